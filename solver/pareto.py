"""The exact Pareto front of two metrics by the epsilon-constraint method with CP-SAT.

Generic over metric names: a ``ParetoTarget`` supplies a CP-SAT encoding whose ``metric(name)``
is an integer to minimise for each metric it can plan (larger-is-better metrics such as
tokens/s are encoded as what to minimise, e.g. GPU-seconds per token), the decoding of a solution
into a plan, and the model's evaluation of that plan. A later metric (cost, say) plugs in by
adding a builder to the encoding.

Method (Haimes et al. 1971; exact for integer objectives, Ehrgott, "Multicriteria Optimization",
2005, Sec. 4.1): minimise the first metric; among its optima minimise the second (a lexicographic
second solve under an enforced bound on the first); record the point; require the second metric
to be strictly better (one integer unit) than that point's, and repeat until infeasible. Each
point is a proven non-dominated point of the integer model; the sequence ends with a proof that
no further point exists. When time runs out the front so far is returned as PARTIAL with the gap
of the solve in progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from parasol.model.errors import ProblemError

from .cpsat import _status_name
from .plan import Plan, _solver


@dataclass
class ParetoTarget:
    """What the front is drawn over: ``encode()`` -> an encoding with ``model``, ``decisions`` and
    ``metric(name)``; ``decode(values) -> (num_gpus, mapping)``; ``evaluate(num_gpus, mapping)``
    -> the model's Evaluation; ``metrics``: the metric names it plans; ``space_size``."""

    encode: Callable
    decode: Callable
    evaluate: Callable
    metrics: tuple
    space_size: int
    check: Callable | None = None  # check(plan, encoding, solver): the round trip (bugs only)
    explain: Callable | None = None  # explain(time_limit, workers, seed) -> the binding constraint when no plan exists


@dataclass
class ParetoResult:
    objectives: tuple
    status: str = "COMPLETE"  # COMPLETE | PARTIAL (| INFEASIBLE when no plan satisfies the constraints)
    plans: list = field(default_factory=list)
    gap: float | None = None
    solve_time_s: float = 0.0
    solves: int = 0
    space_size: int = 0
    message: str | None = None


def pareto_front(target: ParetoTarget, objectives: tuple, time_limit: float = 60.0, workers: int = 1, seed: int = 0,
                 max_points: int = 1000) -> ParetoResult:
    """The exact front of ``objectives`` (two or three metric names) over ``target``."""
    if len(objectives) not in (2, 3) or len(set(objectives)) != len(objectives):
        raise ProblemError(f"give two or three different metrics, got {list(objectives)}; allowed: {', '.join(target.metrics)}",
                           field="--objectives")
    for name in objectives:
        if name not in target.metrics:
            raise ProblemError(f"{name!r} is not a metric the planner can optimise; allowed: {', '.join(target.metrics)}",
                               field="--objectives")
    if len(objectives) == 3:
        return _front_of_three(target, tuple(objectives), time_limit, workers, seed, max_points)
    return _front_of_two(target, objectives, time_limit, workers, seed, max_points)


def _front_of_three(target: ParetoTarget, objectives: tuple, time_limit: float, workers: int, seed: int,
                    max_points: int) -> ParetoResult:
    """Three metrics (a, b, c): two-metric fronts of (a, b) under c <= eps, eps lowered each time to
    one unit below the largest c on the last front, until infeasible; the union's non-dominated
    points (in CP-SAT's integer units, all minimised) are the front. Exact: a point of the 3-D front
    that a 2-D front misses is dominated in (a, b) only by points of larger c, so its c lies below
    that front's largest c and a later, lower eps reaches it (Laumanns, Thiele & Zitzler, EJOR 2006,
    for the adaptive eps-constraint idea)."""
    start = time.perf_counter()
    a, b, c = objectives
    out = ParetoResult(objectives=objectives, space_size=target.space_size)
    eps, found = None, []
    while True:
        left = time_limit - (time.perf_counter() - start)
        if left <= 0.1:
            out.status, out.gap = "PARTIAL", 1.0
            out.message = f"time limit reached after {len(found)} candidate points"
            break
        step = _front_of_two(target, (a, b), left, workers, seed, max_points, bound=None if eps is None else (c, eps), extra=(c,))
        out.solves += step.solves
        found += step.plans
        if step.status == "PARTIAL":
            out.status, out.gap, out.message = "PARTIAL", step.gap, step.message
            break
        if not step.plans:
            if not found:
                out.status, out.message = step.status, step.message
            break
        eps = max(p.units[c] for p in step.plans) - 1
    units = [tuple(p.units[n] for n in objectives) for p in found]
    keep = {id(p) for p, u in zip(found, units)
            if not any(all(x <= y for x, y in zip(v, u)) and v != u for v in units)}
    seen, out.plans = set(), []
    for p, u in zip(found, units):
        if id(p) in keep and u not in seen:
            seen.add(u)
            out.plans.append(p)
    out.solve_time_s = time.perf_counter() - start
    return out


def _front_of_two(target: ParetoTarget, objectives: tuple, time_limit: float, workers: int, seed: int,
                  max_points: int, bound: tuple | None = None, extra: tuple = ()) -> ParetoResult:
    """The two-metric front; ``bound`` = (metric, max units) restricts the space; ``extra``: metrics
    whose integer values are recorded on each plan as well (``plan.units``). The names are checked
    by ``pareto_front``."""
    start = time.perf_counter()
    deadline = start + time_limit
    result = ParetoResult(objectives=tuple(objectives), space_size=target.space_size)
    enc = target.encode()
    first, second = (enc.metric(name) for name in objectives)
    if bound is not None:
        enc.model.add(enc.metric(bound[0]) <= bound[1])

    def run(objective, assumptions=()):
        solver = _solver(max(0.1, deadline - time.perf_counter()), workers, seed)
        enc.model.minimize(objective)
        enc.model.clear_assumptions()
        enc.model.add_assumptions(list(assumptions))
        status = _status_name(solver.solve(enc.model))
        assert status != "MODEL_INVALID", enc.model.validate()
        result.solves += 1
        return solver, status

    while len(result.plans) < max_points:
        solver, status = run(first)
        if status == "INFEASIBLE":
            if not result.plans:
                result.status = "INFEASIBLE"
                result.message = (target.explain(max(0.1, deadline - time.perf_counter()), workers, seed)
                                  if target.explain is not None and bound is None else "no plan satisfies the constraints")
            break
        if status != "OPTIMAL":
            result.status = "PARTIAL"
            found = solver.objective_value if status == "FEASIBLE" else None
            result.gap = (max(0.0, (found - solver.best_objective_bound) / found) if found else 1.0)
            result.message = f"time limit reached after {len(result.plans)} points; the solve in progress had gap {100 * result.gap:.2f} %"
            break
        best_first = solver.value(first)
        fixed = enc.model.new_bool_var(f"pareto_first_at_{len(result.plans)}")
        enc.model.add(first <= best_first).only_enforce_if(fixed)
        solver, status = run(second, [fixed])
        if status != "OPTIMAL":
            result.status, result.gap = "PARTIAL", 1.0
            result.message = f"time limit reached after {len(result.plans)} points (second-metric solve unfinished)"
            break
        values = {k: solver.value(v) for k, v in enc.decisions.items()}
        n, mapping = target.decode(values)
        plan = Plan(n, mapping, target.evaluate(n, mapping))
        plan.units = {name: solver.value(enc.metric(name)) for name in tuple(objectives) + tuple(extra)}
        if target.check is not None:
            target.check(plan, enc, solver)
        result.plans.append(plan)
        enc.model.add(second <= solver.value(second) - 1)  # the next point must be strictly better on the second metric
    enc.model.clear_assumptions()
    result.solve_time_s = time.perf_counter() - start
    return result


def dominates(a: dict, b: dict, objectives: tuple, sense: dict, rel: float = 0.0) -> bool:
    """Whether metrics ``a`` are at least as good as ``b`` on both objectives and better on one
    (``sense`` +1 smaller is better, -1 larger; ``rel`` a relative tolerance for 'as good')."""
    better = False
    for name in objectives:
        x, y = sense[name] * a[name], sense[name] * b[name]
        if x > y + rel * abs(y):
            return False
        if x < y - rel * abs(y):
            better = True
    return better


def non_dominated(points: list, objectives: tuple, sense: dict) -> list:
    """The points (plans) no other point dominates, by their model metrics."""
    return [p for p in points if not any(dominates(q.evaluation.metrics, p.evaluation.metrics, objectives, sense) for q in points)]
