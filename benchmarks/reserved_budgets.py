"""Whole-run GPU-hours against the reserved published totals (problems/validation/reserved_budgets.yaml).

Each row is planned as a user of parasol would plan it: the planner's best mapping for the row's model, cluster and
workload (``solve``, throughput), and the run's GPU-hours with the goodput model's default (``run_hours`` x GPUs).
Issue 13 reserves these totals; ``reserved_accuracy.py`` is the only caller."""

from __future__ import annotations

from dataclasses import dataclass

from parasol.solver.planner import solve
from parasol.solver.validation import problem_from_entry


@dataclass(frozen=True)
class BudgetResult:
    run_id: str
    published_gpu_hours: float
    predicted_gpu_hours: float
    mfu: float
    status: str

    @property
    def error(self) -> float:
        return self.predicted_gpu_hours / self.published_gpu_hours - 1.0


def evaluate(row: dict, time_limit: float = 60.0) -> BudgetResult:
    """The planner's best plan for the row and the GPU-hours of its run."""
    problem = problem_from_entry({**row, "workload": {"kind": "training", **row["workload"]}, "mapping": {}})
    result = solve(problem, time_limit=time_limit)
    if not result.plans:
        timed_out = str(result.status) == "UNKNOWN"
        why = f"no plan found within the {time_limit:g} s time limit" if timed_out else "no plan fits"
        raise ValueError(f"{row['id']}: {why} ({result.status})")
    metrics = result.plans[0].evaluation.metrics
    return BudgetResult(
        run_id=row["id"],
        published_gpu_hours=float(row["published_gpu_hours"]),
        predicted_gpu_hours=metrics["run_hours"] * row["num_gpus"],
        mfu=metrics.get("mfu", 0.0),
        status=str(result.status),
    )
