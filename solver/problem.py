"""Problem files: model + system + workload + mapping choices + objective (a public contract).

```yaml
model: gpt3-175b                  # library name, a model file's path, {hf_config: config.json}, or an inline mapping
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
    Allocator,
    AttentionKernel,
    BackwardPrefetch,
    CpComm,
    LowPrecisionRecipe,
    MoeDispatcher,
    OffloadModule,
    Recompute,
    RecomputeModule,
    TrainingObjective,
    WorkloadKind,
    Zero3Gather,
    ZeroStage,
)
from parasol.model.compute import triton_attention_problem
from parasol.model.decisions import TRAINING_MAPPING_KEYS
from parasol.model.errors import ProblemError
from parasol.model.fp8_attention import fp8_attention_problem
from parasol.model.fused_grouped_mlp import fused_grouped_mlp_etp_problem, fused_grouped_mlp_problem, unfused_recompute_problem
from parasol.model.goodput import MIN_GOODPUT
from parasol.model.inference import check_unquantised_gemms
from parasol.model.memory import memory_headroom_bytes
from parasol.model.nccl_channels import CAPPED_GROUPS, MAX_NCCL_CTAS, cta_caps_problem
from parasol.model.offload import module_offload_problem
from parasol.model.pipeline import split_stages
from parasol.model.pipeline_layout import FIELD as LAYOUT_FIELD
from parasol.model.pipeline_layout import parse_pipeline_layout
from parasol.model.placement import placement_order
from parasol.model.precision import TRAINING_PRECISIONS, training_recipe
from parasol.model.specs import ATTENTION_KERNELS, DEFAULT_PLACEMENT, NO_CTA_CAPS, CommunicatorCtas, Mapping, ModelSpec, Workload
from parasol.model.training import check_mapping, recompute_module_set
from parasol.model.training_step import lead_layers

from . import costing, frameworks, library
from .inference_problem import check_inference_objective, fixed_serving_mapping, parse_inference_mapping, parse_inference_workload

# constraints: keys that keep a memory margin per GPU (one of them): GiB, or a share of the device's memory
HEADROOM_KEYS = ("memory_headroom_gib", "memory_headroom")
CONSTRAINT_KEYS = costing.CONSTRAINT_KEYS + HEADROOM_KEYS
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
    "lowp_grad_bytes",
    "grad_accumulate_copy_bytes",
    "grad_reduce_copy_bytes",
    "zero3_gather",
    "zero3_backward_prefetch",
    "adam_moment_bytes",
    "master_weight_bytes",
    "recompute_modules",
    "offload_modules",
    "overlap_dp",
    "overlap_tp_grad",
    "checkpoint_early_stop",
    "moe_dispatcher",
    "moe_a2a_overlap",
    "moe_fp8_dispatch",
    "fp8_param_gather",
    "fp8_output_proj",
    "fp8_attention",
    "fused_grouped_mlp",
    "nvfp4_hadamard",
    "allocator",
    "mtp_layers",
    "train_tokens",
    "goodput",
    "nccl_max_ctas",
    "framework",  # solver/frameworks.py: read by parse_problem
)
MOE_DISPATCHERS = tuple(d.value for d in MoeDispatcher)
MAPPING_KEYS = tuple(key.value for key in TRAINING_MAPPING_KEYS)  # the problem file's mapping: keys
# ranges every problem is checked against before any arithmetic (docs/problem-files.md, "Limits")
MAX_SEQ_LEN = checks.MAX_SEQ_LEN  # tokens per sequence (16.8M)
MAX_GLOBAL_BATCH = 1 << 24  # sequences per step
MAX_DEVICES = 1 << 20  # devices in one system (1,048,576)
MAX_DEVICE_COUNTS = 4096  # device counts one problem may compare
# num_gpus: as solve reports it; must match the system. pipeline_layout: a Megatron-Core layout string that sets
# vpp, the edge stages' layers and uneven_chunks (model/pipeline_layout.py, ``_apply_pipeline_layout``)
ACCEPTED_MAPPING_KEYS = MAPPING_KEYS + ("num_gpus", "pipeline_layout")
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
    "dualpipe": False,
    "module_offload": False,  # true where workload.offload_modules lists modules (parse_problem)
}
EVALUATE_REQUIRED = ("tp", "pp", "dp", "micro_batch")
FLAG_KEYS = (  # true/false mapping keys
    "sp",
    "uneven_chunks",
    "tp_comm_overlap",
    "weight_offload",
    "dualpipe",
    "module_offload",
    "moe_a2a_overlap",
)
ALLOWED_VALUES = {
    "recompute": tuple(r.value for r in Recompute),
    "zero": tuple(int(z) for z in ZeroStage),
    **{key: (False, True) for key in FLAG_KEYS},
    "cp_comm": tuple(c.value for c in CpComm),
    "moe_dispatcher": tuple(d.value for d in MoeDispatcher),
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
    constraints: dict = field(default_factory=dict)  # max_capex_usd, max_power_w, max_run_hours, memory headroom
    # {(num_gpus, chiplets): {capex_usd, power_w, cost_per_hour_usd}} resolved when the file is loaded
    # (costing.resolve_costs); None when the system has no cost data and the problem needs none
    costs: dict | None = field(default=None, compare=False, repr=False)
    # several systems compared (system.name a list): one single-system problem each, this problem
    # standing for the first; the planners solve each and keep the best (planner._per_subproblem)
    alternatives: tuple = field(default=(), compare=False, repr=False)

    @property
    def systems(self) -> tuple:
        """The single-system problems compared: the alternatives, or this problem alone."""
        return self.alternatives or (self,)

    def for_system(self, name: str | None) -> Problem:
        """The single-system problem on ``name`` (this problem when it has one system or name is None)."""
        return next((p for p in self.alternatives if p.system_name == name), self)

    def check_single_system(self, what: str = "evaluate") -> None:
        if self.alternatives:
            raise ProblemError(
                f"{what} needs one system, got the list {[p.system_name for p in self.alternatives]}",
                source=self.source,
                field="system.name",
            )

    # workload.framework: the framework release whose features bound the mapping (solver/frameworks.py), and
    # the mapping keys its restriction filled in (the user left them free)
    framework: frameworks.Framework | None = field(default=None, compare=False)
    framework_keys: tuple = field(default=(), compare=False)
    # mapping.pipeline_layout as written (its vpp, edge stages and uneven_chunks are in ``mapping``): --emit passes it on
    pipeline_layout: str | None = field(default=None, compare=False)

    @property
    def is_inference(self) -> bool:
        return self.workload.kind == "inference"

    def fixed_serving_mapping(self):
        """The one serving plan ``evaluate`` runs (inference problems; ``inference_problem``)."""
        self.check_single_system()
        return fixed_serving_mapping(self)

    def system(self, num_gpus: int | None = None):
        """The system with ``num_gpus`` devices (default: the first allowed count), its device scaled
        to the problem's chiplet count, its GEMM curves at the share a training step sustains of them for a training
        workload (``DeviceSpec.training_gemm_efficiency``) and, for a serving workload, at the device's serving share
        (``DeviceSpec.serving_gemm_efficiency``) or, where it names an engine, at that engine's efficiencies
        (``library.device_under_engine``)."""
        n = num_gpus if num_gpus is not None else self.num_gpus[0]
        if self.chiplets == (None,):
            system = library.load_system(self.system_name, n)
        else:
            system = costing.system_with_chiplets(self.system_name, n, self.chiplets[0])
        headroom = self.memory_headroom_bytes(system.device.hbm_bytes)
        if headroom:
            system = dataclasses.replace(system, memory_headroom_bytes=headroom)
        share = (
            system.device.serving_gemm_efficiency
            if getattr(self.workload, "kind", None) == "inference"
            else system.device.training_gemm_efficiency
        )
        if share != 1.0:
            # a serving engine's kernels on this device, or a training step: the device file's share of its GEMM curves
            system = dataclasses.replace(system, device=dataclasses.replace(system.device, gemm_scale=share))
        engine = getattr(self.workload, "engine", None)
        if engine is None:
            return system
        return dataclasses.replace(system, device=library.device_under_engine(system.device, engine, self.source))

    def memory_headroom_bytes(self, hbm_bytes: float) -> float:
        """The margin per GPU the constraints keep free on a device of ``hbm_bytes`` (0 without one)."""
        c = self.constraints
        return memory_headroom_bytes(hbm_bytes, c.get("memory_headroom_gib"), c.get("memory_headroom"))

    @property
    def has_cost_limits(self) -> bool:
        """Whether the constraints limit capex, power or the run's length."""
        return any(key in self.constraints for key in costing.CONSTRAINT_KEYS)

    @property
    def needs_cost(self) -> bool:
        """Whether planning needs the system's cost (a cost objective, limit or run length)."""
        return (
            self.objective in costing.COST_OBJECTIVES
            or self.has_cost_limits
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
        self.check_single_system()
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


def _module_offload_choice(mapping: dict, workload: Workload, src: str) -> dict:
    """``mapping.module_offload``: whether the modules ``workload.offload_modules`` lists are offloaded.
    Listing modules sets it true unless the mapping says otherwise (``[false, true]`` lets solve decide);
    true, alone or in a list, without modules is refused."""
    values = mapping.get("module_offload")
    if values is None:
        return {**mapping, "module_offload": (True,)} if workload.offload_modules else mapping
    if True in values and not workload.offload_modules:
        raise ProblemError(
            "module offloading needs workload.offload_modules to list the modules whose inputs it offloads",
            source=src,
            field="mapping.module_offload",
        )
    return mapping


def offload_module_list(value, src: str) -> tuple:
    """``workload.offload_modules`` as Megatron-Core's TransformerConfig accepts it: OffloadModule
    values, attn_proj only with core_attn (its input is core_attn's output, which core_attn's backward
    needs). What depends on the model, the device and the mapping: ``offload.module_offload_problem``."""
    fld = "workload.offload_modules"
    items = value if isinstance(value, list) else [value]
    modules = tuple(dict.fromkeys(str(checks.choice(m, OffloadModule, fld, src)) for m in items))
    if OffloadModule.ATTN_PROJ in modules and OffloadModule.CORE_ATTN not in modules:
        raise ProblemError(
            "attn_proj needs core_attn as well (its input is core_attn's output, which core_attn's backward needs; "
            "Megatron-Core refuses it alone)",
            source=src,
            field=fld,
        )
    return modules


def _parse_workload(data, src: str) -> Workload:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping", source=src, field="workload")
    if data.get("kind") == "inference":
        return parse_inference_workload(data, src)
    if "request_rate" in data:
        raise ProblemError(
            "is a serving load (requests per second): it needs workload.kind inference", source=src, field="workload.request_rate"
        )
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
    # DeepSpeed's BF16_Optimizer (2022) keeps each bf16 .grad beside its fp32 accumulation buffer until the next
    # backward (deepspeed/runtime/bf16_optimizer.py, pipe/engine.py clear_lp_grads); Megatron folds it into main_grad
    lowp_grad_bytes = checks.choice(data.get("lowp_grad_bytes", 0), (0, 2), "workload.lowp_grad_bytes", src)
    # and casts each .grad to fp32 as it accumulates it (update_hp_grads), and DeepSpeed's fallback all-reduce casts the
    # fp32 group to its bf16 communication type (engine.py allreduce_bucket): memory.accumulate_copy_bytes, reduce_copy_bytes
    accumulate_copy = checks.choice(
        data.get("grad_accumulate_copy_bytes", 0), (0, 2, 4), "workload.grad_accumulate_copy_bytes", src
    )
    reduce_copy = checks.choice(data.get("grad_reduce_copy_bytes", 0), (0, 2, 4), "workload.grad_reduce_copy_bytes", src)
    zero3_gather = checks.choice(data.get("zero3_gather", Zero3Gather.BLOCK.value), Zero3Gather, "workload.zero3_gather", src)
    prefetch = checks.choice(
        data.get("zero3_backward_prefetch", BackwardPrefetch.PRE.value), BackwardPrefetch, "workload.zero3_backward_prefetch", src
    )
    moment_bytes = checks.choice(data.get("adam_moment_bytes", 4), (2, 4), "workload.adam_moment_bytes", src)
    master_bytes = checks.choice(data.get("master_weight_bytes", 4), (2, 4), "workload.master_weight_bytes", src)
    modules = recompute_module_set(
        data.get("recompute_modules", [RecomputeModule.CORE_ATTN.value]), "workload.recompute_modules", src
    )
    offload_modules = offload_module_list(data.get("offload_modules", []), src)
    flags = {
        key: checks.flag(data.get(key, default), f"workload.{key}", src)
        for key, default in (
            ("overlap_dp", True),
            ("overlap_tp_grad", True),
            ("checkpoint_early_stop", False),
            ("moe_a2a_overlap", False),
            ("moe_fp8_dispatch", False),
            ("fp8_param_gather", False),
            ("fp8_output_proj", False),
            ("fp8_attention", False),
            ("fused_grouped_mlp", False),
            ("nvfp4_hadamard", True),
        )
    }
    if flags["fp8_param_gather"] and precision != "fp8":
        raise ProblemError(
            f"an FP8 parameter gather needs precision fp8 (Megatron-LM --fp8-param-gather), got {precision}; set it false",
            source=src,
            field="workload.fp8_param_gather",
        )
    if flags["fp8_output_proj"] and (precision != "fp8" or recipe != LowPrecisionRecipe.MXFP8):
        raise ProblemError(
            f"an FP8 output layer needs precision fp8 with low_precision_recipe mxfp8, as Megatron-Core's fp8_output_proj does "
            f"(got precision {precision}, {'no recipe' if recipe is None else f'recipe {recipe}'}); set it false",
            source=src,
            field="workload.fp8_output_proj",
        )
    if not flags["nvfp4_hadamard"] and recipe != LowPrecisionRecipe.NVFP4:
        raise ProblemError(
            f"the random Hadamard transform is NVFP4's (Transformer Engine's NVTE_NVFP4_DISABLE_RHT), the workload "
            f"quantises with {'no recipe' if recipe is None else f'recipe {recipe}'}; set it true",
            source=src,
            field="workload.nvfp4_hadamard",
        )
    reason = fp8_attention_problem(precision, attention, recipe) if flags["fp8_attention"] else None
    if reason is not None:
        raise ProblemError(reason, source=src, field="workload.fp8_attention")
    dispatcher = MoeDispatcher(
        checks.choice(data.get("moe_dispatcher", MoeDispatcher.ALLTOALL.value), MOE_DISPATCHERS, "workload.moe_dispatcher", src)
    )
    if flags["moe_fp8_dispatch"] and (dispatcher != MoeDispatcher.DEEPEP or precision != "fp8"):
        raise ProblemError(
            f"an FP8 dispatch needs moe_dispatcher deepep and precision fp8 (got {dispatcher}, {precision}); set it false, or use deepep with fp8",
            source=src,
            field="workload.moe_fp8_dispatch",
        )
    allocator = Allocator(checks.choice(data.get("allocator", Allocator.CACHING.value), Allocator, "workload.allocator", src))
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
        nccl_max_ctas=_parse_cta_caps(data, src),
        kind="training",
        seq_len=checks.positive_int(data["seq_len"], "workload.seq_len", src, MAX_SEQ_LEN),
        global_batch=checks.positive_int(data["global_batch"], "workload.global_batch", src, MAX_GLOBAL_BATCH),
        precision=precision,
        low_precision_recipe=None if recipe is None else str(recipe),
        attention=attention,
        grad_bytes=float(grad_bytes),
        lowp_grad_bytes=float(lowp_grad_bytes),
        grad_accumulate_copy_bytes=float(accumulate_copy),
        grad_reduce_copy_bytes=float(reduce_copy),
        zero3_gather=str(zero3_gather),
        zero3_backward_prefetch=str(prefetch),
        adam_moment_bytes=float(moment_bytes),
        master_weight_bytes=float(master_bytes),
        recompute_modules=modules,
        offload_modules=offload_modules,
        moe_dispatcher=dispatcher,
        allocator=allocator,
        allocator_overhead=library.load_allocator_overhead(allocator.value),
        mtp_layers=mtp_layers,
        train_tokens=train_tokens,
        goodput=goodput,
        source=src,
        **flags,
    )


def _parse_cta_caps(data: dict, src: str) -> CommunicatorCtas:
    """``workload.nccl_max_ctas`` of the workload mapping ``data``: the NCCL thread blocks each communicator may use
    ({tp, cp, dp, pp: count}, as Megatron-Core's --nccl-communicator-config-path gives max_ctas per process group);
    absent: no caps."""
    if "nccl_max_ctas" not in data:
        return NO_CTA_CAPS
    caps, field = data["nccl_max_ctas"], "workload.nccl_max_ctas"
    counts = f"thread-block counts from 1 to {MAX_NCCL_CTAS}"
    if not isinstance(caps, dict):
        raise ProblemError(
            f"must map communicators ({', '.join(CAPPED_GROUPS)}) to {counts}, got {checks.shown(caps)}", source=src, field=field
        )
    checks.keys(caps, CAPPED_GROUPS, (), src, f"{field}.")
    for group, count in caps.items():
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_NCCL_CTAS:
            raise ProblemError(
                f"must be one of the {counts} (NCCL's MAXCHANNELS), got {checks.shown(count)}",
                source=src,
                field=f"{field}.{group}",
            )
    return CommunicatorCtas(**caps)


def _parse_mapping(data, src: str) -> dict:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping of choices", source=src, field="mapping")
    checks.keys(data, ACCEPTED_MAPPING_KEYS, (), src, "mapping.")
    out = {}
    for key, value in data.items():
        if key == "pipeline_layout":  # one string, read with the model (``_apply_pipeline_layout``)
            out[key] = value
            continue
        if key == "recompute_modules":  # module sets: a list of lists for solve to choose among, or one list
            listed = value if isinstance(value, list) and value and all(isinstance(v, list) for v in value) else [value]
            out[key] = tuple(dict.fromkeys(recompute_module_set(v, f"mapping.{key}", src) for v in listed))
            continue
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


def _apply_pipeline_layout(mapping: dict, layout, model: ModelSpec, workload, framework, src: str) -> dict:
    """``mapping`` with the vpp, edge stage layers and uneven_chunks a Megatron-Core pipeline layout sets
    (``pipeline_layout.parse_pipeline_layout``), for one pp; ProblemError where the layout does not fit the
    model, the workload's MTP layers or a value the mapping also gives, places layers the model cannot hold
    (edge stages of at least one layer, the dense leading layers on the first, middle stages equal), or the
    problem's framework builds its own stages (only Megatron-LM reads a layout)."""
    if framework is not None and framework.emitter != "megatron":
        raise ProblemError(
            f"is Megatron-Core's layout; {framework.label} builds its own stages (leave it out, or use megatron-lm)",
            source=src,
            field=LAYOUT_FIELD,
        )
    pps = mapping.get("pp", ())
    if len(pps) != 1:
        raise ProblemError("a pipeline layout needs one mapping.pp, the ranks it spreads over", source=src, field="mapping.pp")
    pp = pps[0]
    try:
        placed = parse_pipeline_layout(layout, pp)
    except ProblemError as exc:
        raise exc.located(source=src) from None
    if pp == 1 and placed.vpp > 1:
        raise ProblemError(f"gives pp 1 {placed.vpp} chunks; interleaving needs pp > 1", source=src, field=LAYOUT_FIELD)
    edge_layers = placed.stage_layers[0], placed.stage_layers[-1]
    if pp > 1 and not all(edge_layers):
        rank = "the first" if not edge_layers[0] else "the last"
        raise ProblemError(
            f"gives {rank} rank no transformer layer; the model's edge stages hold at least one", source=src, field=LAYOUT_FIELD
        )
    lead = lead_layers(model)
    if edge_layers[0] < lead:
        raise ProblemError(
            f"gives the first rank {edge_layers[0]} layers; the model keeps its {lead} dense leading layers there",
            source=src,
            field=LAYOUT_FIELD,
        )
    layers = sum(placed.stage_layers)
    if layers != model.layers:
        raise ProblemError(f"places {layers} transformer layers; {model.name} has {model.layers}", source=src, field=LAYOUT_FIELD)
    if placed.mtp_layers != workload.mtp_layers:
        raise ProblemError(
            f"places {placed.mtp_layers} MTP layers; workload.mtp_layers is {workload.mtp_layers}", source=src, field=LAYOUT_FIELD
        )
    # the partition the model holds with these edges (``pipeline.split_stages``: the middle stages equal)
    if split_stages(model.layers, pp, *edge_layers)[0] != list(placed.stage_layers):
        raise ProblemError(
            f"gives the middle ranks {', '.join(map(str, placed.stage_layers[1:-1]))} layers; the model holds equal middle stages",
            source=src,
            field=LAYOUT_FIELD,
        )
    first, last = (placed.stage_layers[0], placed.stage_layers[-1]) if pp > 1 else (0, 0)
    implied = {"vpp": placed.vpp, "first_stage_layers": first, "last_stage_layers": last, "uneven_chunks": placed.uneven}
    for key, value in implied.items():
        if key in mapping and mapping[key] != (value,):
            given = ", ".join(str(v).lower() for v in mapping[key])
            raise ProblemError(
                f"is {given} where the pipeline layout sets {str(value).lower()}; leave it out or match the layout",
                source=src,
                field=f"mapping.{key}",
            )
    return {**mapping, **{key: (value,) for key, value in implied.items()}}


def _counts(value, src: str, field_name: str) -> tuple:
    """A positive integer, a list of them, or a range {min, max, step} (step defaults to min): device
    counts up to ``MAX_DEVICES``, at most ``MAX_DEVICE_COUNTS`` of them."""
    if isinstance(value, dict):
        checks.keys(value, ("min", "max", "step"), ("min", "max"), src, f"{field_name}.")
        lo, hi = (checks.positive_int(value[k], f"{field_name}.{k}", src, MAX_DEVICES) for k in ("min", "max"))
        step = checks.positive_int(value.get("step", lo), f"{field_name}.step", src, MAX_DEVICES)
        if hi < lo:
            raise ProblemError(f"max {hi} is below min {lo}", source=src, field=f"{field_name}.max")
        if (hi - lo) // step + 1 > MAX_DEVICE_COUNTS:
            raise ProblemError(
                f"gives {(hi - lo) // step + 1:,} device counts, more than {MAX_DEVICE_COUNTS:,}: raise step or narrow min..max",
                source=src,
                field=f"{field_name}.step",
            )
        values = list(range(lo, hi + 1, step))
    else:
        values = value if isinstance(value, list) else [value]
    if not values:
        raise ProblemError("an empty list allows nothing", source=src, field=field_name)
    if len(values) > MAX_DEVICE_COUNTS:
        raise ProblemError(f"lists {len(values):,} device counts, more than {MAX_DEVICE_COUNTS:,}", source=src, field=field_name)
    return tuple(dict.fromkeys(checks.positive_int(n, field_name, src, MAX_DEVICES) for n in values))


SYSTEM_KEYS = ("name", "num_gpus", "chiplets", "gpu_hour_usd")
RANGE_KEYS = ("min", "max", "step")


def _system_name(name, src: str, field_name: str) -> str:
    """A library system's name, or the resolved path of a system file given as ``{file: PATH}``
    (relative to the problem file's folder), checked like the library's own systems."""
    allowed = ", ".join(library.names("systems"))
    path = library.file_path(name, src, field_name)
    if path is not None:
        if not path.is_file():
            raise ProblemError(f"no system file {str(path)!r}", source=src, field=f"{field_name}.file")
        name = str(path.resolve())
    elif not isinstance(name, str) or not name:
        raise ProblemError(f"must be a system name or {{file: PATH}}; allowed names: {allowed}", source=src, field=field_name)
    try:
        library.load_system(name, 1)
    except ProblemError as exc:
        if exc.source is None:
            raise exc.located(source=src, field=field_name) from None
        raise
    return name


def _parse_system(data, src: str) -> list[tuple[str, tuple, tuple, float | None]]:
    """[(system name or resolved file, device counts, chiplet counts, rental price)]: one entry per
    system the problem compares. ``system.name`` is a name (or a system file) or a list of them;
    ``system.num_gpus`` then gives the counts for every system alike, or a mapping from each listed
    name to its counts; ``system:`` may also be a list of {name, num_gpus, ...} mappings."""
    if isinstance(data, list):
        if not data:
            raise ProblemError("an empty list compares no system", source=src, field="system")
        out = [_one_system(entry, src, f"system[{i}]") for i, entry in enumerate(data)]
        return _distinct(out, src, "system")
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping {name, num_gpus} or a list of them", source=src, field="system")
    names = data.get("name")
    if not isinstance(names, list):
        return [_one_system(data, src, "system")]
    if not names:
        raise ProblemError("an empty list compares no system", source=src, field="system.name")
    checks.keys(data, SYSTEM_KEYS, ("name", "num_gpus"), src, "system.")
    for i, name in enumerate(names):
        if not isinstance(name, str) and library.file_path(name, src, f"system.name[{i}]") is None:
            raise ProblemError("must be a system name or {file: PATH}", source=src, field=f"system.name[{i}]")
    keys = [name if isinstance(name, str) else name[library.FILE_KEY] for name in names]  # a file by its PATH
    counts = data["num_gpus"]
    per_system = isinstance(counts, dict) and not set(counts) <= set(RANGE_KEYS)
    if per_system:
        unknown = [k for k in counts if k not in keys]
        if unknown:
            raise ProblemError(
                f"names {unknown[0]!r}, which system.name does not list; listed: {', '.join(map(str, keys))}",
                source=src,
                field=f"system.num_gpus.{unknown[0]}",
            )
        missing = [k for k in keys if k not in counts]
        if missing:
            raise ProblemError(f"gives no counts for {missing[0]!r}", source=src, field="system.num_gpus")
    out = []
    for i, (name, key) in enumerate(zip(names, keys)):
        entry = {**data, "name": name, "num_gpus": counts[key] if per_system else counts}
        field_name = f"system.num_gpus.{key}" if per_system else "system.num_gpus"
        out.append(_one_system(entry, src, "system", name_field=f"system.name[{i}]", counts_field=field_name))
    return _distinct(out, src, "system.name")


def _distinct(systems: list, src: str, field_name: str) -> list:
    seen = set()
    for name, *_ in systems:
        if name in seen:
            raise ProblemError(f"lists {name!r} twice", source=src, field=field_name)
        seen.add(name)
    return systems


def _one_system(data, src: str, prefix: str, name_field: str | None = None, counts_field: str | None = None) -> tuple:
    if not isinstance(data, dict):
        raise ProblemError("must be a mapping {name, num_gpus}", source=src, field=prefix)
    checks.keys(data, SYSTEM_KEYS, ("name", "num_gpus"), src, f"{prefix}.")
    name = _system_name(data["name"], src, name_field or f"{prefix}.name")
    counts = _counts(data["num_gpus"], src, counts_field or f"{prefix}.num_gpus")
    chiplets = _counts(data["chiplets"], src, f"{prefix}.chiplets") if "chiplets" in data else (None,)
    price = (
        checks.positive_number(data["gpu_hour_usd"], f"{prefix}.gpu_hour_usd", src, "price") if "gpu_hour_usd" in data else None
    )
    return name, counts, chiplets, price


def _parse_constraints(data, src: str, workload: Workload, hbm_bytes: float, usable_bytes: float, where: str = "") -> dict:
    """The constraints mapping; a memory headroom must leave some of ``usable_bytes`` (the device's memory
    ``hbm_bytes`` less the system's reserve; ``where`` names the device and system in the message)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ProblemError(f"must be a mapping with keys among {', '.join(CONSTRAINT_KEYS)}", source=src, field="constraints")
    checks.keys(data, CONSTRAINT_KEYS, (), src, "constraints.")
    if all(key in data for key in HEADROOM_KEYS):
        raise ProblemError(
            "give the memory headroom once: memory_headroom_gib (GiB) or memory_headroom (a share of the device's memory)",
            source=src,
            field="constraints.memory_headroom",
        )
    out = {}
    for key, value in data.items():
        fld = f"constraints.{key}"
        if key == "memory_headroom_gib":
            out[key] = checks.non_negative_number(value, fld, src)
        elif key == "memory_headroom":
            share = checks.as_float(value)
            if share is None or not 0 <= share < 1:
                raise ProblemError(f"must be a share of the device's memory in [0, 1), got {value!r}", source=src, field=fld)
            out[key] = share
        else:
            out[key] = checks.positive_number(value, fld, src)
    for key in HEADROOM_KEYS:
        if key in out:
            kept = memory_headroom_bytes(hbm_bytes, out.get("memory_headroom_gib"), out.get("memory_headroom"))
            if kept >= usable_bytes:
                raise ProblemError(
                    f"{kept / 2**30:.1f} GiB kept free leaves nothing of the {usable_bytes / 2**30:.1f} GiB {where or 'the device'} offers "
                    f"({hbm_bytes / 2**30:.1f} GiB less the system's reserve)",
                    source=src,
                    field=f"constraints.{key}",
                )
    if "max_run_hours" in out and getattr(workload, "train_tokens", None) is None:
        raise ProblemError(
            "needs workload.train_tokens (the run's length in tokens)", source=src, field="constraints.max_run_hours"
        )
    return out


def parse_problem(data: dict, source: str = "<problem>") -> Problem:
    """A Problem from a parsed YAML mapping."""
    checks.keys(data, TOP_KEYS, ("model", "system", "workload"), source, "")
    model = data["model"]
    model_file = library.file_path(model, source, "model")
    if model_file is not None:
        model_spec = library.model_from_path(model_file)
    elif isinstance(model, dict) and "hf_config" in model:
        model_spec = library.model_from_hf_config(model, source)
    elif isinstance(model, dict):
        model_spec = library.model_from_dict(model, source)
    elif not isinstance(model, str):
        raise ProblemError(
            f"must be a library name, {{file: PATH}} or a mapping of model fields, got {checks.shown(model)}; "
            f"allowed names: {', '.join(library.names('models'))}",
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
    systems = _parse_system(data["system"], source)
    workload_data, framework = data["workload"], None
    if isinstance(workload_data, dict) and "framework" in workload_data:  # solver/frameworks.py
        workload_data = {k: v for k, v in workload_data.items() if k != "framework"}
        framework = frameworks.load(data["workload"]["framework"], source)
    workload = _parse_workload(workload_data, source)
    if framework is not None:
        frameworks.check_kind(framework, workload.kind, source)
        workload = frameworks.implied_workload(framework, workload, workload_data)
        frameworks.check_workload(framework, workload, source)
        if framework.engine is not None and getattr(workload, "engine", "") is None:
            workload = dataclasses.replace(workload, engine=framework.engine)
    constraints = data.get("constraints")  # parsed per system: a headroom in GiB is checked against its device
    inference = workload.kind == "inference"
    if inference:
        try:
            check_unquantised_gemms(model_spec, workload)
        except ProblemError as exc:
            raise exc.located(source=source) from None
    if not inference and model_spec.moe is not None and workload.grad_reduce_copy_bytes:
        # DeepSpeed's buffered_allreduce_fallback (15293139f) refuses gradients handed to it with MoE layers
        raise ProblemError(
            "the fallback all-reduce's gradient copy (DeepSpeed 2022's BF16_Optimizer path) has no mixture-of-experts "
            "case; set it 0 for an MoE model",
            source=source,
            field="workload.grad_reduce_copy_bytes",
        )
    mapping = (
        parse_inference_mapping(data.get("mapping"), workload, source)
        if inference
        else _parse_mapping(data.get("mapping"), source)
    )
    if not inference and workload.fused_grouped_mlp:
        reason = fused_grouped_mlp_etp_problem(mapping.get("etp", (1,)))
        if reason is not None:
            raise ProblemError(reason, source=source, field="mapping.etp")
    if not inference:
        mapping = _module_offload_choice(mapping, workload, source)
        for key in ("moe_dispatcher", "moe_a2a_overlap"):
            if model_spec.moe is None and key in mapping:
                raise ProblemError(
                    f"the model has no experts to dispatch tokens to; leave {key} out", source=source, field=f"mapping.{key}"
                )
    pasted = mapping.pop("num_gpus", None)
    layout = mapping.pop("pipeline_layout", None)
    if layout is not None:
        mapping = _apply_pipeline_layout(mapping, layout, model_spec, workload, framework, source)
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
    problems = []
    for system_name, counts, chiplets, gpu_hour_usd in systems:
        if pasted is not None:
            # solve's plans carry num_gpus so they can be pasted back; it must agree with the system
            counts = tuple(n for n in counts if n in pasted)
            if not counts:
                if len(systems) > 1:
                    continue  # a system none of the pasted counts allows is left out of the comparison
                allowed = list(systems[0][1])
                raise ProblemError(
                    f"mapping.num_gpus must be one of system.num_gpus {allowed}", source=source, field="mapping.num_gpus"
                )
        problem = _single_system_problem(
            model_spec, system_name, counts, chiplets, gpu_hour_usd, workload, mapping, objective, constraints, source
        )
        problems.append(dataclasses.replace(problem, framework=framework, framework_keys=framework_keys, pipeline_layout=layout))
    if not problems:
        raise ProblemError("none of the listed systems allows these device counts", source=source, field="mapping.num_gpus")
    if len(problems) == 1:
        return problems[0]
    return dataclasses.replace(problems[0], alternatives=tuple(problems))


def _single_system_problem(
    model_spec, system_name, counts, chiplets, gpu_hour_usd, workload, mapping, objective, constraints, source
) -> Problem:
    """The problem on one system: its device checked against the workload, its constraints parsed, its costs resolved."""
    system = library.load_system(system_name, 1)
    device = system.device
    constraints = _parse_constraints(
        constraints, source, workload, device.hbm_bytes, system.usable_memory_bytes, f"the {device.name} of {system_name}"
    )
    if workload.precision not in device.peak_flops:
        raise ProblemError(
            f"{workload.precision!r} is not supported by the {device.name} of {system_name}; allowed: "
            f"{', '.join(p for p in TRAINING_PRECISIONS if p in device.peak_flops)}",
            source=source,
            field="workload.precision",
        )
    if workload.kind == "inference" and workload.engine is not None:
        library.device_under_engine(device, workload.engine, source)
    if workload.kind == "training" and workload.fp8_attention:
        reason = fp8_attention_problem(workload.precision, workload.attention, workload.low_precision_recipe, device)
        if reason is not None:
            raise ProblemError(reason, source=source, field="workload.fp8_attention")
    if workload.kind == "training" and workload.attention == AttentionKernel.TRITON:
        reason = triton_attention_problem(device)
        if reason is not None:
            raise ProblemError(reason, source=source, field="workload.attention")
    if workload.kind == "training" and workload.fused_grouped_mlp:
        reason = fused_grouped_mlp_problem(model_spec, workload, device)
        if reason is not None:
            raise ProblemError(reason, source=source, field="workload.fused_grouped_mlp")
        for modules in mapping.get("recompute_modules", ()):  # each set the mapping lets solve choose
            reason = unfused_recompute_problem(modules, "mapping.recompute_modules")
            if reason is not None:
                raise ProblemError(reason, source=source, field="mapping.recompute_modules")
    if workload.kind == "training":
        reason = cta_caps_problem(device, workload.nccl_max_ctas)
        if reason is not None:
            raise ProblemError(reason, source=source, field="workload.nccl_max_ctas")
    if workload.kind == "training" and True in mapping.get("module_offload", ()):
        # fine-grained offloading where it may run: what the model and the device allow of the workload's modules
        # (what the mapping's other choices allow: the space, ``training_space.build_space``, and ``check_mapping``)
        reason = module_offload_problem(model_spec, device, workload.offload_modules)
        if reason is not None:
            raise ProblemError(reason, source=source, field="workload.offload_modules")
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
    )
    try:
        costs = costing.resolve_costs(system_name, counts, chiplets, gpu_hour_usd, problem.needs_cost)
    except ProblemError as exc:
        raise exc if exc.source else exc.located(source=source) from None
    return dataclasses.replace(problem, costs=costs)


def load_problem(path: str | Path) -> Problem:
    """Read and parse a problem file."""
    return parse_problem(library.read_yaml(path, "problem file"), source=str(path))
