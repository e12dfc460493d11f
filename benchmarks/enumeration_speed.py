"""Mappings per second of the numpy enumerator on dense training spaces, one core.

    python benchmarks/enumeration_speed.py [--problems A,B,...] [--markdown] [--out FILE] [--write-docs]

For each problem: the space's size, the seconds to build the space, to enumerate it (every point
through the model's composition on numpy arrays, ``planner.best_points``), and the rate. The
enumeration runs in this process on one core (numpy's elementwise kernels are single-threaded; set
OMP_NUM_THREADS=1 to keep BLAS to one thread too). Its best plan is compared with CP-SAT's
(``solve``) on the same space. --write-docs replaces the generated block of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

from docs_block import write_block  # noqa: E402

from parasol.solver.planner import best_points, planner_for, solve  # noqa: E402
from parasol.solver.problem import load_problem  # noqa: E402
from parasol.solver.report import text_table  # noqa: E402
from parasol.solver.results import write_table  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "problems", "examples")
DEFAULT = "gpt3-175b-a100-free,torus-placement,gpt3-175b-a100"


def measure(name: str, with_solve: bool) -> list:
    problem = load_problem(os.path.join(EXAMPLES, f"{name}.yaml"))
    planner = planner_for(problem)
    t0 = time.perf_counter()
    space = planner.space(problem)
    size = space.size()
    t1 = time.perf_counter()
    rows, evaluated, complete, _, _ = best_points(planner, problem, space, problem.objective, 1)
    t2 = time.perf_counter()
    best = planner.evaluate(problem, *planner.decode(problem, space, rows[0])) if rows else None
    value = planner.objective_value(problem, problem.objective, best.metrics) if best else None
    row = [
        name,
        f"{size:,}",
        f"{t1 - t0:.2f}",
        f"{t2 - t1:.2f}",
        f"{evaluated / (t2 - t1):,.0f}",
        f"{value:,.6g}" if value is not None else "-",
    ]
    if with_solve:
        s = solve(problem, time_limit=120, method="cpsat")  # CP-SAT against the enumerator, whatever the size
        same = (
            "yes"
            if (s.objective_value is not None and value is not None and abs(s.objective_value - value) <= 1e-3 * abs(value))
            else "NO"
        )
        row += [f"{s.objective_value:,.6g}" if s.objective_value is not None else "-", same]
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default=DEFAULT, help="example names (problems/examples/NAME.yaml)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--no-solve", action="store_true", help="skip the CP-SAT comparison")
    parser.add_argument("--out", help="also write the table (.csv, .parquet, .json)")
    parser.add_argument("--write-docs", action="store_true", help="rewrite the table in docs/benchmarks.md")
    args = parser.parse_args()
    head = ["problem", "space", "space s", "enumeration s", "mappings/s", "best (enumerator)"]
    if not args.no_solve:
        head += ["best (CP-SAT)", "same"]
    rows = []
    for name in args.problems.split(","):
        rows.append(measure(name.strip(), not args.no_solve))
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(text_table(head, rows, args.markdown))
    if args.write_docs:
        write_block("benchmarks.md", "enumeration-speed", text_table(head, rows, True))
    if args.out:
        import pandas as pd

        write_table(pd.DataFrame(rows, columns=head), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
