"""How much faster than a tuned published run the planner claims its own plan is: a check on the plans' realism.

    python benchmarks/planner_gain.py [--families mlperf-v5 mbridge2511-llama ...] [--time-limit S]

For each published run whose mapping its authors tuned (by default MLPerf Training's dense runs, NVIDIA's most
tuned configurations, and Megatron-Bridge 25.11's dense rows), the planner solves the run's own problem (its model,
system, GPU count and workload, the mapping free) and the script prints three step times: the measured one, the
model's at the published mapping, and the model's at the planner's best mapping. Two ratios follow:

- ``gain`` = model at the published mapping / model at the plan: what the planner says it improves on the experts;
- ``claim`` = measured / model at the plan: how much faster than the measured run the plan is said to be.

Had the model no error anywhere, ``claim`` would be the true gain, and for mappings tuned by NVIDIA's MLPerf teams
it should stay near 1. A claim well above 1 where the model is accurate at the published mapping marks a region
of the mapping space (the plan's) where the model is too fast: a plan there is a lead to try, not a promise.
Nothing is fitted; the runs are problems/validation/training_runs.yaml's.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from parasol.model.errors import ProblemError
from parasol.solver.planner import solve
from parasol.solver.validation import evaluate_run, load_runs, problem_from_entry

FAMILIES = ("mlperf-v4", "mlperf-v5", "mbridge2511-llama")  # tuned dense runs


def free_problem(entry: dict):
    """The run's problem with its mapping left to the planner (``validation.problem_from_entry`` without one)."""
    return problem_from_entry({**entry, "mapping": {}})


def gains(families=FAMILIES, time_limit: float = 30.0) -> list[dict]:
    """One row per run of ``families`` (id prefixes): the three step times, the ratios and the plan."""
    rows = []
    for entry in load_runs():
        if not entry["id"].startswith(tuple(families)):
            continue
        run = evaluate_run(entry)
        result = solve(free_problem(entry), time_limit=time_limit)
        if not result.plans:
            continue
        plan = result.plans[0]
        best = plan.evaluation.metrics["step_time_s"]
        rows.append(
            {
                "id": entry["id"],
                "measured_s": run.measured_step_s,
                "published_mapping_s": run.predicted_step_s,
                "plan_s": best,
                "gain": run.predicted_step_s / best,
                "claim": run.measured_step_s / best,
                "error": run.error,
                "plan": plan.mapping,
                "status": str(result.status),
            }
        )
    return rows


def describe(mapping) -> str:
    m = mapping
    return f"tp {m.tp} pp {m.pp} cp {m.cp} dp {m.dp} mb {m.micro_batch} vpp {m.vpp} zero {m.zero} {m.recompute}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help="run id prefixes")
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per solve")
    args = parser.parse_args()
    try:
        rows = gains(args.families, args.time_limit)
    except ProblemError as err:
        print(err, file=sys.stderr)
        return 2
    print(f"{'run':58s} {'measured':>9s} {'published':>9s} {'plan':>8s} {'error':>7s} {'gain':>5s} {'claim':>5s}  plan")
    for r in rows:
        print(
            f"{r['id']:58s} {r['measured_s']:9.3f} {r['published_mapping_s']:9.3f} {r['plan_s']:8.3f} "
            f"{100 * r['error']:+6.1f}% {r['gain']:5.2f} {r['claim']:5.2f}  {describe(r['plan'])}"
        )
    if rows:
        claims = [r["claim"] for r in rows]
        accurate = [r["claim"] for r in rows if abs(r["error"]) <= 0.05]
        print(
            f"\n{len(rows)} runs: median gain {statistics.median(r['gain'] for r in rows):.2f}, median claim "
            f"{statistics.median(claims):.2f} (max {max(claims):.2f}); where the model is within 5 % at the published "
            f"mapping ({len(accurate)} runs): median claim {statistics.median(accurate) if accurate else float('nan'):.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
