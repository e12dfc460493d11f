"""Many independent plans at once — a suite's instances, a sweep's points — on this machine (a pool
of processes) or over a Ray cluster.

A ``Task`` is plain data: a problem as its file's keys, the file it came from (relative paths in it
are read from that folder, errors name it), what to plan and for how long. ``run_task`` plans it with
one CP-SAT worker and a fixed seed, so its answer (status, objective, bound, gap, mapping, front and
CP-SAT's deterministic time) is the same on every engine and machine; only the wall time is not.
``run_tasks`` runs a list of them on an ``Engine`` and returns their ``TaskResult``s in the list's
order. docs/suites.md.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from enum import StrEnum

from parasol import __version__
from parasol.model.errors import ProblemError


class Engine(StrEnum):
    """Where the tasks run: ``local`` a pool of ``--workers`` processes on this machine (one: in this
    process); ``ray`` Ray tasks on the cluster at ``--address`` (none: a Ray instance started here)."""

    LOCAL = "local"
    RAY = "ray"


class TaskKind(StrEnum):
    SOLVE = "solve"  # the best plan (CP-SAT), as `parasol solve`
    PARETO = "pareto"  # the exact front of two or three metrics, as `parasol pareto`


INVALID = "INVALID"  # a task whose problem is refused (the ProblemError's line is its message)


@dataclass(frozen=True)
class Task:
    name: str
    problem: dict  # the problem file's keys
    source: str  # the file the problem came from (an existing path: relative paths are read from its folder)
    objective: str | None = None  # a solve: overrides the problem's objective
    objectives: tuple = ()  # a front of these metrics instead of a solve
    time_limit: float = 60.0  # seconds, the planner's whole search
    seed: int = 0
    method: str = "auto"  # SolveMethod of a solve or front: a suite's instances are CP-SAT's (cpsat), a sweep's points auto

    @property
    def kind(self) -> TaskKind:
        return TaskKind.PARETO if self.objectives else TaskKind.SOLVE


@dataclass
class TaskResult:
    """What one task found. ``value`` the objective in its own unit (solve); ``front`` the front's
    points as lists of the metrics' values in ``objectives`` order (pareto); ``plan`` the best plan's
    (a front's first point's) mapping and scalar metrics, as a table row."""

    name: str
    kind: str
    status: str
    objective: str = ""
    value: float | None = None
    bound: float | None = None
    gap: float | None = None
    wall_s: float = 0.0
    deterministic_time: float = 0.0
    space_size: int = 0
    num_gpus: int | None = None
    system: str | None = None
    mapping: dict = field(default_factory=dict)
    front: list = field(default_factory=list)
    message: str = ""
    version: str = __version__
    plan: dict = field(default_factory=dict)


def run_task(task: Task) -> TaskResult:
    """Plan one task in this process: a solve or a front, one CP-SAT worker, the task's seed."""
    from .pareto import pareto_front  # noqa: PLC0415 (the planner's imports: only where tasks run)
    from .planner import planner_for, solve  # noqa: PLC0415
    from .problem import parse_problem  # noqa: PLC0415
    from .report import mapping_dict  # noqa: PLC0415
    from .results import plans_frame  # noqa: PLC0415

    start = time.perf_counter()
    try:
        problem = parse_problem(task.problem, source=task.source)
        if task.kind is TaskKind.PARETO:
            result = pareto_front(problem, task.objectives, task.time_limit, 1, task.seed, method=task.method)
        else:
            result = solve(
                problem, objective=task.objective, time_limit=task.time_limit, workers=1, seed=task.seed, method=task.method
            )
    except ProblemError as exc:
        return TaskResult(task.name, str(task.kind), INVALID, message=str(exc))
    wall = time.perf_counter() - start
    out = TaskResult(
        task.name,
        str(task.kind),
        result.status,
        wall_s=wall,
        deterministic_time=result.deterministic_time,
        space_size=result.space_size,
        message=result.message or "",
    )
    if task.kind is TaskKind.PARETO:
        planner = planner_for(problem)
        metrics = [planner.front_metric(problem, name).metric for name in task.objectives]
        out.objective = ",".join(task.objectives)
        out.front = [[float(p.evaluation.metrics[m]) for m in metrics] for p in result.plans]
        out.gap = result.gap
    else:
        out.objective, out.value, out.bound, out.gap = result.objective, result.objective_value, result.bound, result.gap
    if result.plans:
        best = result.plans[0]
        out.num_gpus, out.system = best.num_gpus, best.system_name or problem.system_name
        out.mapping = {k: v for k, v in mapping_dict(best.mapping, best.num_gpus).items() if k != "num_gpus"}
        out.plan = {k: _plain(v) for k, v in plans_frame([best]).iloc[0].to_dict().items()}
    return out


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def run_tasks(tasks: list, engine: Engine, workers: int | None = None, address: str | None = None, on_done=None) -> list:
    """Every task's result, in the order of ``tasks``: on ``engine`` with at most ``workers`` tasks at
    once (local: processes, default 1, which runs them in this process; ray: tasks in flight, default
    all the cluster's CPUs). ``on_done(result, finished, total)`` is called as each one ends."""
    if engine is Engine.RAY:
        return _ray_results(tasks, workers, address, on_done)
    if address:
        raise ProblemError("--address names a Ray cluster; it needs --engine ray", field="--address")
    return _local_results(tasks, workers or 1, on_done)


def _report(on_done, result, finished, total) -> None:
    if on_done is not None:
        on_done(result, finished, total)


def _local_results(tasks: list, workers: int, on_done) -> list:
    results: list = [None] * len(tasks)
    if workers <= 1 or len(tasks) <= 1:
        for i, task in enumerate(tasks):
            results[i] = run_task(task)
            _report(on_done, results[i], i + 1, len(tasks))
        return results
    # spawned, not forked: OR-Tools' threads and Ray's do not survive a fork
    import concurrent.futures  # noqa: PLC0415 (lazy: the command line imports this module for its enums)
    import multiprocessing  # noqa: PLC0415

    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=context) as pool:
        futures = {pool.submit(run_task, task): i for i, task in enumerate(tasks)}
        for finished, future in enumerate(concurrent.futures.as_completed(futures), start=1):
            results[futures[future]] = future.result()
            _report(on_done, results[futures[future]], finished, len(tasks))
    return results


RAY_MISSING = "--engine ray needs Ray: pip install -e '.[ray]' (or pip install 'ray>=2.9')"


def _ray_results(tasks: list, workers: int | None, address: str | None, on_done) -> list:
    try:
        import ray  # noqa: PLC0415 (optional: the ray extra)
    except ImportError:
        raise ProblemError(RAY_MISSING, field="--engine") from None
    if not ray.is_initialized():  # joined once per process; Ray shuts it down when the process ends
        _ray_start(ray, address, workers)
    remote = ray.remote(num_cpus=1, max_retries=0)(run_task)
    limit = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
    results: list = [None] * len(tasks)
    pending, waiting, finished = {}, list(enumerate(tasks)), 0
    while waiting or pending:
        while waiting and len(pending) < limit:
            i, task = waiting.pop(0)
            pending[remote.remote(task)] = i
        done, _ = ray.wait(list(pending), num_returns=1)
        for ref in done:
            i = pending.pop(ref)
            results[i] = ray.get(ref)
            finished += 1
            _report(on_done, results[i], finished, len(tasks))
    stale = sorted({r.version for r in results} - {__version__})
    if stale:
        raise ProblemError(
            f"the Ray workers run parasol {', '.join(stale)}, this is {__version__}; install the same version on every node",
            field="--address",
        )
    return results


def _ray_start(ray, address: str | None, workers: int | None) -> None:
    """Join the cluster at ``address``, or start a one-node Ray instance on this machine."""
    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    try:
        if address:
            ray.init(address=address, **quiet)
        else:
            # one node on this machine (Ray on Linux binds it to the machine's own address even when
            # asked for 127.0.0.1: ray/_private/services.py resolve_ip_for_localhost, Ray 2.60)
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProblemError(f"cannot reach {where}: {first}", field="--address" if address else "--engine") from None
