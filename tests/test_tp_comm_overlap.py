"""Tensor-parallel communication overlap (issue 13): Megatron-LM's asynchronous input-gradient
collectives (``workload.overlap_tp_grad``) and Transformer Engine's userbuffers (``mapping.tp_comm_overlap``).

The limits pin the accounting: with GEMMs far longer than the collectives, only what cannot overlap
stays exposed; with GEMMs that hide nothing (``tp_overlap_efficiency`` 0), every collective is
exposed, the backward's re-gather of the saved input included.
"""

import dataclasses
import itertools

import pytest
from conftest import rel_close, solved_as_enumerated, training_problem

from parasol.model import compute
from parasol.model.errors import ProblemError
from parasol.model.placement import Group, collective_time_s, layout
from parasol.model.specs import Mapping, Workload
from parasol.model.training import check_mapping, tp_comm_exposed_times_s, tp_comm_forward_times_s
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.planner import planner_for
from parasol.solver.problem import parse_problem


def _setup(tp_overlap: float | None = None, overlap_tp_grad: bool = True):
    model, system = library.load_model("llama3-70b"), library.load_system("dgx-h100", 64)
    if tp_overlap is not None:
        system = dataclasses.replace(system, device=dataclasses.replace(system.device, tp_overlap_efficiency=tp_overlap))
    wl = Workload(kind="training", seq_len=8192, global_batch=64, overlap_tp_grad=overlap_tp_grad)
    return model, system, wl


def _exposed(model, system, wl, tp, sp, overlap, collective_s=None, micro_batch=1):
    """(the forward collectives' seconds, their exposed (forward, backward)); ``collective_s`` given: split as 16-bit
    sequence parallelism splits it, half all-gathers, half reduce-scatters (all all-reduces without sp)."""
    if collective_s is None:
        collectives = tp_comm_forward_times_s(model, system, wl, tp, 1, micro_batch, sp)
    else:
        collectives = (collective_s / 2, collective_s / 2) if sp else (0.0, collective_s)
    exposed = tp_comm_exposed_times_s(model, system.device, wl, tp, 1, micro_batch, sp, overlap, False, collectives)
    return sum(collectives), exposed


@pytest.mark.parametrize("sp", [False, True])
def test_without_any_overlap_every_collective_is_exposed(sp):
    model, system, wl = _setup(overlap_tp_grad=False)
    total, (fwd, bwd) = _exposed(model, system, wl, 8, sp, False)
    assert total > 0 and fwd == pytest.approx(total)
    # with sequence parallelism the backward also re-gathers each column-parallel GEMM's saved input
    assert bwd == pytest.approx(1.5 * total if sp else total)


@pytest.mark.parametrize(("sp", "overlap"), [(False, False), (True, False), (True, True)])
def test_gemms_that_hide_nothing_leave_everything_exposed(sp, overlap):
    model, system, wl = _setup(tp_overlap=0.0)
    total, (fwd, bwd) = _exposed(model, system, wl, 8, sp, overlap)
    assert fwd == pytest.approx(total)
    assert bwd == pytest.approx(1.5 * total if sp else total)


def test_long_gemms_hide_all_but_what_cannot_overlap():
    """A tiny collective beside full-size GEMMs: the asynchronous backward hides the input-gradient
    all-reduce (no sp) and, with sp, the re-gather and reduce-scatter, but not the output-gradient
    all-gather before the row-parallel GEMM; userbuffers leave the last reduce-scatter chunk (1/tp)."""
    model, system, wl = _setup(tp_overlap=1.0)
    tiny = 1e-9
    _, (fwd, bwd) = _exposed(model, system, wl, 8, False, False, tiny)
    assert (fwd, bwd) == (pytest.approx(tiny), 0.0)
    _, (fwd, bwd) = _exposed(model, system, wl, 8, True, False, tiny)
    assert (fwd, bwd) == (pytest.approx(tiny), pytest.approx(tiny / 2))
    _, (fwd, bwd) = _exposed(model, system, wl, 8, True, True, tiny)
    assert (fwd, bwd) == (pytest.approx(tiny / (2 * 8)), 0.0)


def test_each_overlap_exposes_no_more_than_the_one_before():
    model, system, _ = _setup()
    for tp, mb, seq in itertools.product((2, 4, 8), (1, 4), (2048, 8192)):
        wl = Workload(kind="training", seq_len=seq, global_batch=64)
        sync = _exposed(model, system, dataclasses.replace(wl, overlap_tp_grad=False), tp, True, False, micro_batch=mb)[1]
        async_ = _exposed(model, system, wl, tp, True, False, micro_batch=mb)[1]
        userbuffers = _exposed(model, system, wl, tp, True, True, micro_batch=mb)[1]
        assert sum(userbuffers) <= sum(async_) + 1e-15 <= sum(sync) + 2e-15
        assert async_[0] == pytest.approx(sync[0]) and async_[1] < sync[1]


def test_the_gemms_beside_the_collectives_are_the_layers_gemms():
    model, system, _ = _setup()
    (attn_col, attn_row), (mlp_col, mlp_row) = compute.tp_block_gemm_times_s(model, system.device, "bf16", 8192, 8)
    total = compute.layer_gemm_forward_time_s(model, system.device, "bf16", 8192, 8)
    assert rel_close(attn_col + attn_row + mlp_col + mlp_row, total, 1e-12)
    assert mlp_col > attn_col > 0 and mlp_row > attn_row > 0  # the FFN is wider than the attention


def test_overlap_speeds_up_a_tensor_parallel_step():
    model, system, wl = _setup()
    plain = Mapping(tp=8, pp=2, dp=4, micro_batch=1, sp=True, recompute="selective")
    overlapped = dataclasses.replace(plain, tp_comm_overlap=True)
    a, b = evaluate_training(model, system, wl, plain), evaluate_training(model, system, wl, overlapped)
    assert b.breakdown["time_s"]["comm/tp"] < a.breakdown["time_s"]["comm/tp"]
    assert b.metrics["step_time_s"] < a.metrics["step_time_s"]
    assert b.metrics["peak_memory_gib"] == a.metrics["peak_memory_gib"]


@pytest.mark.parametrize("mapping", [dict(tp=8, sp=False), dict(tp=1, sp=False)])
def test_userbuffers_need_sequence_parallelism(mapping):
    model, system, wl = _setup()
    m = Mapping(pp=2, dp=64 // (2 * mapping["tp"]), micro_batch=1, tp_comm_overlap=True, **mapping)
    with pytest.raises(ProblemError, match="sp true") as info:
        check_mapping(model, system, wl, m)
    assert info.value.field == "mapping.tp_comm_overlap"


def test_a_bad_flag_names_the_field():
    data = training_problem(model="llama3-70b", system="dgx-h100", num_gpus=64, mapping={"tp_comm_overlap": "yes"})
    with pytest.raises(ProblemError) as info:
        parse_problem(data, source="t")
    assert "mapping.tp_comm_overlap" in str(info.value)


PROBLEM = training_problem(
    model="llama2-7b",
    system="dgx-h100",
    num_gpus=8,
    seq_len=4096,
    global_batch=16,
    mapping={"tp_comm_overlap": [False, True], "vpp": [1], "zero": [1], "cp": [1], "recompute": ["none", "selective"]},
)


@pytest.mark.parametrize("objective", ["throughput", "memory"])
def test_tp_comm_overlap_is_a_decision_and_the_solver_equals_the_enumerator(objective):
    problem = parse_problem({**PROBLEM, "objective": objective}, source="t")
    rows = next(r for r in planner_for(problem).space(problem).relations if r.name == "sp").frame
    assert set(rows["tp_comm_overlap"]) == {0, 1}
    assert all(s for s, o in zip(rows["sp"], rows["tp_comm_overlap"]) if o)  # only with sequence parallelism
    plan = solved_as_enumerated(problem)
    if objective == "throughput" and plan.mapping.tp > 1 and plan.mapping.sp:  # hiding collectives is free
        assert plan.mapping.tp_comm_overlap


def test_a_parallel_block_reduces_once_per_layer():
    """GPT-J, PaLM, Falcon: attention and MLP read the same input and their outputs are summed before
    one reduction; the GEMMs are the same, the collectives half, and the norm input is saved once."""
    from parasol.model import memory  # noqa: PLC0415

    model, system, wl = _setup()
    parallel = dataclasses.replace(model, parallel_block=True)
    assert sum(tp_comm_forward_times_s(parallel, system, wl, 8, 1, 1, True)) == pytest.approx(
        sum(tp_comm_forward_times_s(model, system, wl, 8, 1, 1, True)) / 2
    )
    blocks = compute.tp_block_gemm_times_s(parallel, system.device, "bf16", 8192, 8)
    assert len(blocks) == 1 and rel_close(
        sum(blocks[0]), compute.layer_gemm_forward_time_s(model, system.device, "bf16", 8192, 8), 1e-12
    )
    saved = memory.replicated_activation_bytes(model, 8192) - memory.replicated_activation_bytes(parallel, 8192)
    assert saved == pytest.approx(8192 * model.hidden * memory.ACT_BYTES)
    plain, fused = (
        evaluate_training(m, system, wl, Mapping(tp=8, pp=2, dp=4, micro_batch=1, sp=True, recompute="selective"))
        for m in (model, parallel)
    )
    assert fused.breakdown["time_s"]["comm/tp"] < plain.breakdown["time_s"]["comm/tp"]


def test_parallel_block_must_be_a_flag():
    data = training_problem(
        model={"name": "x", "layers": 2, "hidden": 256, "heads": 4, "ffn": 1024, "vocab": 1000, "parallel_block": "yes"}
    )
    with pytest.raises(ProblemError) as info:
        parse_problem(data, source="t")
    assert "model.parallel_block" in str(info.value)


@pytest.mark.parametrize(
    ("precision", "recipe", "gathered"), [("fp8", "delayed", 1.0), ("fp8", "mxfp8", 1 + 1 / 32), ("fp4", "nvfp4", 0.5 + 1 / 16)]
)
def test_sequence_parallelism_gathers_the_quantised_input_and_reduces_in_16_bits(precision, recipe, gathered):
    """Transformer Engine quantises a GEMM's input before the tensor-parallel all-gather (layernorm_linear.py,
    linear.py, base.py grad_output_preprocess: gather_along_first_dim with the quantizer); the reduce-scatters
    carry the 16-bit GEMM outputs. Without sp the all-reduces stay 16-bit."""
    model, system, bf16 = _setup()
    low = dataclasses.replace(bf16, precision=precision, low_precision_recipe=recipe)
    where = layout(system, Group.of((8, 1)))
    elements = 8192 * model.hidden
    gathers, reductions = tp_comm_forward_times_s(model, system, low, 8, 1, 1, True)
    assert gathers == pytest.approx(2 * collective_time_s("allgather", elements * gathered, where, system))
    assert reductions == pytest.approx(2 * collective_time_s("reducescatter", elements * 2, where, system))
    assert reductions == tp_comm_forward_times_s(model, system, bf16, 8, 1, 1, True)[1] and gathers < reductions
    unsplit = tp_comm_forward_times_s(model, system, low, 8, 1, 1, False)
    assert unsplit == tp_comm_forward_times_s(model, system, bf16, 8, 1, 1, False)


def test_the_backward_charges_the_gathers_and_the_reduce_scatter_each_at_its_own_time():
    """With FP8 the all-gathers (the row-parallel output gradient, the re-gather) are cheaper than the 16-bit
    reduce-scatter (the column-parallel input gradient): unhidden, the backward is 2 gathers + 1 reduce-scatter per
    block; under the asynchronous backward with GEMMs long enough, only the output-gradient gather stays."""
    model, system, bf16 = _setup(tp_overlap=0.0)
    fp8 = dataclasses.replace(bf16, precision="fp8", low_precision_recipe="delayed")
    gathers, reductions = tp_comm_forward_times_s(model, system, fp8, 8, 1, 1, True)
    assert gathers < reductions
    for overlap_tp_grad in (False, True):
        wl = dataclasses.replace(fp8, overlap_tp_grad=overlap_tp_grad)
        fwd, bwd = tp_comm_exposed_times_s(model, system.device, wl, 8, 1, 1, True, False, False, (gathers, reductions))
        assert fwd == pytest.approx(gathers + reductions) and bwd == pytest.approx(2 * gathers + reductions)
    model, system, fp8_hidden = _setup(tp_overlap=1.0)
    fp8_hidden = dataclasses.replace(fp8_hidden, precision="fp8", low_precision_recipe="delayed")
    tiny = (1e-9, 3e-9)  # collectives the GEMMs hide entirely
    _, bwd = tp_comm_exposed_times_s(model, system.device, fp8_hidden, 8, 1, 1, True, False, False, tiny)
    assert bwd == pytest.approx(tiny[0])  # each block's output-gradient gather, half the pair's all-gathers each
