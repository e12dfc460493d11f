"""One planner interface for training and serving, and the searches written once against it.

A ``Planner`` (``training_planner.TRAINING``, ``serving_planner.SERVING``) says what a workload
kind's plans are: its space of decisions (``relations.Space``), its context, its composition (the
model's ``compose``, run here on numpy arrays and on CP-SAT), how a point becomes a mapping, how a
mapping is evaluated and reported, what its limits mean when they bind. On it:

- ``enumerate_space``: every point of the space on the numpy backend, the best ``top`` re-evaluated
  by the model (the oracle);
- ``solve``: by enumeration, by bounding blocks of the space and enumerating the rest
  (``bounded_search``), or as a CP-SAT model (``cpsat_search``), as ``SolveMethod`` says;
- what binds when no plan exists: from the enumeration's least quantities, or by CP-SAT relaxing one
  limit at a time (``cpsat_search.explain``).

It imports neither OR-Tools nor pandas (the commands that only evaluate start without them).

Every plan returned carries the model's own float metrics; ``Plan.solver_values`` keeps the
integer model's values of the same quantities for the round-trip check the tests run.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from parasol.model.errors import ProblemError
from parasol.model.evaluation import Evaluation

from . import deadline, progress

if TYPE_CHECKING:  # numpy, the planner's tables, numpy backend and pandas are imported where a search runs
    import numpy as np
    import pandas as pd

    from .relations import Space
    from .tables import Tables

# an infeasible space up to this size is explained by walking it (about 10 s at 1.5M points/s on 2 cores)
EXPLAIN_ENUMERATE_BELOW = 16_000_000
MAX_KEPT_POINTS = 1_000_000  # enumerate --all: points whose metrics are all kept (1.07M measured at 0.78 GB peak)
TIME_UP = "the time limit passed while the space and the model's tables were built; raise --time-limit"
INTERRUPTED = "interrupted while the space and the model's tables were built"
ROUND_TRIP_TOLERANCE = 1e-3  # relative agreement of the integer model's quantities with the float model's
# points per numpy chunk: 2^17 keeps a chunk's arrays in cache; measured on GPT-3 175B / 1,024 A100 (6.4M
# points, 2 cores): 0.92M points/s at 2^14, 1.40M at 2^16, 1.51M at 2^17, 1.47M at 2^18, 1.19M at 2^20
CHUNK_ROWS = 1 << 17


class SolveMethod(StrEnum):
    """How ``solve`` searches: ``auto`` enumerates a space small enough that every point through the model
    costs less than any search (``Planner.enumerate_below``), bounds and enumerates the larger ones where
    the planner can bound blocks of its space (``Planner.bound_above``) and solves the others with CP-SAT;
    ``cpsat``, ``bound`` and ``enumerate`` force one. All are exact: OPTIMAL means proven, by CP-SAT, by
    bounds on every block not enumerated (``bounded_search``), or by evaluating every point."""

    AUTO = "auto"
    CPSAT = "cpsat"
    BOUND = "bound"
    ENUMERATE = "enumerate"


@dataclass
class Plan:
    num_gpus: int
    mapping: object
    evaluation: Evaluation
    solver_values: dict = field(default_factory=dict)  # the integer model's values (model units) of the round-trip quantities
    units: dict = field(default_factory=dict)  # pareto: the plan's front metrics in CP-SAT's integer units
    system_name: str | None = None  # the system the plan runs on (problem.system_name, or one of several compared)

    @property
    def solver_step_s(self) -> float | None:
        return self.solver_values.get("step_time_s")

    @property
    def metrics(self) -> dict:
        """The model's metrics of this plan (``evaluation.metrics``)."""
        return self.evaluation.metrics

    def to_frame(self) -> pd.DataFrame:
        """One row: the plan's mapping and its scalar metrics (``results.plans_frame``)."""
        from .results import plans_frame  # noqa: PLC0415 (results imports nothing of the planner; kept lazy)

        return plans_frame([self])


@dataclass
class PlanResult:
    status: str
    objective: str
    plans: list = field(default_factory=list)
    objective_value: float | None = None
    bound: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    deterministic_time: float = 0.0
    workers: int = 0
    space_size: int = 0
    points_evaluated: int | None = None
    message: str | None = None
    table: pd.DataFrame | None = None  # enumerate keep_all: every point with its mapping and metrics
    method: str = "cpsat"  # how it was found: "cpsat" (solve) or "enumerate" (every point through the model)

    def to_frame(self) -> pd.DataFrame:
        """The plans as a table, best first (enumerate with keep_all: every point of the space)."""
        from .results import plans_frame  # noqa: PLC0415

        return self.table if self.table is not None else plans_frame(self.plans)


@dataclass(frozen=True)
class FrontMetric:
    """A metric a front (or an objective) can plan: the composition's ``minimised`` key that orders it,
    the model-metrics key it is reported by, and its sense (+1 smaller is better, -1 larger)."""

    minimised: str
    metric: str
    sense: int


class Planner(ABC):
    """What the searches need to know about one kind of workload (see the module docstring)."""

    kind: str
    objectives: tuple  # the objective names solve accepts
    mapping_keys: tuple  # the decisions that state a plan (num_gpus first)
    front_metrics: tuple  # the metric names a front (or an objective) can order
    points_name: str  # what a point of the space is called in reports
    report: object  # the module with evaluation_json, evaluation_table, plans_table, plan_label

    @abstractmethod
    def fixed_plan(self, problem) -> tuple:
        """(num_gpus, mapping) of the one plan a problem file fixes (``evaluate``)."""

    def evaluation_json(self, problem, mapping, evaluation) -> dict:
        return self.report.evaluation_json(problem, mapping, evaluation)

    def evaluation_table(self, problem, mapping, evaluation) -> str:
        return self.report.evaluation_table(problem, mapping, evaluation)

    def plans_table(self, plans) -> list:
        return self.report.plans_table(plans)

    def plan_label(self, plan) -> str:
        return self.report.plan_label(plan)

    @abstractmethod
    def space(self, problem) -> Space: ...

    @abstractmethod
    def context(self, problem, names: tuple = ()):
        """The composition's context; ``names``: the objectives or front metrics planned (some need data)."""

    @abstractmethod
    def compose(self, o, ctx): ...

    @abstractmethod
    def time_reference(self, problem) -> tuple:
        """The factors whose reference outputs set the integer time unit."""

    @abstractmethod
    def decode(self, problem, space: Space, stored: dict) -> tuple:
        """(num_gpus, mapping) of a point given by its stored values."""

    @abstractmethod
    def evaluate(self, problem, num_gpus: int, mapping) -> Evaluation: ...

    @abstractmethod
    def objective_value(self, problem, objective: str, metrics: dict) -> float:
        """The objective in its natural unit (tokens/s, seconds, GiB, $)."""

    @abstractmethod
    def front_metric(self, problem, name: str) -> FrontMetric: ...

    @abstractmethod
    def frame(self, problem, ctx, o, out) -> dict:
        """Columns (name -> array) of the metrics of every point ``o`` holds, for tables."""

    @abstractmethod
    def round_trip(self, out) -> dict:
        """{metric key: quantity} the integer model and the float model must agree on."""

    @abstractmethod
    def binds(self, problem, limit, plan: Plan | None, proven: bool) -> str:
        """Why no plan exists when ``limit`` binds, ``plan`` reaching the least of its quantity."""

    @abstractmethod
    def together(self, problem, names: list) -> str:
        """Why no plan exists when each limit alone can be met but not all together."""

    def subproblems(self, problem) -> list:
        """[(label, sub-problem or None, why not)]: the problem split where a decision changes the
        device (training's chiplet counts), each solved exactly on its own."""
        return [(None, problem, None)]

    def solver_space(self, problem, space: Space, tables: Tables) -> Space:
        """The space restricted for CP-SAT by cuts no feasible plan crosses (default: none)."""
        return space

    def hint_space(self, problem, space: Space) -> Space:
        """A slice of the space worth enumerating for the solver's hint (default: all of it)."""
        return space

    def search_settings(self, problem) -> SearchSettings:
        """How CP-SAT searches this problem's model (default: presolve and the LP relaxation on)."""
        return SearchSettings()

    def block_levels(self, problem, space: Space) -> tuple:
        """The decisions ``bounded_search`` fixes per block, level by level (default: none; the planner
        cannot bound blocks of its spaces)."""
        return ()

    def can_bound(self, problem) -> bool:
        """Whether ``bounded_search`` can search the planner's spaces (``block_levels`` gives it levels; default: no).
        Answered without building the space, which ``check_method`` must not do before the deadline is set."""
        return False

    def enumerate_below(self, problem) -> int:
        """The largest space ``solve`` enumerates instead of solving (SolveMethod.AUTO; default: none)."""
        return 0

    def front_enumerate_below(self, problem) -> int:
        """The largest space whose front ``pareto`` finds by evaluating every point (SolveMethod.AUTO;
        default: the solve's threshold, ``enumerate_below``)."""
        return self.enumerate_below(problem)

    def bound_above(self, problem) -> int | None:
        """The space size above which ``solve`` bounds and enumerates rather than calling CP-SAT
        (SolveMethod.AUTO; default None: never)."""
        return None

    def check_objective(self, problem, objective: str | None) -> str:
        objective = objective or problem.objective
        if objective not in self.objectives:
            raise ProblemError(
                f"{objective!r} is not a {self.kind} objective; allowed: {', '.join(self.objectives)}", field="--objective"
            )
        return objective


@dataclass(frozen=True)
class SearchSettings:
    """The CP-SAT settings a planner chooses per problem (``Planner.search_settings``)."""

    presolve: bool = True
    linearization_level: int = 1  # CP-SAT's: 0 no LP relaxation, 1 the default, 2 more cuts


# ---------------------------------------------------------------- enumeration (numpy)


def scan(planner: Planner, problem, space: Space, names: tuple, time_limit: float | None = None, rows: int = CHUNK_ROWS):
    """The points of ``space`` on the numpy backend, chunk by chunk: yields (offset, cols, ops, out)."""
    from .numpy_ops import NumpyOps  # noqa: PLC0415 (numpy backend and tables: where a search runs)
    from .tables import Tables  # noqa: PLC0415

    ctx = planner.context(problem, names)
    tables = Tables(space, ctx)
    start, offset = time.perf_counter(), 0
    for cols in space.chunks(rows):
        o = NumpyOps(tables, cols)
        yield offset, cols, o, planner.compose(o, ctx), ctx
        offset += o.size
        if (time_limit is not None and time.perf_counter() - start > time_limit) or deadline.passed():
            return  # the scan's own limit, the command's (``deadline.until``) or Ctrl-C


def feasible_mask(out, skip: str | None = None) -> np.ndarray | bool:
    import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

    ok = True
    for limit in out.limits:
        if limit.name != skip:
            ok = ok & (np.asarray(limit.quantity) <= limit.bound)
    return ok


def best_points(
    planner: Planner,
    problem,
    space: Space,
    objective: str,
    top: int,
    time_limit: float | None = None,
    keep_all: bool = False,
    names: tuple = (),
    label: str = "enumerate",
):
    """The ``top`` best feasible points (stored-value dicts, best first; ties in the space's order),
    the points evaluated, whether the scan completed, the explanation data and, with ``keep_all``,
    every point's table."""
    import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

    from .top_k import TopK  # noqa: PLC0415

    best = TopK(top)
    evaluated, frames = 0, []
    least = {}  # limit name -> (value, stored point) of its least quantity where the others allow
    for _offset, cols, o, out, ctx in scan(planner, problem, space, names or (objective,), time_limit):
        evaluated += o.size
        ok = np.broadcast_to(feasible_mask(out), (o.size,))
        key = np.broadcast_to(np.asarray(out.minimised[objective], dtype=float), (o.size,))
        idx = np.flatnonzero(ok)
        if len(idx):
            best.add(cols, idx, key[idx])
        _report_scan(label, evaluated, space, best.rows)
        for limit in out.limits:
            allowed = np.broadcast_to(memory_allows(out, limit), (o.size,))
            cand = np.flatnonzero(allowed)
            if len(cand):
                q = np.broadcast_to(np.asarray(limit.quantity, dtype=float), (o.size,))
                i = cand[np.argmin(q[cand])]
                if limit.name not in least or q[i] < least[limit.name][0]:
                    least[limit.name] = (float(q[i]), {k: int(v[i]) for k, v in cols.items()}, limit)
        if keep_all:
            frames.append(_frame(planner, problem, space, cols, ctx, o, out))
    table = _concat(frames) if keep_all and frames else None
    return best.rows, evaluated, evaluated >= space.size(), least, table  # incomplete: the scan stopped on time


def _report_scan(label: str, evaluated: int, space: Space, best_rows: list) -> None:
    sink = progress.current()
    if sink.due():
        size = space.size()
        found = "a plan found" if best_rows else "no plan yet"
        sink.update(f"{label}: {evaluated:,} of {size:,} points ({100 * evaluated / max(size, 1):.0f} %), {found}")


def memory_allows(out, limit):
    """Where the points meet the memory limit (every point, for the memory limit itself): the
    relaxation ``explain`` makes for each limit."""
    import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

    memory = next((lim for lim in out.limits if lim.name == "memory"), None)
    if limit.name == "memory" or memory is None:
        return True
    return np.asarray(memory.quantity) <= memory.bound


def _frame(planner, problem, space, cols, ctx, o, out) -> pd.DataFrame:
    import numpy as np  # noqa: PLC0415 (evaluating one plan needs no numpy)

    data = {}
    for key in planner.mapping_keys:
        if key not in cols:
            continue
        domain = space.domains[key]
        data[str(key)] = (
            cols[key]
            if domain.numeric
            else np.asarray([domain.values[i] for i in range(len(domain.values))], dtype=object)[cols[key]]
        )
    data.update(planner.frame(problem, ctx, o, out))
    n = o.size
    import pandas as pd  # noqa: PLC0415

    return pd.DataFrame({k: np.broadcast_to(v, (n,)) if np.ndim(v) == 0 else v for k, v in data.items()})


def _concat(frames: list) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415

    return pd.concat(frames, ignore_index=True)


def enumerate_space(
    problem, objective: str | None = None, top: int = 1, time_limit: float | None = None, keep_all: bool = False
) -> PlanResult:
    """Exhaustive baseline: every point of the problem's space evaluated by the model's composition
    on numpy arrays; the best ``top`` re-evaluated on floats."""
    planner = planner_for(problem)
    objective = planner.check_objective(problem, objective)
    return _per_subproblem(
        planner,
        problem,
        objective,
        top,
        time_limit,
        lambda sub, left: _enumerate_one(planner, sub, objective, top, left, keep_all),
    )


def _enumerate_one(planner, problem, objective, top, time_limit, keep_all, space=None) -> PlanResult:
    start = time.perf_counter()
    space = planner.space(problem) if space is None else space
    if keep_all and space.size() > MAX_KEPT_POINTS:
        raise ProblemError(
            f"keeps every point's metrics, and the space has {space.size():,} mappings, more than "
            f"{MAX_KEPT_POINTS:,} (about 1 GB); restrict the problem's mapping or leave out --all",
            source=problem.source,
            field="--all",
        )
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size(), workers=1, method="enumerate")
    rows, evaluated, complete, least, table = best_points(planner, problem, space, objective, top, time_limit, keep_all)
    result.plans = [Plan(*planner.decode(problem, space, r), None) for r in rows]
    for plan in result.plans:
        plan.evaluation = planner.evaluate(problem, plan.num_gpus, plan.mapping)
    result.points_evaluated, result.table = evaluated, table
    if result.plans:
        result.status = "OPTIMAL" if complete else "FEASIBLE"
        result.objective_value = planner.objective_value(problem, objective, result.plans[0].evaluation.metrics)
        result.bound, result.gap = (result.objective_value, 0.0) if complete else (None, None)
    else:
        result.status = "INFEASIBLE" if complete else "UNKNOWN"
        if complete:
            result.message = _explain_from_least(planner, problem, space, least)
    result.solve_time_s = time.perf_counter() - start
    return result


def _explain_from_least(planner, problem, space, least: dict) -> str:
    messages = []
    for name, (value, stored, limit) in least.items():
        if name != "memory" and value > limit.bound:
            messages.append(planner.binds(problem, limit, evaluated_plan(planner, problem, space, stored), True))
    if messages:
        return "; ".join(messages)
    if "memory" in least and least["memory"][0] > least["memory"][2].bound:
        _, stored, limit = least["memory"]
        return planner.binds(problem, limit, evaluated_plan(planner, problem, space, stored), True)
    return planner.together(problem, list(least))


def evaluated_plan(planner, problem, space, stored) -> Plan:
    """The plan of a point given by its stored values, evaluated by the model."""
    n, mapping = planner.decode(problem, space, stored)
    return Plan(n, mapping, planner.evaluate(problem, n, mapping))


# ---------------------------------------------------------------- solve (CP-SAT)


def solve(
    problem,
    objective: str | None = None,
    top: int = 1,
    time_limit: float = 60.0,
    workers: int = 1,
    seed: int = 0,
    method: SolveMethod | str = SolveMethod.AUTO,
) -> PlanResult:
    """The best plan (or the ``top`` best distinct ones) under the model, with proof status: by CP-SAT,
    one worker by default (deterministic for a given seed), or by enumeration where that is cheaper
    (``SolveMethod``)."""
    planner = planner_for(problem)
    objective = planner.check_objective(problem, objective)
    method = check_method(planner, problem, method)

    def run(sub, left):
        begun = time.perf_counter()
        space = planner.space(sub)
        left = None if left is None else max(0.05, left - (time.perf_counter() - begun))  # the space's time counts
        how = resolve_method(planner, sub, method, space.size(), planner.enumerate_below(sub))
        if how is SolveMethod.ENUMERATE:
            return _enumerate_one(planner, sub, objective, top, left, False, space)
        if how is SolveMethod.BOUND:
            return _bound_one(planner, sub, objective, top, left, space)
        from .cpsat_search import solve_one  # noqa: PLC0415 (OR-Tools: only where CP-SAT runs)

        return solve_one(planner, sub, objective, top, left, workers, seed, space)

    return _per_subproblem(planner, problem, objective, top, time_limit, run)


def check_method(planner: Planner, problem, method) -> SolveMethod:
    """``method`` as a ``SolveMethod``, one the planner can run (ProblemError otherwise)."""
    try:
        method = SolveMethod(method)
    except ValueError:
        raise ProblemError(f"{method!r} is not allowed; allowed: {', '.join(SolveMethod)}", field="method") from None
    if method is SolveMethod.BOUND and not planner.can_bound(problem):
        allowed = ", ".join(m for m in SolveMethod if m is not SolveMethod.BOUND)
        raise ProblemError(f"'bound' cannot search {planner.kind} problems; allowed: {allowed}", field="method")
    return method


def resolve_method(planner: Planner, problem, method: SolveMethod, size: int, enumerate_below: int) -> SolveMethod:
    """The method that searches a space of ``size`` points: ``method`` itself unless AUTO, which
    enumerates up to ``enumerate_below`` points, bounds blocks above ``Planner.bound_above``, else CP-SAT."""
    if method is not SolveMethod.AUTO:
        return method
    if size <= enumerate_below:
        return SolveMethod.ENUMERATE
    bound_above = planner.bound_above(problem)
    return SolveMethod.BOUND if bound_above is not None and size > bound_above else SolveMethod.CPSAT


def _bound_one(planner, problem, objective, top, time_limit, space=None) -> PlanResult:
    """``bounded_search`` on one (sub-)problem: the best ``top`` plans, proven OPTIMAL when every block
    was enumerated or bounded out, else the best so far with the least bound of the blocks left."""
    from .bounded_search import bounded_best  # noqa: PLC0415 (only solves that bound need it)

    start = time.perf_counter()
    limit = 60.0 if time_limit is None else time_limit
    space = planner.space(problem) if space is None else space
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size(), workers=1, method="bound")
    outcome = bounded_best(planner, problem, space, objective, top, limit)
    result.plans = [evaluated_plan(planner, problem, space, row) for row in outcome.rows]
    result.points_evaluated = outcome.points_evaluated
    if result.plans:
        result.status = "OPTIMAL" if outcome.complete else "FEASIBLE"
        result.objective_value = planner.objective_value(problem, objective, result.plans[0].evaluation.metrics)
        if outcome.complete or outcome.least_bound is None:
            result.bound, result.gap = result.objective_value, 0.0
            result.status = "OPTIMAL"
        else:
            found = float(outcome.keys[0])
            result.gap = max(0.0, (found - outcome.least_bound) / found) if found > 0 else 0.0
            result.bound = _bound_of(planner, problem, objective, result.objective_value, result.gap)
    elif outcome.complete:
        result.status = "INFEASIBLE"
        result.message = explain_infeasible(planner, problem, space, objective, start + limit)
    result.solve_time_s = time.perf_counter() - start
    return result


def explain_infeasible(planner, problem, space, objective, deadline_s: float, workers: int = 1, seed: int = 0) -> str:
    """What binds in a space proven to hold no plan: the enumerator's least quantities where the space
    is small enough to walk (exact, and as fast as the proof: CP-SAT minimising the peak memory of an
    unpruned model took the whole 60 s on Llama 3 70B at 8 H100, 1.9M points, once the attention time
    followed the key length), else CP-SAT relaxing each limit in turn (``cpsat_search.explain``)."""
    if space.size() <= EXPLAIN_ENUMERATE_BELOW:
        _, _, complete, least, _ = best_points(planner, problem, space, objective, 1, max(deadline_s - time.perf_counter(), 0.0))
        if complete:
            return _explain_from_least(planner, problem, space, least)
    from .cpsat_search import explain  # noqa: PLC0415

    return explain(planner, problem, space, deadline_s, workers, seed)


def _bound_of(planner, problem, objective, value: float, gap: float) -> float:
    if planner.front_metric(problem, objective).sense < 0:
        return value / (1.0 - gap) if gap < 1 else float("inf")
    return value * (1.0 - gap)


# ---------------------------------------------------------------- decomposition


def _per_subproblem(planner, problem, objective, top, time_limit, run) -> PlanResult:
    """``run(sub, seconds left)`` on each sub-problem (one per system compared, then the planner's
    own split; the time left shared by those still to run); the best ``top`` plans over all of
    them, each naming its system."""
    start = time.perf_counter()
    systems = problem.systems
    results = []
    for index, sub in enumerate(systems):
        left = None if time_limit is None else max(0.1, (time_limit - (time.perf_counter() - start)) / (len(systems) - index))
        with deadline.until(None if time_limit is None else time_limit - (time.perf_counter() - start)):
            result = _per_planner_part(planner, sub, objective, top, left, run)
        for plan in result.plans:
            plan.system_name = sub.system_name
        if len(systems) > 1 and result.table is not None:
            result.table.insert(0, "system", sub.system_name)
        results.append((sub.system_name, result))
    if len(results) == 1:
        return results[0][1]
    return _combine(planner, problem, objective, top, results, start)


def _per_planner_part(planner, problem, objective, top, time_limit, run) -> PlanResult:
    start = time.perf_counter()
    parts = planner.subproblems(problem)
    results = []
    for index, (label, sub, why) in enumerate(parts):
        if sub is None:
            results.append((label, PlanResult(status="INFEASIBLE", objective=objective, message=why)))
            continue
        left = None if time_limit is None else max(0.1, (time_limit - (time.perf_counter() - start)) / (len(parts) - index))
        begun = time.perf_counter()
        try:
            with deadline.until(left):
                results.append((label, run(sub, left)))
        except deadline.TimeUp:
            why = INTERRUPTED if deadline.interrupted() else TIME_UP
            cut = PlanResult(status="UNKNOWN", objective=objective, message=why, solve_time_s=time.perf_counter() - begun)
            results.append((label, cut))
    if len(results) == 1:
        return results[0][1]
    return _combine(planner, problem, objective, top, results, start)


def _combine(planner, problem, objective, top, results, start) -> PlanResult:
    sense = planner.front_metric(problem, objective).sense

    def key(plan):
        return sense * planner.objective_value(problem, objective, plan.evaluation.metrics)

    parts = [r for _, r in results]
    out = PlanResult(
        status="INFEASIBLE",
        objective=objective,
        space_size=sum(r.space_size for r in parts),
        workers=max(r.workers for r in parts),
        deterministic_time=sum(r.deterministic_time for r in parts),
        method="+".join(sorted({r.method for r in parts})),
    )
    if any(r.points_evaluated is not None for r in parts):
        out.points_evaluated = sum(r.points_evaluated or 0 for r in parts)
    out.plans = sorted((p for r in parts for p in r.plans), key=key)[:top]
    tables = [r.table for r in parts if r.table is not None]
    out.table = _concat(tables) if tables else None
    statuses = {r.status for r in parts}
    if out.plans:
        proven = statuses <= {"OPTIMAL", "INFEASIBLE"}
        out.status = "OPTIMAL" if proven else "FEASIBLE"
        out.objective_value = planner.objective_value(problem, objective, out.plans[0].evaluation.metrics)
        out.bound, out.gap = (out.objective_value, 0.0) if proven else _combined_bound(sense, out.objective_value, parts)
    elif statuses != {"INFEASIBLE"}:
        out.status = "UNKNOWN"
    else:
        out.message = "; ".join(f"{label}: {r.message}" for label, r in results if r.message)
    out.solve_time_s = time.perf_counter() - start
    return out


def _combined_bound(sense: int, value: float, parts: list) -> tuple:
    """(bound, gap) of the best over several parts when some stopped on time: each part's optimum lies
    within its own bound, so the best over all within the best of the bounds (an infeasible part adds
    none). (None, None) when a part ended with neither plan nor bound. The gap in the objective's unit
    as ``_bound_of`` states it: 1 - value / bound for a rate (sense -1), 1 - bound / value otherwise."""
    bounds = []
    for r in parts:
        if r.status == "INFEASIBLE":
            continue
        if r.bound is None:
            return None, None
        bounds.append(r.bound)
    if not bounds:
        return None, None
    bound = max(bounds) if sense < 0 else min(bounds)
    if sense < 0:
        bound = max(bound, value)
        gap = 1.0 - value / bound if bound > 0 else 0.0
    else:
        bound = min(bound, value)
        gap = 1.0 - bound / value if value > 0 else 0.0
    return bound, max(0.0, gap)


# ---------------------------------------------------------------- the planners


def planner_for(problem) -> Planner:
    """The planner of the problem's workload kind."""
    if problem.is_inference:
        from .serving_planner import SERVING

        return SERVING
    from .training_planner import TRAINING

    return TRAINING


def round_trip_errors(plan: Plan) -> dict:
    """Relative differences between the integer model's quantities and the model's own floats."""
    met = plan.evaluation.metrics
    return {k: abs(v - met[k]) / max(abs(met[k]), 1e-300) for k, v in plan.solver_values.items()}
