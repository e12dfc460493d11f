"""Serving load targets: workload.request_rate (requests/s) as a limit, and the objectives gpus and
cost that size the smallest / cheapest deployment sustaining it (model/serving_step.py)."""

from __future__ import annotations

import copy

import pytest
import yaml
from conftest import REPO, rel_close

from parasol.model.errors import ProblemError
from parasol.model.serving_step import evaluate_inference
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem

EXAMPLE = REPO / "problems" / "examples" / "llama3-70b-serving-load.yaml"


def _data(rate=200, objective="gpus", serving="continuous", num_gpus=(1, 2, 4, 8), slo=None):
    wl = {"kind": "inference", "input_len": 512, "output_len": 64, "precision": "fp8", "serving": serving}
    if rate is not None:
        wl["request_rate"] = rate
    if slo is not None:
        wl["slo"] = slo
    return {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": list(num_gpus)},
        "workload": wl,
        "mapping": {"batch": [1, 4, 8, 16, 32, 64]},
        "objective": objective,
    }


def _problem(**kw):
    return parse_problem(_data(**kw), source="t")


@pytest.mark.parametrize("serving", ["static", "continuous", "disaggregated"])
def test_requests_per_second_is_littles_law(serving):
    """Static and disaggregated: the token throughput / output_len; continuous: the dp·batch slots
    over the end-to-end latency (Little's law), which also holds the TTFT wait, so no more than
    tokens/s / output_len."""
    problem = _problem(rate=1, serving=serving, objective="throughput")
    plan = enumerate_space(problem).plans[0]
    met = plan.evaluation.metrics
    per_token = met["tokens_per_s"] / problem.workload.output_len
    if serving == "continuous":
        assert rel_close(met["requests_per_s"], met["concurrent_requests"] / met["e2e_latency_s"], 1e-12)
        assert met["requests_per_s"] <= per_token * (1 + 1e-12)
    else:
        assert rel_close(met["requests_per_s"], per_token, 1e-12)
    if serving == "static":
        assert rel_close(met["requests_per_s"], met["concurrent_requests"] / met["e2e_latency_s"], 1e-12)
    assert met["sustains_rate"]


@pytest.mark.parametrize("serving", ["static", "continuous", "disaggregated"])
@pytest.mark.parametrize("objective", ["gpus", "cost", "throughput"])
def test_solve_equals_enumerate_under_a_load(serving, objective):
    problem = _problem(serving=serving, objective=objective, slo={"tpot_s": 0.01})
    enum, sol = enumerate_space(problem), solve(problem, workers=1, time_limit=60)
    assert enum.status == sol.status == "OPTIMAL"
    assert rel_close(sol.objective_value, enum.objective_value, 1e-6)
    for plan in (enum.plans[0], sol.plans[0]):
        met = plan.evaluation.metrics
        assert met["sustains_rate"] and met["requests_per_s"] >= 200 and met["meets_slo"] and met["fits"]


def test_fewest_gpus_is_minimal_and_one_step_below_names_the_rate():
    """The gpus optimum is the least count: every plan of fewer GPUs misses the rate, and capping the
    count one step below it is INFEASIBLE with the rate named (solve and enumerate)."""
    problem = _problem(serving="static", num_gpus=(1, 2, 3, 4, 5, 6, 7, 8))
    table = enumerate_space(problem, keep_all=True)
    best = table.plans[0].num_gpus
    assert best > 1
    fewer = table.table[table.table["num_gpus"] < best]
    assert len(fewer) and not (fewer["requests_per_s"] >= 200).any()
    capped = _problem(serving="static", num_gpus=range(1, best))
    for result in (enumerate_space(capped), solve(capped, workers=1, time_limit=60)):
        assert result.status == "INFEASIBLE"
        assert "request rate binds" in result.message and "200" in result.message


def test_the_rate_is_a_constraint_for_other_objectives_too():
    """The least-TTFT plan at one batch does not sustain the load; with the rate it sustains it."""
    free = enumerate_space(_problem(rate=None, objective="ttft", serving="static")).plans[0]
    assert free.evaluation.metrics["requests_per_s"] < 200
    loaded = _problem(objective="ttft", serving="static")
    enum, sol = enumerate_space(loaded), solve(loaded, workers=1, time_limit=60)
    assert enum.status == sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-6)
    assert enum.plans[0].evaluation.metrics["requests_per_s"] >= 200
    assert enum.objective_value > free.evaluation.metrics["ttft_s"]


def test_cost_objective_is_the_systems_hourly_price():
    problem = _problem(objective="cost", serving="static")
    plan = solve(problem, workers=1, time_limit=60).plans[0]
    met = plan.evaluation.metrics
    assert met["cost_per_hour_usd"] == problem.system_cost(plan.num_gpus)["cost_per_hour_usd"]
    cheaper = [n for n in problem.num_gpus if problem.system_cost(n)["cost_per_hour_usd"] < met["cost_per_hour_usd"]]
    assert cheaper  # the load rules the cheaper systems out
    capped = _problem(objective="cost", serving="static", num_gpus=cheaper)
    assert solve(capped, workers=1, time_limit=60).status == "INFEASIBLE"


def test_evaluate_reports_whether_a_plan_sustains_the_load():
    problem = _problem(rate=1, serving="static", num_gpus=(1,))
    mapping = enumerate_space(problem).plans[0].mapping
    met = evaluate_inference(problem.model, problem.system(1), problem.workload, mapping).metrics
    assert met["sustains_rate"]
    heavy = _problem(rate=met["requests_per_s"] * 1.01, serving="static", num_gpus=(1,))
    assert not evaluate_inference(heavy.model, heavy.system(1), heavy.workload, mapping).metrics["sustains_rate"]


@pytest.mark.parametrize(
    "change, field, words",
    [
        (lambda d: d["workload"].update(request_rate=-5), "workload.request_rate", "positive"),
        (lambda d: d["workload"].update(request_rate=0), "workload.request_rate", "positive"),
        (lambda d: d["workload"].update(request_rate="fast"), "workload.request_rate", "positive"),
        (lambda d: d.update(objective="gpu"), "objective", "gpus"),
    ],
)
def test_bad_load_is_a_one_line_error(change, field, words):
    data = copy.deepcopy(_data())
    change(data)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t")
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("key", ["request_rate", "requests"])
def test_a_serving_load_on_a_training_workload_is_an_error(key):
    """A rate to sustain or a finite set of requests (tests/test_finite_requests.py) is a serving load."""
    data = {
        "model": "llama2-7b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32, key: 10},
    }
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t")
    assert f"workload.{key}" in f"{err.value.field} {err.value}"
    if key == "request_rate":
        assert "inference" in str(err.value)


@pytest.mark.slow
def test_example_fewest_gpus_and_one_node_less_is_infeasible():
    """docs/serving.md's example: the fewest GPUs for 100 requests/s (the enumerator: every plan of the
    example's space, so minimal by construction; the solver's agreement is tested on the smaller cases
    above); a cap one step (8 GPUs) below that answer is INFEASIBLE, the rate named."""
    data = yaml.safe_load(EXAMPLE.read_text())
    result = enumerate_space(parse_problem(data, source=str(EXAMPLE)))
    assert result.status == "OPTIMAL"
    best = result.plans[0].num_gpus
    assert result.plans[0].evaluation.metrics["sustains_rate"] and result.plans[0].evaluation.metrics["meets_slo"]
    data["system"]["num_gpus"] = {"min": 8, "max": best - 8, "step": 8}
    capped = enumerate_space(parse_problem(data, source=str(EXAMPLE)))
    assert capped.status == "INFEASIBLE" and "request rate" in capped.message
