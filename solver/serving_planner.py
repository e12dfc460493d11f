"""The serving planner: ``planner.Planner`` for ``workload.kind: inference``.

Its space is ``serving_space.build_space``; its composition ``model.serving_step.compose``; a plan
is a ``model.specs.ServingMapping`` and the number of GPUs. Memory pruning for CP-SAT
(``solver_space``): a (tp, pp, ep, batch) whose pool does not fit in memory at that batch cannot
be in a plan, so CP-SAT does not see it.
"""

from __future__ import annotations

import numpy as np

from parasol.model.choices import ServingObjective as O
from parasol.model.decisions import ServingDecision as S
from parasol.model.errors import ProblemError
from parasol.model.evaluation import Evaluation
from parasol.model.serving_step import (
    ACTIVATIONS,
    KV,
    METRIC_SENSE,
    WEIGHTS,
    ServingContext,
    compose,
    evaluate_inference,
    replica_memory,
    serving_metrics,
    time_reference,
)

from . import serving_report
from .numpy_ops import NumpyOps
from .planner import FrontMetric, Plan, Planner
from .relations import Space
from .serving_space import build_space, plan_of
from .tables import Tables

# objective -> the metric it optimises
OBJECTIVE_METRICS = {O.THROUGHPUT: "tokens_per_s", O.TTFT: "ttft_s", O.TPOT: "tpot_s", O.LATENCY: "e2e_latency_s"}
FRONT_METRICS = {name: FrontMetric(name, name, sense) for name, sense in METRIC_SENSE.items()}


class ServingPlanner(Planner):
    kind = "inference"
    objectives = tuple(str(o) for o in O)
    front_metrics = tuple(FRONT_METRICS)
    points_name = "plans"
    report = serving_report

    def fixed_plan(self, problem) -> tuple:
        return problem.num_gpus[0], problem.fixed_serving_mapping()

    @property
    def mapping_keys(self) -> tuple:
        return (S.NUM_GPUS, S.TP, S.PP, S.EP, S.DP, S.BATCH, S.PREFILL_TP, S.PREFILL_PP, S.PREFILL_EP, S.PREFILL_DP)

    def space(self, problem) -> Space:
        return build_space(problem)

    def context(self, problem, names: tuple = ()) -> ServingContext:
        return ServingContext(problem.model, problem.system(problem.num_gpus[0]), problem.workload)

    def compose(self, o, ctx):
        out = compose(o, ctx)
        out.minimised.update({str(objective): out.minimised[metric] for objective, metric in OBJECTIVE_METRICS.items()})
        return out

    def time_reference(self, problem) -> tuple:
        return time_reference(problem.model, problem.workload)

    def decode(self, problem, space: Space, stored: dict):
        return plan_of(space, stored)

    def evaluate(self, problem, num_gpus: int, mapping) -> Evaluation:
        return evaluate_inference(problem.model, problem.system(num_gpus), problem.workload, mapping)

    def objective_value(self, problem, objective: str, metrics: dict) -> float:
        return metrics[self.front_metric(problem, objective).metric]

    def front_metric(self, problem, name: str) -> FrontMetric:
        if name in OBJECTIVE_METRICS:
            name = OBJECTIVE_METRICS[name]
        if name not in FRONT_METRICS:
            raise ProblemError(
                f"{name!r} is not a metric the planner can optimise; allowed: {', '.join(FRONT_METRICS)}", field="--objectives"
            )
        return FRONT_METRICS[name]

    def frame(self, problem, ctx, o, out) -> dict:
        return serving_metrics(ctx, out, o.decision(S.NUM_GPUS))

    def round_trip(self, out) -> dict:
        return {"ttft_s": out.ttft, "tpot_s": out.tpot, "e2e_latency_s": out.e2e}

    def solver_space(self, problem, space: Space, tables: Tables) -> Space:
        """``space`` without the (tp, pp, ep, batch) whose pool alone exceeds the usable memory
        (``serving_step.replica_memory`` on numpy), unless none fits (then CP-SAT proves it)."""
        keys = [S.TP, S.PP, S.EP, S.MICRO_BATCH, S.BATCH]
        rows = space.project(keys)
        cols = {k: rows[k].to_numpy() for k in keys}
        o = NumpyOps(tables, cols)
        peak = replica_memory(
            o, o.lookup(WEIGHTS), o.lookup(KV), o.decision(S.BATCH), o.lookup(ACTIVATIONS), o.decision(S.PP) == 1
        )
        fits = np.asarray(peak) <= problem.system(problem.num_gpus[0]).usable_memory_bytes
        if fits.all() or not fits.any():
            return space
        return space.extend("pool_fits", rows.loc[fits].reset_index(drop=True))

    def binds(self, problem, limit, plan: Plan, proven: bool) -> str:
        met = plan.evaluation.metrics
        if limit.name in ("ttft_slo", "tpot_slo"):
            name = limit.name[:4]
            return (
                f"the {name.upper()} SLO binds: {met[name + '_s']:.4g} s is the least any plan that fits reaches "
                f"(SLO {limit.bound:g} s)"
            )
        system = problem.system(plan.num_gpus)
        mem = plan.evaluation.breakdown["memory_gib"]
        return (
            f"memory binds: {met['peak_memory_gib']:.1f} GiB per GPU is the least any plan needs (weights "
            f"{mem['weights']:.1f} GiB + KV cache {mem['kv_cache']:.1f} GiB (+ {mem['kv_headroom']:.1f} GiB the engine "
            f"leaves outside its KV pool) + activations {mem['activations']:.1f} GiB, at {plan.mapping.as_dict()}); the "
            f"{system.device.name} offers {system.usable_memory_bytes / 2**30:.1f} GiB"
            + (
                f" (after the {system.memory_headroom_bytes / 2**30:.1f} GiB headroom kept)"
                if system.memory_headroom_bytes
                else ""
            )
        )

    def together(self, problem, names: list) -> str:
        if len([n for n in names if n != "memory"]) >= 2:
            return "the TTFT and TPOT SLOs together admit no plan that fits (each alone does)"
        return "the SLOs together admit no plan that fits"


SERVING = ServingPlanner()
