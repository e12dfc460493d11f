"""Fit each device's efficiency curves on the published runs of that device.

    python benchmarks/calibrate.py [--holdout]

Per device (A100, H100) three numbers are fitted, shared by every run on that device:
the GEMM curve eff(F) = e_max · F / (F + F_half) (F = FLOPs of one GEMM), the flash-attention
efficiency (H100 runs only; the A100 runs predate flash attention) and one network efficiency
for both tiers (achieved fraction of the link rate). HBM efficiency is not fitted: it is the
measured STREAM copy bandwidth over the spec (A100 1.61 / 2.039 TB/s, Azure benchmarking guide,
hardware_cost_conventions.md Sec. 10.1; H100 from our H200 copy measurement, problems/measurements/).
The objective is the mean absolute relative step-time error. DeepSpeed ZeRO-3 runs of SC'21
Table 2 are excluded from the fit (see the README: the model has no term for that
implementation's overheads) and reported like every other run.

--holdout refits leaving out one publication family at a time and prints the error on it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from solver.validation import evaluate_all, family, load_runs  # noqa: E402

GRID = np.array([1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14])
DEVICE_OF_SYSTEM = {"dgx-a100": "a100-sxm-80gb", "jean-zay-a100": "a100-sxm-80gb", "dgx-h100": "h100-sxm-80gb"}
EXCLUDED_FAMILIES = ("Megatron SC'21 Table 2 ZeRO-3",)


def gemm_curve(e_max: float, f_half: float) -> tuple:
    return tuple(float(x) for x in e_max * GRID / (GRID + f_half))


def override(params: dict):
    """system_override applying trial parameters {device: (e_max, f_half, attention, network)}."""
    def apply(system):
        if system.device.name not in params:
            return system
        e_max, f_half, attention, network = params[system.device.name]
        device = dataclasses.replace(system.device, gemm_efficiency_flops=tuple(GRID), gemm_efficiency=gemm_curve(e_max, f_half),
                                     attention_efficiency=attention)
        return dataclasses.replace(system, device=device, scale_up=dataclasses.replace(system.scale_up, efficiency=network),
                                   scale_out=dataclasses.replace(system.scale_out, efficiency=network))
    return apply


def loss(entries, params) -> float:
    return statistics.fmean(abs(r.error) for r in evaluate_all(entries, override(params)))


def fit(entries, device: str, start=(0.8, 1e10, 0.5, 0.8)) -> tuple:
    """Coordinate search in multiplicative steps; bounded to physical ranges."""
    bounds = [(0.3, 1.0), (1e7, 1e13), (0.2, 0.9), (0.3, 1.0)]
    x = list(start)
    best = loss(entries, {device: tuple(x)})
    for step in (1.3, 1.1, 1.03, 1.01):
        improved = True
        while improved:
            improved = False
            for i in range(4):
                for factor in (step, 1 / step):
                    y = list(x)
                    y[i] = min(max(y[i] * factor, bounds[i][0]), bounds[i][1])
                    value = loss(entries, {device: tuple(y)})
                    if value < best - 1e-6:
                        x, best, improved = y, value, True
    return tuple(x), best


def device_entries(entries, device: str):
    return [e for e in entries if DEVICE_OF_SYSTEM.get(e["system"]) == device and family(e["id"]) not in EXCLUDED_FAMILIES]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holdout", action="store_true", help="leave-one-family-out errors")
    args = parser.parse_args()
    entries = load_runs()
    fitted = {}
    for device in ("a100-sxm-80gb", "h100-sxm-80gb"):
        own = device_entries(entries, device)
        x, value = fit(own, device)
        fitted[device] = x
        print(f"{device}: {len(own)} runs, mean |error| {100 * value:.1f} %")
        print(f"  gemm e_max {x[0]:.3f}, F_half {x[1]:.3g} FLOPs, attention {x[2]:.3f}, network {x[3]:.3f}")
        print(f"  gemm curve at {list(GRID)}: {[round(v, 3) for v in gemm_curve(x[0], x[1])]}")
    if args.holdout:
        print("\nleave-one-family-out (fit without the family, error on it):")
        for device in fitted:
            own = device_entries(entries, device)
            for fam in sorted({family(e["id"]) for e in own}):
                train = [e for e in own if family(e["id"]) != fam]
                test = [e for e in own if family(e["id"]) == fam]
                if not train:
                    continue
                x, _ = fit(train, device, start=fitted[device])
                print(f"  {fam:<32} {len(test):>2} runs: held-out mean |error| {100 * loss(test, {device: x}):.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
