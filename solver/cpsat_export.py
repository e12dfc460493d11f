"""``parasol suite export SUITE --format cpsat``: each instance's CP-SAT model written to a file, so
other solvers, and later versions of parasol, can be compared on exactly the instances ``suite run``
solves.

An instance is one CP-SAT model per part: per system compared, then per planner sub-problem
(training's chiplet counts), as ``solve`` and ``pareto`` split it (``planner._per_subproblem``). A
solve's model minimises the objective's integer quantity (``Search.minimised``); a front's model
minimises its first metric and names every metric's integer quantity as a variable ``front_<metric>``,
so a solver can run the epsilon-constraint method over them. Files are CP-SAT's ``CpModelProto``,
binary (``.pb``); ``manifest.json`` lists them with the instance's known optimum in natural units.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from parasol import __version__
from parasol.model.errors import ProblemError

from .cpsat_ops import IntQ
from .cpsat_search import Search
from .fanout import TaskKind
from .planner import planner_for
from .problem import parse_problem
from .results import check_new_file, write_new_file

FORMATS = ("cpsat",)


def model_parts(problem) -> list:
    """[(label, sub-problem)]: the parts ``solve`` plans one CP-SAT model each for (those with no
    plan before any search, a cost limit ruling out every device count, are left out)."""
    planner = planner_for(problem)
    parts = []
    for system in problem.systems:
        for label, sub, _ in planner.subproblems(system):
            if sub is not None:
                name = system.system_name if len(problem.systems) > 1 else ""
                parts.append(("/".join(x for x in (name, label) if x), sub))
    return parts


def _expr(q):
    return q.expr if isinstance(q, IntQ) else q


def instance_models(instance) -> list:
    """[(part label, CpModel, {variable name: what it is}, objective)] of one suite instance."""
    problem = parse_problem(instance.problem, source=instance.source)
    planner = planner_for(problem)
    out = []
    for label, sub in model_parts(problem):
        space = planner.space(sub)
        if instance.kind is TaskKind.PARETO:
            search = Search(planner, sub, space, instance.objectives)
            named, first = {}, None
            for metric in instance.objectives:
                q = search.minimised(planner.front_metric(sub, metric).minimised)
                var = search.model.new_int_var(int(q.lo), int(q.hi), f"front_{metric}")
                search.model.add(var == _expr(q))
                named[var.name] = f"{metric} in CP-SAT's integer units (smaller is better)"
                first = var if first is None else first
            search.model.minimize(first)
            objective = ",".join(instance.objectives)
        else:
            objective = planner.check_objective(sub, instance.objective)
            search = Search(planner, sub, space, (objective,))
            search.model.minimize(_expr(search.minimised(objective)))
            named = {}
        named.update({str(k): f"decision {k}" for k in search.decisions})
        out.append((label, search.model, named, objective))
    return out


def export_suite(suite, instances, out_dir: str, fmt: str = "cpsat") -> list:
    """Write every instance's models and ``manifest.json`` into ``out_dir`` (created; never over a
    file that exists). Returns the files written."""
    if fmt not in FORMATS:
        raise ProblemError(f"{fmt!r} is not a format; allowed: {', '.join(FORMATS)}", field="--format")
    folder = Path(out_dir)
    if folder.exists() and not folder.is_dir():
        raise ProblemError(f"{folder} exists and is not a folder", field="--out")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ProblemError(f"cannot create the folder {folder}: {err.strerror}", field="--out") from None
    manifest_path = folder / "manifest.json"
    check_new_file(str(manifest_path), "--out")  # before any model is written
    manifest = {"suite": suite.name, "version": __version__, "format": "CP-SAT CpModelProto (binary)", "models": []}
    written = []
    for instance in instances:
        for label, model, named, objective in instance_models(instance):
            part = label.replace("/", "--").replace(" ", "-")
            name = instance.name + (f"--{part}" if part else "") + ".pb"
            path = folder / name
            write_new_file(str(path), "--out", lambda tmp, m=model: _export(m, tmp))
            written.append(str(path))
            record = suite.known.get(instance.name, {})
            manifest["models"].append(
                {
                    "file": name,
                    "instance": instance.name,
                    "tier": str(instance.tier),
                    "part": label or None,
                    "kind": str(instance.kind),
                    "objective": objective,
                    "variables": len(model.proto.variables),
                    "constraints": len(model.proto.constraints),
                    "named": named,
                    "known": {k: record[k] for k in ("status", "value", "front", "num_gpus", "system", "mapping") if k in record},
                }
            )
    write_new_file(str(manifest_path), "--out", lambda tmp: Path(tmp).write_text(json.dumps(manifest, indent=1) + "\n"))
    written.append(str(manifest_path))
    return written


def _export(model, path: str) -> None:
    if not model.export_to_file(path):
        raise ProblemError(f"CP-SAT could not write {os.path.basename(path)}", field="--out")
