"""How the training figures move when a device's NVLink efficiency is set to a trial value.

    python benchmarks/network_sensitivity.py DEVICE=EFFICIENCY [DEVICE=EFFICIENCY ...]

e.g. ``gb200=0.76 gb300=0.76 b200=0.70 b300=0.70``, the shares of the line rate XLA's collective table
measures on NVLink5 (docs/collectives.md). Every published training run on those devices (problems/validation/
training_runs.yaml, Megatron SC'21's ZeRO-3 runs left out as benchmarks/accuracy.py reports them apart) is
evaluated with the system file's ``scale_up.efficiency`` and with the trial one; the runs whose error moves by
more than a point are listed, and the mean |error| of each family kind (dense or MoE, in or out of sample)
before and after. Nothing is written.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys

from calibrate import DENSE_CHECK, MOE_CALIBRATION, MOE_CHECK  # benchmarks/calibrate.py: the families, fitted or not

from parasol.solver.library import load_system, names
from parasol.solver.validation import evaluate_run, family, load_runs


def parse(argv: list[str], devices: tuple = ()) -> dict:
    """{device: efficiency} from DEVICE=EFFICIENCY arguments, each DEVICE one of ``devices`` (the library's device
    files; any name when empty); ValueError naming the one at fault."""
    trial = {}
    for arg in argv:
        device, _, value = arg.partition("=")
        if devices and device not in devices:
            raise ValueError(f"{arg}: unknown device {device!r}; allowed: {', '.join(devices)}")
        try:
            trial[device] = float(value)
        except ValueError:
            raise ValueError(f"expected DEVICE=EFFICIENCY (e.g. gb200=0.76), got {arg!r}") from None
        if not 0.0 < trial[device] <= 1.0:
            raise ValueError(f"{arg}: the efficiency must be in (0, 1]")
    if not trial:
        raise ValueError("give at least one DEVICE=EFFICIENCY (e.g. gb200=0.76)")
    return trial


def main(argv=None) -> int:
    try:
        trial = parse(sys.argv[1:] if argv is None else argv, tuple(names("systems/devices")))
    except ValueError as exc:
        print(f"network_sensitivity.py: {exc}", file=sys.stderr)
        return 2

    def override(system):
        if system.device.name not in trial:
            return system
        return dataclasses.replace(system, scale_up=dataclasses.replace(system.scale_up, efficiency=trial[system.device.name]))

    kinds: dict = {}
    for entry in load_runs():
        name = family(entry["id"])
        if "ZeRO-3" in name:
            continue
        if load_system(entry["system"], entry["num_gpus"]).device.name not in trial:
            continue
        before = evaluate_run(entry)
        after = evaluate_run(entry, override)
        kind = (
            "MoE" if name in MOE_CALIBRATION + MOE_CHECK else "dense",
            "out of sample" if name in DENSE_CHECK + MOE_CHECK else "in sample",
        )
        kinds.setdefault(kind, []).append((before.error, after.error))
        if abs(after.error - before.error) > 0.01:
            print(f"  {entry['id']:<70}{100 * before.error:+7.1f} % -> {100 * after.error:+7.1f} %")
    for (moe, sample), pairs in sorted(kinds.items()):
        b = statistics.fmean(abs(x) for x, _ in pairs)
        a = statistics.fmean(abs(y) for _, y in pairs)
        print(f"{moe:<6}{sample:<15}{len(pairs):>4} runs  mean |error| {100 * b:5.1f} % -> {100 * a:5.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
