"""issue 16: solve --method bound (solver/bounded_search.py), blocks of the space bounded by the model's
composition on intervals (solver/interval_ops.py) and the blocks that could beat the best found
enumerated.

- soundness: every point of every block, at every level, has its objective and each limit's quantity
  within the block's interval (random problems, MoE, context parallelism, a free pipeline split);
- exactness: the search's best equals the enumerator's on the same problems (top 3 too), and the suites'
  recorded optima;
- what a search that stops reports: INFEASIBLE with the binding limit, or the best so far with a bound
  on the right side of it;
- auto sends a large training space to it; a serving problem refuses it in one line.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import rel_close, run_main, training_problem
from test_solver import random_problem

from parasol.model.errors import ProblemError
from parasol.solver import bounded_search
from parasol.solver.interval_ops import IntervalOps
from parasol.solver.numpy_ops import NumpyOps
from parasol.solver.planner import enumerate_space, planner_for, solve
from parasol.solver.problem import parse_problem
from parasol.solver.suites import load_suite
from parasol.solver.tables import Tables

SEEDS = range(12)
MOE = {
    "model": "mixtral-8x7b",
    "system": {"name": "dgx-h100", "num_gpus": 32},
    "workload": {"kind": "training", "seq_len": 4096, "global_batch": 64, "precision": "bf16"},
    "mapping": {"vpp": [1, 2], "zero": [1, 3], "micro_batch": [1, 2], "first_stage_layers": 0, "last_stage_layers": 0},
    "objective": "throughput",
}
CONTEXT = training_problem(
    model="llama2-7b",
    system="dgx-h100",
    num_gpus=16,
    seq_len=16384,
    global_batch=16,
    mapping={"cp": [1, 2, 4], "vpp": [1], "zero": [1], "micro_batch": [1], "first_stage_layers": 0, "last_stage_layers": 0},
    objective="throughput",
)
FREE_SPLIT = training_problem(
    model="llama2-7b",
    system="dgx-a100",
    num_gpus=16,
    seq_len=4096,
    global_batch=32,
    mapping={"pp": [2, 4], "recompute": ["selective", "full"], "zero": [1], "vpp": [1, 2], "micro_batch": [1, 2]},
    objective="memory",
)
CASES = [(f"random-{s}", random_problem(s)) for s in SEEDS] + [("moe", MOE), ("context", CONTEXT), ("free-split", FREE_SPLIT)]


def _problem(data, name):
    return parse_problem(data, source=name)


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
def test_every_point_lies_within_its_blocks_interval(name, data):
    problem = _problem(data, name)
    planner = planner_for(problem)
    try:
        space = planner.space(problem)
    except ProblemError:
        pytest.skip("no valid grid")
    objective = problem.objective
    ctx = planner.context(problem, (objective,))
    tables = Tables(space, ctx)
    levels = planner.block_levels(problem, space)
    assert levels, "training spaces are bounded block by block"
    points = list(space.chunks(1 << 17))
    for depth in range(len(levels)):
        decisions = sum(levels[: depth + 1], ())
        frame, counts = bounded_search._refine(space, None, decisions)
        assert counts.sum() == space.size()  # the blocks of a level partition the space
        bounds = planner.compose(IntervalOps(tables, frame, bounded_search._free_ranges(space, frame)), ctx)
        numbered = frame.assign(_block=np.arange(len(frame)))
        for cols in points:
            block = pd.DataFrame({k: cols[k] for k in frame.columns}).merge(numbered, how="left")["_block"].to_numpy()
            exact = planner.compose(NumpyOps(tables, cols), ctx)
            pairs = [("objective", bounds.minimised[objective], exact.minimised[objective])]
            pairs += [(b.name, b.quantity, e.quantity) for b, e in zip(bounds.limits, exact.limits)]
            for what, interval, value in pairs:
                value = np.broadcast_to(np.asarray(value, dtype=float), block.shape)
                lo = np.broadcast_to(interval.lo, (len(frame),))[block]
                hi = np.broadcast_to(interval.hi, (len(frame),))[block]
                slack = 1e-9 * np.abs(value)
                assert (value >= lo - slack).all(), f"{what} below its block's lower end at level {depth + 1}"
                assert (value <= hi + slack).all(), f"{what} above its block's upper end at level {depth + 1}"


@pytest.mark.parametrize("name,data", CASES, ids=[c[0] for c in CASES])
def test_the_bounded_search_finds_the_enumerators_best(name, data):
    problem = _problem(data, name)
    try:
        enum = enumerate_space(problem, top=3)
    except ProblemError:
        with pytest.raises(ProblemError):
            solve(problem, method="bound")
        return
    found = solve(problem, method="bound", top=3)
    assert found.method == "bound" and found.space_size == enum.space_size
    assert found.status == enum.status
    if enum.status == "INFEASIBLE":
        assert found.message and "binds" in found.message
        return
    assert found.gap == 0.0 and found.bound == found.objective_value
    assert found.objective_value == pytest.approx(enum.objective_value, rel=1e-12)
    # the same three best values (ties may pick other mappings of the same value)
    values = [planner_for(problem).objective_value(problem, problem.objective, p.metrics) for p in found.plans]
    expected = [planner_for(problem).objective_value(problem, problem.objective, p.metrics) for p in enum.plans]
    assert values == pytest.approx(expected, rel=1e-12)
    assert found.points_evaluated <= enum.points_evaluated


@pytest.mark.parametrize(
    "instance",
    [
        "gpt3-175b-a100-1024-free",
        "qwen3-30b-a3b-h100-128",
        "llama3-70b-h100-cheapest-90-days",
        "deepseek-v3-h800-1024-restricted",
    ],
)
def test_the_bounded_search_reproduces_the_suites_proven_optima(instance):
    suite = next(s for s in map(load_suite, ("dense-training", "moe-context-placement-sizing")) if instance in s.known)
    item = next(i for i in suite.instances if i.name == instance)
    found = solve(_problem(item.problem, item.source), objective=item.objective, method="bound", time_limit=60)
    assert found.status == "OPTIMAL"
    assert rel_close(found.objective_value, suite.known[instance]["value"], 1e-9)


def test_a_search_stopped_on_time_returns_the_best_so_far_with_a_bound(monkeypatch):
    problem = _problem(
        training_problem(model="gpt3-175b", system="dgx-a100", num_gpus=1024, seq_len=2048, global_batch=1536), "gpt3"
    )
    full = solve(problem, method="bound")
    steps = []
    enumerate_blocks = bounded_search._Search.enumerate

    def enumerate_once(self, pool, rows):  # the clock runs out after the first blocks are enumerated
        enumerate_blocks(self, pool, rows)
        steps.append(len(rows))

    clock = bounded_search._clock
    monkeypatch.setattr(bounded_search, "ENUMERATE_POINTS", 256)  # a first step too small to prove the optimum
    monkeypatch.setattr(bounded_search._Search, "enumerate", enumerate_once)
    monkeypatch.setattr(bounded_search, "_clock", lambda: clock() + (1e6 if steps else 0.0))
    stopped = solve(problem, method="bound", time_limit=60)
    assert steps == steps[:1] and stopped.status == "FEASIBLE"
    assert stopped.objective_value <= full.objective_value * (1 + 1e-12)
    assert stopped.bound >= full.objective_value * (1 - 1e-12)  # a rate: the bound lies above the optimum
    assert 0 < stopped.gap < 1 and stopped.points_evaluated < full.points_evaluated


@pytest.mark.auto_method
def test_auto_bounds_a_large_training_space():
    problem = _problem(
        training_problem(model="gpt3-175b", system="dgx-a100", num_gpus=1024, seq_len=2048, global_batch=1536), "gpt3"
    )
    planner = planner_for(problem)
    assert planner.space(problem).size() > planner.enumerate_below(problem)
    auto = solve(problem)
    cpsat = solve(problem, method="cpsat")
    assert auto.method == "bound" and auto.status == cpsat.status == "OPTIMAL"
    assert auto.objective_value == pytest.approx(cpsat.objective_value, rel=1e-3)  # CP-SAT's integer scaling


def test_choosing_the_bound_method_builds_no_space_before_the_deadline_is_set(monkeypatch):
    """``check_method`` runs before ``solve`` sets its deadline: a space built there could not be interrupted cleanly
    (Ctrl-C while DeepSeek-V3's space was built printed a traceback, 2026-11-29), so it asks the planner alone."""
    from parasol.solver.planner import SolveMethod, check_method  # noqa: PLC0415

    problem = parse_problem(training_problem("llama3-8b", num_gpus=8), source="t.yaml")
    planner = planner_for(problem)

    def no_space(_problem):
        raise AssertionError("the space was built")

    monkeypatch.setattr(planner, "space", no_space)
    assert check_method(planner, problem, "bound") is SolveMethod.BOUND


def test_serving_refuses_the_bound_method_in_one_line():
    proc = run_main(["solve", "problems/examples/llama3-70b-serving.yaml", "--method", "bound"])
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "'bound'" in proc.stderr and "allowed" in proc.stderr


# ---------------------------------------------------------------- fronts

THREE = {  # tests/test_pareto_three.py's problem: 2 GPU counts, a priced run (cost)
    "model": "megatron-gpt-1.7b",
    "system": {"name": "dgx-h100", "num_gpus": [8, 16]},
    "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "train_tokens": 1.0e9},
    "mapping": {"vpp": [1], "first_stage_layers": 0, "last_stage_layers": 0, "zero": [0, 1], "recompute": ["none", "full"]},
    "objective": "cost",
}
FRONTS = [
    ("three-metric", THREE, ("throughput", "cost", "memory")),
    ("moe", MOE, ("throughput", "memory")),
    (
        "priced-split",
        {**FREE_SPLIT, "mapping": {**FREE_SPLIT["mapping"], "pp": [4], "micro_batch": [1]}},
        ("step_time", "memory", "tokens_per_usd"),
    ),
    ("serving", "problems/examples/llama3-8b-pareto.yaml", ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft_s")),
]


def _front_problem(data, name):
    if isinstance(data, str):
        from parasol.solver import library  # noqa: PLC0415

        return parse_problem(library.read_yaml(data), source=data)
    if name == "priced-split":
        data = {**data, "system": {"name": "dgx-a100", "num_gpus": 16}, "workload": {**data["workload"], "train_tokens": 1e9}}
    return _problem(data, name)


def _truth(problem, objectives) -> list:
    """The non-dominated distinct metric tuples of every feasible point the enumerator lists."""
    from parasol.solver.pareto import non_dominated  # noqa: PLC0415

    planner = planner_for(problem)
    metrics = [planner.front_metric(problem, n) for n in objectives]
    keys, sense = tuple(m.metric for m in metrics), {m.metric: m.sense for m in metrics}
    table = enumerate_space(problem, keep_all=True).table
    if "fits" in table:
        table = table[table["fits"]]
    front = non_dominated(table, keys, sense)
    return keys, sorted({tuple(row) for row in front[list(keys)].itertuples(index=False, name=None)})


@pytest.mark.parametrize("name,data,objectives", FRONTS, ids=[f[0] for f in FRONTS])
def test_fronts_found_without_cpsat_are_the_enumerated_non_dominated_points(name, data, objectives):
    from parasol.solver.pareto import pareto_front  # noqa: PLC0415

    problem = _front_problem(data, name)
    keys, want = _truth(problem, objectives)
    methods = ["enumerate"] + (["bound"] if not problem.is_inference else [])
    for method in methods:
        front = pareto_front(problem, objectives, time_limit=60, method=method)
        assert front.status == "COMPLETE" and len(front.plans) >= 2, method
        got = sorted(tuple(p.evaluation.metrics[k] for k in keys) for p in front.plans)
        assert len(got) == len(want), method
        for g, w in zip(got, want):
            assert g == pytest.approx(w, rel=1e-9), method


@pytest.mark.auto_method
def test_auto_enumerates_a_small_front_and_equals_cpsats():
    from parasol.solver.pareto import pareto_front  # noqa: PLC0415

    problem = _front_problem("problems/examples/llama3-8b-pareto.yaml", "serving")
    objectives = ("tokens_per_s_per_gpu", "tokens_per_s_per_user")
    auto = pareto_front(problem, objectives)
    cpsat = pareto_front(problem, objectives, method="cpsat")
    assert auto.solves == 0 and cpsat.solves > 0 and auto.status == cpsat.status == "COMPLETE"
    got = sorted(tuple(p.metrics[k] for k in objectives) for p in auto.plans)
    want = sorted(tuple(p.metrics[k] for k in objectives) for p in cpsat.plans)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g == pytest.approx(w, rel=2e-3)  # CP-SAT's integer units


def test_the_non_dominated_rows_are_exact_and_keep_one_of_equal_rows():
    rng = np.random.default_rng(0)
    values = np.round(rng.random((600, 3)), 1)  # many ties and duplicates
    values = np.concatenate([values, values[:40]])
    got = bounded_search.non_dominated_rows(values)
    brute = [
        i
        for i in range(len(values))
        if not any(
            (values[j] <= values[i]).all() and ((values[j] < values[i]).any() or j < i) for j in range(len(values)) if j != i
        )
    ]
    assert sorted(map(tuple, values[got])) == sorted(map(tuple, values[brute]))
    assert len({tuple(v) for v in values[got]}) == len(got)


@pytest.mark.parametrize("method", ["bound", "cpsat"])
def test_an_infeasible_space_small_enough_to_walk_is_explained_exactly(method):
    """Llama 3 70B on 8 H100 cannot fit (1.9M mappings): the enumerator's least peak memory names the
    binding limit as proven. CP-SAT minimising the peak of the unpruned model ran out the 30 s here
    (and 60 s by default) with a 325 GiB plan once attention followed the key length."""
    data = training_problem("llama3-70b", seq_len=8192, global_batch=2048)
    result = solve(parse_problem(data, source="t.yaml"), method=method, time_limit=30)
    assert result.status == "INFEASIBLE"
    assert "memory binds" in result.message and "the least any allowed mapping needs" in result.message
