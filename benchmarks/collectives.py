"""Model vs published nccl-tests bus bandwidth (problems/measurements/nccl_tests.yaml).

    python benchmarks/collectives.py [--large] [--json]

Every point of every entry: parasol's busbw (``parasol collective`` on the entry's system, GPUs and
algorithm), the measured one, and the error model/measured - 1. Calibration points (the numbers the
system files' collective efficiencies and the NVLS latency were set from, see each entry's role) are
reported apart from validation points. The issue's target: 8-GPU all-reduce of large buffers
(>= 1 GiB) on the DGX/HGX systems within 20%.
"""

from __future__ import annotations

import argparse
import json
import statistics

from parasol.solver.collective import compare_measurements

LARGE = 1 << 30  # bytes: "large buffers"
DGX_HGX = ("dgx-", "hgx-")


def target_subset(rows: list[dict]) -> list[dict]:
    """8-GPU all-reduce, >= 1 GiB, on the DGX/HGX systems (the issue's accuracy target)."""
    return [
        r for r in rows if r["op"] == "allreduce" and r["gpus"] == 8 and r["bytes"] >= LARGE and r["system"].startswith(DGX_HGX)
    ]


def summary(rows: list[dict]) -> dict:
    out = {}
    for role in ("calibration", "validation"):
        errors = [abs(r["error"]) for r in rows if r["role"] == role]
        if errors:
            worst = max((r for r in rows if r["role"] == role), key=lambda r: abs(r["error"]))
            out[role] = {
                "points": len(errors),
                "mean_abs_error": statistics.fmean(errors),
                "max_abs_error": max(errors),
                "worst": f"{worst['id']} at {worst['bytes']} B",
            }
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="only buffers of 1 GiB and more")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = compare_measurements()
    if args.large:
        rows = [r for r in rows if r["bytes"] >= LARGE]
    report = {
        "all": summary(rows),
        "target_8gpu_allreduce_large_dgx_hgx": summary(target_subset(rows)),
        "large_buffers_all_systems": summary([r for r in rows if r["bytes"] >= LARGE]),
    }
    if args.json:
        print(json.dumps({"rows": rows, "summary": report}, indent=2))
        return 0
    print(
        f"{'entry':<26}{'system':<15}{'n':>3} {'bytes':>11} {'algorithm':<19}{'role':<12}{'measured':>9}{'model':>9}{'error':>8}"
    )
    for r in rows:
        print(
            f"{r['id']:<26}{r['system']:<15}{r['gpus']:>3} {r['bytes']:>11} {r['algorithm']:<19}{r['role']:<12}"
            f"{r['measured_gbps']:>9.1f}{r['model_gbps']:>9.1f}{r['error']:>+8.1%}"
        )
    print("\nbusbw in GB/s (1e9 B/s), nccl-tests convention; error = model / measured - 1")
    for name, block in report.items():
        for role, s in block.items():
            print(
                f"{name:<38} {role:<12} {s['points']:>3} points  mean |err| {s['mean_abs_error']:6.1%}  "
                f"max {s['max_abs_error']:6.1%}  ({s['worst']})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
