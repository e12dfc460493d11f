"""The serving planner: ``planner.Planner`` for ``workload.kind: inference``.

Its space is ``serving_space.build_space``; its composition ``model.serving_step.compose``; a plan
is a ``model.specs.ServingMapping`` and the number of GPUs. Memory pruning for CP-SAT
(``solver_space``): a (tp, pp, ep, batch) whose pool does not fit in memory at that batch cannot
be in a plan, so CP-SAT does not see it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from parasol.model.choices import ServingMode
from parasol.model.choices import ServingObjective as O
from parasol.model.decisions import ServingDecision as S
from parasol.model.errors import ProblemError
from parasol.model.evaluation import Evaluation
from parasol.model.inference import budget_micro_batch, longest_sequence_tokens, pass_tokens
from parasol.model.serving_step import (
    ACTIVATIONS,
    HOURLY_PRICE,
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

from . import costing, serving_report
from .planner import FrontMetric, Plan, Planner
from .training_planner import _per_gpu_count

if TYPE_CHECKING:
    # the space (pandas) is built where a search runs: evaluate starts without it
    from .relations import Space
    from .tables import Tables

# objective -> the metric it optimises
OBJECTIVE_METRICS = {
    O.THROUGHPUT: "tokens_per_s",
    O.TTFT: "ttft_s",
    O.TPOT: "tpot_s",
    O.LATENCY: "e2e_latency_s",
    O.GPUS: "num_gpus",
    O.COST: "cost_per_hour_usd",
}
PRICED = "cost_per_hour_usd"  # the metric that needs the system's prices
FRONT_METRICS = {name: FrontMetric(name, name, sense) for name, sense in {**METRIC_SENSE, PRICED: 1}.items()}


SERVING_ENUMERATE_BELOW = 200_000  # points: enumerating costs less than solving below this (enumerate_below)
# points: a front found by evaluating every point (front_enumerate_below); measured (docs/serving.md): 53k-169k
# plans in 0.3-5.4 s against 13-125 s (two of four PARTIAL at 120 s) for CP-SAT's fronts; at ~30k plans/s
# 2M plans take about a minute, which CP-SAT's fronts already exceed at 169k
SERVING_FRONT_ENUMERATE_BELOW = 2_000_000


# what a sequence's tokens in a pass are, by serving mode (the ``token_budget`` limit's message)
TOKENS_OF_A_SEQUENCE = {
    ServingMode.CONTINUOUS: "its decoded token and its prompt's share",
    ServingMode.STATIC: "its prompt, prefilled in one pass",
    ServingMode.DISAGGREGATED: "its decoded token",
}


def budget_restricts(problem) -> bool:
    """Whether a stated token budget leaves out any micro-batch the problem allows: below the largest listed batch, or
    the engine's (or the planner's default) batch cap where none is listed; a looser budget cannot bind, alone or with
    the other limits."""
    from .serving_space import largest_batch  # noqa: PLC0415  (pandas, kept off the command line's start-up)

    wl = problem.workload
    return wl.max_prefill_tokens is not None and budget_micro_batch(wl) < largest_batch(problem)


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
        from .serving_space import build_space  # noqa: PLC0415

        return build_space(problem)

    def context(self, problem, names: tuple = ()) -> ServingContext:
        priced = any(OBJECTIVE_METRICS.get(n, n) == PRICED for n in map(str, names))
        hourly = {n: problem.system_cost(n)["cost_per_hour_usd"] for n in problem.num_gpus} if priced else None
        return ServingContext(problem.model, problem.system(problem.num_gpus[0]), problem.workload, hourly)

    def compose(self, o, ctx):
        out = compose(o, ctx)
        out.minimised.update(
            {str(objective): out.minimised[metric] for objective, metric in OBJECTIVE_METRICS.items() if metric in out.minimised}
        )
        return out

    def price_factors(self, problem, ctx) -> tuple:
        return (HOURLY_PRICE,) if ctx.hourly_usd is not None else ()

    def time_reference(self, problem) -> tuple:
        return time_reference(problem.model, problem.workload)

    def decode(self, problem, space: Space, stored: dict):
        from .serving_space import plan_of  # noqa: PLC0415

        return plan_of(space, stored)

    def evaluate(self, problem, num_gpus: int, mapping) -> Evaluation:
        ev = evaluate_inference(problem.model, problem.system(num_gpus), problem.workload, mapping)
        if problem.needs_cost:  # the system's capex, power, $ per hour, $ per million output tokens
            ev.metrics.update(costing.cost_metrics(problem.system_cost(num_gpus), ev.metrics["tokens_per_s"], None))
            ev.metrics.pop("goodput", None)
        return ev

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
        n = o.decision(S.NUM_GPUS)
        columns = serving_metrics(ctx, out, n)
        if problem.needs_cost:
            rows = {m: problem.system_cost(m)["cost_per_hour_usd"] for m in problem.num_gpus}
            columns[PRICED] = _per_gpu_count(n, rows)
        return columns

    def round_trip(self, out) -> dict:
        finite = {"makespan_s": out.makespan} if out.makespan is not None else {}
        drained = {"drain_s": out.drain} if out.drain is not None else {}
        return {"ttft_s": out.ttft, "tpot_s": out.tpot, "e2e_latency_s": out.e2e, **finite, **drained}

    def solver_space(self, problem, space: Space, tables: Tables) -> Space:
        """``space`` without the (tp, pp, ep, batch) whose pool alone exceeds the usable memory
        (``serving_step.replica_memory`` on numpy), unless none fits (then CP-SAT proves it)."""
        import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

        keys = [S.TP, S.PP, S.EP, S.MICRO_BATCH, S.BATCH]
        rows = space.project(keys)
        cols = {k: rows[k].to_numpy() for k in keys}
        from .numpy_ops import NumpyOps  # noqa: PLC0415

        o = NumpyOps(tables, cols)
        peak = replica_memory(
            o, o.lookup(WEIGHTS), o.lookup(KV), o.decision(S.BATCH), o.lookup(ACTIVATIONS), o.decision(S.PP) == 1
        )
        fits = np.asarray(peak) <= problem.system(problem.num_gpus[0]).usable_memory_bytes
        if fits.all() or not fits.any():
            return space
        return space.extend("pool_fits", rows.loc[fits].reset_index(drop=True))

    def front_enumerate_below(self, problem) -> int:
        return SERVING_FRONT_ENUMERATE_BELOW

    def enumerate_below(self, problem) -> int:
        # measured, 2 cores, best of 2 (suite instances): 814 points 0.67 s solved against 0.09 s enumerated,
        # 2,858 (Mixtral) 5.88 against 0.52 s, 30,440 (disaggregated) 2.67 against 0.23 s, 83,563 (a request
        # rate over 64 device counts) 7.19 against 2.72 s
        return SERVING_ENUMERATE_BELOW

    def binds(self, problem, limit, plan: Plan, proven: bool) -> str:
        met = plan.evaluation.metrics
        if limit.name == "request_rate":
            how = "the most any plan that fits sustains" if proven else "the most found within the time limit"
            return (
                f"the request rate binds: {met['requests_per_s']:.4g} requests/s is {how} (on {plan.num_gpus} GPUs, "
                f"{serving_report.mapping_line(plan.mapping)}), below workload.request_rate "
                f"{problem.workload.request_rate:g}; allow more GPUs (system.num_gpus)"
                + (
                    f" or raise workload.max_prefill_tokens (it holds {budget_micro_batch(problem.workload):,} sequences a "
                    "micro-batch)"
                    if budget_restricts(problem)
                    else ""
                )
            )
        if limit.name in ("ttft_slo", "tpot_slo"):
            name = limit.name[:4]
            return (
                f"the {name.upper()} SLO binds: {met[name + '_s']:.4g} s is the least any plan that fits reaches "
                f"(SLO {limit.bound:g} s)"
            )
        if limit.name == "token_budget":
            wl = problem.workload
            return (
                f"the token budget binds: workload.max_prefill_tokens {wl.max_prefill_tokens:,} holds "
                f"{limit.bound:,.0f} sequences a pass ({pass_tokens(wl, 1):.4g} tokens each: {TOKENS_OF_A_SEQUENCE[ServingMode(wl.serving)]}), "
                f"fewer than the least micro-batch allowed ({plan.mapping.batch // plan.mapping.decode.pp} "
                f"at {plan.mapping.as_dict()}); raise max_prefill_tokens or allow smaller batches (mapping.batch)"
            )
        system = problem.system(plan.num_gpus)
        if limit.name == "longest_sequence":
            wl = problem.workload
            return (
                f"the longest sequence binds: one request of {longest_sequence_tokens(wl):,.0f} tokens (input_len + "
                f"output_len_max, or the length-biased mean request where more) needs "
                f"{met['longest_sequence_gib']:.1f} GiB per GPU with the weights and activations, the least any plan "
                f"reaches (at {plan.mapping.as_dict()}); the "
                f"{system.device.name} offers {system.usable_memory_bytes / 2**30:.1f} GiB; lower workload.output_len_max "
                "or allow more GPUs (system.num_gpus)"
            )
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
        slos = [n[:4].upper() for n in names if n in ("ttft_slo", "tpot_slo")]
        what = " and ".join(slos) + (" SLOs" if len(slos) > 1 else " SLO") if slos else "the SLOs"
        if "longest_sequence" in names:
            named = (
                ("request_rate" in names, "the request rate"),
                (bool(slos), f"the {what}"),
                ("memory" in names, "the memory"),
            )
            others = " and ".join(text for present, text in named if present)
            return (
                f"the set's longest request (workload.output_len_max) and {others or 'the other limits'} together admit no "
                "plan that fits (each alone does); lower output_len_max or allow more GPUs (system.num_gpus)"
            )
        if "token_budget" in names and budget_restricts(problem):
            return (
                "the token budget (workload.max_prefill_tokens) and the other limits together admit no plan that fits "
                "(each alone does): the batches within the budget miss the others; raise max_prefill_tokens"
            )
        if "request_rate" in names:
            return (
                f"the request rate {problem.workload.request_rate:g}/s and the {what} together admit no plan that fits "
                "(each alone does); allow more GPUs (system.num_gpus)"
            )
        if len(slos) >= 2:
            return "the TTFT and TPOT SLOs together admit no plan that fits (each alone does)"
        return "the SLOs together admit no plan that fits"


SERVING = ServingPlanner()
