"""How the training figures move when the Blackwell devices' GEMM rates follow their power caps.

    python benchmarks/power_cap_sensitivity.py [--alpha ALPHA]

The hypothesis: B200 (1,000 W), HGX B300 (1,100 W), GB200 (1,200 W) and GB300 (1,400 W) are one die at four power
caps, and a training step, which loads HBM, NVLink and every kernel beside its GEMMs for minutes, sustains a share
(P / 1,200 W)^alpha of the GEMM curves their files derive from single-GPU MAMF bursts (GB200's cap the reference,
whose MAMF GB300's curve borrows). It is tried by scaling each Blackwell device's GEMM curves (``gemm_scale``) in
the evaluation, nothing written:

1. alpha is fitted (grid 0 to 2, step 0.05; or given) on the calibration set's dense runs on B200, GB200 and GB300,
   as ``benchmarks/calibrate.py`` selects them, at the system files' networks, with the mean |error| at 0 and the
   leave-one-device-out errors (alpha fitted without the device's runs, the error on them);
2. the routed-expert efficiency is fitted again at alpha, as ``calibrate.py --moe`` does (``moe_expert_fit`` on the
   20 MoE calibration runs);
3. the step-time ratio of each configuration published on both B200 and GB200 (``same_configuration_pairs``) is
   printed, measured and in the model at 0 and at alpha;
4. the mean |error| of the dense and the MoE runs in and out of sample (``benchmarks/accuracy.py``'s families) is
   printed as the files stand, at alpha, and at alpha with the refitted routed-expert efficiency.

docs/accuracy.md says what it measured and why the files do not take it.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys

from accuracy import APART, OUTSIDE_MODEL  # benchmarks/accuracy.py: the families it reports apart
from calibrate import DENSE_CHECK, MOE_CALIBRATION, MOE_CHECK, device_entries, moe_expert_fit, moe_override

from parasol.solver.library import load_device
from parasol.solver.validation import evaluate_all, family, load_all_runs

POWER_DEVICES = ("b200", "b300", "gb200", "gb300")  # the die at its caps (their files' tdp_w)
FIT_DEVICES = ("b200", "gb200", "gb300")  # those with dense runs in the calibration set
REFERENCE_DEVICE = "gb200"  # the cap the shares are 1 at
ALPHA_GRID = tuple(k / 20 for k in range(41))  # 0 to 2 in steps of 0.05


def share(tdp_w: float, alpha: float) -> float:
    """The share (P / P_ref)^alpha of its GEMM curves a device capped at ``tdp_w`` watts sustains, dimensionless."""
    if tdp_w <= 0:
        raise ValueError(f"a power cap must be positive watts, got {tdp_w}")
    return (tdp_w / load_device(REFERENCE_DEVICE).tdp_w) ** alpha


def power_override(alpha: float, expert: float | None = None):
    """system_override scaling each Blackwell device's GEMM curves by its cap's share (and setting a trial
    routed-expert efficiency on every device, when given)."""
    moe = moe_override(expert) if expert is not None else None

    def apply(system):
        device = system.device
        if device.name in POWER_DEVICES:
            scaled = dataclasses.replace(device, gemm_scale=device.gemm_scale * share(device.tdp_w, alpha))
            system = dataclasses.replace(system, device=scaled)
        return moe(system) if moe else system

    return apply


def mean_error(entries, override) -> float:
    return statistics.fmean(abs(r.error) for r in evaluate_all(entries, override))


def fit_alpha(entries) -> tuple[float, float]:
    """(mean |error|, alpha) of the grid's best alpha on ``entries`` (ties to the smaller)."""
    return min((mean_error(entries, power_override(a)), a) for a in ALPHA_GRID)


def same_configuration_pairs(entries) -> list[tuple[dict, dict]]:
    """(B200 run, GB200 run) pairs of one configuration: ids that differ only in the system, the same GPUs, workload
    and mapping (Megatron-Bridge's tables run Llama 3 8B alike on both)."""
    runs = {e["id"]: e for e in entries}
    pairs = []
    for run_id, b200 in runs.items():
        gb200 = runs.get(run_id.replace("-dgx-b200-", "-dgx-gb200-"))
        if "-dgx-b200-" in run_id and gb200 and all(b200[k] == gb200[k] for k in ("num_gpus", "workload", "mapping")):
            pairs.append((b200, gb200))
    return pairs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--alpha", type=float, help="the exponent to try instead of fitting it (0 to 2)")
    args = parser.parse_args(argv)
    if args.alpha is not None and not 0.0 <= args.alpha <= 2.0:
        print(f"power_cap_sensitivity.py: --alpha must be from 0 to 2, got {args.alpha}", file=sys.stderr)
        return 2
    entries = [e for e in load_all_runs() if family(e["id"]) not in OUTSIDE_MODEL]
    dense = {device: device_entries(entries, device) for device in FIT_DEVICES}
    calibration = [e for runs in dense.values() for e in runs]
    fitted = fit_alpha(calibration)[1] if args.alpha is None else args.alpha
    print(
        f"alpha {fitted:.2f} ({'fitted' if args.alpha is None else 'given'}): {len(calibration)} dense calibration runs on "
        f"{', '.join(FIT_DEVICES)}, mean |error| {100 * mean_error(calibration, power_override(0.0)):.1f} % at 0, "
        f"{100 * mean_error(calibration, power_override(fitted)):.1f} % at alpha"
    )
    caps = {name: load_device(name).tdp_w for name in POWER_DEVICES}
    print("  shares: " + ", ".join(f"{name} ({watts:.0f} W) {share(watts, fitted):.3f}" for name, watts in caps.items()))
    for device, held in dense.items():
        alpha_out = fit_alpha([e for e in calibration if e not in held])[1]
        print(
            f"  without {device}: alpha {alpha_out:.2f}, its {len(held)} runs {100 * mean_error(held, power_override(alpha_out)):.1f} % "
            f"({100 * mean_error(held, power_override(0.0)):.1f} % at 0)"
        )
    moe_calibration = [e for e in entries if family(e["id"]) in MOE_CALIBRATION]
    error, expert = moe_expert_fit(moe_calibration, power_override(fitted))
    print(
        f"routed-expert efficiency refitted at alpha {fitted:.2f}: {expert:.2f}, its {len(moe_calibration)} runs {100 * error:.1f} %"
    )
    groups = {  # as benchmarks/accuracy.py reports them
        "dense in sample": [e for e in entries if family(e["id"]) not in APART],
        "dense out of sample": [e for e in entries if family(e["id"]) in DENSE_CHECK],
        "MoE in sample": [e for e in entries if family(e["id"]) in MOE_CALIBRATION],
        "MoE out of sample": [e for e in entries if family(e["id"]) in MOE_CHECK],
    }
    print("\nthe same configuration on B200 (1,000 W) and GB200 (1,200 W), step-time ratio B200 / GB200:")
    for b200, gb200 in same_configuration_pairs(entries):
        model = {}
        for a in (0.0, fitted):
            slow, fast = evaluate_all([b200, gb200], power_override(a))
            model[a] = slow.predicted_step_s / fast.predicted_step_s
        measured = b200["measured"]["step_time_s"] / gb200["measured"]["step_time_s"]
        print(f"  {b200['id']:<50} measured {measured:.3f}, model {model[0.0]:.3f} at 0, {model[fitted]:.3f} at alpha")
    trials = (("as the files stand", power_override(0.0)), (f"alpha {fitted:.2f}", power_override(fitted)))
    trials += ((f"alpha {fitted:.2f}, moe_expert {expert:.2f}", power_override(fitted, expert)),)
    print(f"\n{'runs':<28}" + "".join(f"{label:>32}" for label, _ in trials))
    for name, runs in groups.items():
        print(f"{name + f' ({len(runs)})':<28}" + "".join(f"{100 * mean_error(runs, o):>31.2f}%" for _, o in trials))
    return 0


if __name__ == "__main__":
    sys.exit(main())
