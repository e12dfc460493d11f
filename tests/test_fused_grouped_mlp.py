"""workload.fused_grouped_mlp: Transformer Engine's fused grouped MLP (NVTE_CUTEDSL_FUSED_GROUPED_MLP under the op
fuser, as NVIDIA's MLPerf Training v6.0 DeepSeek-V3 configs set it): the routed experts' SwiGLU, its derivative and the
casts between their two grouped GEMMs run in the GEMMs' epilogues."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import run_main, solved_as_enumerated, training_problem, write_yaml

from parasol.model import compute, training
from parasol.model.choices import LowPrecisionRecipe
from parasol.model.errors import ProblemError
from parasol.model.fused_grouped_mlp import fused_grouped_mlp_problem
from parasol.model.specs import Mapping
from parasol.solver import library
from parasol.solver.problem import parse_problem
from parasol.solver.validation import load_runs

MXFP8 = {"precision": "fp8", "low_precision_recipe": "mxfp8"}
TOKENS = 4096.0


def _workload(fused: bool, model="deepseek-v3", system="gb300-nvl72", **workload):
    data = training_problem(model, system, 64, global_batch=64, fused_grouped_mlp=fused, **{**MXFP8, **workload})
    return parse_problem(data, source="t.yaml")


def test_the_routed_activation_streams_nothing_of_its_own():
    """SwiGLU reads 2f and writes f 16-bit elements per routed row: exactly that leaves an MoE layer's forward bytes,
    and nothing of a dense layer's."""
    model = library.load_model("deepseek-v3")
    plain = compute.elementwise_forward_bytes(model, TOKENS, 1, False, "fp8", True)
    fused = compute.elementwise_forward_bytes(model, TOKENS, 1, False, "fp8", True, True)
    rows = TOKENS * 8  # top-8 routing of every token, balanced (DeepSeek-V3's model file: load_imbalance 1)
    assert plain - fused == pytest.approx(3 * 2 * rows * 2048)  # 3 passes x 2 bytes x rows x expert width 2,048
    assert compute.elementwise_forward_bytes(model, TOKENS, 1, False, "fp8", False, True) == compute.elementwise_forward_bytes(
        model, TOKENS, 1, False, "fp8", False
    )


def test_the_casts_between_the_two_grouped_gemms_go_and_the_outer_ones_stay():
    """MXFP8 reads each 16-bit element once and writes two 1-byte copies with an E8M0 scale per 32: 4.0625 bytes. The
    fused forward drops the second GEMM's rows x f input; the fused backward the first GEMM's rows x 2f output gradient.
    The first GEMM's rows x h input and the second's rows x h output gradient are still quantised."""
    model = library.load_model("deepseek-v3")
    per = 2 + 2 * (1 + 1 / 32)
    rows = TOKENS * 8
    plain = compute.low_precision_cast_bytes(model, TOKENS, 1, LowPrecisionRecipe.MXFP8, True)
    fused = compute.low_precision_cast_bytes(model, TOKENS, 1, LowPrecisionRecipe.MXFP8, True, fused_grouped_mlp=True)
    assert plain[0] - fused[0] == pytest.approx(rows * 2048 * per)
    assert plain[1] - fused[1] == pytest.approx(rows * 2 * 2048 * per)
    rest = compute.gemm_input_cast_bytes(compute.layer_gemm_shapes(model, TOKENS, 1, True).values(), LowPrecisionRecipe.MXFP8)
    routed_outer = rows * 7168 * per  # the dispatched tokens, and the combine's gradient
    assert fused[0] - rest[0] == pytest.approx(routed_outer) and fused[1] - rest[1] == pytest.approx(routed_outer)


def test_an_moe_layer_saves_exactly_those_bytes_at_the_memory_rate():
    """The layer's memory-bound forward falls by the activation's and the cast's bytes over the device's memory rate, its
    backward by twice the activation's (SwiGLU's derivative) plus the gradient cast; its GEMMs are untouched."""
    plain, fused = _workload(False), _workload(True)
    model, device = plain.model, library.load_system("gb300-nvl72", 64).device
    args = (model, device)
    a = training.layer_compute_times_s(*args, plain.workload, 1, 1, 1, False, 32, True)
    b = training.layer_compute_times_s(*args, fused.workload, 1, 1, 1, False, 32, True)
    assert a[:2] == b[:2]  # GEMMs and attention
    rows, f, per = TOKENS * 8 / 1, 2048, 2 + 2 * (1 + 1 / 32)
    act = 3 * 2 * rows * f
    assert a[2] - b[2] == pytest.approx(compute.memory_bound_time_s(device, act + rows * f * per))
    assert a[3] - b[3] == pytest.approx(compute.memory_bound_time_s(device, 2 * act + rows * 2 * f * per))


def test_under_nvfp4_only_the_activation_is_fused_and_both_casts_stay():
    """Transformer Engine's NVFP4 path writes FC1's output and the dGLU output in 16 bits and quantises them in a grouped
    kernel of its own: the casts are what they are unfused, the activation's bytes still go."""
    model = library.load_model("deepseek-v3")
    plain = compute.low_precision_cast_bytes(model, TOKENS, 1, LowPrecisionRecipe.NVFP4, True)
    fused = compute.low_precision_cast_bytes(model, TOKENS, 1, LowPrecisionRecipe.NVFP4, True, fused_grouped_mlp=True)
    assert fused == plain and plain[0] > 0
    nvfp4 = {"precision": "fp4", "low_precision_recipe": "nvfp4"}
    a, b = _workload(False, **nvfp4), _workload(True, **nvfp4)
    device = library.load_system("gb300-nvl72", 64).device
    times = [training.layer_compute_times_s(a.model, device, w.workload, 1, 1, 1, False, 32, True) for w in (a, b)]
    assert times[0][2] - times[1][2] == pytest.approx(compute.memory_bound_time_s(device, 3 * 2 * TOKENS * 8 * 2048))


def test_widths_that_are_not_multiples_of_64_are_refused():
    model = library.load_model("qwen3-30b-a3b")
    odd = dataclasses.replace(model, moe=dataclasses.replace(model.moe, expert_ffn=760))
    workload = _workload(True, model="qwen3-30b-a3b").workload
    assert fused_grouped_mlp_problem(model, workload) is None
    assert "multiples of 64" in fused_grouped_mlp_problem(odd, workload)


@pytest.mark.parametrize(
    ("model", "system", "workload", "words"),
    [
        ("llama3-70b", "gb300-nvl72", MXFP8, "is dense"),
        ("deepseek-v3", "dgx-h100", MXFP8, "compute capability 10"),
        ("deepseek-v3", "gb300-nvl72", {"precision": "fp8", "low_precision_recipe": "tensorwise"}, "mxfp8 or nvfp4"),
        ("deepseek-v3", "gb300-nvl72", {"precision": "bf16"}, "mxfp8 or nvfp4"),
        (
            "deepseek-v3",
            "gb300-nvl72",
            {"precision": "fp4", "low_precision_recipe": "nvfp4", "nvfp4_hadamard": False},
            "nvfp4_hadamard true",
        ),
        ("deepseek-v3", "gb300-nvl72", {**MXFP8, "recompute_modules": ["core_attn", "moe_act"]}, "recompute_modules"),
        ("deepseek-v3", "gb300-nvl72", {**MXFP8, "offload_modules": ["expert_fc1"]}, "offload_modules"),
    ],
)
def test_it_is_refused_where_the_kernels_do_not_run_in_one_line(model, system, workload, words):
    data = training_problem(model, system, 64, global_batch=64, fused_grouped_mlp=True, **workload)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fused_grouped_mlp" and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("etp", [[2], [1, 2]])
def test_expert_tensor_parallelism_is_refused_on_the_mapping(etp):
    mapping = {"etp": etp}
    data = training_problem("qwen3-30b-a3b", "dgx-b200", 8, global_batch=64, fused_grouped_mlp=True, mapping=mapping, **MXFP8)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "mapping.etp" and "etp 1" in str(err.value)


def test_evaluating_a_plan_at_etp_2_is_refused_too():
    problem = _workload(True, model="qwen3-30b-a3b", system="dgx-b200")
    system = library.load_system("dgx-b200", 8)
    mapping = Mapping(tp=2, pp=1, dp=4, cp=1, ep=2, etp=2, micro_batch=1)
    with pytest.raises(ProblemError) as err:
        training.check_mapping(problem.model, system, problem.workload, mapping)
    assert err.value.field == "mapping.etp"
    training.check_mapping(problem.model, system, problem.workload, dataclasses.replace(mapping, etp=1))


def test_the_command_line_names_the_field_and_exits_2(tmp_path):
    path = write_yaml(
        tmp_path / "p.yaml", training_problem("llama3-70b", "gb300-nvl72", 64, global_batch=64, fused_grouped_mlp=True, **MXFP8)
    )
    done = run_main(["evaluate", path])
    assert done.returncode == 2 and "workload.fused_grouped_mlp" in done.stderr and "Traceback" not in done.stderr


def test_the_recorded_megatron_release_cannot_express_it():
    data = training_problem(
        "deepseek-v3", "gb300-nvl72", 64, global_batch=64, fused_grouped_mlp=True, framework="megatron-lm", **MXFP8
    )
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fused_grouped_mlp" and str(err.value).endswith("allowed: false")


def test_the_runs_that_set_it_are_the_mlperf_configs_that_enable_it():
    """Every run stating the fusion is one of MLPerf Training v6.0's DeepSeek-V3 runs, whose configs set
    NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, and all nine state it."""
    fused = {e["id"] for e in load_runs() if e["workload"].get("fused_grouped_mlp")}
    mlperf = {e["id"] for e in load_runs() if e["id"].startswith("mlperf-v60-deepseekv3")}
    assert fused == mlperf and len(fused) == 9


@pytest.mark.slow  # a whole solve and enumeration, 10 s on 2 cores
def test_solver_equals_the_enumerator_with_it():
    data = training_problem("qwen3-30b-a3b", "dgx-b200", 8, global_batch=64, fused_grouped_mlp=True, **MXFP8)
    solved_as_enumerated(parse_problem(data, source="t.yaml"))
