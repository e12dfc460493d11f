"""workload.fp8_attention: flash attention in FP8 (Transformer Engine's FP8 DotProductAttention, Megatron-Core's
fp8_dot_product_attention), timed by the serial softmax rule of model/fp8_attention.py from each device file's
softmax_exp_ratio."""

from __future__ import annotations

import pytest
from conftest import solved_as_enumerated, training_problem

from parasol.model import compute, fp8_attention, memory, training
from parasol.model.choices import LowPrecisionRecipe
from parasol.model.errors import ProblemError
from parasol.model.precision import attention_quantised_bytes_per_element
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.launch import Unexpressible, megatron_args
from parasol.solver.problem import parse_problem
from parasol.solver.validation import evaluate_run, load_runs

MXFP8 = {"precision": "fp8", "low_precision_recipe": "mxfp8"}
MAPPING = {"tp": 2, "pp": 1, "dp": 4, "ep": 8, "micro_batch": 1, "zero": 1, "sp": True, "recompute": "none"}


def _problem(flag: bool, model="deepseek-v3", system="gb200-nvl72", mapping=MAPPING, **workload):
    kinds = {**MXFP8, **workload}
    data = training_problem(model, system, 8, global_batch=32, fp8_attention=flag, mapping=dict(mapping), **kinds)
    return parse_problem(data, source="t.yaml")


def _evaluate(problem, system="gb200-nvl72", num_gpus=8):
    return evaluate_training(problem.model, library.load_system(system, num_gpus), problem.workload, problem.fixed_mapping())


def test_the_passes_follow_the_serial_rule_at_the_devices_ratio():
    """DeepSeek-V3's MLA heads are the 320-wide reference: e is the device file's value, and the FP8 forward
    and backward take (1 + e)/(2 + e) and (2.5 + e)/(5 + e) of the 16-bit kernel's time; off, both 1."""
    problem = _problem(True)
    device = library.load_device("gb200")
    e = device.softmax_exp_ratio
    assert e == pytest.approx(1.077)
    fwd, bwd = fp8_attention.pass_factors(problem.model, device, problem.workload)
    assert fwd == pytest.approx((1 + e) / (2 + e)) and bwd == pytest.approx((2.5 + e) / (5 + e))
    assert 0.5 < bwd < fwd < 1.0  # the backward's products weigh more against its one exponential
    assert fp8_attention.pass_factors(problem.model, device, _problem(False).workload) == (1.0, 1.0)


def test_narrower_heads_gain_less_and_blackwell_ultra_more():
    """The exponential's share grows as the products narrow (Llama's 128 + 128 against MLA's 192 + 128), and
    Blackwell Ultra's doubled exponential rate halves it."""
    llama = library.load_model("llama3-70b")
    dsv3 = library.load_model("deepseek-v3")
    gb200, gb300 = library.load_device("gb200"), library.load_device("gb300")
    assert fp8_attention.exp_ratio(llama, gb200) == pytest.approx(gb200.softmax_exp_ratio * 320 / 256)
    assert fp8_attention.exp_ratio(dsv3, gb300) == pytest.approx(fp8_attention.exp_ratio(dsv3, gb200) / 2, abs=1e-3)
    on = _problem(True).workload
    fwd = {d.name: fp8_attention.pass_factors(m, d, on)[0] for m in (dsv3,) for d in (gb200, gb300)}
    assert fwd["gb300"] < fwd["gb200"]
    assert fp8_attention.pass_factors(llama, gb200, on)[0] > fwd["gb200"]


def test_a_layer_pays_the_casts_and_keeps_q_k_v_in_fp8():
    """The attention core's time falls by the pass factors; the elementwise time grows by quantising Q, K and V
    (forward) and the output's gradient (backward) with per-tensor current scaling under MXFP8 (two 16-bit
    reads and one FP8 write per element); the layer keeps Q, K and V in one byte instead of two."""
    plain, fp8 = _problem(False), _problem(True)
    system = library.load_system("gb200-nvl72", 8)
    args = (system, 2, 1, 1, True, "none", 8, True)
    a = training.layer_times(plain.model, system, plain.workload, *args[1:])
    b = training.layer_times(fp8.model, system, fp8.workload, *args[1:])
    fwd, bwd = fp8_attention.pass_factors(fp8.model, system.device, fp8.workload)
    assert b.attention_fwd == pytest.approx(a.attention_fwd * fwd) and b.attention_bwd == pytest.approx(a.attention_bwd * bwd)
    assert attention_quantised_bytes_per_element(LowPrecisionRecipe.MXFP8) == 5.0
    assert attention_quantised_bytes_per_element(LowPrecisionRecipe.DELAYED) == 3.0
    qkv, out = compute.attention_activation_widths(fp8.model)
    tokens = 4096
    assert b.elementwise_fwd - a.elementwise_fwd == pytest.approx(
        compute.memory_bound_time_s(system.device, tokens * qkv / 2 * 5.0)
    )
    assert b.elementwise_bwd - a.elementwise_bwd == pytest.approx(
        compute.memory_bound_time_s(system.device, tokens * out / 2 * 5.0)
    )
    layer = training.layer_tokens(fp8.workload, 2, 1, 1, True, True, 1)
    assert (
        layer.attention_input_bytes == 1.0
        and training.layer_tokens(plain.workload, 2, 1, 1, True, True, 1).attention_input_bytes == 2.0
    )
    kept = {
        q: memory.activation_bytes_per_layer(fp8.model, 1, 4096, 2, 1, True, "none", "flash", 1.0, True, attention_input_bytes=q)
        for q in (1.0, 2.0)
    }
    assert kept[2.0] - kept[1.0] == pytest.approx(tokens * qkv / 2)
    assert _evaluate(fp8).metrics["peak_memory_gib"] < _evaluate(plain).metrics["peak_memory_gib"]
    assert _evaluate(fp8).metrics["step_time_s"] < _evaluate(plain).metrics["step_time_s"]


@pytest.mark.parametrize(
    ("workload", "said"),
    [({"precision": "bf16", "low_precision_recipe": None}, "precision bf16"), ({"attention": "standard"}, "attention standard")],
)
def test_it_needs_fp8_training_and_flash_attention(workload, said):
    data = training_problem("deepseek-v3", "gb200-nvl72", 8, global_batch=32, fp8_attention=True, **{**MXFP8, **workload})
    data["workload"] = {k: v for k, v in data["workload"].items() if v is not None}
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fp8_attention" and said in str(err.value) and "\n" not in str(err.value)


def test_a_device_without_the_ratio_is_refused_by_name():
    """Where the problem is read, naming its file (and, for a mapping evaluated directly, by the model)."""
    dense = {**MAPPING, "ep": 1}
    with pytest.raises(ProblemError) as err:
        _problem(True, model="llama3-70b", system="mi300x", mapping=dense, precision="fp8", low_precision_recipe="delayed")
    assert err.value.field == "workload.fp8_attention" and "softmax_exp_ratio" in str(err.value)
    assert str(err.value).startswith("t.yaml: ") and "\n" not in str(err.value)
    problem = _problem(
        True, model="llama3-70b", system="gb200-nvl72", mapping=dense, precision="fp8", low_precision_recipe="delayed"
    )
    with pytest.raises(ProblemError) as err:
        evaluate_training(problem.model, library.load_system("mi300x", 8), problem.workload, problem.fixed_mapping())
    assert err.value.field == "workload.fp8_attention" and "softmax_exp_ratio" in str(err.value)


def test_the_recorded_megatron_release_cannot_express_it():
    data = training_problem("llama3-70b", "dgx-b200", 64, global_batch=64, fp8_attention=True, framework="megatron-lm", **MXFP8)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fp8_attention" and str(err.value).endswith("allowed: false")
    solved_as_enumerated(
        parse_problem(training_problem("llama3-70b", "dgx-b200", 64, global_batch=64, fp8_attention=True, **MXFP8), "t.yaml")
    )
    # The emitter, asked past the profile, refuses too. The mapping is fixed: a solved plan may tie ZeRO-1 with
    # ZeRO-2, which the emitter refuses first for its own reason.
    mapping = {"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "zero": 1, "sp": True, "recompute": "none"}
    data = training_problem("llama3-70b", "dgx-b200", 64, global_batch=64, fp8_attention=True, mapping=mapping, **MXFP8)
    plain = parse_problem(data, "t.yaml")
    assert _evaluate(plain, "dgx-b200", 64).metrics["fits"]
    with pytest.raises(Unexpressible, match="FP8 attention"):
        megatron_args(plain, 64, plain.fixed_mapping())


def test_the_runs_that_set_it_move_as_the_rule_says():
    """The 22 published runs whose configs set FP8 attention (MLPerf Training v6.0 DeepSeek-V3 on GB200 and
    GB300, v5.1 Llama 3.1 8B NVFP4: NVIDIA's two on 8 GPUs and, added 2026-11-28, its partners' eight on B200 and B300,
    and Nebius's 16- and 32-GPU B200 and 8-GPU B300 runs) carry the flag, and it makes each faster than without it: less
    attention time, more elementwise time (the casts): the GB300 runs, too slow, moved 4 to 6 points toward their measurement
    (2026-11-28: +42.5 to +36.5 % on 256 GPUs); the 8B runs, already too fast, 8 to 10 points further from it (without
    FP8 attention the partners' B200 runs would be about -11 to -13 %, B300's -16 %)."""
    entries = [e for e in load_runs() if e["workload"].get("fp8_attention")]
    assert len(entries) == 22
    for entry in entries:
        plain = {**entry, "workload": {**entry["workload"], "fp8_attention": False}}
        with_, without = evaluate_run(entry), evaluate_run(plain)
        assert with_.predicted_step_s < without.predicted_step_s
        t_with, t_without = with_.evaluation.breakdown["time_s"], without.evaluation.breakdown["time_s"]
        assert t_with["compute/attention"] < t_without["compute/attention"]
        assert t_with["compute/elementwise"] > t_without["compute/elementwise"]  # the casts
        if entry["id"].startswith("mlperf-v60-deepseekv3-gb300"):
            assert abs(without.error) - abs(with_.error) > 0.04
        if "llama31-8b" in entry["id"]:
            assert abs(with_.error) - abs(without.error) > 0.07


def test_recomputing_the_attention_core_keeps_16_bit_q_k_v_and_recasts_them():
    """Megatron-Core's attention checkpoint saves its inputs, the 16-bit Q, K and V (the FP8 copies live only inside
    it): under selective recomputation of core_attn the flag saves no memory there, and the recomputed forward
    quantises Q, K and V again; MLA's up-projection checkpoint frees nothing that FP8 attention keeps."""
    model = library.load_model("deepseek-v3")
    args = (model, 1, 4096, 2, 1, True, "selective", "flash", 1.0, True)
    for modules in (("core_attn",), ("core_attn", "mla_up_proj")):
        kept = {q: memory.activation_bytes_per_layer(*args, modules=modules, attention_input_bytes=q) for q in (1.0, 2.0)}
        assert kept[1.0] == kept[2.0]
    up = {q: memory.activation_bytes_per_layer(*args, modules=("mla_up_proj",), attention_input_bytes=q) for q in (1.0, 2.0)}
    none = {q: memory.activation_bytes_per_layer(*args[:6], "none", *args[7:], attention_input_bytes=q) for q in (1.0, 2.0)}
    assert up[2.0] < none[2.0] and up[1.0] == none[1.0]  # 16 bits: the up-projections' outputs freed; FP8: nothing
    selective = {**MAPPING, "recompute": "selective"}
    plain, fp8 = _problem(False, mapping=selective), _problem(True, mapping=selective)
    system = library.load_system("gb200-nvl72", 8)
    a = training.layer_times(plain.model, system, plain.workload, 2, 1, 1, True, "selective", 8, True)
    b = training.layer_times(fp8.model, system, fp8.workload, 2, 1, 1, True, "selective", 8, True)
    qkv, _ = compute.attention_activation_widths(fp8.model)
    recast = compute.memory_bound_time_s(system.device, 4096 * qkv / 2 * 5.0)
    assert b.recompute - a.recompute == pytest.approx(b.attention_fwd - a.attention_fwd + recast)


def test_the_blockwise_recipe_has_no_fp8_attention():
    data = training_problem(
        "deepseek-v3", "dgx-h100", 8, global_batch=32, fp8_attention=True, precision="fp8", low_precision_recipe="blockwise"
    )
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fp8_attention" and "blockwise" in str(err.value)
