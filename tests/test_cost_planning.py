"""Cost in the planner (issue 7): cost objectives, capex/power/run-length limits, device counts as a
list or range, chiplet counts as a decision, and ``enumerate --all``; CP-SAT against the enumerator."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli, write_yaml

from parasol.solver.costing import cost_metrics
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem

SMALL = {"vpp": [1], "first_stage_layers": 0, "last_stage_layers": 0, "zero": [1], "recompute": ["none", "full"]}


def _problem(
    objective="cost",
    num_gpus=(8, 16, 32),
    constraints=None,
    chiplets=None,
    train_tokens=1.0e9,
    system="dgx-h100",
    model="megatron-gpt-1.7b",
    price=None,
):
    sys_ = {"name": system, "num_gpus": list(num_gpus) if isinstance(num_gpus, tuple) else num_gpus}
    if chiplets is not None:
        sys_["chiplets"] = chiplets
    if price is not None:
        sys_["gpu_hour_usd"] = price
    data = {
        "model": model,
        "system": sys_,
        "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16", "train_tokens": train_tokens},
        "mapping": SMALL,
        "objective": objective,
    }
    if constraints:
        data["constraints"] = constraints
    return parse_problem(data, source="t")


@pytest.mark.parametrize("objective", ["cost", "tokens_per_usd", "throughput"])
@pytest.mark.slow
def test_cost_objectives_match_the_enumerator_over_device_counts(objective):
    p = _problem(objective)
    sol, enum = solve(p, time_limit=60), enumerate_space(p)
    assert sol.status == enum.status == "OPTIMAL"
    assert sol.objective_value == pytest.approx(enum.objective_value, rel=2e-3)
    met = sol.plans[0].evaluation.metrics
    assert met["run_cost_usd"] == pytest.approx(met["run_hours"] * met["cost_per_hour_usd"], rel=1e-12)
    # wall-clock hours: the training time over the run's goodput (issue 13, model/goodput.py)
    assert 0.9 < met["goodput"] < 1.0
    assert met["run_hours"] == pytest.approx(1.0e9 / (met["tokens_per_s"] * met["goodput"]) / 3600, rel=1e-12)


def test_cheapest_and_fastest_differ_when_more_gpus_cost_more_per_token():
    fast = solve(_problem("throughput"), time_limit=60).plans[0].evaluation.metrics
    cheap = solve(_problem("cost"), time_limit=60).plans[0].evaluation.metrics
    assert cheap["run_cost_usd"] <= fast["run_cost_usd"] and fast["tokens_per_s"] >= cheap["tokens_per_s"]


def test_capex_limit_removes_the_large_systems_and_binds_with_a_message():
    free = enumerate_space(_problem("throughput")).plans[0].evaluation.metrics
    cap = free["capex_usd"] * 0.99  # just below what the fastest system costs
    limited = _problem("throughput", constraints={"max_capex_usd": cap})
    sol, enum = solve(limited, time_limit=60), enumerate_space(limited)
    assert sol.status == enum.status == "OPTIMAL"
    assert sol.plans[0].evaluation.metrics["capex_usd"] <= cap
    assert sol.objective_value == pytest.approx(enum.objective_value, rel=1e-3) and sol.objective_value < free["tokens_per_s"]
    none = solve(_problem("throughput", constraints={"max_capex_usd": 1000.0}), time_limit=60)
    assert none.status == "INFEASIBLE" and none.message.startswith("max_capex_usd binds") and "8 GPUs" in none.message


def test_run_length_limit_is_a_step_time_bound():
    base = enumerate_space(_problem("cost")).plans[0].evaluation.metrics
    hours = base["run_hours"] * 0.8  # the cheapest plan is too slow now
    p = _problem("cost", constraints={"max_run_hours": hours})
    sol, enum = solve(p, time_limit=60), enumerate_space(p)
    assert sol.status == enum.status
    if enum.plans:
        assert sol.plans[0].evaluation.metrics["run_hours"] <= hours * (1 + 1e-3)
        assert (
            sol.objective_value == pytest.approx(enum.objective_value, rel=2e-3) and sol.objective_value >= base["run_cost_usd"]
        )


def test_rental_price_sets_the_hourly_cost():
    met = solve(_problem("cost", num_gpus=(16,), price=2.0), time_limit=60).plans[0].evaluation.metrics
    assert met["cost_per_hour_usd"] == pytest.approx(32.0)


@pytest.mark.slow
def test_chiplet_count_is_a_decision_solved_per_count():
    p = _problem("tokens_per_usd", num_gpus=(8, 16), chiplets=[1, 2], system="dgx-b200")
    sol, enum = solve(p, time_limit=60), enumerate_space(p)
    assert sol.status == enum.status == "OPTIMAL"
    assert sol.objective_value == pytest.approx(enum.objective_value, rel=2e-3)
    assert sol.plans[0].evaluation.metrics["chiplets"] in (1, 2)
    one = enumerate_space(_problem("tokens_per_usd", num_gpus=(8, 16), chiplets=1, system="dgx-b200"))
    two = enumerate_space(_problem("tokens_per_usd", num_gpus=(8, 16), chiplets=2, system="dgx-b200"))
    assert enum.objective_value == pytest.approx(max(one.objective_value, two.objective_value), rel=1e-12)


def test_cost_metrics_formula():
    out = cost_metrics({"capex_usd": 1e6, "power_w": 1e4, "cost_per_hour_usd": 36.0}, tokens_per_s=1e4, train_tokens=3.6e8)
    assert out["usd_per_million_tokens"] == pytest.approx(1.0)  # $36/h for 36M tokens/h
    assert out["tokens_per_usd"] == pytest.approx(1e6)
    assert out["run_hours"] == pytest.approx(10.0) and out["run_cost_usd"] == pytest.approx(360.0)


def test_num_gpus_range(tmp_path):
    p = parse_problem(
        {
            "model": "megatron-gpt-1.7b",
            "system": {"name": "dgx-h100", "num_gpus": {"min": 8, "max": 32, "step": 8}},
            "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64},
        },
        source="t",
    )
    assert p.num_gpus == (8, 16, 24, 32)


@pytest.mark.slow
def test_enumerate_all_lists_every_feasible_point(tmp_path):
    data = {
        "model": "megatron-gpt-1.7b",
        "system": {"name": "dgx-h100", "num_gpus": [8, 16]},
        "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64},
        "mapping": SMALL,
        "objective": "cost",
    }
    path = write_yaml(tmp_path / "p.yaml", data)
    proc = run_cli(["enumerate", str(path), "--all", "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    points = doc["points"]
    assert len(points) > 1 and all(pt["metrics"]["fits"] for pt in points)
    best = min(points, key=lambda pt: pt["metrics"]["usd_per_million_tokens"])
    assert best["metrics"]["usd_per_million_tokens"] == pytest.approx(doc["objective"], rel=1e-12)


@pytest.mark.slow
def test_run_length_limit_that_no_plan_meets_names_the_binding_limit():
    p = _problem("cost", constraints={"max_run_hours": 1e-6})
    sol = solve(p, time_limit=60)
    assert sol.status == enumerate_space(p).status == "INFEASIBLE"
    assert sol.message.startswith("max_run_hours binds: the fastest allowed plan")


@pytest.mark.parametrize(("objectives", "num_gpus"), [(("throughput", "cost"), (8, 16, 32)), (("throughput", "memory"), (8, 16))])
@pytest.mark.slow
def test_training_front_equals_the_non_dominated_enumerated_points(objectives, num_gpus):
    """issue 7: on a small problem the exact front (epsilon-constraint with CP-SAT) is the
    non-dominated subset of every feasible point the enumerator lists (memory trades against
    throughput within a GPU count: two counts keep the front of that pair small)."""
    from test_pareto_three import front_keys

    from parasol.solver.pareto import non_dominated, pareto_front

    p = _problem("cost", num_gpus=num_gpus, chiplets=None)
    front = pareto_front(p, objectives, time_limit=120)
    assert front.status == "COMPLETE" and front.plans
    table = enumerate_space(p, keep_all=True).table
    keys, sense = front_keys(p, objectives)
    expected = non_dominated(table[table["fits"]], keys, sense)
    got = sorted((round(q.evaluation.metrics[keys[0]], 6), round(q.evaluation.metrics[keys[1]], 6)) for q in front.plans)
    want = sorted({(round(a, 6), round(b, 6)) for a, b in expected[list(keys)].itertuples(index=False, name=None)})
    assert len(got) == len(want)
    for (a1, b1), (a2, b2) in zip(got, want):  # the integer scaling keeps values within 1e-3
        assert a1 == pytest.approx(a2, rel=2e-3) and b1 == pytest.approx(b2, rel=2e-3)


@pytest.mark.slow
def test_training_front_over_chiplet_counts_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    from parasol.solver.pareto import pareto_front
    from parasol.solver.planner import planner_for
    from parasol.solver.report import plot_front

    p = _problem("cost", num_gpus=(8, 16), chiplets=[1, 2], system="dgx-b200")
    front = pareto_front(p, ("throughput", "cost"), time_limit=120)
    assert front.status == "COMPLETE" and {q.evaluation.metrics["chiplets"] for q in front.plans} <= {1, 2}
    out = tmp_path / "front.png"
    plot_front(planner_for(p), p, front, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_review_regressions_end_in_one_line_errors(tmp_path):
    """Inference objectives on a training problem, a non-string system name and a --plot folder that
    does not exist are user mistakes: one line, exit 2."""
    base = {
        "model": "megatron-gpt-1.7b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64},
        "mapping": SMALL,
    }
    path = write_yaml(tmp_path / "p.yaml", base)
    for args in (
        ["solve", str(path), "--objective", "ttft"],
        ["enumerate", str(path), "--objective", "latency"],
        ["pareto", str(path), "--objectives", "throughput,memory", "--plot", str(tmp_path / "no" / "f.png")],
    ):
        proc = run_cli(args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
    # issue 14 made system.name a list (the system as a decision); a list of one unknown name is bad input
    bad = write_yaml(tmp_path / "b.yaml", {**base, "system": {"name": ["dgx-z900"], "num_gpus": 8}})
    proc = run_cli(["solve", str(bad)])
    assert proc.returncode == 2 and "system.name" in proc.stderr and "Traceback" not in proc.stderr


def test_enumerate_names_the_run_length_limit_when_it_binds():
    p = _problem("cost", constraints={"max_run_hours": 1e-6})
    result = enumerate_space(p)
    assert result.status == "INFEASIBLE" and result.message.startswith("max_run_hours binds")
