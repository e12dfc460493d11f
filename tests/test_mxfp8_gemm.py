"""MXFP8's block-scaled dense GEMMs against the per-tensor FP8 curve (efficiency.mxfp8_gemm, compute.dense_gemm_share),
fitted by benchmarks/calibrate.py --mxfp8 on published MXFP8/FP8-CS pairs (benchmarks/mxfp8_pairs.py)."""

import copy
import dataclasses
import sys
from pathlib import Path

import pytest

from parasol.model import compute
from parasol.model.choices import LowPrecisionRecipe as R
from parasol.solver.library import load_device, load_model
from parasol.solver.validation import evaluate_run, load_runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import mxfp8_pairs  # noqa: E402  (benchmarks/mxfp8_pairs.py)

BLACKWELL = ("b200", "b300", "gb200", "gb300")


@pytest.fixture(scope="module")
def fitted():
    return mxfp8_pairs.fit(mxfp8_pairs.fitted_pairs())


def test_the_device_files_hold_the_fit_and_it_explains_the_pairs(fitted):
    """The 4 pairs of Megatron-Bridge 25.11 (MXFP8 3.7-5.9 % slower than FP8-CS per step) give 0.87, their ratio error
    7.1 -> 0.8 % (python benchmarks/calibrate.py --mxfp8, 2026-11-29); 0.88 once the Blackwell training steps ran their
    GEMM curves at efficiency.training_gemm (7.1 -> 1.0 %, the same day); every Blackwell file holds it."""
    error, share = fitted
    assert {load_device(name).mxfp8_gemm_efficiency for name in BLACKWELL} == {share}
    assert 0.8 < share < 0.95 and error < 0.015
    assert mxfp8_pairs.mean_abs(mxfp8_pairs.ratio_errors(mxfp8_pairs.fitted_pairs(), 1.0)) > 0.05
    assert load_device("h100-sxm-80gb").mxfp8_gemm_efficiency == 1.0  # no MXFP8 before Blackwell


def test_the_fit_holds_on_the_out_of_sample_pairs(fitted):
    """Megatron-Bridge 25.09's seven pairs, never fitted: mean |ratio error| 4.5 % at 1, 2.1 % at the fit."""
    checks = mxfp8_pairs.check_pairs()
    assert len(checks) == 7 and all(p.current["mapping"] == p.mxfp8["mapping"] for p in checks)
    before = mxfp8_pairs.mean_abs(mxfp8_pairs.ratio_errors(checks, 1.0))
    after = mxfp8_pairs.mean_abs(mxfp8_pairs.ratio_errors(checks, fitted[1]))
    assert after < 0.6 * before and after < 0.03


def test_only_mxfp8_takes_the_share():
    b200 = load_device("b200")
    assert compute.dense_gemm_share(b200, R.MXFP8) == b200.mxfp8_gemm_efficiency < 1.0
    for recipe in (None, R.DELAYED, R.TENSORWISE, R.BLOCKWISE, R.NVFP4):
        assert compute.dense_gemm_share(b200, recipe) == 1.0, recipe


def test_a_compute_bound_layer_slows_by_the_share_and_the_routed_experts_keep_their_measured_rate():
    """Llama 3 8B's layer GEMMs at 16K tokens are compute-bound: 1/share longer. An MoE layer's routed experts are
    grouped GEMMs whose Blackwell rate is the measured MXFP8 grouped GEMM's (grouped_fp8): only the dense rest slows."""
    b200, share = load_device("b200"), load_device("b200").mxfp8_gemm_efficiency
    dense = load_model("llama3-8b")
    plain = compute.layer_gemm_forward_time_s(dense, b200, "fp8", 16384.0, 1)
    assert compute.layer_gemm_forward_time_s(dense, b200, "fp8", 16384.0, 1, rate_share=share) == pytest.approx(plain / share)
    entry = next(e for e in load_runs() if e["id"] == "mbridge2511-qwen3_30b_a3b-dgx-b200-8gpu-fp8-mx")
    tensorwise = copy.deepcopy(entry)
    tensorwise["workload"]["low_precision_recipe"] = "tensorwise"
    mx, cs = (evaluate_run(e).evaluation.breakdown["time_s"] for e in (entry, tensorwise))
    moe = load_model("qwen3-30b-a3b")
    b200 = dataclasses.replace(b200, gemm_scale=b200.training_gemm_efficiency)  # as a training problem runs it
    tokens = 4096.0  # micro-batch 1 x 4,096
    routed = compute.moe_routed_forward_time_s(moe, b200, "fp8", tokens, 1, 8)
    dense_part = compute.layer_gemm_forward_time_s(moe, b200, "fp8", tokens, 1, True)
    layer_passes = 3 * 48 * 64  # forward + backward (x2) GEMMs, 48 layers, 64 micro-batches
    assert mx["compute/gemm"] - cs["compute/gemm"] == pytest.approx(layer_passes * dense_part * (1 / share - 1), rel=1e-6)
    assert routed > 2 * dense_part  # the experts, most of its GEMM time, unchanged
