"""Model vs published collective bus bandwidths: nccl-tests (problems/measurements/nccl_tests.yaml) and
XLA's collective table (problems/measurements/xla_collectives.yaml, benchmarks/xla_collective_table.py).

    python benchmarks/collectives.py [--large] [--json]

Every point of every entry: parasol's busbw (``parasol collective`` on the entry's system, GPUs and
algorithm), the measured one, and the error model/measured - 1. Calibration points (the numbers the
system files' collective efficiencies and the NVLS latency were set from, see each entry's role) are
reported apart from validation points. The issue's target: 8-GPU all-reduce of large buffers
(>= 1 GiB) on the DGX/HGX systems within 20%. nccl-tests' points are listed one by one; XLA's (1,500
of them, every collective and group size on 8-GPU Hopper and B200 servers and on GB200/GB300 NVL72) by
system and collective, at buffers of 256 MiB and more and at 1 GiB and more.
"""

from __future__ import annotations

import argparse
import json
import statistics

from parasol.solver.collective import compare_measurements

LARGE = 1 << 30  # bytes: "large buffers"
MID = 1 << 28  # bytes: the ramp's upper part (at the first size from here 45 of XLA's 104 series are under 80 % of their maximum)
DGX_HGX = ("dgx-", "hgx-")
NCCL_TESTS, XLA = "nccl_tests.yaml", "xla_collectives.yaml"


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


def by_system_and_op(rows: list[dict], smallest: int) -> list[dict]:
    """XLA's points of at least ``smallest`` bytes, per system and collective: count, mean signed and
    absolute error, range."""
    groups: dict = {}
    for r in rows:
        if r["bytes"] >= smallest:
            groups.setdefault((r["system"], r["op"]), []).append(r["error"])
    return [
        {
            "system": system,
            "op": op,
            "points": len(errors),
            "mean_error": statistics.fmean(errors),
            "mean_abs_error": statistics.fmean(abs(e) for e in errors),
            "min_error": min(errors),
            "max_error": max(errors),
        }
        for (system, op), errors in sorted(groups.items())
    ]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--large", action="store_true", help="only buffers of 1 GiB and more")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    every = compare_measurements()
    if args.large:
        every = [r for r in every if r["bytes"] >= LARGE]
    rows = [r for r in every if r["file"] == NCCL_TESTS]
    xla = [r for r in every if r["file"] == XLA]
    report = {
        "all": summary(rows),
        "target_8gpu_allreduce_large_dgx_hgx": summary(target_subset(rows)),
        "large_buffers_all_systems": summary([r for r in rows if r["bytes"] >= LARGE]),
        "xla_table": summary(xla),
    }
    xla_groups = {f">= {MID >> 20} MiB": by_system_and_op(xla, MID), f">= {LARGE >> 20} MiB": by_system_and_op(xla, LARGE)}
    if args.json:
        print(json.dumps({"rows": every, "summary": report, "xla_by_system_and_op": xla_groups}, indent=2))
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
                f"{name:<38} {role:<12} {s['points']:>4} points  mean |err| {s['mean_abs_error']:6.1%}  "
                f"max {s['max_abs_error']:6.1%}  ({s['worst']})"
            )
    for label, groups in xla_groups.items():
        print(f"\nXLA's table, buffers {label}: model / measured - 1 by system and collective")
        print(f"{'system':<14}{'collective':<15}{'points':>7}{'mean':>9}{'mean |err|':>12}{'range':>20}")
        for g in groups:
            span = f"{g['min_error']:+.1%} .. {g['max_error']:+.1%}"
            print(f"{g['system']:<14}{g['op']:<15}{g['points']:>7}{g['mean_error']:>+9.1%}{g['mean_abs_error']:>12.1%}{span:>20}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
