"""A suite run's table, its summary and its performance profile (``parasol suite run``).

The summary follows the conventions of solver benchmarks (Achterberg, "Constraint Integer
Programming", 2007, Sec. A.3; MIPLIB 2017): instances solved (proven OPTIMAL, or a COMPLETE front),
the mean gap (100 % for an instance without a plan), and the shifted geometric mean of the wall
time, exp(mean ln(t + s)) - s with the shift s = 1 s, an unsolved instance counted at its time
limit. The performance profile is Dolan and Moré's ("Benchmarking optimization software with
performance profiles", Math. Program. 91, 2002): for each run, the share of instances it solved
within a factor tau of the fastest run on that instance; with one run alone, the share solved within
t seconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from parasol.model.errors import ProblemError

from . import read_files
from .fanout import TaskKind
from .report import text_table
from .results import table_suffix, write_new_file
from .suites import reproduces

SHIFT_S = 1.0  # the shifted geometric mean's shift
PROVEN = ("OPTIMAL", "COMPLETE")


def results_frame(suite, instances, results, engine: str, time_limit: float | None) -> pd.DataFrame:
    """One row per instance: what the run found, the record it is held to and whether it reproduces it."""
    rows = []
    for instance, result in zip(instances, results):
        record = suite.known.get(instance.name)
        row = asdict(result)
        plan = row.pop("plan")
        row.update(
            {
                "suite": suite.name,
                "instance": instance.name,
                "tier": str(instance.tier),
                "time_limit_s": instance.time_limit if time_limit is None else time_limit,
                "known": _known_text(record),
                "reproduces": reproduces(result, record),
                "engine": engine,
                "mapping": json.dumps(row["mapping"], sort_keys=True),
                "front": json.dumps(row["front"]),
                "tokens_per_s": plan.get("tokens_per_s"),
            }
        )
        del row["name"]
        rows.append(row)
    first = ["suite", "instance", "tier", "kind", "objective", "status", "value", "bound", "gap", "wall_s", "deterministic_time"]
    frame = pd.DataFrame(rows)
    return frame[first + [c for c in frame.columns if c not in first]]


def _known_text(record: dict | None) -> str:
    if not record:
        return "none"
    if "front" in record:
        return f"{len(record['front'])} points"
    return f"{record['value']:.10g}"


@dataclass(frozen=True)
class Summary:
    instances: int
    solved: int  # proven OPTIMAL / COMPLETE
    reproduced: int  # equal to the record
    mean_gap: float  # a share
    sgm_wall_s: float  # shifted geometric mean (SHIFT_S), unsolved at the time limit
    sgm_deterministic: float
    total_wall_s: float


def summary(frame: pd.DataFrame) -> Summary:
    solved = frame["status"].isin(PROVEN)
    gaps = [0.0 if s else (1.0 if g is None or pd.isna(g) else float(g)) for s, g in zip(solved, frame["gap"])]
    walls = [w if s else max(w, limit) for s, w, limit in zip(solved, frame["wall_s"], frame["time_limit_s"])]
    return Summary(
        instances=len(frame),
        solved=int(solved.sum()),
        reproduced=int(frame["reproduces"].sum()),
        mean_gap=sum(gaps) / len(gaps) if gaps else 0.0,
        sgm_wall_s=shifted_geometric_mean(walls),
        sgm_deterministic=shifted_geometric_mean(list(frame["deterministic_time"])),
        total_wall_s=float(frame["wall_s"].sum()),
    )


def shifted_geometric_mean(values: list, shift: float = SHIFT_S) -> float:
    """exp(mean(ln(v + shift))) - shift; 0 for no values."""
    if not values:
        return 0.0
    return math.exp(sum(math.log(max(0.0, float(v)) + shift) for v in values) / len(values)) - shift


def summary_line(s: Summary) -> str:
    return (
        f"summary: {s.solved}/{s.instances} solved (proven), {s.reproduced}/{s.instances} reproduce their known optima, "
        f"mean gap {100 * s.mean_gap:.3f} %, shifted geometric mean time {s.sgm_wall_s:.3f} s "
        f"(shift {SHIFT_S:g} s; deterministic {s.sgm_deterministic:.3f}), wall {s.total_wall_s:.1f} s in all"
    )


def run_table(frame: pd.DataFrame) -> str:
    head = ["instance", "tier", "kind", "status", "objective", "value", "bound", "gap %", "wall s", "det. time", "known", "same"]
    rows = []
    for r in frame.to_dict("records"):
        value = f"{len(json.loads(r['front']))} points" if r["kind"] == TaskKind.PARETO else _num(r["value"])
        gap = "-" if r["gap"] is None or pd.isna(r["gap"]) else f"{100 * r['gap']:.3f}"
        rows.append(
            [
                r["instance"],
                r["tier"],
                r["kind"],
                r["status"],
                r["objective"],
                value,
                "-" if r["kind"] == TaskKind.PARETO else _num(r["bound"]),
                gap,
                f"{r['wall_s']:.2f}",
                f"{r['deterministic_time']:.2f}",
                r["known"],
                "yes" if r["reproduces"] else "NO",
            ]
        )
    return text_table(head, rows, markdown=False)


def _num(value) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.6g}"


def read_results(path: str) -> pd.DataFrame:
    """A table an earlier ``suite run --out`` wrote (.csv, .parquet or .json)."""
    suffix = table_suffix(path, "--compare", "read")
    if not Path(path).is_file():
        raise ProblemError("results file not found", source=path, field="--compare")
    try:
        frame = {".csv": pd.read_csv, ".parquet": pd.read_parquet, ".json": pd.read_json}[suffix](path)
        read_files.note(path)
    except (ValueError, OSError) as exc:
        raise ProblemError(f"cannot read it as a results table: {exc}", source=path, field="--compare") from None
    missing = [c for c in ("instance", "status", "wall_s") if c not in frame.columns]
    if missing:
        raise ProblemError(f"not a suite run's table: no column {missing[0]!r}", source=path, field="--compare")
    wall = pd.to_numeric(frame["wall_s"], errors="coerce")
    if wall.isna().any() or (wall < 0).any():
        raise ProblemError("column 'wall_s' must hold seconds (numbers >= 0) in every row", source=path, field="--compare")
    if not frame["instance"].map(lambda v: isinstance(v, str) and bool(v)).all():
        raise ProblemError("column 'instance' must name an instance in every row", source=path, field="--compare")
    return frame.assign(wall_s=wall, status=frame["status"].astype(str))


def profile_curves(runs: dict) -> tuple[str, dict]:
    """(x axis, {run label: (xs, shares)}): each run's step curve. One run: the share of the instances
    solved within t seconds; several: Dolan and Moré's share solved within tau times the fastest."""
    instances = sorted(set().union(*(set(f["instance"]) for f in runs.values())))
    times = {
        label: {r["instance"]: float(r["wall_s"]) for r in f.to_dict("records") if r["status"] in PROVEN}
        for label, f in runs.items()
    }
    if len(runs) == 1:
        xs_of = times
        axis = "wall time t (s)"
    else:
        best = {i: min((t[i] for t in times.values() if i in t), default=None) for i in instances}
        xs_of = {label: {i: v / max(best[i], 1e-9) for i, v in t.items()} for label, t in times.items()}
        axis = "performance ratio tau (time / fastest run's)"
    curves = {}
    for label, values in xs_of.items():
        xs = sorted(values.values())
        curves[label] = (xs, [(k + 1) / len(instances) for k in range(len(xs))])
    return axis, curves


def plot_profile(runs: dict, title: str, path: str) -> None:
    """Draw ``profile_curves(runs)`` as a PNG into a new file (matplotlib, the plot extra)."""
    try:
        import matplotlib  # noqa: PLC0415

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        raise ProblemError("needs matplotlib: pip install -e '.[plot]'", field="--plot") from None
    axis, curves = profile_curves(runs)
    fig, ax = plt.subplots(figsize=(6, 4))
    for label, (xs, shares) in curves.items():
        if xs:
            ax.step([xs[0]] + xs, [0.0] + shares, where="post", label=f"{label} ({len(xs)} solved)")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(axis)
    ax.set_ylabel("share of instances solved")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    try:
        write_new_file(path, "--plot", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)
