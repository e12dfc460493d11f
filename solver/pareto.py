"""Exact Pareto fronts of two or three metrics by the epsilon-constraint method with CP-SAT, for
training and serving alike (``cpsat_search.Search``: the model's composition as a CP-SAT model, whose
``minimised`` quantities are the integers each metric is ordered by).

Method (Haimes et al. 1971; exact for integer objectives, Ehrgott, "Multicriteria Optimization",
2005, Sec. 4.1): minimise the first metric; among its optima minimise the second (a lexicographic
second solve under an enforced bound on the first); record the point; require the second metric
to be strictly better (one integer unit) than that point's, and repeat until infeasible. Each
point is a proven non-dominated point of the integer model; the sequence ends with a proof that
no further point exists. Three metrics: two-metric fronts under an adaptive bound on the third
(Laumanns, Thiele & Zitzler, EJOR 2006). A decision that changes the device (training's chiplet
count) gives one front per value; the front over all is the non-dominated subset of their union.
When time runs out the front so far is returned as PARTIAL with the gap of the solve in progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import pandas as pd

from parasol.model.errors import ProblemError

from . import deadline, progress
from .bounded_search import bounded_front, enumerated_front
from .cpsat_ops import IntQ
from .cpsat_search import Search, cp_solver, explain
from .cpsat_search import run as run_cp
from .planner import TIME_UP, Plan, SolveMethod, check_method, evaluated_plan, planner_for, resolve_method


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
    deterministic_time: float = 0.0  # CP-SAT's, summed over the front's solves (independent of load)
    method: str = "cpsat"  # how it was found: cpsat (epsilon-constraint), bound or enumerate (SolveMethod)
    points_evaluated: int | None = None  # bound, enumerate: the mappings evaluated on numpy

    @property
    def table(self) -> pd.DataFrame:
        """The front as a table: one row per plan, its mapping and its model metrics."""
        from .results import plans_frame  # noqa: PLC0415

        return plans_frame(self.plans)

    def to_frame(self) -> pd.DataFrame:
        """The front as a table (``table``), ordered along its first metric."""
        return self.table


def check_metrics(planner, problem, objectives) -> tuple:
    """The front's metric names, checked: two or three different ones the planner plans."""
    objectives = tuple(objectives)
    allowed = ", ".join(planner.front_metrics)
    if len(objectives) not in (2, 3) or len(set(objectives)) != len(objectives):
        raise ProblemError(
            f"give two or three different metrics, got {list(objectives)}; allowed: {allowed}", field="--objectives"
        )
    for name in objectives:
        if name not in planner.front_metrics:
            raise ProblemError(f"{name!r} is not a metric the planner can optimise; allowed: {allowed}", field="--objectives")
    return objectives


def pareto_front(
    problem,
    objectives,
    time_limit: float = 60.0,
    workers: int = 1,
    seed: int = 0,
    max_points: int = 1000,
    method: SolveMethod | str = SolveMethod.AUTO,
) -> ParetoResult:
    """The exact front of ``objectives`` (two or three metric names) of ``problem``, found as ``method``
    says (``SolveMethod``; auto: every point of a space of at most ``Planner.front_enumerate_below``,
    blocks bounded and enumerated above that where the planner bounds them, else CP-SAT)."""
    planner = planner_for(problem)
    objectives = check_metrics(planner, problem, objectives)
    method = check_method(planner, problem, method)
    start = time.perf_counter()
    systems = problem.systems
    results = []
    for index, sub in enumerate(systems):
        left = max(0.1, (time_limit - (time.perf_counter() - start)) / (len(systems) - index))
        result = _system_front(planner, sub, objectives, left, workers, seed, max_points, method)
        for plan in result.plans:
            plan.system_name = sub.system_name
        if len(systems) > 1 and result.message:
            result.message = f"{sub.system_name}: {result.message}"
        results.append(result)
    return results[0] if len(results) == 1 else _union(planner, problem, objectives, results, start)


def _system_front(planner, problem, objectives, time_limit, workers, seed, max_points, method) -> ParetoResult:
    """The front on one system: one front per sub-problem (training's chiplet counts), then their union's."""
    start = time.perf_counter()
    parts = planner.subproblems(problem)
    results = []
    for index, (_, sub, why) in enumerate(parts):
        if sub is None:
            results.append(ParetoResult(objectives=objectives, status="INFEASIBLE", message=why))
            continue
        left = max(0.1, (time_limit - (time.perf_counter() - start)) / (len(parts) - index))
        try:
            with deadline.until(left):
                results.append(_front(planner, sub, objectives, left, workers, seed, max_points, method))
        except deadline.TimeUp:
            results.append(ParetoResult(objectives=objectives, status="PARTIAL", gap=1.0, message=TIME_UP))
    return results[0] if len(results) == 1 else _union(planner, problem, objectives, results, start)


def _union(planner, problem, objectives, results, start) -> ParetoResult:
    """The non-dominated subset of the union of several fronts (exact when each is)."""
    sense = {planner.front_metric(problem, n).metric: planner.front_metric(problem, n).sense for n in objectives}
    keys = tuple(sense)
    plans = non_dominated([p for r in results for p in r.plans], keys, sense)
    statuses = {r.status for r in results}
    status = "PARTIAL" if "PARTIAL" in statuses else ("INFEASIBLE" if not plans else "COMPLETE")
    return ParetoResult(
        objectives=objectives,
        status=status,
        plans=sorted(plans, key=lambda p: p.evaluation.metrics[keys[0]] * sense[keys[0]]),
        gap=max((r.gap or 0.0 for r in results), default=None) if status == "PARTIAL" else None,
        solve_time_s=time.perf_counter() - start,
        solves=sum(r.solves for r in results),
        deterministic_time=sum(r.deterministic_time for r in results),
        space_size=sum(r.space_size for r in results),
        message="; ".join(r.message for r in results if r.message) or None,
        method="+".join(sorted({r.method for r in results if r.status != "INFEASIBLE" or r.space_size} or {"cpsat"})),
        points_evaluated=sum(r.points_evaluated for r in results if r.points_evaluated is not None)
        if any(r.points_evaluated is not None for r in results)
        else None,
    )


def _front(planner, problem, objectives, time_limit, workers, seed, max_points, method) -> ParetoResult:
    space = planner.space(problem)
    how = resolve_method(planner, problem, method, space.size(), planner.front_enumerate_below(problem))
    if how is not SolveMethod.CPSAT:
        search = enumerated_front if how is SolveMethod.ENUMERATE else bounded_front
        return _front_of_points(planner, problem, space, objectives, time_limit, max_points, search)

    def new_search():
        return Search(planner, problem, space, objectives)

    def unit(search, name):
        return search.minimised(planner.front_metric(problem, name).minimised)

    deadline = time.perf_counter() + time_limit
    if len(objectives) == 3:
        result = _front_of_three(
            new_search, unit, objectives, deadline, workers, seed, max_points, planner.search_settings(problem)
        )
    else:
        result = _front_of_two(
            new_search, unit, objectives, deadline, workers, seed, max_points, planner.search_settings(problem)
        )
    result.space_size = space.size()
    if result.status == "INFEASIBLE" and result.message is None:
        result.message = explain(planner, problem, space, deadline, workers, seed)
    return result


def _front_of_points(planner, problem, space, objectives, time_limit, max_points, search) -> ParetoResult:
    """The front as ``search`` (``bounded_search.enumerated_front`` or ``bounded_front``) finds it: the
    non-dominated points of the model's own floats, one per distinct tuple of the metrics."""
    start = time.perf_counter()
    minimised = tuple(planner.front_metric(problem, n).minimised for n in objectives)
    outcome = search(planner, problem, space, objectives, minimised, time_limit, max_points)
    method = "enumerate" if search is enumerated_front else "bound"
    result = ParetoResult(
        objectives=objectives, space_size=space.size(), method=method, points_evaluated=outcome.points_evaluated
    )
    result.plans = [evaluated_plan(planner, problem, space, row) for row in outcome.rows]
    if not outcome.complete:
        result.status, result.gap = "PARTIAL", 1.0
        more = len(outcome.rows) >= max_points
        result.message = (
            f"more than {max_points} points on the front" if more else f"time limit reached after {len(outcome.rows)} points"
        )
    elif not result.plans:
        result.status = "INFEASIBLE"
        result.message = explain(planner, problem, space, time.perf_counter() + time_limit, 1, 0)
    result.solve_time_s = time.perf_counter() - start
    return result


def _front_of_three(new_search, unit, objectives, deadline, workers, seed, max_points, settings) -> ParetoResult:
    """Three metrics (a, b, c): two-metric fronts of (a, b) under c <= eps, eps lowered each time to
    one unit below the largest c on the last front, until infeasible; the union's non-dominated
    points (in CP-SAT's integer units, all minimised) are the front. Exact: a point of the 3-D front
    that a 2-D front misses is dominated in (a, b) only by points of larger c, so its c lies below
    that front's largest c and a later, lower eps reaches it."""
    start = time.perf_counter()
    a, b, c = objectives
    out = ParetoResult(objectives=objectives)
    eps, found = None, []
    while True:
        if deadline - time.perf_counter() <= 0.1:
            out.status, out.gap = "PARTIAL", 1.0
            out.message = f"time limit reached after {len(found)} candidate points"
            break
        step = _front_of_two(
            new_search,
            unit,
            (a, b),
            deadline,
            workers,
            seed,
            max_points,
            settings,
            bound=None if eps is None else (c, eps),
            extra=(c,),
        )
        out.solves += step.solves
        out.deterministic_time += step.deterministic_time
        found += step.plans
        if step.status == "PARTIAL":
            out.status, out.gap, out.message = "PARTIAL", step.gap, step.message
            break
        if not step.plans:
            if not found:
                out.status = step.status
            break
        eps = max(p.units[c] for p in step.plans) - 1
    units = [tuple(p.units[n] for n in objectives) for p in found]
    keep = {id(p) for p, u in zip(found, units) if not any(all(x <= y for x, y in zip(v, u)) and v != u for v in units)}
    seen, out.plans = set(), []
    for p, u in zip(found, units):
        if id(p) in keep and u not in seen:
            seen.add(u)
            out.plans.append(p)
    out.solve_time_s = time.perf_counter() - start
    return out


def _front_of_two(
    new_search, unit, objectives, deadline, workers, seed, max_points, settings, bound=None, extra=()
) -> ParetoResult:
    """The two-metric front; ``bound`` = (metric, max units) restricts the space; ``extra``: metrics
    whose integer values are recorded on each plan as well (``plan.units``)."""
    start = time.perf_counter()
    result = ParetoResult(objectives=tuple(objectives))
    search = new_search()
    model = search.model
    first, second = (unit(search, name) for name in objectives)
    if bound is not None:
        model.add(_expr(unit(search, bound[0])) <= bound[1])

    def run(objective, assumptions=()):
        solver = cp_solver(max(0.1, deadline - time.perf_counter()), workers, seed, settings)
        model.minimize(_expr(objective))
        model.clear_assumptions()
        model.add_assumptions(list(assumptions))
        status = run_cp(solver, model)
        if status == "MODEL_INVALID":
            raise RuntimeError(f"invalid CP-SAT model: {model.validate()}")  # a bug in a backend
        result.solves += 1
        result.deterministic_time += solver.deterministic_time
        return solver, status

    while len(result.plans) < max_points:
        solver, status = run(first)
        if status == "INFEASIBLE":
            if not result.plans:
                result.status = "INFEASIBLE"
                if bound is not None:
                    result.message = "no plan satisfies the constraints"
            break
        if status != "OPTIMAL":
            result.status = "PARTIAL"
            found = solver.objective_value if status == "FEASIBLE" else None
            result.gap = max(0.0, (found - solver.best_objective_bound) / found) if found else 1.0
            result.message = (
                f"time limit reached after {len(result.plans)} points; the solve in progress had gap {100 * result.gap:.2f} %"
            )
            break
        best_first = solver.value(_expr(first))
        fixed = model.new_bool_var(f"pareto_first_at_{len(result.plans)}")
        model.add(_expr(first) <= best_first).only_enforce_if(fixed)
        solver, status = run(second, [fixed])
        if status != "OPTIMAL":
            result.status, result.gap = "PARTIAL", 1.0
            result.message = f"time limit reached after {len(result.plans)} points (second-metric solve unfinished)"
            break
        plan: Plan = search.plan(solver)
        plan.units = {name: solver.value(_expr(unit(search, name))) for name in tuple(objectives) + tuple(extra)}
        result.plans.append(plan)
        progress.current().update(f"pareto: {len(result.plans)} points on the ({', '.join(objectives)}) front so far")
        model.add(_expr(second) <= solver.value(_expr(second)) - 1)  # the next point strictly better on the second
    model.clear_assumptions()
    result.solve_time_s = time.perf_counter() - start
    return result


def _expr(q):
    return q.expr if isinstance(q, IntQ) else q


def dominates(a: dict, b: dict, objectives: tuple, sense: dict, rel: float = 0.0) -> bool:
    """Whether metrics ``a`` are at least as good as ``b`` on every objective and better on one
    (``sense`` +1 smaller is better, -1 larger; ``rel`` a relative tolerance for 'as good')."""
    better = False
    for name in objectives:
        x, y = sense[name] * a[name], sense[name] * b[name]
        if x > y + rel * abs(y):
            return False
        if x < y - rel * abs(y):
            better = True
    return better


def non_dominated(points, objectives: tuple, sense: dict):
    """The points no other point dominates: plans (by their model metrics) or a table's rows."""
    if isinstance(points, pd.DataFrame):
        rows = points.to_dict("records")
        keep = [i for i, r in enumerate(rows) if not any(dominates(q, r, objectives, sense) for q in rows)]
        return points.iloc[keep]
    return [
        p for p in points if not any(dominates(q.evaluation.metrics, p.evaluation.metrics, objectives, sense) for q in points)
    ]
