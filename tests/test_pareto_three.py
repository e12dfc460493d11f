"""Exact Pareto fronts over three objectives (issue 7): the front equals the non-dominated subset of
every feasible point the enumerator lists, for training (throughput, cost, memory)."""

from __future__ import annotations

import pytest

from solver.pareto import non_dominated
from solver.plan import enumerate_space
from solver.problem import parse_problem
from solver.training_pareto import METRICS, metric_key, training_front


def test_three_objective_training_front_equals_the_non_dominated_enumerated_points():
    p = parse_problem({"model": "megatron-gpt-1.7b", "system": {"name": "dgx-h100", "num_gpus": [8, 16]},
                       "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "train_tokens": 1.0e9},
                       "mapping": {"vpp": [1], "first_stage_layers": 0, "last_stage_layers": 0, "zero": [0, 1],
                                   "recompute": ["none", "full"], "micro_batch": [1, 2]},
                       "objective": "cost"}, source="t")
    objectives = ("throughput", "cost", "memory")
    front = training_front(p, objectives, time_limit=240)
    assert front.status == "COMPLETE" and front.plans
    keys = tuple(metric_key(p, n) for n in objectives)
    sense = {metric_key(p, n): METRICS[n][1] for n in objectives}
    expected = non_dominated(enumerate_space(p, keep_all=True).feasible_points, keys, sense)
    want = sorted({tuple(round(q.evaluation.metrics[k], 6) for k in keys) for q in expected})
    got = sorted(tuple(round(q.evaluation.metrics[k], 6) for k in keys) for q in front.plans)
    assert len(got) == len(want) and len(want) >= 2
    for g, w in zip(got, want):  # the integer scaling keeps values within 1e-3
        assert all(x == pytest.approx(y, rel=2e-3) for x, y in zip(g, w))
