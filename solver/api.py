"""parasol's Python API, one interface for training and serving (re-exported by ``import parasol``).

Every function takes a problem as a ``Problem`` (``load``), a path to a problem file, or a dict with
the file's keys; the workload's ``kind`` decides whether it is planned as training or serving. The
results are the CLI's: ``Plan`` (``evaluate``), ``PlanResult`` (``solve``, ``enumerate``) and
``ParetoResult`` (``pareto``), each with ``to_frame()`` for a pandas DataFrame; ``accuracy`` gives the
out-of-sample error that the CLI reports with every plan. Mistakes raise
``ProblemError`` with the file (or "<dict>"), the field and what is allowed. docs/api.md.
"""

from __future__ import annotations

from pathlib import Path

from parasol.model.errors import ProblemError

from . import accuracy_bands
from . import planner as _planner
from .pareto import ParetoResult, pareto_front
from .planner import Plan, PlanResult, planner_for
from .problem import Problem, load_problem, parse_problem

DICT_SOURCE = "<dict>"


def load(problem: Problem | str | Path | dict) -> Problem:
    """A problem from a file path, a dict with a problem file's keys, or a Problem (returned as is)."""
    if isinstance(problem, Problem):
        return problem
    if isinstance(problem, dict):
        return parse_problem(problem, source=DICT_SOURCE)
    if isinstance(problem, str | Path):
        return load_problem(problem)
    raise ProblemError(f"expected a path, a dict or a Problem, got {type(problem).__name__}", source=DICT_SOURCE)


def evaluate(problem: Problem | str | Path | dict) -> Plan:
    """The model's figures for the one plan the problem fixes (every mapping key a scalar, as
    ``parasol evaluate``): a Plan with ``num_gpus``, ``mapping``, ``metrics`` and ``evaluation``."""
    problem = load(problem)
    planner = planner_for(problem)
    num_gpus, mapping = planner.fixed_plan(problem)
    return Plan(num_gpus, mapping, planner.evaluate(problem, num_gpus, mapping))


def accuracy(problem: Problem | str | Path | dict, system: str | None = None) -> dict:
    """How far the problem's figures can be trusted: the model's error on the published runs of its regime (the
    task, a dense or MoE model, the device's architecture) that no number of it was fitted to, as the CLI's
    ``"accuracy"`` (``regime``, ``out_of_sample`` rows; a ``note`` where no run measures the regime). A problem
    comparing several systems needs ``system``, one of their names (``load(problem).systems``)."""
    problem = load(problem)
    if system is not None or problem.alternatives:
        names = [p.system_name for p in problem.systems]
        if system not in names:
            raise ProblemError(f"accuracy needs system, one of {names}; got {system!r}", source=problem.source, field="system")
        problem = problem.for_system(system)
    return accuracy_bands.plan_accuracy(problem)


def solve(
    problem: Problem | str | Path | dict,
    objective: str | None = None,
    top: int = 1,
    time_limit: float = 60.0,
    workers: int = 1,
    seed: int = 0,
    method: str = "auto",
) -> PlanResult:
    """The best plan (or the ``top`` best) with its status, bound and gap (``parasol solve``): by CP-SAT, by
    bounding blocks of the space and enumerating the rest, or by enumeration where the space is small
    enough (``method``: auto, cpsat, bound, enumerate)."""
    return _planner.solve(
        load(problem), objective=objective, top=top, time_limit=time_limit, workers=workers, seed=seed, method=method
    )


def enumerate(  # noqa: A001 (the public name the CLI uses: parasol enumerate)
    problem: Problem | str | Path | dict,
    objective: str | None = None,
    top: int = 1,
    time_limit: float | None = None,
    keep_all: bool = False,
) -> PlanResult:
    """Every plan of the same space through the model (``parasol enumerate``); ``keep_all``: the
    result's ``to_frame()`` holds every point, feasible or not, with its metrics."""
    return _planner.enumerate_space(load(problem), objective=objective, top=top, time_limit=time_limit, keep_all=keep_all)


def pareto(
    problem: Problem | str | Path | dict,
    objectives: tuple | list | str,
    time_limit: float = 120.0,
    workers: int = 1,
    seed: int = 0,
    method: str = "auto",
) -> ParetoResult:
    """The exact Pareto front of two or three metrics (``parasol pareto``); ``objectives`` as a
    sequence of names or one comma-separated string; ``method`` as ``solve``'s."""
    if isinstance(objectives, str):
        objectives = tuple(x.strip() for x in objectives.split(","))
    return pareto_front(load(problem), tuple(objectives), time_limit, workers, seed, method=method)


__all__ = ["Plan", "PlanResult", "ParetoResult", "Problem", "ProblemError", "load", "evaluate", "solve", "enumerate", "pareto"]
