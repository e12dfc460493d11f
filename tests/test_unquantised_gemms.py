"""GEMMs a quantised checkpoint leaves at 16 bits (workload.unquantised_gemms): their weights are stored and computed
at 16 bits while the rest of the layer runs at the workload's precision. ModelOpt's NVFP4 DeepSeek-R1, the checkpoint
MLPerf Inference v5.1 ran, excludes MLA's fused_a (q_down and kv_down), q_b_proj (q_up) and kv_b_proj (kv_up)
(code/deepseek-r1/tensorrt/hf_quant_config.json, exclude_modules)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from conftest import REPO, run_main, write_yaml

from parasol.model import compute, inference
from parasol.model.choices import LayerGemm
from parasol.model.precision import stored_bytes_per_element
from parasol.model.specs import InferenceWorkload
from parasol.solver.library import load_model, load_system
from parasol.solver.problem import parse_problem

MLA_PROJECTIONS = ("q_down", "q_up", "kv_down", "kv_up")
FP4 = InferenceWorkload(input_len=804, output_len=3736, precision="fp4", weight_precision="fp4", kv_precision="fp8")


def _stage(model, pp: int = 1):
    return inference.stage_layouts(model, pp)[0]


def test_deepseek_mla_projections_at_16_bits_add_their_weights_counted_from_the_config():
    """DeepSeek-V3's config: per layer fused_a 7,168 x (1,536 + 576), q_b_proj 1,536 x 128·192 and kv_b_proj
    512 x 128·(128 + 128) = 69,664,768 weights; over 61 layers at 2 bytes instead of NVFP4's 0.5625 (values and
    an E4M3 scale per 16) on one GPU of tp 1: 6.11 GB more."""
    model = load_model("deepseek-v3")
    per_layer = 7168 * (1536 + 576) + 1536 * 128 * 192 + 512 * 128 * 256
    assert per_layer == 69_664_768
    wide = dataclasses.replace(FP4, unquantised_gemms=MLA_PROJECTIONS)
    stage = _stage(model)
    added = inference.stage_weight_bytes(model, wide, stage, 1, 8) - inference.stage_weight_bytes(model, FP4, stage, 1, 8)
    assert added == pytest.approx(61 * per_layer * (2 - stored_bytes_per_element("fp4")))
    assert added == pytest.approx(6.11e9, rel=1e-3)


def test_every_gemm_unquantised_is_the_16_bit_layer():
    """A dense layer whose GEMMs are all left at 16 bits times its GEMMs as a 16-bit workload does, and holds its
    weights within the norms' few (a norm is not a GEMM: it stays at the stored width)."""
    model, system = load_model("llama3-70b"), load_system("dgx-b200", 8)
    everything = tuple(g.value for g in LayerGemm if g in compute.layer_gemm_shapes(model, 1, 1))
    assert set(everything) == {"qkv", "attn_out", "mlp_up", "mlp_down"}
    fp4 = dataclasses.replace(FP4, kv_precision="bf16")
    wide = dataclasses.replace(fp4, unquantised_gemms=everything)
    bf16 = dataclasses.replace(fp4, precision="bf16", weight_precision="bf16")
    p = inference.decode_pass(fp4, 64)
    gemm = {
        name: inference.layer_time(model, system, wl, 2, 1, p).gemm for name, wl in (("fp4", fp4), ("wide", wide), ("bf16", bf16))
    }
    assert gemm["wide"] == pytest.approx(gemm["bf16"])
    assert gemm["wide"] > 1.5 * gemm["fp4"]
    stage = _stage(model)
    weights = {
        name: inference.stage_weight_bytes(model, wl, stage, 2, 1) for name, wl in (("fp4", fp4), ("wide", wide), ("bf16", bf16))
    }
    assert weights["wide"] == pytest.approx(weights["bf16"], rel=1e-4) and weights["wide"] < weights["bf16"]
    assert weights["fp4"] < 0.35 * weights["wide"]


def test_the_field_changes_nothing_at_16_bits_and_only_the_named_gemms():
    """Naming GEMMs of a 16-bit workload changes nothing; naming only MLA's up-projections in FP4 slows the layer by
    less than naming all four projections."""
    model, system = load_model("deepseek-v3"), load_system("dgx-b200", 8)
    bf16 = dataclasses.replace(FP4, precision="bf16", weight_precision="bf16", kv_precision="bf16")
    p = inference.decode_pass(bf16, 384)
    assert inference.layer_time(model, system, dataclasses.replace(bf16, unquantised_gemms=MLA_PROJECTIONS), 1, 8, p, True) == (
        inference.layer_time(model, system, bf16, 1, 8, p, True)
    )
    times = [
        inference.layer_time(model, system, dataclasses.replace(FP4, unquantised_gemms=names), 1, 8, p, True).gemm
        for names in ((), ("q_up", "kv_up"), MLA_PROJECTIONS)
    ]
    assert times[0] < times[1] < times[2]


@pytest.mark.parametrize(
    ("model", "mapping", "gemms", "needles"),
    [
        (
            "deepseek-v3",
            {"tp": 1, "pp": 1, "ep": 8, "dp": 8},
            ["fused_a"],
            ("workload.unquantised_gemms", "'fused_a' is not allowed", "q_down", "mlp_down"),
        ),
        (
            "llama3-70b",
            {"tp": 8, "pp": 1, "dp": 1},
            ["q_down"],
            ("workload.unquantised_gemms", "q_down is not a GEMM of llama3-70b", "allowed: qkv, attn_out, mlp_up, mlp_down"),
        ),
    ],
)
def test_a_gemm_that_is_not_one_is_refused_in_one_line(tmp_path, model, mapping, gemms, needles):
    data = yaml.safe_load((REPO / "problems" / "examples" / "deepseek-r1-offline-b200.yaml").read_text())
    data.update(model=model, mapping=mapping)
    data["workload"]["unquantised_gemms"] = gemms
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    for needle in (str(tmp_path / "p.yaml"), *needles):
        assert needle in proc.stderr, proc.stderr


def test_an_empty_or_single_entry_reads_as_a_list():
    """``unquantised_gemms:`` left empty names nothing; a single name is a list of one; repeats count once."""
    data = yaml.safe_load((REPO / "problems" / "examples" / "deepseek-r1-offline-b200.yaml").read_text())
    for value, expected in ((None, ()), ("q_up", ("q_up",)), (["kv_up", "kv_up", "q_up"], ("kv_up", "q_up"))):
        data["workload"]["unquantised_gemms"] = value
        assert parse_problem(data, "p.yaml").workload.unquantised_gemms == expected
