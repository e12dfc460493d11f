"""The problems that ended in an assert before the composition was written once (issue 12): solved
with CP-SAT and enumerated with numpy over the same space; the optima must agree.

    python benchmarks/issue12_regressions.py

Before, `parasol solve` on these ended in ``AssertionError: solver step ... vs model ...`` (stage 0's
data-parallel time extrapolated as affine in its layer count, which a topology's collective is not).
"""

from __future__ import annotations

import sys
import time

from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.report import text_table

CLUSTER = "llama3-h100-cluster"
PROBLEMS = {
    "the issue's file (llama2-7b, 4,096 GPUs, overlap_dp false)": {
        "model": "llama2-7b",
        "system": {"name": CLUSTER, "num_gpus": 4096},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 4096, "overlap_dp": False},
        "mapping": {"tp": 2, "pp": 1, "cp": 1, "zero": 1, "vpp": 1, "recompute": "none", "micro_batch": 1},
    },
    "llama3-70b, 4,096 GPUs, defaults": {
        "model": "llama3-70b",
        "system": {"name": CLUSTER, "num_gpus": 4096},
        "workload": {"kind": "training", "seq_len": 8192, "global_batch": 2048},
    },
    "llama3-70b, 16,384 GPUs, defaults": {
        "model": "llama3-70b",
        "system": {"name": CLUSTER, "num_gpus": 16384},
        "workload": {"kind": "training", "seq_len": 8192, "global_batch": 4096},
    },
    "llama3.1-8b, 1,024 GPUs, defaults": {
        "model": "llama3.1-8b",
        "system": {"name": CLUSTER, "num_gpus": 1024},
        "workload": {"kind": "training", "seq_len": 8192, "global_batch": 1024},
    },
}


def main() -> int:
    rows = []
    for name, data in PROBLEMS.items():
        problem = parse_problem(data, source=name)
        t0 = time.perf_counter()
        s = solve(problem, time_limit=300)
        t1 = time.perf_counter()
        e = enumerate_space(problem)
        t2 = time.perf_counter()
        same = (
            s.objective_value is not None
            and e.objective_value is not None
            and abs(s.objective_value / e.objective_value - 1) < 1e-3
        )
        step = s.plans[0].evaluation.metrics["step_time_s"] if s.plans else float("nan")
        rows.append(
            [
                name,
                f"{s.space_size:,}",
                s.status,
                f"{s.objective_value:,.0f}",
                f"{step:.4f}",
                f"{t1 - t0:.1f}",
                e.status,
                f"{e.objective_value:,.0f}",
                f"{t2 - t1:.1f}",
                "yes" if same else "NO",
            ]
        )
        print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    print(
        text_table(
            ["problem", "space", "solve", "tokens/s", "step s", "solve s", "enumerate", "tokens/s", "enumerate s", "same"],
            rows,
            markdown=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
