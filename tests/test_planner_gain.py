"""benchmarks/planner_gain.py: the planner's plan against a published run's own mapping."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import planner_gain  # noqa: E402  benchmarks/planner_gain.py


def test_the_plan_is_never_slower_than_a_published_mapping_the_space_holds():
    """Megatron-Bridge 25.11's Llama 3 8B on 8 H100 runs tp 1, pp 1, dp 8, micro-batch 1: a mapping of the planner's
    default space, so the proven-optimal plan is at least as fast in the model (gain >= 1)."""
    (row,) = planner_gain.gains(("mbridge2511-llama3_8b-dgx-h100",), time_limit=30)
    assert row["status"] == "OPTIMAL"
    assert row["gain"] >= 1.0 - 1e-9
    assert row["plan_s"] <= row["published_mapping_s"] * (1.0 + 1e-9) and abs(row["measured_s"] - 9.07) < 0.01


def test_free_problem_leaves_the_mapping_to_the_planner():
    from parasol.solver.validation import load_runs  # noqa: PLC0415

    entry = next(e for e in load_runs() if e["id"] == "mlperf-v51-llama31-405b-gb200-512gpu-nvfp4")
    problem = planner_gain.free_problem(entry)
    assert problem.workload.nccl_max_ctas.cp == 1 and problem.num_gpus == (512,)  # the run's workload, its caps kept
    assert problem.mapping == {} and entry["mapping"]["tp"] == 4  # the planner's default space, not the published tp 4
