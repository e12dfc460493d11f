"""CP-SAT solve time against exhaustive enumeration over the same space, on one machine, one run.

    python benchmarks/solve_speed.py [--enum-limit S] [--time-limit S] [--sizes 8,64,...] [--markdown]
    python benchmarks/solve_speed.py --ladder moe [--sizes 256,1024,...]

Ladders: dense (default): GPT-3 175B on DGX A100, Llama 3 70B and Llama 3.1 405B on DGX H100, from 8
to 16,384 GPUs; moe: DeepSeek-V3 on DGX H800 (FP8, seq 4096, the published 15,360-sequence batch,
DeepEP-style dispatch with overlap, as problems/examples/deepseek-v3-h800.yaml) from 256 to 16,384
GPUs, with ep free as well. Free: tp, pp, dp, cp, micro-batch, vpp, sp, recompute, zero and the
first/last stage layer counts
(--restricted: the default stage split and vpp 1 or 2, so that enumeration finishes).
The enumerator evaluates every point with the model; when it passes --enum-limit seconds it stops
and its full time is extrapolated from its rate (marked "est."), and its optimum is then only the
best of the points it reached (marked "partial").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem

LADDERS = {
    "dense": [("gpt3-175b", "dgx-a100", 2048, 1536, "bf16"),
              ("llama3-70b", "dgx-h100", 8192, 2048, "bf16"),
              ("llama3.1-405b", "dgx-h100", 8192, 2048, "bf16")],
    "moe": [("deepseek-v3", "dgx-h800", 4096, 15360, "fp8")],
}
DEFAULT_SIZES = {"dense": "8,64,512,1024,4096,16384", "moe": "256,1024,2048,4096,16384"}
MOE_WORKLOAD = {"moe_dispatcher": "deepep", "moe_a2a_overlap": True}


# --restricted: the default stage split and vpp 1 or 2, spaces the enumerator finishes in seconds
RESTRICTED = {"first_stage_layers": 0, "last_stage_layers": 0, "vpp": [1, 2]}


def problem(model, system, seq, batch, precision, n, mapping=None):
    workload = {"kind": "training", "seq_len": seq, "global_batch": batch, "precision": precision}
    if model == "deepseek-v3":
        workload.update(MOE_WORKLOAD)
    return parse_problem({"model": model, "system": {"name": system, "num_gpus": n}, "workload": workload,
                          "mapping": mapping or {}, "objective": "throughput"}, source=f"{model}@{n}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--enum-limit", type=float, default=30.0, help="seconds of enumeration per problem")
    parser.add_argument("--time-limit", type=float, default=60.0, help="CP-SAT time limit per problem")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--ladder", choices=sorted(LADDERS), default="dense")
    parser.add_argument("--sizes", help="GPU counts (default: dense 8..16,384, moe 256..16,384)")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--restricted", action="store_true", help="default stage split and vpp in {1, 2}")
    args = parser.parse_args()
    sizes = [int(x) for x in (args.sizes or DEFAULT_SIZES[args.ladder]).split(",")]
    head = ["model", "GPUs", "space", "enumeration s", "solve s", "ratio", "status", "enum best tok/s", "CP-SAT tok/s", "same"]
    rows = []
    for model, system, seq, batch, precision in LADDERS[args.ladder]:
        for n in sizes:
            p = problem(model, system, seq, batch, precision, n, RESTRICTED if args.restricted else None)
            t0 = time.perf_counter()
            s = solve(p, time_limit=args.time_limit, workers=args.workers)
            solve_s = time.perf_counter() - t0
            e = enumerate_space(p, time_limit=args.enum_limit)
            complete = e.points_evaluated >= s.space_size
            enum_s = e.solve_time_s if complete else e.solve_time_s * s.space_size / max(e.points_evaluated, 1)
            enum_txt = f"{enum_s:,.1f}" + ("" if complete else " est.")
            s_val = s.objective_value
            e_val = e.objective_value
            if s_val is not None and e_val is not None:
                same = "yes" if abs(s_val - e_val) <= 1e-3 * abs(e_val) else ("CP-SAT better (enum partial)" if not complete and s_val > e_val else "NO")
            else:
                same = "yes" if (s_val is None and e_val is None and complete) else ("n/a (enum partial)" if not complete else "NO")
            rows.append([model, f"{n:,}", f"{s.space_size:,}", enum_txt, f"{solve_s:.2f}", f"{enum_s / solve_s:,.0f}x",
                         s.status, (f"{e_val:,.0f}" if e_val else "-") + ("" if complete else " partial"),
                         f"{s_val:,.0f}" if s_val else "-", same])
            print(" | ".join(rows[-1]), flush=True, file=sys.stderr)
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        fmt = "  ".join(f"{{:<{w}}}" for w in widths)
        print(fmt.format(*head))
        for r in rows:
            print(fmt.format(*r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
