"""Exact Pareto fronts over three objectives (issue 7): the front equals the non-dominated subset of
every feasible point the enumerator lists, for training (throughput, cost, memory)."""

from __future__ import annotations

import pytest

from parasol.solver.pareto import non_dominated, pareto_front
from parasol.solver.planner import enumerate_space, planner_for
from parasol.solver.problem import parse_problem


def front_keys(problem, objectives) -> tuple:
    """(metric keys, {key: sense}) of a front's metrics, as the planner reports them."""
    metrics = [planner_for(problem).front_metric(problem, n) for n in objectives]
    return tuple(m.metric for m in metrics), {m.metric: m.sense for m in metrics}


@pytest.mark.slow
def test_three_objective_training_front_equals_the_non_dominated_enumerated_points():
    p = parse_problem(
        {
            "model": "megatron-gpt-1.7b",
            "system": {"name": "dgx-h100", "num_gpus": [8, 16]},
            "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "train_tokens": 1.0e9},
            "mapping": {
                "vpp": [1],
                "first_stage_layers": 0,
                "last_stage_layers": 0,
                "zero": [0, 1],
                "recompute": ["none", "full"],
                "micro_batch": [2],
            },
            "objective": "cost",
        },
        source="t",
    )
    objectives = ("throughput", "cost", "memory")
    front = pareto_front(p, objectives, time_limit=240)
    assert front.status == "COMPLETE" and front.plans
    keys, sense = front_keys(p, objectives)
    table = enumerate_space(p, keep_all=True).table
    expected = non_dominated(table[table["fits"]], keys, sense)
    want = sorted({tuple(round(v, 6) for v in row) for row in expected[list(keys)].itertuples(index=False, name=None)})
    got = sorted(tuple(round(q.evaluation.metrics[k], 6) for k in keys) for q in front.plans)
    assert len(got) == len(want) and len(want) >= 2
    for g, w in zip(got, want):  # the integer scaling keeps values within 1e-3
        assert all(x == pytest.approx(y, rel=2e-3) for x, y in zip(g, w))


INFEASIBLE_GPT3 = {
    "model": "gpt3-175b",
    "system": {"name": "dgx-a100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"},
}


@pytest.mark.parametrize("objectives", [("throughput", "memory"), ("throughput", "memory", "step_time")])
@pytest.mark.slow
def test_infeasible_training_front_names_the_binding_constraint(objectives):
    """GPT-3 175B cannot fit on 8 A100s: a front of two or three metrics is INFEASIBLE and says
    that memory binds, by how much, as `solve` does (not a bare 'no plan')."""
    p = parse_problem(INFEASIBLE_GPT3, source="t")
    front = pareto_front(p, objectives, time_limit=30)
    assert front.status == "INFEASIBLE" and not front.plans
    assert front.message.startswith("memory binds:") and "a100-sxm-80gb offers 78.0 GiB" in front.message


def test_infeasible_serving_front_names_the_binding_slo():
    """A serving front under a TPOT SLO no plan reaches names that SLO and the least TPOT reachable."""
    p = parse_problem(
        {
            "model": "llama3.1-8b",
            "system": {"name": "dgx-h100", "num_gpus": 1},
            "workload": {"kind": "inference", "input_len": 512, "output_len": 64, "precision": "fp8", "slo": {"tpot_s": 1.0e-4}},
        },
        source="t",
    )
    front = pareto_front(p, ("tokens_per_s_per_gpu", "tokens_per_s_per_user"), time_limit=30)
    assert front.status == "INFEASIBLE" and front.message.startswith("the TPOT SLO binds:")


def test_front_objective_names_are_all_checked_before_solving():
    """A bad third metric is a one-line error, even when the problem has no plan at all."""
    from parasol.model.errors import ProblemError

    p = parse_problem(INFEASIBLE_GPT3, source="t")
    with pytest.raises(ProblemError, match="'tokens_per_gpu' is not a metric"):
        pareto_front(p, ("throughput", "memory", "tokens_per_gpu"), time_limit=30)
    with pytest.raises(ProblemError, match="two or three different metrics"):
        pareto_front(p, ("throughput", "memory", "throughput"), time_limit=30)
