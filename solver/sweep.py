"""Design-space sweeps (``parasol sweep SPEC.yaml``): the Cartesian product of lists of models,
systems, GPU counts, chiplet counts, precisions, workloads and objectives over a base problem, each
point solved, the results one table.

A spec file::

    base: ../examples/llama3-70b-megatron.yaml   # a problem file's path (from the spec's folder), or its keys inline
    sweep:                                       # axis -> the values it takes; the points are every combination
      model: [llama3-8b, llama3-70b]             # replaces model (a name, a path or a mapping)
      system: [dgx-h100, hgx-h200, dgx-b200]     # replaces system.name (a mapping: merged into system)
      num_gpus: [64, 128, 256, 512]              # replaces system.num_gpus
      chiplets: [1, 2]                           # replaces system.chiplets
      precision: [bf16, fp8]                     # replaces workload.precision
      workload: [{seq_len: 4096}, {seq_len: 8192}]   # each merged into workload
      objective: [throughput, cost]              # replaces objective
    time_limit: 60                               # seconds per point (--time-limit overrides)

A point whose problem is refused (fp8 on an A100, say) is a row with status INVALID and the reason;
a spec whose every point is refused is an error. docs/suites.md.
"""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import pandas as pd

from parasol.model import checks
from parasol.model.errors import ProblemError

from .fanout import INVALID, Task, TaskResult
from .library import read_yaml
from .report import text_table

SPEC_KEYS = ("base", "sweep", "time_limit", "seed")
DEFAULT_TIME_LIMIT_S = 60.0
MAX_SEED = 2**31 - 1
MAX_POINTS = 100_000  # a spec's product beyond this is refused (a typo in a range, not a sweep)


class Axis(StrEnum):
    """What a sweep varies, each placed into the base problem by ``place``."""

    MODEL = "model"
    SYSTEM = "system"
    NUM_GPUS = "num_gpus"
    CHIPLETS = "chiplets"
    PRECISION = "precision"
    WORKLOAD = "workload"
    OBJECTIVE = "objective"


def place(data: dict, axis: Axis, value) -> None:
    """Put ``value`` of ``axis`` into the problem ``data`` (its keys, changed in place)."""
    if axis is Axis.MODEL:
        data["model"] = value
    elif axis is Axis.OBJECTIVE:
        data["objective"] = value
    elif axis in (Axis.SYSTEM, Axis.NUM_GPUS, Axis.CHIPLETS):
        system = data.setdefault("system", {})
        if not isinstance(system, dict):  # the base's own mistake: parse_problem names it
            return
        if axis is Axis.SYSTEM:
            system.update(value if isinstance(value, dict) else {"name": value})
        else:
            system[str(axis)] = value
    else:
        workload = data.setdefault("workload", {})
        if isinstance(workload, dict):
            workload.update(value if axis is Axis.WORKLOAD else {"precision": value})


def label(value):
    """A point's value on an axis as a table cell: a name, a number, or a mapping's keys=values."""
    if isinstance(value, dict):
        if "name" in value and len(value) == 1:
            return str(value["name"])
        return ",".join(f"{k}={label(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + ",".join(map(str, map(label, value))) + "]"
    return value if isinstance(value, (int, float, str)) else str(value)


@dataclass(frozen=True)
class Point:
    name: str  # p1, p2, ... in the product's order
    values: dict  # axis name -> the value's label
    task: Task


@dataclass(frozen=True)
class Sweep:
    path: Path
    axes: tuple  # Axis, in the spec's order
    points: tuple  # Point


def load_sweep(path: str, time_limit: float | None = None, seed: int | None = None) -> Sweep:
    """The spec's points, each a task on its own problem (not yet checked: ``check_points``)."""
    src = str(path)
    data = read_yaml(path, "sweep spec")
    checks.keys(data, SPEC_KEYS, ("base", "sweep"), src, "")
    base, source = data["base"], src
    if isinstance(base, str):
        base_path = Path(path).parent / base
        base, source = read_yaml(base_path, "problem file"), str(base_path)
    checks.mapping(base, "base", src)
    sweep = checks.mapping(data["sweep"], "sweep", src)
    if not sweep:
        raise ProblemError(f"must name at least one axis; allowed: {', '.join(Axis)}", source=src, field="sweep")
    axes, lists = [], []
    for key, values in sweep.items():
        axes.append(checks.choice(key, Axis, f"sweep.{key}", src))
        lists.append(checks.nonempty_list(values, f"sweep.{key}", src))
        if axes[-1] is Axis.WORKLOAD:  # each merged into the base's workload
            for j, value in enumerate(values):
                checks.mapping(value, f"sweep.workload[{j}]", src)
        # a value twice would solve the same point twice under two names
        repeat = checks.first_repeat(json.dumps(value, sort_keys=True, default=str) for value in values)
        if repeat is not None:
            first, again = repeat
            raise ProblemError(
                f"value {again} repeats value {first} ({label(values[again])}); list each once", source=src, field=f"sweep.{key}"
            )
    size = 1
    for values in lists:
        size *= len(values)
    if size > MAX_POINTS:
        raise ProblemError(f"the product has {size:,} points; at most {MAX_POINTS:,}", source=src, field="sweep")
    # the spec's own values are checked even where the command line overrides them: a bad file is refused alike
    spec_limit = checks.positive_number(data.get("time_limit", DEFAULT_TIME_LIMIT_S), "time_limit", src, "number of seconds")
    limit = time_limit or spec_limit
    spec_seed = checks.non_negative_int(data.get("seed", 0), "seed", src)
    if spec_seed > MAX_SEED:
        raise ProblemError(f"must be at most {MAX_SEED} (CP-SAT's seed is an int32), got {spec_seed}", source=src, field="seed")
    seed = spec_seed if seed is None else seed
    points = []
    for index, combination in enumerate(itertools.product(*lists), start=1):
        problem = copy.deepcopy(base)
        for axis, value in zip(axes, combination):
            place(problem, axis, copy.deepcopy(value))
        name = f"p{index}"
        values = {str(axis): label(value) for axis, value in zip(axes, combination)}
        points.append(Point(name, values, Task(name, problem, source, None, (), limit, seed)))
    return Sweep(Path(path), tuple(axes), tuple(points))


def check_points(sweep: Sweep) -> dict:
    """{point name: the one-line reason} for the points whose problem is refused; ProblemError (the
    first point's) when every point is."""
    from .problem import parse_problem  # noqa: PLC0415 (after the spec is read)

    refused, first = {}, None
    for point in sweep.points:
        try:
            parse_problem(point.task.problem, source=point.task.source)
        except ProblemError as exc:
            refused[point.name] = str(exc)
            first = first or exc
    if first is not None and len(refused) == len(sweep.points):
        raise ProblemError(f"every point is refused; the first: {first}", source=str(sweep.path), field="sweep")
    return refused


def sweep_frame(sweep: Sweep, results: dict) -> pd.DataFrame:
    """One row per point: its axes' values, what the solve found, the best plan's mapping and metrics."""
    rows = []
    for point in sweep.points:
        result: TaskResult = results[point.name]
        row = {"point": point.name, **point.values}
        row.update(
            {
                "status": result.status,
                "objective": row.get("objective", result.objective),  # an objective axis keeps its value
                "value": result.value,
                "bound": result.bound,
                "gap": result.gap,
                "wall_s": result.wall_s,
                "deterministic_time": result.deterministic_time,
                "space_size": result.space_size,
                "message": result.message,
            }
        )
        for key, value in result.plan.items():
            if key in point.values and point.values[key] != value:  # the plan's choice within the axis value
                row[f"chosen_{key}"] = value
            else:
                row.setdefault(key, value)
        if result.plan:
            row.update(accuracy_columns(point, result.system, result.plan.get("chiplets")))
        rows.append(row)
    return pd.DataFrame(rows)


def accuracy_columns(point: Point, system: str | None, chiplets) -> dict:
    """The out-of-sample error of a planned point's headline figure (``accuracy_bands.headline_band``) on the
    system and chiplet count its plan chose: its runs, mean absolute and mean signed error; no runs (and no errors)
    where none measures the point's regime."""
    from .accuracy_bands import headline_band  # noqa: PLC0415
    from .problem import parse_problem  # noqa: PLC0415

    problem = parse_problem(point.task.problem, source=point.task.source).for_system(system)
    band = headline_band(problem, chiplets=None if chiplets is None or pd.isna(chiplets) else int(chiplets))
    if band is None:
        return {"oos_runs": 0, "oos_mean_abs_error": None, "oos_mean_error": None}
    return {"oos_runs": band.runs, "oos_mean_abs_error": band.mean_abs_error, "oos_mean_error": band.mean_error}


def invalid_result(name: str, message: str) -> TaskResult:
    return TaskResult(name, "solve", INVALID, message=message)


SHOWN = ("num_gpus", "tp", "pp", "dp", "cp", "ep", "micro_batch", "batch")


def sweep_table(sweep: Sweep, frame: pd.DataFrame) -> str:
    axes = [str(a) for a in sweep.axes]
    head = ["point", *axes, "status", *([] if "objective" in axes else ["objective"]), "value", "plan", "tokens/s", "wall s"]
    rows = []
    for r in frame.to_dict("records"):
        plan = " ".join(f"{k} {_cell(r[k])}" for k in SHOWN if k in r and k not in axes and not _missing(r[k]))
        value = "-" if _missing(r["value"]) else f"{r['value']:.6g}"
        tokens = "-" if _missing(r.get("tokens_per_s")) else f"{r['tokens_per_s']:,.0f}"
        status = r["status"] if r["status"] != INVALID else f"{INVALID}: {r['message']}"
        objective = [] if "objective" in axes else [r["objective"]]
        rows.append([r["point"], *[str(r[a]) for a in axes], status, *objective, value, plan, tokens, f"{r['wall_s']:.2f}"])
    return text_table(head, rows, markdown=False)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and pd.isna(value))


def _cell(value) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
