"""The training planner: ``planner.Planner`` for ``workload.kind: training``.

Its space is ``training_space.build_space``; its composition ``model.training_step.compose``; a plan
is a ``model.specs.Mapping`` and the number of GPUs. Solver techniques it adds, each exact:

- memory pruning (``solver_space``): a (tp, cp, micro-batch, sp, recompute, ep) whose single layer
  already needs more activation memory than the device has cannot run (every stage holds at least
  one layer of one micro-batch), so CP-SAT does not see it;
- the hint: the best point of the slice with each pipeline depth's default split, the two smallest
  micro-batches and the first placement of each grid point (numpy enumeration);
- chiplet counts (``subproblems``): each count changes the device, so each is its own exact problem,
  after the cost limits (capex, power) remove the device counts they exclude.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from parasol.model.choices import COST_OBJECTIVES
from parasol.model.choices import TrainingObjective as T
from parasol.model.decisions import TRAINING_MAPPING_KEYS
from parasol.model.decisions import TrainingDecision as D
from parasol.model.errors import ProblemError
from parasol.model.evaluation import GIB, Evaluation
from parasol.model.goodput import stretch_basis_points
from parasol.model.offload import HOST_MAPPING_KEYS
from parasol.model.training_step import (
    HOURLY_PRICE,
    TrainingContext,
    compose,
    device_memory,
    evaluate_step,
    layer_factors,
    least_peak_memory,
    training_metrics,
)

from . import costing, training_report
from .planner import FrontMetric, Plan, Planner, SearchSettings

if TYPE_CHECKING:
    # the space (pandas) is built where a search runs: evaluate starts without it
    from .relations import Space
    from .tables import Tables

FRONT_METRICS = {
    "throughput": FrontMetric(T.THROUGHPUT, "tokens_per_s", -1),
    "step_time": FrontMetric(T.STEP_TIME, "step_time_s", 1),
    "memory": FrontMetric(T.MEMORY, "peak_memory_gib", 1),
    "tokens_per_gpu": FrontMetric(T.TOKENS_PER_GPU, "tokens_per_s_per_gpu", -1),
    "cost": FrontMetric(T.COST, "usd_per_million_tokens", 1),
    "tokens_per_usd": FrontMetric(T.TOKENS_PER_USD, "tokens_per_usd", -1),
}
HINT_MICRO_BATCHES = 2


DENSE_ENUMERATE_BELOW = 1_000_000  # points: enumerating costs less than solving below this (enumerate_below)
MOE_ENUMERATE_BELOW = 300_000
# points: above the enumeration threshold, bounding blocks and enumerating the rest beats CP-SAT
# (measured, benchmarks/solve_speed.py: docs/planner.md); None: CP-SAT
BOUND_ABOVE: int | None = 0


class TrainingPlanner(Planner):
    kind = "training"
    objectives = tuple(str(o) for o in T)
    mapping_keys = (D.NUM_GPUS, *TRAINING_MAPPING_KEYS)
    front_metrics = tuple(n for n in FRONT_METRICS if n != "tokens_per_gpu")  # objectives all; fronts these
    points_name = "mappings"
    report = training_report

    def fixed_plan(self, problem) -> tuple:
        return problem.num_gpus[0], problem.fixed_mapping()

    def space(self, problem) -> Space:
        from .training_space import build_space  # noqa: PLC0415

        return build_space(problem)

    def context(self, problem, names: tuple = ()) -> TrainingContext:
        priced = any(str(n) in COST_OBJECTIVES for n in names)
        max_step = costing.max_step_time_s(problem)
        goodput = {n: costing.goodput(problem, n) for n in problem.num_gpus} if priced or max_step is not None else {}
        hourly = {n: problem.system_cost(n)["cost_per_hour_usd"] / goodput[n] for n in problem.num_gpus} if priced else None
        stretch = {n: stretch_basis_points(g) for n, g in goodput.items()} if max_step is not None else None
        system = problem.system(problem.num_gpus[0])
        return TrainingContext(
            problem.model,
            system,
            problem.workload,
            hourly,
            max_step,
            run_stretch=stretch,
            host_limit_bytes=host_limit_bytes(problem, system),
        )

    def compose(self, o, ctx):
        return compose(o, ctx)

    def time_reference(self, problem) -> tuple:
        return tuple(dict.fromkeys(layer_factors(problem.model)))

    def price_factors(self, problem, ctx) -> tuple:
        return (HOURLY_PRICE,) if ctx.hourly_usd is not None else ()

    def decode(self, problem, space: Space, stored: dict):
        from .training_space import mapping_of  # noqa: PLC0415

        return mapping_of(space, stored)

    def evaluate(self, problem, num_gpus: int, mapping) -> Evaluation:
        return evaluate_plan(problem, num_gpus, mapping)

    def objective_value(self, problem, objective: str, metrics: dict) -> float:
        return metrics[self.front_metric(problem, objective).metric]

    def front_metric(self, problem, name: str) -> FrontMetric:
        if name not in FRONT_METRICS:
            raise ProblemError(f"{name!r} is not a training metric; allowed: {', '.join(FRONT_METRICS)}", field="--objectives")
        metric = FRONT_METRICS[name]
        if name == "cost" and problem.workload.train_tokens is not None:
            return dataclasses.replace(metric, metric="run_cost_usd")
        return metric

    def frame(self, problem, ctx, o, out) -> dict:
        n = o.decision(D.NUM_GPUS)
        columns = training_metrics(ctx, out.step, out.peak_memory, n, out.host_memory)
        columns["microbatches"] = o.decision(D.MICROBATCHES)
        columns["device_memory_gib"] = device_memory(o, ctx, out) / GIB
        if problem.needs_cost:
            rows = {m: problem.system_cost(m) for m in problem.num_gpus}
            by_n = {key: _per_gpu_count(n, {m: r[key] for m, r in rows.items()}) for key in next(iter(rows.values()))}
            goodput = _per_gpu_count(n, {m: costing.goodput(problem, m) for m in problem.num_gpus})
            columns.update(costing.cost_metrics(by_n, columns["tokens_per_s"], problem.workload.train_tokens, goodput))
            if problem.chiplets != (None,):
                columns["chiplets"] = problem.chiplets[0]
        return columns

    def round_trip(self, out) -> dict:
        return {"step_time_s": out.step}

    def subproblems(self, problem) -> list:
        """One sub-problem per chiplet count, on the device counts that meet the cost limits."""
        parts = []
        for count in problem.chiplets:
            sub = dataclasses.replace(problem, chiplets=(count,))
            limited, why = cost_filter(sub)
            parts.append((None if count is None else f"chiplets {count}", limited, why))  # None: the device as described
        return parts

    def solver_space(self, problem, space: Space, tables: Tables) -> Space:
        """``space`` without the (tp, cp, micro-batch, sp, recompute, ep) whose one layer's activations
        and recomputation working set exceed the usable memory (unless none fits: then CP-SAT proves
        the problem infeasible on the full space)."""
        body = layer_factors(problem.model)[1]
        table = tables.table(body)
        usable = min(problem.system(n).usable_memory_bytes for n in problem.num_gpus)
        keys = [k for k in (D.TP, D.CP, D.MICRO_BATCH, D.SP, D.RECOMPUTE, D.EP) if k in body.keys]
        fits = least_peak_memory(body.row(*table.columns)) <= usable
        if fits.all() or not fits.any():
            return space
        return space.extend("one_layer_fits", table.keys.loc[fits, keys].drop_duplicates().reset_index(drop=True))

    def hint_space(self, problem, space: Space) -> Space:
        """The first placement of each grid point, the two smallest micro-batches per dp, and per
        pipeline depth one partition (the default split where allowed, else the middle one) with
        every interleaving depth it allows."""
        import pandas as pd  # noqa: PLC0415

        grid = space.relation("grid")
        grid = grid.drop_duplicates(subset=[D.NUM_GPUS, D.TP, D.PP, D.DP, D.CP, D.EP], keep="first")
        micro = space.relation("micro").sort_values([D.DP, D.MICRO_BATCH]).groupby(D.DP).head(HINT_MICRO_BATCHES)
        pipe = space.relation("pipeline")
        chosen = []
        for pp, rows in pipe.groupby(D.PP, sort=True):
            splits = rows[[D.FIRST_STAGE_LAYERS, D.LAST_STAGE_LAYERS]].drop_duplicates()
            default = _default_split(problem, pp)
            match = splits[(splits[D.FIRST_STAGE_LAYERS] == default[0]) & (splits[D.LAST_STAGE_LAYERS] == default[1])]
            pick = match.iloc[0] if len(match) else splits.iloc[len(splits) // 2]
            chosen.append(
                rows[
                    (rows[D.FIRST_STAGE_LAYERS] == pick[D.FIRST_STAGE_LAYERS])
                    & (rows[D.LAST_STAGE_LAYERS] == pick[D.LAST_STAGE_LAYERS])
                ]
            )
        out = space.replace("grid", grid.reset_index(drop=True)).replace("micro", micro.reset_index(drop=True))
        return out.replace("pipeline", pd.concat(chosen, ignore_index=True))

    def search_settings(self, problem) -> SearchSettings:
        # MoE problems skip presolve: their expert tables (keyed by ep as well) made CP-SAT's presolve
        # expand ~1e8 objective entries and probe 2.5M clauses (47 of 52 s on the DeepSeek-V3 2,048-GPU
        # example); dense problems keep it (GPT-3 175B on 1,024 A100: 2.1 s with, 6.6 s without).
        # Dense problems search without the LP relaxation: the numpy hint is usually the optimum and
        # propagation proves it sooner (measured, one worker: deterministic time 0.44 s against 2.26 s
        # on GPT-3 175B at 1,024 A100, 0.59 against 1.60 s at 16,384, 0.39 against 2.27 s on Llama 3
        # 70B at 1,024 H100, 2.16 against 9.79 s on the chiplet co-design example); MoE problems keep
        # it (without presolve it gives their only bound).
        if problem.model.moe is not None:
            return SearchSettings(presolve=False)
        return SearchSettings(linearization_level=0)

    def block_levels(self, problem, space: Space) -> tuple:
        # the grid point, micro-batch and recomputation first (what sets a layer's time and memory), then
        # the ZeRO stage, sequence parallelism and the schedule with its interleaving depth (the bubble and
        # the in-flight chunks); the pipeline split and the choices that leave the step nearly unchanged
        # (cp and tp communication, offloads) are enumerated within each block
        first = (*space.relation("grid").columns, D.MICRO_BATCH, D.MICROBATCHES, D.RECOMPUTE, D.MODULE_OFFLOAD)
        second = (D.ZERO, D.OPTIMIZER_OFFLOAD, D.SP, D.TP_COMM_OVERLAP, D.INTERLEAVED, D.VPP)
        return tuple(tuple(k for k in level if k in space.domains) for level in (first, second))

    def can_bound(self, problem) -> bool:
        return True  # every training space has a grid to fix per block (block_levels)

    def enumerate_below(self, problem) -> int:
        # measured, 2 cores, best of 2 (suite instances; CP-SAT one worker with its hint, against every point
        # through the numpy composition): dense 282 points 0.22 s against 0.07 s, 1.0M 0.75 against 0.60 s,
        # 1.18M 0.68 against 0.85 s, 1.9M 0.56 against 1.15 s; MoE (DeepSeek-V3 on 1,024 H800, pipeline split
        # fixed) 159k points 18.3 s against 2.0 s
        return MOE_ENUMERATE_BELOW if problem.model.moe is not None else DENSE_ENUMERATE_BELOW

    def bound_above(self, problem) -> int | None:
        return BOUND_ABOVE

    def binds(self, problem, limit, plan: Plan, proven: bool) -> str:
        met = plan.evaluation.metrics
        if limit.name == "host_memory":
            how = "the least any allowed mapping needs" if proven else "the least found within the time limit"
            system = problem.system(plan.num_gpus)
            return (
                f"host memory binds: {met['host_memory_gib']:.1f} GiB per GPU ({training_report.host_contents(plan.mapping)}) is {how} "
                f"where the device memory allows; the {system.name} gives each GPU "
                f"{system.host_memory_per_gpu_bytes / GIB:.1f} GiB of host DRAM (its host_memory_bytes over {system.gpus_per_node} "
                "GPUs per node)"
            )
        if limit.name == "run_length":
            need, bound = apart(met["run_hours"], problem.constraints["max_run_hours"])
            return (
                f"max_run_hours binds: the fastest allowed plan ({plan.num_gpus} GPUs, {met['tokens_per_s']:,.0f} tokens/s) "
                f"needs {need} h, over the limit {bound} h"
            )
        system = problem.system(plan.num_gpus)
        device, m = system.device, plan.mapping
        mem = plan.evaluation.breakdown["memory_gib"]
        states = sum(v for k, v in mem.items() if k not in ("activations", "reduction_copy"))
        copy = f" + the gradient reduction's copy {mem['reduction_copy']:.1f} GiB" if "reduction_copy" in mem else ""
        how = "the least any allowed mapping needs" if proven else "the least found within the time limit"
        return (
            f"memory binds: {met['peak_memory_gib']:.1f} GiB per GPU is {how} "
            f"(weights, gradients and optimizer states {states:.1f} GiB + activations {mem['activations']:.1f} GiB{copy}, "
            f"at tp {m.tp}, pp {m.pp}, dp {m.dp}, zero {m.zero}, recompute {m.recompute}, micro_batch {m.micro_batch}); "
            f"the {device.name} offers {system.usable_memory_bytes / GIB:.1f} GiB ({device.hbm_bytes / GIB:.1f} GiB minus "
            f"{system.memory_reserve_bytes / GIB:.1f} GiB reserved"
            + (f", {system.memory_headroom_bytes / GIB:.1f} GiB headroom kept" if system.memory_headroom_bytes else "")
            + ")"
        )

    def together(self, problem, names: list) -> str:
        if names == ["memory"]:
            return "the mapping restrictions and the pipeline partition rules admit no mapping, whatever the memory"
        named = {"memory": "memory", "host_memory": "host memory", "run_length": "max_run_hours"}
        return f"{' and '.join(named[n] for n in names)} together admit no plan (each alone does)"


TRAINING = TrainingPlanner()


def host_limit_bytes(problem, system) -> float | None:
    """The host memory each GPU may fill (``SystemSpec.host_memory_per_gpu_bytes``) where the problem's mapping
    allows some offloading (each offload key is off unless the mapping lists it) and the system file gives its
    host DRAM; None otherwise: no host limit to compose."""
    offloads = any(value for key in HOST_MAPPING_KEYS for value in problem.mapping.get(key, ()))
    return system.host_memory_per_gpu_bytes if offloads and system.host_memory_bytes else None


def _per_gpu_count(n, values: dict):
    """An array (or a number) of ``values[n]`` for every entry of ``n``."""
    import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

    if np.ndim(n) == 0:
        return values[int(n)]
    keys = np.array(sorted(values))
    return np.array([values[k] for k in keys])[np.searchsorted(keys, n)]


def _default_split(problem, pp: int) -> tuple:
    from parasol.model.pipeline import default_edge_stage_layers

    L = problem.model.layers
    return (L, L) if pp == 1 else default_edge_stage_layers(L, pp)


def evaluate_plan(problem, num_gpus: int, mapping) -> Evaluation:
    """The model's evaluation of a plan, with its cost metrics when the problem's system is priced
    (a ProblemError when a cost is asked and it is not)."""
    ev = evaluate_step(TrainingContext(problem.model, problem.system(num_gpus), problem.workload), mapping)
    try:
        row = problem.system_cost(num_gpus)
        goodput = costing.goodput(problem, num_gpus)
    except ProblemError:
        if problem.needs_cost:
            raise
        return ev  # the costs are extras here: a system without a price, or failures that leave no time to train
    ev.metrics.update(costing.cost_metrics(row, ev.metrics["tokens_per_s"], problem.workload.train_tokens, goodput))
    if problem.chiplets != (None,):
        ev.metrics["chiplets"] = problem.chiplets[0]
    return ev


def cost_filter(problem) -> tuple:
    """The problem restricted to the device counts whose system meets max_capex_usd / max_power_w,
    or (None, why not) when none does."""
    if not problem.has_cost_limits:
        return problem, None
    rows = {(n, problem.chiplets[0]): problem.system_cost(n) for n in problem.num_gpus}
    why = costing.cost_limits_message(problem, rows)
    if why is not None:
        return None, why
    counts = tuple(n for n in problem.num_gpus if costing.within_limits(problem, rows[(n, problem.chiplets[0])]))
    return dataclasses.replace(problem, num_gpus=counts), None


def apart(value: float, limit: float) -> tuple[str, str]:
    """``value`` and the ``limit`` it exceeds, written with the fewest decimals (one at least) that tell them apart
    and show the limit's first significant digit."""
    for decimals in range(1, 10):
        shown = f"{value:,.{decimals}f}", f"{limit:,.{decimals}f}"
        if shown[0] != shown[1] and (limit <= 0 or float(shown[1].replace(",", "")) > 0):
            return shown
    return f"{value:,.10g}", f"{limit:,.10g}"
