"""Three other shapes for the routed-expert block, each fitted on the MoE calibration runs and measured out of sample.

    python benchmarks/moe_structure_trials.py

The model times the routed experts of an MoE layer as their GEMMs on the device's curve over one number,
``efficiency.moe_expert`` (``compute.moe_routed_forward_time_s``), fitted on the 20 MoE calibration runs
(``calibrate.py --moe``: Megatron-Bridge 25.09's 3 and 25.11's 17). Issue 13 asks for that block from the
shapes rather than one fitted constant. This script fits three alternatives the same way (least mean |error|
of the step time over the calibration runs, exhaustive grids) and prints, beside the stored structure:
in sample, leaving out one source, and on the 37 MoE runs outside the calibration set (``calibrate.MOE_CHECK``).

- ``per device``: one moe_expert per device (H100, B200, GB200, GB300), each fitted on that device's runs
  (grid 0.20-1.00, step 0.01, as calibrate.py --moe); a device without calibration runs takes the global fit.
- ``per local expert``: a fixed cost per local expert per MoE layer forward (``overhead``, seconds; the
  backward takes twice it, as it takes twice each GEMM), what launching one GEMM and one quantisation per
  expert costs beside the grouped GEMMs (Transformer Engine's GroupedLinear), with moe_expert fitted with
  it, at most 1 (the H100's grouped GEMMs of 2,048 rows or more per expert run at 0.98 of the dense
  rate: problems/measurements/h100-kernel-microbench.yaml). Grid: overhead 0-160 us (step 10), moe_expert
  0.60-1.00 (step 0.05).
- ``per MoE layer``: a fixed cost per MoE layer forward (``overhead``, seconds; the backward takes twice it), what
  the host's wait for the routed-token counts costs each layer (Megatron-Core's dispatchers copy them to the host
  and synchronise before the grouped GEMMs can be launched: ``_maybe_dtoh_and_synchronize``), with moe_expert
  fitted with it, at most 1. Grid: overhead 0-2,000 us (step 100), moe_expert 0.50-1.00 (step 0.05).

None of the alternatives is in the model: this script times the last two by wrapping
``compute.moe_routed_forward_time_s`` for its own process, on a device type that carries the trial
overheads (so that the model's caches key on them).

What it showed (docs/accuracy.md, "Other shapes for the routed-expert block"): each fits the
calibration runs better and the runs outside them worse, so the model keeps one number.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate import DEVICE_OF_SYSTEM, MOE_CALIBRATION, MOE_CHECK  # noqa: E402  benchmarks/calibrate.py

from parasol.model import compute  # noqa: E402
from parasol.model.hashing import hash_once  # noqa: E402
from parasol.model.specs import DeviceSpec  # noqa: E402
from parasol.solver.validation import evaluate_all, family, load_all_runs  # noqa: E402

PER_DEVICE_GRID = tuple(x / 100 for x in range(20, 101))
OVERHEAD_GRID_US = tuple(range(0, 161, 10))
EXPERT_GRID = tuple(x / 100 for x in range(60, 101, 5))
LAYER_OVERHEAD_GRID_US = tuple(range(0, 2001, 100))
LAYER_EXPERT_GRID = tuple(x / 100 for x in range(50, 101, 5))


@dataclasses.dataclass(frozen=True)
class TrialDevice(DeviceSpec):
    """A device with trial costs per local expert and per MoE layer, each per MoE layer forward (seconds)."""

    __hash__ = hash_once  # over every field, the trials' too: the model's caches key on them

    expert_overhead_s: float = 0.0
    layer_overhead_s: float = 0.0


def trial_device(device: DeviceSpec, expert: float, overhead_s: float, layer_s: float = 0.0) -> TrialDevice:
    """``device`` at routed-expert efficiency ``expert`` with ``overhead_s`` per local expert and ``layer_s`` per MoE layer."""
    fields = {f.name: getattr(device, f.name) for f in dataclasses.fields(DeviceSpec)}
    return TrialDevice(**{**fields, "moe_expert_efficiency": expert}, expert_overhead_s=overhead_s, layer_overhead_s=layer_s)


def trial_override(expert: float, overhead_s: float = 0.0, layer_s: float = 0.0):
    """A ``system_override`` (``validation.evaluate_all``) putting the trial device in the system."""

    def override(system):
        return dataclasses.replace(system, device=trial_device(system.device, expert, overhead_s, layer_s))

    return override


def with_trial_overheads(routed):
    """``compute.moe_routed_forward_time_s`` plus the device's trial overheads: one for each of the E/ep local experts
    and one for the layer."""

    @functools.wraps(routed)
    def timed(model, device, precision, tokens, tp, ep, etp=1, rate_share=1.0):
        per_expert = model.moe.experts / ep * getattr(device, "expert_overhead_s", 0.0)
        routed_s = routed(model, device, precision, tokens, tp, ep, etp, rate_share)
        return routed_s + per_expert + getattr(device, "layer_overhead_s", 0.0)

    return timed


def errors(entries, expert: float, overhead_s: float = 0.0, layer_s: float = 0.0) -> dict[str, float]:
    """Each run's relative step-time error at the trial values."""
    return {r.run_id: r.error for r in evaluate_all(entries, trial_override(expert, overhead_s, layer_s))}


def mean_abs(table: dict[str, float], ids) -> float:
    return statistics.fmean(abs(table[i]) for i in ids)


def best(tables: dict, ids) -> tuple:
    """The key of ``tables`` (trial values -> errors by run) with the least mean |error| over ``ids``."""
    return min(tables, key=lambda key: (mean_abs(tables[key], ids), key))


def report(name: str, fitted: str, error_of, calibration, check, sources, devices) -> None:
    """One structure's line: in sample, each source left out, out of sample and per device out of sample."""
    ids = [e["id"] for e in calibration]
    out = [e["id"] for e in check]
    print(f"{name}: {fitted}")
    print(f"  in sample {100 * statistics.fmean(abs(error_of(None, i)) for i in ids):.1f} % ({len(ids)} runs)")
    for source in sources:
        held = [e["id"] for e in calibration if family(e["id"]) == source]
        print(f"  without {source}: its {len(held)} runs {100 * statistics.fmean(abs(error_of(source, i)) for i in held):.1f} %")
    print(f"  out of sample {100 * statistics.fmean(abs(error_of(None, i)) for i in out):.1f} % ({len(out)} runs)")
    for device in sorted({devices[i] for i in out}):
        held = [i for i in out if devices[i] == device]
        print(f"    {device:<16} {len(held):3d} runs {100 * statistics.fmean(abs(error_of(None, i)) for i in held):5.1f} %")


def main() -> int:
    compute.moe_routed_forward_time_s = with_trial_overheads(compute.moe_routed_forward_time_s)
    entries = load_all_runs()
    calibration = [e for e in entries if family(e["id"]) in MOE_CALIBRATION]
    check = [e for e in entries if family(e["id"]) in MOE_CHECK]
    runs = calibration + check
    devices = {e["id"]: DEVICE_OF_SYSTEM[e["system"]] for e in runs}
    sources = [s for s in MOE_CALIBRATION if any(family(e["id"]) == s for e in calibration)]
    ids_of = {s: [e["id"] for e in calibration if family(e["id"]) != s] for s in sources}
    ids_of[None] = [e["id"] for e in calibration]

    def show(name: str, fitted: str, error_of) -> None:
        report(name, fitted, error_of, calibration, check, sources, devices)

    # one number for every device, and one per device: the same grid of moe_expert
    by_expert = {(x,): errors(runs, x) for x in PER_DEVICE_GRID}
    fit_global = {s: best(by_expert, ids)[0] for s, ids in ids_of.items()}
    show(
        "stored structure (one moe_expert)",
        f"moe_expert {fit_global[None]:.2f}",
        lambda s, i: by_expert[(fit_global[s],)][i],
    )

    def per_device_fit(ids):
        fitted = {}
        for device in {devices[i] for i in ids}:
            own = [i for i in ids if devices[i] == device]
            fitted[device] = best(by_expert, own)[0]
        return fitted

    fit_device = {s: per_device_fit(ids) for s, ids in ids_of.items()}
    show(
        "one moe_expert per device",
        ", ".join(f"{d} {x:.2f}" for d, x in sorted(fit_device[None].items())) + f"; others {fit_global[None]:.2f}",
        lambda s, i: by_expert[(fit_device[s].get(devices[i], fit_global[s]),)][i],
    )

    def two_numbers(name: str, describe, grid, error_at) -> None:
        """A structure of two fitted numbers: every grid point's errors, the best on each calibration subset."""
        tables = {key: error_at(*key) for key in grid}
        fitted = {s: best(tables, ids) for s, ids in ids_of.items()}
        show(name, describe(*fitted[None]), lambda s, i: tables[fitted[s]][i])

    two_numbers(
        "a cost per local expert",
        lambda us, x: f"overhead {us} us per local expert per MoE layer forward, moe_expert {x:.2f}",
        [(us, x) for us in OVERHEAD_GRID_US for x in EXPERT_GRID],
        lambda us, x: errors(runs, x, us * 1e-6),
    )
    two_numbers(
        "a cost per MoE layer",
        lambda us, x: f"overhead {us} us per MoE layer forward, moe_expert {x:.2f}",
        [(us, x) for us in LAYER_OVERHEAD_GRID_US for x in LAYER_EXPERT_GRID],
        lambda us, x: errors(runs, x, 0.0, us * 1e-6),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
