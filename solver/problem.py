"""Problem files: model + system + workload + mapping choices + objective (a public contract).

```yaml
model: gpt3-175b                  # library name, or an inline mapping of model fields
system: {name: dgx-a100, num_gpus: 1024}
workload: {kind: training, seq_len: 2048, global_batch: 1536, precision: fp16}
mapping: {tp: 8, pp: 16, dp: 8, micro_batch: 1, recompute: selective}
objective: throughput
```
In ``mapping`` a scalar fixes a choice, a list allows a set, an absent key is free for the
planner; ``evaluate`` fills absent keys with the defaults in ``MAPPING_DEFAULTS``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from parasol.model import checks
from parasol.model.choices import (
    CpComm,
    LowPrecisionRecipe,
    Recompute,
    RecomputeModule,
    TrainingObjective,
    WorkloadKind,
    ZeroStage,
    allowed,
)
from parasol.model.decisions import TRAINING_MAPPING_KEYS
from parasol.model.errors import ProblemError
from parasol.model.goodput import MIN_GOODPUT
from parasol.model.placement import placement_order
from parasol.model.precision import TRAINING_PRECISIONS, training_recipe
from parasol.model.specs import ATTENTION_KERNELS, DEFAULT_PLACEMENT, Mapping, ModelSpec, Workload
from parasol.model.training import check_mapping

from . import costing, frameworks, library
from .inference_problem import check_inference_objective, fixed_serving_mapping, parse_inference_mapping, parse_inference_workload

TOP_KEYS = ("model", "system", "workload", "mapping", "objective", "constraints")
OBJECTIVES = tuple(o.value for o in TrainingObjective)
WORKLOAD_KEYS = (
    "kind",
    "seq_len",
    "global_batch",
    "precision",
    "low_precision_recipe",
    "attention",
    "grad_bytes",
    "adam_moment_bytes",
    "master_weight_bytes",
    "recompute_modules",
    "overlap_dp",
    "overlap_tp_grad",
    "moe_dispatcher",
    "moe_a2a_overlap",
    "mtp_layers",
    "train_tokens",
    "goodput",
    "framework",  # solver/frameworks.py: read by parse_problem
)
MOE_DISPATCHERS = ("alltoall", "deepep")
MAPPING_KEYS = tuple(key.value for key in TRAINING_MAPPING_KEYS)  # the problem file's mapping: keys
ACCEPTED_MAPPING_KEYS = MAPPING_KEYS + ("num_gpus",)  # num_gpus: as solve reports it; must match the system
# evaluate's defaults for absent keys (sp defaults to tp > 1; zero 1 = Megatron's distributed optimizer)
MAPPING_DEFAULTS = {
    "cp": 1,
    "ep": 1,
    "vpp": 1,
    "recompute": "none",
    "zero": 1,
    "first_stage_layers": 0,
    "last_stage_layers": 0,
    "placement": DEFAULT_PLACEMENT,
    "uneven_chunks": False,
    "offload_layers": 0,
    "cp_comm": "ring",
    "etp": 1,
    "tp_comm_overlap": False,
    "optimizer_offload": 0.0,
    "weight_offload": False,
}
EVALUATE_REQUIRED = ("tp", "pp", "dp", "micro_batch")
FLAG_KEYS = ("sp", "uneven_chunks", "tp_comm_overlap", "weight_offload")  # true/false mapping keys
ALLOWED_VALUES = {
    "recompute": tuple(r.value for r in Recompute),
    "zero": tuple(int(z) for z in ZeroStage),
    **{key: (False, True) for key in FLAG_KEYS},
    "cp_comm": tuple(c.value for c in CpComm),
}


@dataclass(frozen=True)
class Problem:
    """A parsed problem file."""

    model: ModelSpec
    system_name: str
    num_gpus: tuple  # allowed device counts (one for a fixed system)
    workload: Workload  # or model.specs.InferenceWorkload (kind inference)
    mapping: dict  # key -> tuple of allowed values; absent key = free
    objective: str
    source: str = field(default="<problem>", compare=False)
    chiplets: tuple = (None,)  # compute dies per package to consider (None: the device as described)
    gpu_hour_usd: float | None = None  # rental price; replaces the amortised hourly cost
    constraints: dict = field(default_factory=dict)  # max_capex_usd, max_power_w, max_run_hours
    # {(num_gpus, chiplets): {capex_usd, power_w, cost_per_hour_usd}} resolved when the file is loaded
    # (costing.resolve_costs); None when the system has no cost data and the problem needs none
    costs: dict | None = field(default=None, compare=False, repr=False)
    # workload.framework: the framework release whose features bound the mapping (solver/frameworks.py), and
    # the mapping keys its restriction filled in (the user left them free)
    framework: frameworks.Framework | None = field(default=None, compare=False)
    framework_keys: tuple = field(default=(), compare=False)

    @property
    def is_inference(self) -> bool:
        return self.workload.kind == "inference"

    def fixed_serving_mapping(self):
        """The one serving plan ``evaluate`` runs (inference problems; ``inference_problem``)."""
        return fixed_serving_mapping(self)

    def system(self, num_gpus: int | None = None):
        """The system with ``num_gpus`` devices (default: the first allowed count), its device scaled
        to the problem's chiplet count and, for a serving workload that names an engine, at that
        engine's efficiencies (``library.device_under_engine``)."""
        n = num_gpus if num_gpus is not None else self.num_gpus[0]
        if self.chiplets == (None,):
            system = library.load_system(self.system_name, n)
        else:
            system = costing.system_with_chiplets(self.system_name, n, self.chiplets[0])
        engine = getattr(self.workload, "engine", None)
        if engine is None:
            return system
        return dataclasses.replace(system, device=library.device_under_engine(system.device, engine, self.source))

    @property
    def needs_cost(self) -> bool:
        """Whether planning needs the system's cost (a cost objective, limit or run length)."""
        return (
            self.objective in costing.COST_OBJECTIVES
            or bool(self.constraints)
            or getattr(self.workload, "train_tokens", None) is not None
            or self.gpu_hour_usd is not None
            or self.chiplets != (None,)
        )

    def system_cost(self, num_gpus: int) -> dict:
        """{capex_usd, power_w, cost_per_hour_usd} of the system with ``num_gpus`` devices (a
        ProblemError naming the device file when its device has neither chiplet data nor a price)."""
        key = (num_gpus, self.chiplets[0])
        if self.costs is not None and key in self.costs:
            return self.costs[key]
        return costing.system_cost(self.system_name, num_gpus, self.chiplets[0], self.gpu_hour_usd)

    def fixed_mapping(self) -> Mapping:
        """The one mapping ``evaluate`` runs: every key a scalar, absent keys at their defaults."""
        src = self.source
        if len(self.num_gpus) != 1:
            raise ProblemError("evaluate needs a single device count", source=src, field="system.num_gpus")
        if len(self.chiplets) != 1:
            raise ProblemError("evaluate needs a single chiplet count", source=src, field="system.chiplets")
        values = {}
        for key in MAPPING_KEYS:
            allowed = self.mapping.get(key)
            if key in self.framework_keys:  # free in the file, bounded by the framework: evaluate's default if allowed
                allowed = (MAPPING_DEFAULTS[key],) if MAPPING_DEFAULTS.get(key) in allowed else allowed[:1]
            if allowed is None:
                if key in EVALUATE_REQUIRED:
                    raise ProblemError("evaluate needs this key as a scalar", source=src, field=f"mapping.{key}")
                continue
            if len(allowed) != 1:
                raise ProblemError(f"evaluate needs one value, got the list {list(allowed)}", source=src, field=f"mapping.{key}")
            values[key] = allowed[0]
        mapping = mapping_with_defaults(values)
        try:
            check_mapping(self.model, self.system(), self.workload, mapping)
        except ProblemError as exc:
            raise exc.located(source=src) from None
        return mapping


def mapping_with_defaults(values: dict) -> Mapping:
    """A Mapping from the given keys, absent ones at ``MAPPING_DEFAULTS`` and sp = (tp > 1)."""
    kwargs = {**MAPPING_DEFAULTS, **values}
    kwargs.setdefault("sp", kwargs["tp"] > 1)
    return Mapping(**kwargs)


def _parse_workload(data, src: str) -> Workload:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping", source=src, field="workload")
    if data.get("kind") == "inference":
        return parse_inference_workload(data, src)
    checks.keys(data, WORKLOAD_KEYS, ("kind", "seq_len", "global_batch"), src, "workload.")
    checks.choice(data["kind"], WorkloadKind, "workload.kind", src)
    precision = checks.choice(data.get("precision", "bf16"), TRAINING_PRECISIONS, "workload.precision", src)
    attention = checks.choice(data.get("attention", "flash"), ATTENTION_KERNELS, "workload.attention", src)
    recipe = data.get("low_precision_recipe")
    if recipe is not None:
        recipe = checks.choice(recipe, LowPrecisionRecipe, "workload.low_precision_recipe", src)
    try:
        recipe = training_recipe(precision, recipe)
    except ProblemError as exc:
        raise exc.located(source=src) from None
    # Megatron accumulates and reduces gradients in fp32 for bf16 (and fp8) training, in fp16 for
    # fp16 training (megatron/training/arguments.py: accumulate_allreduce_grads_in_fp32).
    grad_bytes = checks.choice(data.get("grad_bytes", 2.0 if precision == "fp16" else 4.0), (2, 4), "workload.grad_bytes", src)
    moment_bytes = checks.choice(data.get("adam_moment_bytes", 4), (2, 4), "workload.adam_moment_bytes", src)
    master_bytes = checks.choice(data.get("master_weight_bytes", 4), (2, 4), "workload.master_weight_bytes", src)
    modules = data.get("recompute_modules", [RecomputeModule.CORE_ATTN.value])
    modules = modules if isinstance(modules, list) else [modules]
    if not modules:
        raise ProblemError(
            f"an empty list recomputes nothing (use mapping.recompute none); allowed: {allowed(RecomputeModule)}",
            source=src,
            field="workload.recompute_modules",
        )
    modules = [str(checks.choice(module, RecomputeModule, "workload.recompute_modules", src)) for module in modules]
    flags = {
        key: checks.flag(data.get(key, default), f"workload.{key}", src)
        for key, default in (("overlap_dp", True), ("overlap_tp_grad", True), ("moe_a2a_overlap", False))
    }
    dispatcher = checks.choice(data.get("moe_dispatcher", "alltoall"), MOE_DISPATCHERS, "workload.moe_dispatcher", src)
    mtp_layers = checks.non_negative_int(data.get("mtp_layers", 0), "workload.mtp_layers", src)
    goodput = data.get("goodput", "auto")
    if goodput != "auto":
        goodput = checks.fraction(goodput, "workload.goodput", src)
        if goodput < MIN_GOODPUT:
            raise ProblemError(
                f"must be 'auto' or a fraction in [{MIN_GOODPUT}, 1], got {goodput!r}", source=src, field="workload.goodput"
            )
    goodput = None if goodput == "auto" else goodput
    train_tokens = data.get("train_tokens")
    if train_tokens is not None:
        train_tokens = checks.positive_number(train_tokens, "workload.train_tokens", src, "number of tokens")
    return Workload(
        kind="training",
        seq_len=checks.positive_int(data["seq_len"], "workload.seq_len", src),
        global_batch=checks.positive_int(data["global_batch"], "workload.global_batch", src),
        precision=precision,
        low_precision_recipe=None if recipe is None else str(recipe),
        attention=attention,
        grad_bytes=float(grad_bytes),
        adam_moment_bytes=float(moment_bytes),
        master_weight_bytes=float(master_bytes),
        recompute_modules=tuple(dict.fromkeys(modules)),
        moe_dispatcher=dispatcher,
        mtp_layers=mtp_layers,
        train_tokens=train_tokens,
        goodput=goodput,
        source=src,
        **flags,
    )


def _parse_mapping(data, src: str) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping of choices", source=src, field="mapping")
    checks.keys(data, ACCEPTED_MAPPING_KEYS, (), src, "mapping.")
    out = {}
    for key, value in data.items():
        values = value if isinstance(value, list) else [value]
        if not values:
            raise ProblemError("an empty list allows nothing", source=src, field=f"mapping.{key}")
        for v in values:
            if key in ALLOWED_VALUES:
                if (
                    v not in ALLOWED_VALUES[key]
                    or (key not in FLAG_KEYS and isinstance(v, bool))
                    or (key in FLAG_KEYS and not isinstance(v, bool))
                ):
                    allowed = ", ".join(str(a).lower() if isinstance(a, bool) else str(a) for a in ALLOWED_VALUES[key])
                    raise ProblemError(f"{v!r} is not allowed; allowed: {allowed}", source=src, field=f"mapping.{key}")
            elif key == "placement":  # a rank order string, e.g. tp-cp-ep-dp-pp (model/placement.py)
                try:
                    placement_order(v)
                except ProblemError as exc:
                    raise exc.located(source=src, field=f"mapping.{key}") from None
            elif key == "optimizer_offload":  # a share, as Megatron-Core's --optimizer-offload-fraction: below
                pass
            elif key in ("first_stage_layers", "last_stage_layers", "offload_layers"):
                checks.non_negative_int(v, f"mapping.{key}", src)
            else:
                checks.positive_int(v, f"mapping.{key}", src)
        if key == "optimizer_offload":
            values = [checks.share(v, f"mapping.{key}", src) for v in values]
        out[key] = tuple(dict.fromkeys(values))
    return out


def _counts(value, src: str, field_name: str) -> tuple:
    """A positive integer, a list of them, or a range {min, max, step} (step defaults to min)."""
    if isinstance(value, dict):
        checks.keys(value, ("min", "max", "step"), ("min", "max"), src, f"{field_name}.")
        lo, hi = (checks.positive_int(value[k], f"{field_name}.{k}", src) for k in ("min", "max"))
        step = checks.positive_int(value.get("step", lo), f"{field_name}.step", src)
        if hi < lo:
            raise ProblemError(f"max {hi} is below min {lo}", source=src, field=f"{field_name}.max")
        values = list(range(lo, hi + 1, step))
    else:
        values = value if isinstance(value, list) else [value]
    if not values:
        raise ProblemError("an empty list allows nothing", source=src, field=field_name)
    return tuple(dict.fromkeys(checks.positive_int(n, field_name, src) for n in values))


def _parse_system(data, src: str) -> tuple[str, tuple, tuple, float | None]:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping {name, num_gpus}", source=src, field="system")
    checks.keys(data, ("name", "num_gpus", "chiplets", "gpu_hour_usd"), ("name", "num_gpus"), src, "system.")
    name = data["name"]
    if not isinstance(name, str):
        raise ProblemError(
            f"must be a system name; allowed: {', '.join(library.names('systems'))}", source=src, field="system.name"
        )
    try:
        library.load_system(name, 1)
    except ProblemError as exc:
        if exc.source is None:
            raise exc.located(source=src, field="system.name") from None
        raise
    counts = _counts(data["num_gpus"], src, "system.num_gpus")
    chiplets = _counts(data["chiplets"], src, "system.chiplets") if "chiplets" in data else (None,)
    price = checks.positive_number(data["gpu_hour_usd"], "system.gpu_hour_usd", src, "price") if "gpu_hour_usd" in data else None
    return name, counts, chiplets, price


def _parse_constraints(data, src: str, workload: Workload) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProblemError(
            f"must be a mapping with keys among {', '.join(costing.CONSTRAINT_KEYS)}", source=src, field="constraints"
        )
    checks.keys(data, costing.CONSTRAINT_KEYS, (), src, "constraints.")
    out = {key: checks.positive_number(value, f"constraints.{key}", src) for key, value in data.items()}
    if "max_run_hours" in out and getattr(workload, "train_tokens", None) is None:
        raise ProblemError(
            "needs workload.train_tokens (the run's length in tokens)", source=src, field="constraints.max_run_hours"
        )
    return out


def parse_problem(data: dict, source: str = "<problem>") -> Problem:
    """A Problem from a parsed YAML mapping."""
    checks.keys(data, TOP_KEYS, ("model", "system", "workload"), source, "")
    model = data["model"]
    if isinstance(model, dict):
        model_spec = library.model_from_dict(model, source)
    elif not isinstance(model, str):
        raise ProblemError(
            f"must be a library name or a mapping of model fields, got {model!r}; allowed names: "
            f"{', '.join(library.names('models'))}",
            source=source,
            field="model",
        )
    else:
        try:
            model_spec = library.load_model(model)
        except ProblemError as exc:
            if exc.source is None:
                raise exc.located(source=source, field="model") from None
            raise
    system_name, counts, chiplets, gpu_hour_usd = _parse_system(data["system"], source)
    workload_data, framework = data["workload"], None
    if isinstance(workload_data, dict) and "framework" in workload_data:  # solver/frameworks.py
        workload_data = {k: v for k, v in workload_data.items() if k != "framework"}
        framework = frameworks.load(data["workload"]["framework"], source)
    workload = _parse_workload(workload_data, source)
    if framework is not None:
        frameworks.check_kind(framework, workload.kind, source)
        frameworks.check_workload(framework, workload, source)
        if framework.engine is not None and getattr(workload, "engine", "") is None:
            workload = dataclasses.replace(workload, engine=framework.engine)
    constraints = _parse_constraints(data.get("constraints"), source, workload)
    device = library.load_system(system_name, 1).device
    if workload.precision not in device.peak_flops:
        raise ProblemError(
            f"{workload.precision!r} is not supported by the {device.name} of {system_name}; allowed: "
            f"{', '.join(p for p in TRAINING_PRECISIONS if p in device.peak_flops)}",
            source=source,
            field="workload.precision",
        )
    inference = workload.kind == "inference"
    if inference and workload.engine is not None:
        library.device_under_engine(device, workload.engine, source)
    mapping = (
        parse_inference_mapping(data.get("mapping"), workload, source)
        if inference
        else _parse_mapping(data.get("mapping"), source)
    )
    if "num_gpus" in mapping:
        # solve's plans carry num_gpus so they can be pasted back; it must agree with the system
        allowed = tuple(n for n in counts if n in mapping.pop("num_gpus"))
        if not allowed:
            raise ProblemError(
                f"mapping.num_gpus must be one of system.num_gpus {list(counts)}", source=source, field="mapping.num_gpus"
            )
        counts = allowed
    framework_keys = ()
    if framework is not None:
        restricted = frameworks.restrict(framework, mapping, source, getattr(workload, "serving", None) == "disaggregated")
        framework_keys = tuple(k for k in restricted if k not in mapping)
        mapping = restricted
    objective = data.get("objective", "throughput")
    if inference:
        check_inference_objective(objective, source)
    else:
        checks.choice(objective, OBJECTIVES, "objective", source)
    problem = Problem(
        model=model_spec,
        system_name=system_name,
        num_gpus=counts,
        workload=workload,
        mapping=mapping,
        objective=objective,
        source=source,
        chiplets=chiplets,
        gpu_hour_usd=gpu_hour_usd,
        constraints=constraints,
        framework=framework,
        framework_keys=framework_keys,
    )
    try:
        costs = costing.resolve_costs(system_name, counts, chiplets, gpu_hour_usd, problem.needs_cost)
    except ProblemError as exc:
        raise exc if exc.source else exc.located(source=source) from None
    return dataclasses.replace(problem, costs=costs)


def load_problem(path: str | Path) -> Problem:
    """Read and parse a problem file."""
    return parse_problem(library.read_yaml(path, "problem file"), source=str(path))
