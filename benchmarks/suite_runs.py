"""Run the benchmark suites with `parasol suite run` on the local and the Ray engine, and compare.

    python benchmarks/suite_runs.py [--suites a,b] [--engines local,ray] [--workers N] [--tier T]
                                    [--out DIR] [--write-docs]

Each suite runs once per engine as a user runs it (`parasol suite run SUITE --engine E --workers N
--quiet --out DIR/SUITE-E.csv`, in a subprocess). The table gives, per suite and engine, the instances
solved (proven), those that reproduce their record, the mean gap, the shifted geometric mean of the
wall time and of CP-SAT's deterministic time, the wall time of the whole command and, for the Ray
engine, whether every instance's answer (status, objective, bound, gap, mapping, front, deterministic
time) equals the local engine's. --catalogue prints (and with --write-docs writes) the suites'
instances per tier instead, read from the suite files and their records. --write-docs replaces the
blocks suite-runs / suite-catalogue of docs/suites.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from docs_block import write_block

from parasol.solver.report import text_table
from parasol.solver.suite_report import summary
from parasol.solver.suites import Tier, load_suite, suite_names

SAME = ["status", "value", "bound", "gap", "mapping", "front", "space_size", "deterministic_time"]


def run(suite: str, engine: str, workers: int, tier: str | None, out: Path) -> tuple[pd.DataFrame, float, int]:
    path = out / f"{suite}-{engine}.csv"
    path.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "parasol", "suite", "run", suite, "--engine", engine, "--workers", str(workers), "--quiet"]
    cmd += ["--out", str(path)] + (["--tier", tier] if tier else [])
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not path.exists():
        raise SystemExit(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr}")
    print(proc.stdout.strip().splitlines()[-1], flush=True)
    return pd.read_csv(path), wall, proc.returncode


def runs_table(args) -> str:
    out = Path(args.out or tempfile.mkdtemp(prefix="suite-runs-"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for suite in args.suites.split(","):
        frames = {}
        for engine in args.engines.split(","):
            frame, wall, code = run(suite, engine, args.workers, args.tier, out)
            frames[engine] = frame
            s = summary(frame)
            same = "-"
            if engine != "local" and "local" in frames:
                a, b = frames["local"], frame
                same = "yes" if a[SAME].astype(str).equals(b[SAME].astype(str)) else "NO"
            rows.append(
                [
                    suite,
                    engine,
                    f"{s.instances}",
                    f"{s.solved}",
                    f"{s.reproduced}",
                    f"{100 * s.mean_gap:.3f} %",
                    f"{s.sgm_wall_s:.2f}",
                    f"{s.sgm_deterministic:.2f}",
                    f"{wall:.0f}",
                    f"{code}",
                    same,
                ]
            )
    head = [
        "suite",
        "engine",
        "instances",
        "solved",
        "reproduce",
        "mean gap",
        "sgm wall s",
        "sgm det.",
        "command s",
        "exit",
        "= local",
    ]
    return text_table(head, rows, markdown=True)


def catalogue_table() -> str:
    rows, total = [], 0
    for name in suite_names():
        suite = load_suite(name)
        for tier in Tier:
            instances = suite.select((tier,))
            if not instances:
                continue
            sizes = [suite.known[i.name]["space_size"] for i in instances if i.name in suite.known]
            fronts = sum(1 for i in instances if i.objectives)
            enumerated = sum(
                1 for i in instances if suite.known.get(i.name, {}).get("proof", {}).get("enumerator", "").startswith("agrees")
            )
            total += len(instances)
            rows.append(
                [
                    name,
                    str(tier),
                    f"{len(instances)}",
                    f"{fronts}",
                    f"{min(sizes):,} - {max(sizes):,}" if sizes else "-",
                    f"{len(sizes)}",
                    f"{enumerated}",
                ]
            )
    head = ["suite", "tier", "instances", "of them fronts", "space (mappings)", "proven by CP-SAT", "enumerator agrees"]
    return text_table(head, rows, markdown=True) + f"\n\n{total} instances in all."


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suites", default=",".join(suite_names()))
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--tier", choices=tuple(Tier))
    parser.add_argument("--out", help="folder for the per-instance tables (default: a new temporary one)")
    parser.add_argument("--catalogue", action="store_true", help="the suites' instances per tier, not a run")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.catalogue:
        table = catalogue_table()
        print(table)
        if args.write_docs:
            print(f"wrote {write_block('suites.md', 'suite-catalogue', table)}")
        return 0
    table = runs_table(args)
    print(table)
    if args.write_docs:
        print(f"wrote {write_block('suites.md', 'suite-runs', table)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
