"""constraints.memory_headroom_gib / memory_headroom: a margin per GPU that every plan leaves free,
honoured by evaluate, solve, enumerate and pareto, for training and serving."""

from __future__ import annotations

import pytest
from conftest import rel_close, training_problem

from parasol.model.errors import ProblemError
from parasol.model.evaluation import GIB
from parasol.solver import pareto
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.training_planner import evaluate_plan

TRAIN_MAPPING = {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1, "recompute": "none", "zero": 1}


def _training(constraints=None, mapping=TRAIN_MAPPING, **kw):
    data = training_problem(mapping=mapping, **kw)
    if constraints is not None:
        data["constraints"] = constraints
    return parse_problem(data, source="t")


def _serving(constraints=None, batch=(1, 4, 8, 16, 32, 64, 128)):
    data = {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": 2},
        "workload": {"kind": "inference", "input_len": 2048, "output_len": 256, "precision": "fp8", "serving": "static"},
        "mapping": {"batch": list(batch)},
        "objective": "throughput",
    }
    if constraints is not None:
        data["constraints"] = constraints
    return parse_problem(data, source="t")


def test_headroom_comes_off_the_usable_memory_in_gib_or_as_a_share():
    plain = _training()
    hbm = plain.system().device.hbm_bytes
    gib = _training({"memory_headroom_gib": 4})
    share = _training({"memory_headroom": 0.05})
    assert rel_close(plain.system().usable_memory_bytes - gib.system().usable_memory_bytes, 4 * GIB, 1e-12)
    assert rel_close(plain.system().usable_memory_bytes - share.system().usable_memory_bytes, 0.05 * hbm, 1e-12)


def test_evaluate_reports_a_plan_that_fits_only_without_the_margin():
    """A plan whose peak lies between capacity - margin and capacity fits without the headroom and
    not with it; the reported usable memory leaves the margin."""
    plain = _training()
    met = evaluate_plan(plain, 8, plain.fixed_mapping()).metrics
    assert met["fits"]
    spare = met["usable_memory_gib"] - met["peak_memory_gib"]
    held = _training({"memory_headroom_gib": spare + 1.0})
    again = evaluate_plan(held, 8, held.fixed_mapping()).metrics
    assert again["peak_memory_gib"] == met["peak_memory_gib"]
    assert not again["fits"]
    assert rel_close(again["usable_memory_gib"], met["usable_memory_gib"] - spare - 1.0, 1e-12)


def _training_space_problem(constraints):
    mapping = {"tp": [1, 2], "pp": 1, "micro_batch": [1, 2], "recompute": ["none", "full"], "zero": [1, 3]}
    return _training(constraints, mapping=mapping, global_batch=16)


def test_solve_equals_enumerate_with_headroom_and_the_margin_is_left():
    plain = enumerate_space(_training_space_problem(None))
    peak = plain.plans[0].evaluation.metrics["peak_memory_gib"]
    usable = plain.plans[0].evaluation.metrics["usable_memory_gib"]
    margin = usable - peak + 2.0  # the plain optimum no longer fits
    problem = _training_space_problem({"memory_headroom_gib": margin})
    enum, sol = enumerate_space(problem), solve(problem, workers=1, time_limit=60)
    assert enum.status == sol.status == "OPTIMAL"
    assert rel_close(sol.objective_value, enum.objective_value, 1e-3)
    assert enum.plans[0].mapping != plain.plans[0].mapping
    for plan in (enum.plans[0], sol.plans[0]):
        met = plan.evaluation.metrics
        assert met["fits"] and met["peak_memory_gib"] <= usable - margin + 1e-9


def test_pareto_honours_the_headroom():
    """The front under a margin holds only plans within capacity - margin (the plain front reaches past it)."""
    plain = pareto.pareto_front(_training_space_problem(None), ["throughput", "memory"], time_limit=60)
    peaks = sorted(p.evaluation.metrics["peak_memory_gib"] for p in plain.plans)
    problem = _training_space_problem(
        {"memory_headroom_gib": plain.plans[0].evaluation.metrics["usable_memory_gib"] - peaks[-1] + 0.5}
    )
    limit = problem.system().usable_memory_bytes / GIB
    assert peaks[0] <= limit < peaks[-1]
    front = pareto.pareto_front(problem, ["throughput", "memory"], time_limit=60)
    assert front.plans
    assert all(p.evaluation.metrics["peak_memory_gib"] <= limit + 1e-9 for p in front.plans)


def test_serving_headroom_shrinks_the_batch_that_fits():
    """Serving: the KV cache gets only what the margin leaves (the largest batch that fits drops) and
    solve = enumerate under it."""
    plain = enumerate_space(_serving()).plans[0]
    held_problem = _serving({"memory_headroom_gib": 40})
    enum, sol = enumerate_space(held_problem), solve(held_problem, workers=1, time_limit=60)
    assert enum.status == sol.status == "OPTIMAL"
    assert rel_close(sol.objective_value, enum.objective_value, 1e-3)
    held = enum.plans[0].evaluation.metrics
    assert held["max_batch"] < plain.evaluation.metrics["max_batch"]
    assert held["fits"] and held["peak_memory_gib"] <= held["usable_memory_gib"]
    assert held["usable_memory_gib"] == pytest.approx(plain.evaluation.metrics["usable_memory_gib"] - 40)


@pytest.mark.parametrize(
    "constraints, field, words",
    [
        ({"memory_headroom": 1.0}, "constraints.memory_headroom", "[0, 1)"),
        ({"memory_headroom": -0.1}, "constraints.memory_headroom", "[0, 1)"),
        ({"memory_headroom_gib": -4}, "constraints.memory_headroom_gib", "non-negative"),
        ({"memory_headroom_gib": 80}, "constraints.memory_headroom_gib", "leaves nothing"),
        ({"memory_headroom_gib": 4, "memory_headroom": 0.1}, "constraints.memory_headroom", "once"),
        ({"memory_headroom_gb": 4}, "constraints.memory_headroom_gb", "memory_headroom_gib"),
    ],
)
def test_bad_headroom_is_a_one_line_error(constraints, field, words):
    with pytest.raises(ProblemError) as err:
        _training(constraints)
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_headroom_alone_needs_no_prices():
    """A memory margin is not a cost limit: a system without cost data still plans with it."""
    problem = _training({"memory_headroom_gib": 1})
    assert not problem.has_cost_limits and not problem.needs_cost
