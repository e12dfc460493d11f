"""CP-SAT solve time against exhaustive enumeration over the same space, and against an earlier
version of parasol, on one machine, one run.

    python benchmarks/solve_speed.py [--ladder dense|moe|targets] [--sizes 8,64,...] [--restricted]
                                     [--method auto|cpsat|bound|enumerate] [--baseline DIR] [--repeat N]
                                     [--enum-limit S] [--markdown] [--write-docs]

Ladders: dense (default): GPT-3 175B on DGX A100, Llama 3 70B and Llama 3.1 405B on DGX H100, from 8
to 16,384 GPUs; moe: DeepSeek-V3 on DGX H800 (FP8, seq 4096, the published 15,360-sequence batch,
DeepEP-style dispatch with overlap, as problems/examples/deepseek-v3-h800.yaml) from 256 to 16,384
GPUs, with ep free as well; targets: issue 16's other problems (MT-NLG 530B and Megatron 1T on 5,120
A100, the chiplet co-design example). Free: tp, pp, dp, cp, micro-batch, vpp, sp, recompute, zero and
the first/last stage layer counts (--restricted: the default stage split and vpp 1 or 2). Each
problem is solved with --method (default auto: what `parasol solve` does).

The enumerator (numpy: every point through the model's composition) stops after --enum-limit
seconds; its full time is then extrapolated from its rate ("est.") and its best is only that of the
points it reached ("partial"). With --baseline DIR (a checkout of an earlier version, e.g.
``git worktree add /tmp/parasol-before REV``), each problem is also solved by that version in a
subprocess, alternating with this one --repeat times; the best wall time of each and their ratio
(baseline / this) are printed, with CP-SAT's deterministic time, which load on the machine does not
change. --write-docs replaces this ladder's generated block of docs/benchmarks.md with the table.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

from docs_block import write_block

from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.report import text_table

LADDERS = {
    "dense": [
        ("gpt3-175b", "dgx-a100", 2048, 1536, "bf16"),
        ("llama3-70b", "dgx-h100", 8192, 2048, "bf16"),
        ("llama3.1-405b", "dgx-h100", 8192, 2048, "bf16"),
    ],
    "moe": [("deepseek-v3", "dgx-h800", 4096, 15360, "fp8")],
    "targets": [("mt-nlg-530b", "dgx-a100", 2048, 1920, "bf16"), ("megatron-gpt-1t", "dgx-a100", 2048, 3072, "bf16")],
}
DEFAULT_SIZES = {"dense": "8,64,512,1024,4096,16384", "moe": "256,1024,2048,4096,16384", "targets": "5120"}
MOE_WORKLOAD = {"moe_dispatcher": "deepep", "moe_a2a_overlap": True}
RESTRICTED = {"first_stage_layers": 0, "last_stage_layers": 0, "vpp": [1, 2]}

# Runs one problem with an earlier checkout's planner (its own package layout: top-level solver/model
# before parasol had one import root; after it, the checkout's root is the package parasol, loaded
# from there rather than from the installed copy) and prints its best wall time and result.
BASELINE_SNIPPET = """
import json, os, sys, time
root, data, limit, workers, repeat = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
sys.path.insert(0, root)
if os.path.isfile(os.path.join(root, "__init__.py")):  # one import root: the checkout itself is the package parasol
    import importlib.util
    spec = importlib.util.spec_from_file_location("parasol", os.path.join(root, "__init__.py"), submodule_search_locations=[root])
    sys.modules["parasol"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["parasol"])
    data_dir = os.path.join(root, "problems")  # the library, installed as parasol.data
    spec = importlib.util.spec_from_file_location("parasol.data", os.path.join(data_dir, "__init__.py"), submodule_search_locations=[data_dir])
    sys.modules["parasol.data"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["parasol.data"])
    from parasol.solver.problem import parse_problem
    from parasol.solver.planner import solve
elif os.path.isdir(os.path.join(root, "parasol")) or not os.path.isdir(os.path.join(root, "solver")):
    from parasol.solver.problem import parse_problem
    from parasol.solver.planner import solve
else:
    from solver.problem import parse_problem
    from solver.plan import solve
walls = []
for _ in range(repeat):
    p = parse_problem(data, source="baseline")
    t0 = time.perf_counter()
    r = solve(p, time_limit=limit, workers=workers)
    walls.append(time.perf_counter() - t0)
print(json.dumps({"wall": min(walls), "det": r.deterministic_time, "status": r.status, "objective": r.objective_value}))
"""


def problem_data(model, system, seq, batch, precision, n, mapping=None) -> dict:
    workload = {"kind": "training", "seq_len": seq, "global_batch": batch, "precision": precision}
    if model == "deepseek-v3":
        workload.update(MOE_WORKLOAD)
    return {
        "model": model,
        "system": {"name": system, "num_gpus": n},
        "workload": workload,
        "mapping": mapping or {},
        "objective": "throughput",
    }


def prepare_baseline(root: str) -> None:
    """An old checkout finds its library as the package ``solver.data``, which its editable install
    mapped to problems/; a symbolic link stands in for that install."""
    link = os.path.join(root, "solver", "data")
    if os.path.isdir(os.path.join(root, "solver")) and not os.path.exists(link):
        os.symlink(os.path.join("..", "problems"), link)


def run_baseline(root: str, data: dict, limit: float, workers: int) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", BASELINE_SNIPPET, root, json.dumps(data), str(limit), str(workers), "1"],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    if proc.returncode:
        raise RuntimeError(f"the baseline failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr else proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--enum-limit", type=float, default=30.0, help="seconds of enumeration per problem (0: none)")
    parser.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT time limit per problem")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--ladder", choices=sorted(LADDERS), default="dense")
    parser.add_argument("--sizes", help="GPU counts (default: dense 8..16,384, moe 256..16,384)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--restricted", action="store_true", help="default stage split and vpp in {1, 2}")
    parser.add_argument("--baseline", help="a checkout of an earlier version to compare solve times with")
    parser.add_argument("--repeat", type=int, default=1, help="solves per problem and version (the best wall time counts)")
    parser.add_argument("--method", default="auto", help="solve's method for this version (default auto)")
    parser.add_argument("--write-docs", action="store_true", help="rewrite this ladder's table in docs/benchmarks.md")
    args = parser.parse_args()
    sizes = [int(x) for x in (args.sizes or DEFAULT_SIZES[args.ladder]).split(",")]
    head = [
        "model",
        "GPUs",
        "space",
        "enumeration s",
        "solve s",
        "ratio",
        "status",
        "enum best tok/s",
        "solve tok/s",
        "same",
        "method",
    ]
    if args.baseline:
        prepare_baseline(args.baseline)
        head += ["baseline s", "speed-up", "det. s (baseline / this)", "baseline tok/s"]
    rows, speedups = [], []
    for model, system, seq, batch, precision in LADDERS[args.ladder]:
        for n in sizes:
            data = problem_data(model, system, seq, batch, precision, n, RESTRICTED if args.restricted else None)
            walls, base_walls, base = [], [], None
            for _ in range(max(1, args.repeat)):
                if args.baseline:
                    base = run_baseline(args.baseline, data, args.time_limit, args.workers)
                    base_walls.append(base["wall"])
                p = parse_problem(data, source=f"{model}@{n}")
                t0 = time.perf_counter()
                s = solve(p, time_limit=args.time_limit, workers=args.workers, method=args.method)
                walls.append(time.perf_counter() - t0)
            solve_s = min(walls)
            row = [model, f"{n:,}", f"{s.space_size:,}"]
            if args.enum_limit > 0:
                e = enumerate_space(p, time_limit=args.enum_limit)
                complete = e.points_evaluated >= s.space_size
                enum_s = e.solve_time_s if complete else e.solve_time_s * s.space_size / max(e.points_evaluated, 1)
                e_val, s_val = e.objective_value, s.objective_value
                if s_val is not None and e_val is not None:
                    if abs(s_val - e_val) <= 1e-3 * abs(e_val):
                        same = "yes"
                    elif not complete and s_val > e_val:
                        same = "solve better (enum partial)"
                    elif s.status != "OPTIMAL" and e_val > s_val:
                        same = "enum better (solve not proven)"
                    else:
                        same = "NO"
                else:
                    same = (
                        "yes"
                        if (s_val is None and e_val is None and complete)
                        else ("n/a (enum partial)" if not complete else "NO")
                    )
                row += [
                    f"{enum_s:,.1f}" + ("" if complete else " est."),
                    f"{solve_s:.2f}",
                    f"{enum_s / solve_s:,.1f}x",
                    s.status,
                    (f"{e_val:,.0f}" if e_val else "-") + ("" if complete else " partial"),
                    f"{s_val:,.0f}" if s_val else "-",
                    same,
                    s.method,
                ]
            else:
                value = f"{s.objective_value:,.0f}" if s.objective_value else "-"
                row += ["-", f"{solve_s:.2f}", "-", s.status, "-", value, "-", s.method]
            if args.baseline:
                b = min(base_walls)
                speedups.append(b / solve_s)
                row += [
                    f"{b:.2f}",
                    f"{b / solve_s:.2f}x",
                    f"{base['det']:.2f} / {s.deterministic_time:.2f}",
                    f"{base['objective']:,.0f}" if base["objective"] else "-",
                ]
            rows.append(row)
            print(" | ".join(rows[-1]), flush=True, file=sys.stderr)
    text = text_table(head, rows, args.markdown or args.write_docs)
    if speedups:
        text += (
            f"\n\nspeed-up (baseline wall / this wall): geometric mean {math.exp(sum(map(math.log, speedups)) / len(speedups)):.2f}x, "
            f"range {min(speedups):.2f}x to {max(speedups):.2f}x over {len(speedups)} problems"
        )
    print(text)
    if args.write_docs:
        name = args.ladder + ("-restricted" if args.restricted else "") + ("-vs-baseline" if args.baseline else "")
        write_block("benchmarks.md", name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
