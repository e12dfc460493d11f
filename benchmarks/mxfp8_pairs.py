"""The MXFP8 GEMM share (efficiency.mxfp8_gemm) fitted on pairs of runs that differ only in the FP8 recipe.

    python benchmarks/calibrate.py --mxfp8

The devices' FP8 GEMM curves come from per-tensor-scaled GEMMs (MAMF: torch._scaled_mm). MXFP8's GEMMs apply an
E8M0 scale per 32 values along K; no kernel measurement of them on Blackwell is at hand. Published whole steps of
one configuration in both recipes are: problems/validation/mxfp8_pairs.yaml (Megatron-Bridge 25.11's table, the
calibration set's source: Llama 3 8B on B200, GB200 and GB300, Llama 3.1 405B on B200). ``fit`` takes the share,
one for every Blackwell device (the same tensor cores), by grid search (0.70-1.00, step 0.01) of the mean
|model ratio / measured ratio - 1| over the pairs, the ratio being MXFP8's step time over FP8-CS's: what the model
gets wrong in both runs alike cancels. ``main`` prints it, each pair's error under the share fitted without it, and
the error on the out-of-sample pairs (Megatron-Bridge 25.09's, mbridge_2509_runs.yaml: a -cs run and its -mx twin
with the same mapping), before and at the fit; and exits 1 where a Blackwell device file holds another value.
"""

from __future__ import annotations

import copy
import statistics
from typing import NamedTuple

from parasol.solver.inference_validation import with_device_fields
from parasol.solver.library import library_root, load_device, read_yaml
from parasol.solver.validation import evaluate_all, load_runs

GRID = tuple(k / 100 for k in range(70, 101))
BLACKWELL = ("b200", "b300", "gb200", "gb300")  # the devices whose files hold the fitted share


class Pair(NamedTuple):
    """A configuration's FP8-CS run and its MXFP8 twin (validation entries), with the measured step-time ratio."""

    name: str
    current: dict
    mxfp8: dict
    measured_ratio: float


def twin(entry: dict, step_time_s: float) -> dict:
    """The entry run in MXFP8 instead, its measured step ``step_time_s``."""
    out = copy.deepcopy(entry)
    out["id"] = entry["id"].removesuffix("-cs") + "-mx"
    out["workload"]["low_precision_recipe"] = "mxfp8"
    out["measured"] = {"step_time_s": step_time_s, "derived_from": "the MXFP8 throughput of the same row"}
    return out


def fitted_pairs() -> list[Pair]:
    """The pairs of problems/validation/mxfp8_pairs.yaml, each FP8-CS run from training_runs.yaml."""
    runs = {e["id"]: e for e in load_runs()}
    rows = read_yaml(library_root() / "validation" / "mxfp8_pairs.yaml", "validation file")["pairs"]
    pairs = []
    for row in rows:
        current = runs[row["run"]]
        ratio = row["fp8_cs_tokens_per_s_per_gpu"] / row["mxfp8_tokens_per_s_per_gpu"]
        pairs.append(Pair(row["run"], current, twin(current, current["measured"]["step_time_s"] * ratio), ratio))
    return pairs


def check_pairs() -> list[Pair]:
    """Megatron-Bridge 25.09's pairs (mbridge_2509_runs.yaml): each -cs run whose -mx twin has the same mapping."""
    runs = {e["id"]: e for e in load_runs(name="mbridge_2509_runs.yaml")}
    pairs = []
    for run_id, current in runs.items():
        mx = runs.get(run_id.removesuffix("-cs") + "-mx")
        if run_id.endswith("-cs") and mx and mx["mapping"] == current["mapping"]:
            ratio = mx["measured"]["step_time_s"] / current["measured"]["step_time_s"]
            pairs.append(Pair(run_id, current, mx, ratio))
    return pairs


def ratio_errors(pairs: list[Pair], share: float) -> list[float]:
    """Each pair's model step-time ratio (MXFP8 over FP8-CS, every device at ``share``) over its measured one, - 1."""
    results = evaluate_all([e for p in pairs for e in (p.current, p.mxfp8)], with_device_fields(mxfp8_gemm_efficiency=share))
    return [
        mx.predicted_step_s / cs.predicted_step_s / p.measured_ratio - 1 for p, cs, mx in zip(pairs, results[::2], results[1::2])
    ]


def mean_abs(errors: list[float]) -> float:
    return statistics.fmean(abs(e) for e in errors)


def fit(pairs: list[Pair]) -> tuple[float, float]:
    """(mean |ratio error|, share) of the grid's best share (ties to the smaller)."""
    return min((mean_abs(ratio_errors(pairs, x)), x) for x in GRID)


def main() -> int:
    pairs = fitted_pairs()
    error, share = fit(pairs)
    print(
        f"mxfp8_gemm {share:.2f}: {len(pairs)} pairs, mean |ratio error| {100 * error:.1f} % "
        f"({100 * mean_abs(ratio_errors(pairs, 1.0)):.1f} % at 1)"
    )
    for held, own in zip(pairs, ratio_errors(pairs, share)):
        _, without = fit([p for p in pairs if p is not held])
        (out,) = ratio_errors([held], without)
        print(
            f"  {held.name:<52} measured x{held.measured_ratio:.3f}, error {100 * own:+.1f} %; "
            f"fitted without it {without:.2f}: {100 * out:+.1f} %"
        )
    checks = check_pairs()
    before, after = ratio_errors(checks, 1.0), ratio_errors(checks, share)
    print(f"out of sample: {len(checks)} pairs of Megatron-Bridge 25.09 (mbridge_2509_runs.yaml)")
    for p, b, a in zip(checks, before, after):
        print(f"  {p.name:<52} measured x{p.measured_ratio:.3f}, error {100 * b:+.1f} % at 1, {100 * a:+.1f} % at the fit")
    print(f"  mean |ratio error| {100 * mean_abs(before):.1f} % at 1, {100 * mean_abs(after):.1f} % at the fit")
    stored = {name: load_device(name).mxfp8_gemm_efficiency for name in BLACKWELL}
    differ = {name: value for name, value in stored.items() if abs(value - share) > 1e-9}
    if differ:
        print("device files holding another value: " + ", ".join(f"{n} {v:.2f}" for n, v in differ.items()))
        return 1
    return 0
