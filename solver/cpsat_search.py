"""The CP-SAT side of the planner: the model's composition as a CP-SAT model (``Search``, which
``pareto`` uses too), the solver's settings, ``solve``'s CP-SAT search (hinted by a numpy enumeration
of a slice of the space, top-K by forbidding each plan found) and ``explain``, what binds when no plan
exists (each limit relaxed in turn). Imported only by the commands that search with CP-SAT, so that
the others start without OR-Tools.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import threading
import time

from ortools.sat.python import cp_model

from . import progress
from .cpsat_ops import CpSatOps, IntQ
from .deadline import TimeUp, at, interrupted
from .planner import Plan, Planner, PlanResult, SearchSettings, _bound_of, best_points
from .relations import Space
from .scaling import Scale
from .tables import Tables

HINT_ROWS = 2_000_000  # the hint enumeration's largest slice of the space
DEFAULT_SETTINGS = SearchSettings()
STATUS = {
    cp_model.OPTIMAL: "OPTIMAL",
    cp_model.FEASIBLE: "FEASIBLE",
    cp_model.INFEASIBLE: "INFEASIBLE",
    cp_model.UNKNOWN: "UNKNOWN",
    cp_model.MODEL_INVALID: "MODEL_INVALID",
}


# ---------------------------------------------------------------- the CP-SAT model of a space


class Search:
    """The CP-SAT model of ``space``: the planner's composition on ``CpSatOps``, with the limits named
    in ``enforce`` (all by default) required."""

    def __init__(self, planner: Planner, problem, space: Space, names: tuple = (), enforce=None, prune: bool = True):
        self.planner, self.problem = planner, problem
        self.ctx = planner.context(problem, names)
        tables = Tables(space, self.ctx)
        if prune:
            tables = Tables(planner.solver_space(problem, space, tables), self.ctx)
        self.space = tables.space
        self.scale = _scale(planner, problem, tables)
        self.ops = CpSatOps(tables, self.scale)
        self.out = planner.compose(self.ops, self.ctx)
        self.limits = list(self.out.limits)
        for limit in self.limits:
            if enforce is None or limit.name in enforce:
                self.ops.at_most(limit.quantity, limit.bound)
        self.decisions = {k: self.ops.vars[k] for k in planner.mapping_keys if k in self.ops.vars}

    @property
    def model(self) -> cp_model.CpModel:
        return self.ops.model

    def minimised(self, name: str) -> IntQ:
        return self.out.minimised[name]

    def hint(self, stored: dict | None) -> None:
        self.model.clear_hints()
        if stored is None:
            return
        for key, var in self.ops.vars.items():
            if key in stored and stored[key] in self.ops.values[key]:
                self.model.add_hint(var, int(stored[key]))

    def plan(self, solver: cp_model.CpSolver) -> Plan:
        """The solution's plan, evaluated by the model, with the integer model's round-trip values."""
        n, mapping = self.planner.decode(self.problem, self.space, self.ops.stored(solver))
        plan = Plan(n, mapping, self.planner.evaluate(self.problem, n, mapping))
        plan.solver_values = {key: self.ops.value(solver, q) for key, q in self.planner.round_trip(self.out).items()}
        return plan


def _scale(planner: Planner, problem, tables: Tables) -> Scale:
    times = [
        v
        for factor in planner.time_reference(problem)
        for j, out in enumerate(factor.outputs)
        if out.reference
        for v in tables.table(factor).values[:, j]
        if v > 0
    ]
    prices = [v for factor in _price_factors(planner, problem, tables) for v in tables.table(factor).values[:, 0]]
    return Scale(min(times) if times else 1e-3, min(prices) if prices else 1.0)


def _price_factors(planner, problem, tables) -> list:
    return [f for f in getattr(planner, "price_factors", lambda p, ctx: ())(problem, tables.ctx)]


def cp_solver(time_limit: float, workers: int, seed: int, settings: SearchSettings = DEFAULT_SETTINGS) -> cp_model.CpSolver:
    """A CP-SAT solver: one presolve pass (measured on the 1,024-GPU ladder, later passes cost 0.4-1.3 s
    and never shortened the search) without probing (measured on the dense ladder: deterministic time
    2.26 s against 3.89 s with CP-SAT's default probing on GPT-3 175B at 1,024 A100, 1.60 against 3.46 s
    at 16,384, 2.24 against 4.37 s on Llama 3 70B at 4,096 H100), the planner's ``settings``, a fixed
    seed, ``workers`` workers."""
    solver = cp_model.CpSolver()
    time_limit = 0.01 if interrupted() else time_limit  # after Ctrl-C a new search only reports what it has
    solver.parameters.max_time_in_seconds = float(max(0.01, time_limit))
    solver.parameters.random_seed = int(seed)
    solver.parameters.num_workers = int(workers)
    solver.parameters.max_presolve_iterations = 1
    solver.parameters.cp_model_presolve = settings.presolve
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.linearization_level = settings.linearization_level
    return solver


def run(solver: cp_model.CpSolver, model: cp_model.CpModel, callback=None) -> str:
    """``solver.solve(model)``'s status name. Ctrl-C during the search stops it at once
    (``_stopping_on_ctrl_c``) and then acts as anywhere else in Python: KeyboardInterrupt, or, inside
    ``deadline.stopping_on_ctrl_c``, the command marked interrupted and the search's findings answered."""
    with _stopping_on_ctrl_c(solver):
        return status_name(solver.solve(model, callback))


@contextlib.contextmanager
def _stopping_on_ctrl_c(solver: cp_model.CpSolver):
    """CP-SAT left to Python's SIGINT handling (``catch_sigint_signal`` off: CP-SAT's own handler would
    answer as if time had run out, indistinguishable from a time-out): a thread woken by the signal
    (``signal.set_wakeup_fd``) stops the search; Python's handler runs when ``solve`` returns. Outside
    the main thread (Ray workers) CP-SAT keeps its own handling."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    solver.parameters.catch_sigint_signal = False
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    done = threading.Event()

    def watch():
        while not done.is_set():
            if select.select([reader], [], [], 0.05)[0] and signal.SIGINT in reader.recv(64):
                solver.stop_search()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()


def status_name(code) -> str:
    if code not in STATUS:
        raise RuntimeError(f"unexpected CP-SAT status {code!r}")  # a bug, not a user error
    return STATUS[code]


def relative_gap(solver: cp_model.CpSolver) -> float:
    """CP-SAT's proven relative gap in its own integer units, (found - bound) / found."""
    found = solver.objective_value
    return max(0.0, (found - solver.best_objective_bound) / found) if found > 0 else 0.0


def hint_point(planner: Planner, problem, space: Space, objective: str) -> dict | None:
    """The best feasible point of the planner's hint slice of the space (numpy), or None."""
    hint_space = planner.hint_space(problem, space)
    if hint_space.size() > HINT_ROWS:
        return None
    rows, _, _, _, _ = best_points(planner, problem, hint_space, objective, 1, label="solve: hint")
    return rows[0] if rows else None


SEARCH_TIME_UP = "the time limit passed before CP-SAT found a plan; raise --time-limit"
SEARCH_INTERRUPTED = "interrupted before CP-SAT found a plan"


def solve_one(planner, problem, objective, top, time_limit, workers, seed, space=None) -> PlanResult:
    start = time.perf_counter()
    deadline = start + (time_limit if time_limit is not None else 60.0)
    space = planner.space(problem) if space is None else space
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size())
    search = Search(planner, problem, space, (objective,))
    target = search.minimised(objective)
    search.model.minimize(target.expr if isinstance(target, IntQ) else target)
    point = hint_point(planner, problem, space, objective)
    if point is not None:
        search.hint(point)
    for rank in range(top):
        solver = cp_solver(deadline - time.perf_counter(), workers, seed, planner.search_settings(problem))
        status = run(solver, search.model, _progress_callback(search, objective, solver, rank))
        if status == "MODEL_INVALID":
            raise RuntimeError(f"invalid CP-SAT model: {search.model.validate()}")  # a bug in a backend
        result.deterministic_time += solver.deterministic_time
        result.workers = solver.parameters.num_workers
        if status not in ("OPTIMAL", "FEASIBLE"):
            if rank == 0:
                result.status = status
                if status == "INFEASIBLE":
                    from .planner import explain_infeasible  # noqa: PLC0415 (the planner module imports this one)

                    result.message = explain_infeasible(planner, problem, space, objective, deadline, workers, seed)
                elif status == "UNKNOWN":
                    result.message = SEARCH_INTERRUPTED if interrupted() else SEARCH_TIME_UP
            break
        plan = search.plan(solver)
        result.plans.append(plan)
        if rank == 0:
            result.status = status
            gap = relative_gap(solver)
            result.objective_value = planner.objective_value(problem, objective, plan.evaluation.metrics)
            result.gap = gap
            result.bound = _bound(planner, problem, objective, plan, gap)
        values = [solver.value(v) for v in search.decisions.values()]
        search.model.add_forbidden_assignments(list(search.decisions.values()), [values])
    result.solve_time_s = time.perf_counter() - start
    return result


class _SolveProgress(cp_model.CpSolverSolutionCallback):
    """Reports each incumbent of a solve (in the objective's own unit, decoded and evaluated by the
    model when a line is due) and each improvement of the bound, through ``progress.current()``."""

    def __init__(self, search: Search, objective: str, solver: cp_model.CpSolver, rank: int):
        super().__init__()
        self.search, self.objective, self.rank = search, objective, rank
        self.stored: dict | None = None  # the incumbent's decisions, decoded only when a line is due
        self.found, self.bound = None, None
        solver.best_bound_callback = self.on_bound

    def on_solution_callback(self) -> None:
        self.found, self.bound = self.objective_value, self.best_objective_bound
        self.stored = self.search.ops.stored(self)
        self.show()

    def on_bound(self, bound: float) -> None:
        self.bound = bound
        self.show()

    def show(self) -> None:
        sink = progress.current()
        if not sink.due():
            return
        rank = f"plan {self.rank + 1}: " if self.rank else ""
        if self.stored is None:
            sink.update(f"solve: {rank}no plan yet")
            return
        planner, problem = self.search.planner, self.search.problem
        n, mapping = planner.decode(problem, self.search.space, self.stored)
        value = planner.objective_value(problem, self.objective, planner.evaluate(problem, n, mapping).metrics)
        gap = max(0.0, (self.found - self.bound) / self.found) if self.found and self.bound is not None else None
        bound = "-" if gap is None else f"{_bound_of(planner, problem, self.objective, value, gap):.4g}"
        sink.update(f"solve: {rank}{self.objective} {value:.4g}  bound {bound}  {progress.gap_text(gap)}")


def _progress_callback(search: Search, objective: str, solver: cp_model.CpSolver, rank: int):
    """A CP-SAT callback reporting progress, or None when nobody listens (no overhead)."""
    if progress.current() is progress.SILENT:
        return None
    return _SolveProgress(search, objective, solver, rank)


def _bound(planner, problem, objective, plan: Plan, gap: float) -> float:
    """The proven bound on the objective in its natural unit, from the relative gap of what CP-SAT
    minimises: a quantity proportional (or, for rates, inversely proportional) to the objective."""
    return _bound_of(planner, problem, objective, planner.objective_value(problem, objective, plan.evaluation.metrics), gap)


NOT_EXPLAINED = (
    "no plan exists (proven), but the time limit passed before the limit that binds was found; raise --time-limit to see which"
)


def explain(planner, problem, space: Space, deadline: float, workers: int, seed: int) -> str:
    """What binds when the problem has no plan (``_explain``), or ``NOT_EXPLAINED`` when ``deadline``
    (or the command's) passes first: the proof stands, the explanation is cut short."""
    messages = []
    outer = at()  # the command's own deadline, where it comes first
    deadline = deadline if outer is None else min(deadline, outer)
    try:
        return _explain(planner, problem, space, deadline, workers, seed, messages)
    except TimeUp:
        if messages:
            return "; ".join(messages) + " (the time limit passed before every limit was checked)"
        return NOT_EXPLAINED


def _check_time(deadline: float) -> None:
    """TimeUp once ``deadline`` has passed or the command was interrupted: nothing new starts."""
    if time.perf_counter() >= deadline or interrupted():
        raise TimeUp


def _explain(planner, problem, space: Space, deadline: float, workers: int, seed: int, messages: list) -> str:
    """Each limit but memory relaxed in turn (memory kept), its quantity minimised; if one cannot be
    met, it binds (its message added to ``messages``). Else memory alone relaxed, the peak minimised;
    else the limits only bind together."""
    _check_time(deadline)
    probe = Search(planner, problem, space, enforce=set(), prune=False)
    for limit in probe.limits:
        if limit.name == "memory":
            continue
        search = Search(planner, problem, space, enforce={"memory"})
        plan, proven = _least(search, limit.name, deadline, workers, seed, planner.search_settings(problem))
        if plan is not None:
            messages.append(planner.binds(problem, limit, plan, proven))
    if messages:
        return "; ".join(messages)
    if any(lim.name == "memory" for lim in probe.limits):
        plan, proven = _least(probe, "memory", deadline, workers, seed, planner.search_settings(problem))
        if plan is not None:
            return planner.binds(problem, next(lim for lim in probe.limits if lim.name == "memory"), plan, proven)
    return planner.together(problem, [lim.name for lim in probe.limits])


def _least(search: Search, name: str, deadline, workers, seed, settings: SearchSettings) -> tuple[Plan | None, bool]:
    """The plan with the least quantity of limit ``name`` in ``search`` and whether that is proven,
    or (None, False) when even the least meets the limit (it does not bind) or none is found."""
    limit = next(lim for lim in search.limits if lim.name == name)
    q = limit.quantity
    search.model.minimize(q.expr if isinstance(q, IntQ) else q)
    _check_time(deadline)
    solver = cp_solver(deadline - time.perf_counter(), workers, seed, settings)
    status = run(solver, search.model)
    if status == "UNKNOWN":  # the time ran out before this limit was settled
        raise TimeUp
    if status not in ("OPTIMAL", "FEASIBLE") or search.ops.value(solver, q) <= limit.bound:
        return None, False
    return search.plan(solver), status == "OPTIMAL"
