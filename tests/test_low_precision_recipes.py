"""Low-precision training recipes (issue 13): what each Transformer Engine recipe streams to quantise
the GEMM inputs (``workload.low_precision_recipe``), the GEMMs that stay in 16 bits, and the errors.

The per-element costs are derived from each recipe's passes and copies, not restated: an amax pass
is one more 16-bit read, a scale per block adds its bytes to each of the two quantised copies."""

import dataclasses
import json

import pytest
from conftest import rel_close, run_main, stretch_of, training_problem, write_yaml

from parasol.model import compute
from parasol.model.choices import LowPrecisionRecipe as R
from parasol.model.errors import ProblemError
from parasol.model.precision import quantised_bytes_per_element, training_recipe
from parasol.model.specs import Mapping, Workload
from parasol.model.training_step import evaluate_training
from parasol.solver.library import load_model, load_system
from parasol.solver.problem import parse_problem
from parasol.solver.validation import load_runs


def test_each_recipe_streams_its_reads_and_two_quantised_copies():
    delayed = quantised_bytes_per_element(R.DELAYED)
    assert delayed == 2.0 + 2 * 1.0  # read the bf16 input once, write the row-wise and column-wise FP8 copies
    assert quantised_bytes_per_element(R.TENSORWISE) == delayed + 2.0  # current scaling reads once more for its amax
    assert quantised_bytes_per_element(R.MXFP8) == delayed + 2 * (1 / 32)  # an E8M0 scale per 32 values, per copy
    assert quantised_bytes_per_element(R.BLOCKWISE) == delayed + 2 * (4 / 128)  # an fp32 scale per 128
    # NVFP4: global amax, row-wise pass, Hadamard-transformed column-wise pass; half-byte values, an E4M3 scale per 16
    assert quantised_bytes_per_element(R.NVFP4) == 3 * 2.0 + 2 * (0.5 + 1 / 16)


def test_a_layers_cast_bytes_cover_every_gemm_input_routed_experts_included():
    model = load_model("qwen3-30b-a3b")
    tokens, tp = 4096.0, 1
    fwd, bwd = compute.low_precision_cast_bytes(model, tokens, tp, R.DELAYED, moe_layer=True)
    dense = list(compute.layer_gemm_shapes(model, tokens, tp, True).values())
    rows = compute.routed_rows_per_gpu(model, tokens, tp)
    routed = list(compute.mlp_gemm_shapes(model, rows, model.moe.expert_ffn).values())
    assert rel_close(fwd, 4.0 * sum(m * k for m, _, k in dense + routed), 1e-12)
    assert rel_close(bwd, 4.0 * sum(m * n for m, n, _ in dense + routed), 1e-12)
    assert sum(m * k for m, _, k in routed) > sum(m * k for m, _, k in dense)  # top-8 of 128: the experts dominate
    assert compute.low_precision_cast_bytes(model, tokens, tp, None, moe_layer=True) == (0.0, 0.0)


def test_expert_tensor_parallelism_quantises_the_gathered_rows_at_a_narrower_width():
    """With etp the GPU quantises etp x its routed rows (gathered over the ETP group) at 1/etp of the
    expert width: the expert GEMMs' inputs keep their row count x hidden size, the down projection's
    input shrinks with the width."""
    model = load_model("qwen3-30b-a3b")
    tokens, tp = 4096.0, 1
    f1, b1 = compute.low_precision_cast_bytes(model, tokens, tp, R.DELAYED, moe_layer=True, etp=1)
    f2, b2 = compute.low_precision_cast_bytes(model, tokens, tp, R.DELAYED, moe_layer=True, etp=2)
    rows = compute.routed_rows_per_gpu(model, tokens, tp)
    up_inputs = rows * model.hidden  # the up projection reads hidden-wide rows: twice as many with etp 2
    # the down projection reads twice the rows at half the expert width: the same bytes; so the change is the up's
    assert rel_close(f2 - f1, 4.0 * up_inputs, 1e-9)
    assert b2 > b1


def _step(precision, recipe=None, model="llama3-8b"):
    wl = Workload(kind="training", seq_len=8192, global_batch=128, precision=precision, low_precision_recipe=recipe)
    m = Mapping(tp=1, pp=1, dp=8, micro_batch=1)
    return evaluate_training(load_model(model), load_system("dgx-b200", 8), wl, m)


def test_current_scaling_costs_its_amax_pass_and_nothing_else():
    delayed, tensorwise = _step("fp8", "delayed"), _step("fp8", "tensorwise")
    d, t = delayed.breakdown["time_s"], tensorwise.breakdown["time_s"]
    assert t["compute/gemm"] == d["compute/gemm"]
    assert t["compute/elementwise"] > d["compute/elementwise"]
    assert rel_close(
        tensorwise.metrics["step_time_s"] - delayed.metrics["step_time_s"],
        (t["compute/elementwise"] - d["compute/elementwise"]) * stretch_of(tensorwise),
        1e-6,
    )
    assert _step("fp8").metrics == delayed.metrics  # delayed scaling is fp8's default


def test_nvfp4_gemms_are_faster_but_its_quantisation_costs_more():
    fp8, fp4 = _step("fp8", "mxfp8"), _step("fp4")
    assert fp4.breakdown["time_s"]["compute/gemm"] < 0.8 * fp8.breakdown["time_s"]["compute/gemm"]
    assert fp4.breakdown["time_s"]["compute/elementwise"] > fp8.breakdown["time_s"]["compute/elementwise"]
    assert fp4.metrics["step_time_s"] < fp8.metrics["step_time_s"]


def test_the_output_layer_and_the_router_stay_in_16_bits(monkeypatch):
    bf16, fp8 = _step("bf16"), _step("fp8")
    assert fp8.breakdown["time_s"]["compute/embedding_logits"] == bf16.breakdown["time_s"]["compute/embedding_logits"]
    device, model = load_system("dgx-b200", 8).device, load_model("qwen3-30b-a3b")
    seen = []

    def recording(device, m, n, k, precision, *args, **kwargs):
        seen.append((n, k, precision))
        return 1.0

    monkeypatch.setattr(compute, "gemm_time_s", recording)
    compute.moe_routed_forward_time_s(model, device, "fp8", 4096.0, 1, 8)
    router = [p for n, k, p in seen if (n, k) == (model.moe.experts, model.hidden)]
    experts = [p for n, k, p in seen if (n, k) != (model.moe.experts, model.hidden)]
    assert router == ["bf16"] and set(experts) == {"fp8"}


@pytest.mark.parametrize(
    ("precision", "recipe", "says"),
    [
        ("bf16", "tensorwise", "trains in bf16"),
        ("fp8", "nvfp4", "allowed: delayed, tensorwise, mxfp8, blockwise"),
        ("fp4", "mxfp8", "allowed: nvfp4"),
        ("fp8", "cs", "allowed: delayed, tensorwise, mxfp8, blockwise, nvfp4"),
    ],
)
def test_a_recipe_that_does_not_fit_the_precision_names_the_field(precision, recipe, says):
    data = training_problem(precision=precision, low_precision_recipe=recipe)
    with pytest.raises(ProblemError, match=says) as info:
        parse_problem(data, source="t")
    assert "workload.low_precision_recipe" in str(info.value)


def test_defaults_and_16_bit_training():
    assert training_recipe("fp8", None) == R.DELAYED and training_recipe("fp4", None) == R.NVFP4
    assert training_recipe("bf16", None) is None
    data = training_problem(system="dgx-b200", precision="fp4")
    assert parse_problem(data, source="t").workload.low_precision_recipe == "nvfp4"


def test_the_validation_runs_carry_their_tables_recipes():
    runs = [r for r in load_runs() if r["id"].startswith("mbridge2511") and r["workload"]["precision"] == "fp8"]
    assert runs
    for run in runs:
        want = "tensorwise" if run["id"].endswith("-cs") else "mxfp8"
        assert run["workload"]["low_precision_recipe"] == want, run["id"]


def test_nvfp4_without_its_hadamard_transform_saves_that_pass_and_nothing_else():
    """Transformer Engine applies NVFP4's random Hadamard transform to the column-wise copies only
    (common/recipe/__init__.py); NVTE_NVFP4_DISABLE_RHT=1 (MLPerf's NVFP4 configs) leaves one 16-bit read per
    quantised input fewer. The other recipes have no transform to drop."""
    assert quantised_bytes_per_element(R.NVFP4, transform=False) == quantised_bytes_per_element(R.NVFP4) - 2.0
    for recipe in (R.DELAYED, R.TENSORWISE, R.MXFP8, R.BLOCKWISE):
        assert quantised_bytes_per_element(recipe, transform=False) == quantised_bytes_per_element(recipe)
    model, system = load_model("llama3-8b"), load_system("dgx-b200", 8)
    mapping = Mapping(tp=1, pp=1, dp=8, micro_batch=1)
    with_rht = Workload(kind="training", seq_len=8192, global_batch=64, precision="fp4", low_precision_recipe="nvfp4")
    without = dataclasses.replace(with_rht, nvfp4_hadamard=False)
    a, b = evaluate_training(model, system, with_rht, mapping), evaluate_training(model, system, without, mapping)
    assert b.breakdown["time_s"]["compute/elementwise"] < a.breakdown["time_s"]["compute/elementwise"]
    assert b.breakdown["time_s"]["compute/gemm"] == a.breakdown["time_s"]["compute/gemm"]


@pytest.mark.parametrize(("precision", "recipe"), [("fp8", "mxfp8"), ("bf16", None)])
def test_turning_off_a_hadamard_transform_the_recipe_lacks_names_the_field(precision, recipe):
    data = training_problem(precision=precision, low_precision_recipe=recipe, nvfp4_hadamard=False)
    with pytest.raises(ProblemError, match="NVFP4's") as info:
        parse_problem(data, source="t")
    assert info.value.field == "workload.nvfp4_hadamard"


def test_megatrons_launch_sets_transformer_engines_switch_for_it(tmp_path):
    mapping = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}
    data = training_problem(
        model="llama3-8b", system="dgx-b200", precision="fp4", framework="megatron-lm", nvfp4_hadamard=False, mapping=mapping
    )
    proc = run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", data)), "--emit", "--json"])
    assert proc.returncode == 0, proc.stderr
    launch = json.loads(proc.stdout)["launch"]
    assert launch.startswith("NVTE_NVFP4_DISABLE_RHT=1 torchrun") and "--fp4-recipe nvfp4" in launch
    data["workload"].pop("nvfp4_hadamard")
    proc = run_main(["evaluate", str(write_yaml(tmp_path / "q.yaml", data)), "--emit", "--json"])
    assert "NVTE_NVFP4_DISABLE_RHT" not in json.loads(proc.stdout)["launch"]
