"""Goodput of whole runs (model/goodput.py; problems/cost/reliability.yaml from benchmarks/goodput.py).

A run's wall-clock hours and cost count the time lost to failures and checkpoints: run_hours =
train_tokens / (tokens/s x goodput). The planner's run-length limit and cost objective use the same
goodput per device count, and the solver still finds the enumerator's optimum.
"""

import sys
from pathlib import Path

import pytest
from conftest import REPO, rel_close, run_cli, training_problem, write_yaml

from parasol.model.errors import ProblemError
from parasol.model.goodput import Reliability, checkpoint_interval_s, job_mtbf_s, run_goodput
from parasol.solver.cost_library import load_reliability
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.training_planner import evaluate_plan

sys.path.insert(0, str(Path(REPO) / "benchmarks"))
import goodput as goodput_script  # noqa: E402  benchmarks/goodput.py


def test_youngs_interval_and_the_first_order_loss():
    r = Reliability(failures_per_gpu_hour=1e-5, checkpoint_stall_s=10.0, restart_s=600.0)
    mtbf = 3600.0 / (1e-5 * 10_000)  # 36,000 s
    assert job_mtbf_s(10_000, r) == pytest.approx(mtbf)
    assert checkpoint_interval_s(10_000, r) == pytest.approx((2 * 10.0 * mtbf) ** 0.5)  # 848.5 s
    tau = (2 * 10.0 * mtbf) ** 0.5
    assert run_goodput(10_000, r) == pytest.approx(1 - 10.0 / tau - (tau / 2 + 600.0) / mtbf)


def test_the_stored_numbers_are_the_scripts_and_give_llama3s_ninety_percent():
    stored, derived = load_reliability(), goodput_script.derive()
    assert stored.failures_per_gpu_hour == pytest.approx(derived.failures_per_gpu_hour, rel=1e-5)
    assert stored.checkpoint_stall_s == pytest.approx(derived.checkpoint_stall_s, rel=1e-3)
    assert abs(stored.restart_s - derived.restart_s) < 1.0
    assert run_goodput(16_384, stored) == pytest.approx(0.90, abs=1e-3)
    values = [run_goodput(n, stored) for n in (1024, 4096, 16_384, 65_536)]
    assert values == sorted(values, reverse=True) and values[0] > 0.98


def test_too_many_failures_leave_no_time_and_say_what_to_set():
    with pytest.raises(ProblemError) as info:
        run_goodput(1_000_000, load_reliability())
    assert info.value.field == "workload.goodput"


def evaluate(**workload):
    data = training_problem(model="llama3-8b", num_gpus=64, seq_len=8192, global_batch=512, train_tokens=1e12, **workload) | {
        "mapping": {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "recompute": "full"}
    }
    problem = parse_problem(data, source="t")
    return evaluate_plan(problem, 64, problem.fixed_mapping())


def test_run_hours_count_the_lost_time():
    auto, fixed = evaluate(), evaluate(goodput=0.5)
    m, f = auto.metrics, fixed.metrics
    ideal_hours = 1e12 / m["tokens_per_s"] / 3600
    assert m["goodput"] == pytest.approx(run_goodput(64, load_reliability()))
    assert rel_close(m["run_hours"], ideal_hours / m["goodput"], 1e-9)
    assert f["goodput"] == 0.5 and rel_close(f["run_hours"], 2 * ideal_hours, 1e-9)
    assert rel_close(f["run_cost_usd"], 2 * ideal_hours * f["cost_per_hour_usd"], 1e-9)


@pytest.mark.parametrize("value", [0, 1.5, "most", True, 1e-7])
def test_a_bad_goodput_is_one_line_and_exit_2(tmp_path, value):
    data = training_problem(train_tokens=1e12, goodput=value)
    out = run_cli(
        ["evaluate", str(write_yaml(tmp_path / "p.yaml", data | {"mapping": {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}}))]
    )
    assert out.returncode == 2 and "workload.goodput" in out.stderr and "Traceback" not in out.stderr


SIZING = {
    "model": "llama3-8b",
    "system": {"name": "dgx-h100", "num_gpus": [64, 8192, 32768]},
    "workload": {"kind": "training", "seq_len": 8192, "global_batch": 4096, "train_tokens": 2e12},
    "mapping": {"vpp": [1], "cp": [1], "tp": [1, 2], "pp": [1], "recompute": ["none", "full"], "zero": [1]},
    "objective": "cost",
}


@pytest.mark.parametrize("hours", [None, 12.0, 8.0])
def test_sizing_with_goodput_solves_to_the_enumerators_optimum(hours):
    """Goodput falls from 99.8 % at 64 GPUs to 94.5 % at 8,192: the cost per token and the run-length
    limit take it per device count, on every backend alike. At 8.0 h the fastest plan (8,192 GPUs)
    would meet the limit if it trained all the time (7.8 h) but needs 8.3 h of wall clock."""
    data = SIZING | ({"constraints": {"max_run_hours": hours}} if hours else {})
    problem = parse_problem(data, source="t")
    enum, sol = enumerate_space(problem), solve(problem, workers=2, time_limit=60)
    assert enum.status == sol.status
    if hours == 8.0:
        assert sol.status == "INFEASIBLE" and "max_run_hours binds" in sol.message
        fastest = SIZING | {"objective": "throughput"}
        best = solve(parse_problem(fastest, source="t"), workers=2, time_limit=60).plans[0].evaluation.metrics
        assert best["run_hours"] * best["goodput"] < hours < best["run_hours"]
        return
    assert sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-3)
    assert enum.plans[0].num_gpus == sol.plans[0].num_gpus
    if hours:
        assert sol.plans[0].evaluation.metrics["run_hours"] <= hours


def test_a_throughput_problem_past_the_failure_limit_still_evaluates():
    """Goodput is a cost extra: a throughput problem without train_tokens on more GPUs than the
    failures allow still evaluates (without its cost metrics), while a cost asked there says why not."""
    mapping = {"tp": 8, "pp": 1, "dp": 32768, "micro_batch": 1}
    data = training_problem(num_gpus=262_144, global_batch=32768) | {"mapping": mapping}
    problem = parse_problem(data, source="t")
    ev = evaluate_plan(problem, 262_144, problem.fixed_mapping())
    assert ev.metrics["step_time_s"] > 0 and "goodput" not in ev.metrics
    costly = parse_problem(data | {"objective": "cost"}, source="t")
    with pytest.raises(ProblemError) as info:
        evaluate_plan(costly, 262_144, costly.fixed_mapping())
    assert info.value.field == "workload.goodput"
