"""Float8BlockScaling's GEMMs on Hopper (efficiency.block_fp8_gemm and efficiency.block_fp8_grouped;
compute.dense_gemm_share and compute.routed_gemm_share), measured on a lent H200 by
benchmarks/fp8_scaling_microbench.py (problems/measurements/h200-fp8-scaling-microbench.yaml) and derived by
benchmarks/device_curves.py."""

import statistics
import sys

import pytest
import yaml
from conftest import REPO, write_yaml

from parasol.model import compute
from parasol.model.choices import LowPrecisionRecipe as R
from parasol.model.errors import ProblemError
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.library import load_device, load_model
from parasol.solver.problem import parse_problem

sys.path.insert(0, str(REPO / "benchmarks"))
import device_curves  # noqa: E402  (benchmarks/device_curves.py)
import fp8_scaling_microbench as bench  # noqa: E402

HOPPER = ("h100-sxm-80gb", "h200-sxm-141gb", "h800-sxm-80gb")
MEASUREMENT = REPO / "problems" / "measurements" / "h200-fp8-scaling-microbench.yaml"


@pytest.fixture(scope="module")
def measured():
    return yaml.safe_load(MEASUREMENT.read_text())


def test_the_hopper_files_hold_the_shares_the_measurement_gives(measured):
    """0.77 of the FP8 curve for the dense linears (11, range 0.72-0.79), 0.89 of the row-wise grouped rate for the
    expert shapes (8, range 0.78-0.97), measured 2026-11-29; every block layout was checked against the dequantised
    product before it was timed, so the times are of kernels that apply the block scales."""
    shares = device_curves.block_fp8_shares(measured)
    assert 0.6 < shares.dense < shares.grouped < 1.0
    for name in HOPPER:
        device = load_device(name)
        assert (device.block_fp8_gemm_efficiency, device.block_fp8_grouped_efficiency) == tuple(shares), name
    layouts = measured["meta"]["block_layouts"]
    assert all(layouts[s]["checked"] and layouts[s]["rel_err"] < 0.01 for s in bench.SCALINGS)
    for name in ("b200", "gb200", "a100-sxm-80gb"):  # not measured there: nothing taken
        assert load_device(name).block_fp8_gemm_efficiency == load_device(name).block_fp8_grouped_efficiency == 1.0


def test_an_unchecked_layout_is_refused_by_the_derivation(measured):
    broken = {**measured, "meta": {**measured["meta"], "block_layouts": dict(measured["meta"]["block_layouts"])}}
    broken["meta"]["block_layouts"]["block_1x128_1x128"] = {"layout": ["outer", "outer"], "checked": False}
    with pytest.raises(ValueError, match="not checked"):
        device_curves.block_fp8_shares(broken)


def test_the_weight_gradient_with_1x128_scales_on_both_operands_is_the_slowest_pass(measured):
    """Measured, per pass over the shapes: 0.87 (forward), 0.87 (data gradient), 0.67 (weight gradient) of per-tensor
    scaling; row-wise scales cost 4-7 %. The model takes one share per linear, which weighs its three GEMMs by time."""
    summary = bench.summarise(measured)
    block = summary["block_1x128_128x128_share_median"]
    assert summary["block_1x128_1x128_share_median"]["wgrad"] < min(block.values()) - 0.1
    assert all(0.9 < v < 1.0 for v in summary["rowwise_share_median"].values())


def test_only_the_blockwise_recipe_takes_the_shares():
    h100 = load_device("h100-sxm-80gb")
    assert compute.dense_gemm_share(h100, R.BLOCKWISE) == h100.block_fp8_gemm_efficiency < 1.0
    assert compute.routed_gemm_share(h100, R.BLOCKWISE) == h100.block_fp8_grouped_efficiency < 1.0
    for recipe in (None, R.DELAYED, R.TENSORWISE, R.MXFP8):
        assert compute.dense_gemm_share(h100, recipe) == compute.routed_gemm_share(h100, recipe) == 1.0, recipe


def test_the_routed_experts_slow_by_their_share_and_the_router_does_not():
    """DeepSeek-V3's MoE layer at 4,096 tokens, ep 64: the grouped expert GEMMs run at 0.89 of their row-wise rate; the
    router is Megatron-Core's own 16-bit linear, outside Transformer Engine's recipe."""
    model, h800 = load_model("deepseek-v3"), load_device("h800-sxm-80gb")
    share = h800.block_fp8_grouped_efficiency
    plain = compute.moe_routed_forward_time_s(model, h800, "fp8", 4096.0, 1, 64)
    scaled = compute.moe_routed_forward_time_s(model, h800, "fp8", 4096.0, 1, 64, rate_share=share)
    router = compute.gemm_time_s(h800, 4096.0, model.moe.experts, model.hidden, "bf16") / h800.moe_expert_efficiency
    assert scaled - router == pytest.approx((plain - router) / share, rel=1e-9)


def test_deepseek_v3s_step_under_blockwise_scaling_spends_more_on_its_gemms():
    """The published mapping (pp 16, ep 64, DualPipe) under Float8BlockScaling against per-tensor current scaling: the
    GEMM time grows by between the grouped and the dense share's loss (the step mixes both), and the step with it."""
    data = yaml.safe_load((REPO / "problems" / "examples" / "deepseek-v3-h800.yaml").read_text())
    data["mapping"] = {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "micro_batch": 1, "recompute": "selective", "dualpipe": True}
    evs = {}
    for recipe in ("blockwise", "tensorwise"):
        problem = parse_problem({**data, "workload": {**data["workload"], "low_precision_recipe": recipe}}, source="t.yaml")
        evs[recipe] = evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping())
    h800 = load_device("h800-sxm-80gb")
    gemm = {recipe: ev.breakdown["time_s"]["compute/gemm"] for recipe, ev in evs.items()}
    assert 1 / h800.block_fp8_grouped_efficiency < gemm["blockwise"] / gemm["tensorwise"] < 1 / h800.block_fp8_gemm_efficiency
    assert evs["blockwise"].metrics["step_time_s"] > evs["tensorwise"].metrics["step_time_s"]


@pytest.mark.parametrize("key", ["block_fp8_gemm", "block_fp8_grouped"])
def test_a_share_out_of_range_is_refused_naming_the_file_and_field(tmp_path, key):
    device = yaml.safe_load((REPO / "problems" / "systems" / "devices" / "h100-sxm-80gb.yaml").read_text())
    device.pop("name", None)
    device["efficiency"][key] = 1.5
    write_yaml(tmp_path / "h100-bad.yaml", device)
    system = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    system["device"] = {"file": "h100-bad.yaml"}
    with pytest.raises(ProblemError, match=r"\(0, 1\]") as exc:
        library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
    assert exc.value.field == f"efficiency.{key}" and exc.value.source.endswith("h100-bad.yaml")


def test_the_measured_blockwise_rate_is_what_a_blockwise_plan_is_charged():
    """A whole layer at the measured shares: Llama 3 70B's GEMMs at tp 4 and 8,192 tokens are compute-bound, so
    under blockwise scaling they take 1/0.77 of their time under per-tensor scaling, within the curve's rounding;
    the measured linears of that layer took 1/0.77 (the median of their own ratios) too."""
    model, h100 = load_model("llama3-70b"), load_device("h100-sxm-80gb")
    share = h100.block_fp8_gemm_efficiency
    plain = compute.layer_gemm_forward_time_s(model, h100, "fp8", 8192.0, 4)
    blockwise = compute.layer_gemm_forward_time_s(model, h100, "fp8", 8192.0, 4, rate_share=share)
    assert blockwise / plain == pytest.approx(1 / share, rel=0.02)
    entries = yaml.safe_load(MEASUREMENT.read_text())["scaling"]["entries"]
    llama = {}
    for e in entries:
        if e["model"] == "llama3-70b tp4":
            llama.setdefault(e["layer"], []).append(e)
    ratios = [
        sum(e["tensorwise_fast_seconds"] for e in passes)
        / sum(e.get("block_1x128_128x128_seconds", e.get("block_1x128_1x128_seconds")) for e in passes)
        for passes in llama.values()
    ]
    assert len(ratios) == 4 and abs(statistics.median(ratios) - share) < 0.02


def test_the_hopper_curves_gemms_sustain_their_burst_rate_and_split_accumulation_does_not():
    """The curves were measured in short bursts; a training step holds its GEMMs for minutes. Held 8 s each on the lent
    H200 (problems/measurements/h200-gemm-sustained-microbench.yaml), bf16 and fast-accumulation FP8 keep their burst rate
    (median 0.99 and 1.02 over six shapes), which is why the Hopper files keep efficiency.training_gemm at 1. Split
    accumulation (Transformer Engine's data- and weight-gradient FP8 GEMMs) sustains 0.91-0.97 of fast accumulation,
    measured and not yet taken by the model."""
    measured = yaml.safe_load((REPO / "problems" / "measurements" / "h200-gemm-sustained-microbench.yaml").read_text())
    entries = measured["sustained"]["entries"]
    assert len({e["shape"] for e in entries}) == 6
    for kind in ("bf16", "fp8_fast"):
        assert 0.95 < statistics.median(e["median_over_burst"] for e in entries if e["kind"] == kind) < 1.05, kind
    assert load_device("h200-sxm-141gb").training_gemm_efficiency == 1.0
    rates = {}
    for e in entries:
        rates.setdefault(e["shape"], {})[e["kind"]] = e["tflops_median"]
    assert all(0.88 < r["fp8_tensorwise"] / r["fp8_fast"] < 0.98 for r in rates.values())
