"""Benchmark suites: problem instances with known, proven optima (problems/suites/).

A suite is two files. ``NAME.yaml``, written by hand: the suite's name and description and its
instances, each a name, a tier (easy, medium, hard: by space size and structure), a problem (inline,
or the path of a problem file) and, for a front, its metrics. ``NAME.known.yaml``, written by
``benchmarks/prove_suites.py``: per instance the proven optimum (objective value and mapping, or the
front), how it was proven (CP-SAT's status, and the enumerator's agreement where the space can be
enumerated), the space size and the parasol version that proved it. docs/suites.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from parasol.model.errors import ProblemError

from .fanout import Task, TaskKind, TaskResult

# the command line's parser imports this module (Tier, suite_names): the library, numpy and YAML are
# imported where a suite is read

SUITE_KEYS = ("suite", "description", "time_limit", "instances")
INSTANCE_KEYS = ("name", "tier", "problem", "objective", "objectives", "time_limit", "note")
DEFAULT_TIME_LIMIT_S = 60.0
REL_TOL = 1e-6  # an objective (or a front's coordinate) equals the record when within this relative difference


class Tier(StrEnum):
    EASY = "easy"  # spaces up to about 10^4 mappings, a few choices free: proven in well under a second
    MEDIUM = "medium"  # most choices free, up to about 10^6 mappings
    HARD = "hard"  # everything free, millions of mappings, MoE grids, many device counts or systems


@dataclass(frozen=True)
class Instance:
    name: str
    tier: Tier
    problem: dict  # the problem file's keys
    source: str  # the file the problem came from
    objective: str | None = None  # a solve: the objective (default: the problem's)
    objectives: tuple = ()  # a front of these metrics
    time_limit: float = DEFAULT_TIME_LIMIT_S
    note: str = ""

    @property
    def kind(self) -> TaskKind:
        return TaskKind.PARETO if self.objectives else TaskKind.SOLVE

    def task(self, time_limit: float | None = None, seed: int = 0) -> Task:
        """The instance as a fan-out task, under ``time_limit`` (default: the instance's own)."""
        limit = self.time_limit if time_limit is None else time_limit
        # CP-SAT, whatever the space: a suite benchmarks the solver, and its records are CP-SAT's proofs
        return Task(self.name, self.problem, self.source, self.objective, self.objectives, limit, seed, method="cpsat")


@dataclass(frozen=True)
class Suite:
    name: str
    description: str
    path: Path
    instances: tuple
    known: dict  # instance name -> its record (NAME.known.yaml), {} when none was proven yet

    @property
    def known_path(self) -> Path:
        return known_path(self.path)

    def select(self, tiers: tuple = ()) -> tuple:
        """The instances of ``tiers`` (all when empty), in the file's order."""
        return tuple(i for i in self.instances if not tiers or i.tier in tiers)


def suites_dir() -> Path:
    from importlib import resources  # noqa: PLC0415

    return Path(str(resources.files("parasol.data"))) / "suites"  # library.library_root(), without the library


def suite_names() -> list[str]:
    return sorted(p.stem for p in suites_dir().glob("*.yaml") if not p.name.endswith(".known.yaml"))


def known_path(path: Path) -> Path:
    return path.with_name(path.stem + ".known.yaml")


def suite_path(name_or_path: str) -> Path:
    """A suite of the library by name, or a suite file by path; ProblemError naming the suites otherwise."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise ProblemError("suite file not found", source=str(path))
        return path
    path = suites_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ProblemError(f"unknown suite {name_or_path!r}; allowed: {', '.join(suite_names())}", field="SUITE")
    return path


def load_suite(name_or_path: str) -> Suite:
    """The suite and its records, every instance checked (its problem parsed) before anything runs."""
    from parasol.model import checks  # noqa: PLC0415

    from .library import read_yaml  # noqa: PLC0415

    path = suite_path(name_or_path)
    src = str(path)
    data = read_yaml(path, "suite file")
    checks.keys(data, SUITE_KEYS, ("suite", "instances"), src, "")
    default_limit = checks.positive_number(data.get("time_limit", DEFAULT_TIME_LIMIT_S), "time_limit", src, "number of seconds")
    items = checks.nonempty_list(data["instances"], "instances", src)
    instances, seen = [], set()
    for i, item in enumerate(items):
        instance = _instance(item, f"instances[{i}]", path, default_limit)
        if instance.name in seen:
            raise ProblemError(f"a second instance named {instance.name!r}", source=src, field=f"instances[{i}].name")
        seen.add(instance.name)
        instances.append(instance)
    name = data["suite"]
    if not _is_name(name):
        raise ProblemError(f"must be a name of letters, digits, '-', '_' and '.', got {name!r}", source=src, field="suite")
    known = _known(known_path(path), seen)
    return Suite(name, str(data.get("description", "")), path, tuple(instances), known)


def _is_name(name) -> bool:
    return isinstance(name, str) and bool(name) and all(c.isalnum() or c in "-_." for c in name) and name[0] != "."


def _instance(item, field: str, path: Path, default_limit: float) -> Instance:
    from parasol.model import checks  # noqa: PLC0415

    from .library import read_yaml  # noqa: PLC0415

    src = str(path)
    checks.mapping(item, field, src)
    checks.keys(item, INSTANCE_KEYS, ("name", "tier", "problem"), src, f"{field}.")
    name = item["name"]
    if not _is_name(name):
        raise ProblemError(
            f"must be a name of letters, digits, '-', '_' and '.', got {name!r}", source=src, field=f"{field}.name"
        )
    tier = checks.choice(item["tier"], Tier, f"{field}.tier", src)
    problem, source = item["problem"], src
    if isinstance(problem, str):  # a problem file's path, read from the suite's folder
        problem_path = path.parent / problem
        problem, source = read_yaml(problem_path, "problem file"), str(problem_path)
    checks.mapping(problem, f"{field}.problem", src)
    objectives = ()
    if "objectives" in item:
        raw = item["objectives"]
        if not isinstance(raw, list) or len(raw) not in (2, 3) or not all(isinstance(x, str) for x in raw):
            raise ProblemError(
                f"must be a list of two or three metric names, got {raw!r}", source=src, field=f"{field}.objectives"
            )
        objectives = tuple(raw)
    objective = item.get("objective")
    if objective is not None and objectives:
        raise ProblemError("give objective (a solve) or objectives (a front), not both", source=src, field=f"{field}.objective")
    limit = checks.positive_number(item.get("time_limit", default_limit), f"{field}.time_limit", src, "number of seconds")
    instance = Instance(name, tier, problem, source, objective, objectives, limit, str(item.get("note", "")))
    _check_problem(instance, field, src)
    return instance


def _check_problem(instance: Instance, field: str, suite_src: str) -> None:
    """Parse the instance's problem (and its metrics) now: a mistake is one line naming the instance."""
    from .pareto import check_metrics  # noqa: PLC0415 (the planner's imports, after the file is read)
    from .planner import planner_for  # noqa: PLC0415
    from .problem import parse_problem  # noqa: PLC0415

    try:
        problem = parse_problem(instance.problem, source=instance.source)
        planner = planner_for(problem)
        if instance.objectives:
            check_metrics(planner, problem, instance.objectives)
        else:
            planner.check_objective(problem, instance.objective)
    except ProblemError as exc:
        inner = (exc.field or "").lstrip("-")  # the planner names its CLI option: --objective(s)
        where = f"{field} ({instance.name})" + (f": {inner}" if inner else "")
        # objective(s) are the suite's own keys; the problem's mistakes are in its file
        source = suite_src if inner in ("objective", "objectives") else (exc.source or instance.source)
        raise ProblemError(exc.message, source=source, field=where) from None


def _known(path: Path, names: set) -> dict:
    from parasol.model import checks  # noqa: PLC0415

    from .library import read_yaml  # noqa: PLC0415

    if not path.is_file():
        return {}
    data = read_yaml(path, "suite records")
    records = checks.mapping(data.get("instances", {}), "instances", str(path))
    stray = sorted(set(records) - names)
    if stray:
        raise ProblemError(f"a record for {stray[0]!r}, which the suite does not have", source=str(path), field="instances")
    for name, record in records.items():
        _check_record(record, str(path), f"instances.{name}")
    return records


def _check_record(record, src: str, field: str) -> None:
    """A record as prove_suites writes it: a mapping with a status and a numeric value, or a front of
    lists of numbers."""
    from parasol.model import checks  # noqa: PLC0415

    checks.mapping(record, field, src)
    if not isinstance(record.get("status"), str):
        raise ProblemError("must name the status the optimum was proven with", source=src, field=f"{field}.status")
    if "front" in record:
        front = record["front"]
        if not isinstance(front, list) or not all(
            isinstance(p, list) and p and all(checks.as_float(x) is not None for x in p) for p in front
        ):
            raise ProblemError("must be a list of points, each a list of numbers", source=src, field=f"{field}.front")
    elif checks.as_float(record.get("value")) is None or isinstance(record.get("value"), str):
        raise ProblemError(f"must be a number, got {record.get('value')!r}", source=src, field=f"{field}.value")


# ---------------------------------------------------------------- a run against the records


def close(a, b, rel: float = REL_TOL) -> bool:
    return a is not None and b is not None and math.isclose(float(a), float(b), rel_tol=rel, abs_tol=1e-12)


def reproduces(result: TaskResult, record: dict | None) -> bool:
    """Whether ``result`` reproduces the recorded optimum: proven (OPTIMAL, a COMPLETE front) and equal
    (the objective, or every point of the front, within ``REL_TOL``)."""
    if not record:
        return False
    if result.kind == TaskKind.PARETO:
        front = sorted(map(tuple, result.front))
        recorded = sorted(map(tuple, record.get("front", [])))
        return (
            result.status == "COMPLETE"
            and len(front) == len(recorded)
            and all(close(x, y) for p, q in zip(front, recorded) for x, y in zip(p, q))
        )
    return result.status == "OPTIMAL" and close(result.value, record.get("value"))


def record_of(result: TaskResult, proof: dict) -> dict:
    """A record for NAME.known.yaml from a proving run (``benchmarks/prove_suites.py``)."""
    record = {"status": result.status, "objective": result.objective}
    if result.kind == TaskKind.PARETO:
        record["front"] = [[float(x) for x in p] for p in result.front]
    else:
        record["value"] = float(result.value)
    record.update(
        {
            "num_gpus": result.num_gpus,
            "system": result.system,
            "mapping": result.mapping,
            "proof": proof,
            "space_size": int(result.space_size),
            "version": result.version,
        }
    )
    return record
