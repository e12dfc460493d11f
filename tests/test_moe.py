"""Mixture-of-experts and MLA terms of the model, expert-parallel dispatch, and MoE planning."""

import dataclasses

import pytest
from conftest import TINY_MOE, solved_as_enumerated, training_problem

from parasol.model import compute, params
from parasol.model.choices import MoeDispatcher
from parasol.model.errors import ProblemError
from parasol.model.specs import Mapping
from parasol.model.training import check_mapping, ep_comm_forward_time_s, layer_compute_times_s, layer_times
from parasol.model.training_step import evaluate_training
from parasol.solver.library import load_model, load_system
from parasol.solver.problem import parse_problem


def _workload(seq=4096, batch=256, precision="bf16"):
    return parse_problem(
        {
            "model": "mixtral-8x7b",
            "system": {"name": "dgx-h100", "num_gpus": 64},
            "workload": {"kind": "training", "seq_len": seq, "global_batch": batch, "precision": precision},
        },
        source="t",
    ).workload


def _mixtral(ep, tp=2, pp=4, dp=8, **kw):
    model, system, wl = load_model("mixtral-8x7b"), load_system("dgx-h100", tp * pp * dp), _workload()
    mapping = Mapping(tp=tp, pp=pp, dp=dp, ep=ep, micro_batch=1, sp=tp > 1, **kw)
    return model, system, wl, mapping


def test_model_flops_count_active_experts_only():
    """Mixtral: 6 x the activated matmul weights (top-2 of 8 experts) + attention, not 6 x all 46.7B."""
    model = load_model("mixtral-8x7b")
    per_token = params.model_flops_per_token(model, 4096)
    attention = 6.0 * model.layers * model.heads * 2 * model.head_dim * 4096
    active_matmul = model.layers * params.matmul_params_per_layer(model, moe_layer=True) + model.vocab * model.hidden
    assert per_token == pytest.approx(6 * active_matmul + attention, rel=1e-12)
    assert 6 * 12.0e9 < per_token - attention < 6 * 13.5e9  # ~12.9B active parameters


def test_expert_parallelism_divides_expert_memory_and_adds_all_to_all():
    one = evaluate_training(*_mixtral(ep=1))
    eight = evaluate_training(*_mixtral(ep=8))
    s1, s8 = one.stages[0], eight.stages[0]
    assert s8["expert_params"] == pytest.approx(s1["expert_params"] / 8, rel=1e-12)
    assert s1["params"] == pytest.approx(s8["params"], rel=1e-12)  # attention and norms: unchanged
    assert one.breakdown["time_s"]["comm/ep"] == 0.0 < eight.breakdown["time_s"]["comm/ep"]
    assert eight.metrics["peak_memory_gib"] < one.metrics["peak_memory_gib"]


def test_all_to_all_is_slower_across_nodes():
    model, system, wl, _ = _mixtral(ep=8)
    inside = ep_comm_forward_time_s(model, system, wl, tp=1, cp=1, micro_batch=1, ep=8)  # 8 consecutive ranks: one node
    across = ep_comm_forward_time_s(model, system, wl, tp=1, cp=1, micro_batch=1, ep=64)  # 8 nodes
    assert 0 < inside < across


def test_moe_layer_compute_matches_routed_flops():
    """Routed expert GEMM FLOPs per GPU = 2 x rows x (3 h f_e) with rows = tokens/tp x top_k."""
    model = load_model("mixtral-8x7b")
    rows = compute.routed_rows_per_gpu(model, 4096, 2)
    assert rows == 4096 / 2 * 2
    shapes = compute.mlp_gemm_shapes(model, rows / (8 / 8), model.moe.expert_ffn)
    flops = sum(2 * m * n * k for m, n, k in shapes.values())
    assert flops == pytest.approx(2 * rows * 3 * model.hidden * model.moe.expert_ffn, rel=1e-12)


def test_routed_experts_add_to_the_layer_and_load_imbalance_slows_it():
    model, system, wl, m = _mixtral(ep=8)
    moe_times = layer_times(model, system, wl, 2, 1, 1, True, "none", 8, True)
    assert moe_times.gemm_fwd > compute.layer_gemm_forward_time_s(model, system.device, "bf16", 4096, 2, True)
    import dataclasses

    skewed = dataclasses.replace(model, moe=dataclasses.replace(model.moe, load_imbalance=1.5))
    assert layer_times(skewed, system, wl, 2, 1, 1, True, "none", 8, True).gemm_fwd > moe_times.gemm_fwd


def test_expert_parallelism_rules():
    model, system, wl, _ = _mixtral(ep=8)
    with pytest.raises(ProblemError, match="ep 3"):
        check_mapping(model, system, wl, Mapping(tp=2, pp=4, dp=8, ep=3, micro_batch=1, sp=True))
    dense = load_model("llama2-7b")
    with pytest.raises(ProblemError, match="dense"):
        check_mapping(dense, system, wl, Mapping(tp=2, pp=4, dp=8, ep=2, micro_batch=1, sp=True))


def test_mla_attention_uses_its_head_dims():
    model = load_model("deepseek-v3")
    assert compute.attention_head_dims(model) == (192, 128)
    flops = compute.attention_core_flops(model, 1, 4096, 1, 1, causal_skip=False)
    assert flops == 2.0 * 4096 * 4096 * 128 * (192 + 128)


def test_deepseek_v3_dense_leading_layers_sit_on_the_first_stage():
    model, system = load_model("deepseek-v3"), load_system("dgx-h100", 1024)
    wl = parse_problem(
        {
            "model": "deepseek-v3",
            "system": {"name": "dgx-h100", "num_gpus": 1024},
            "workload": {"kind": "training", "seq_len": 4096, "global_batch": 8192, "precision": "fp8"},
        },
        source="t",
    ).workload
    ev = evaluate_training(
        model, system, wl, Mapping(tp=2, pp=8, dp=64, ep=64, micro_batch=1, sp=True, first_stage_layers=7, last_stage_layers=6)
    )
    assert [s["moe_layers"] for s in ev.stages] == [4, 8, 8, 8, 8, 8, 8, 6]  # layers 0-2 are dense
    assert 0.0 < ev.metrics["mfu"] < 1.0


# ---------------------------------------------------------------- planning MoE models


def _moe_problem(model, num_gpus, batch, mapping, objective="throughput", seq=2048):
    return parse_problem(
        {
            "model": model,
            "system": {"name": "dgx-h100", "num_gpus": num_gpus},
            "workload": {"kind": "training", "seq_len": seq, "global_batch": batch, "precision": "bf16"},
            "mapping": mapping,
            "objective": objective,
        },
        source="moe-test",
    )


@pytest.mark.parametrize("objective", ["throughput", "memory"])
@pytest.mark.parametrize(
    "case",
    [
        ("tiny", 16, 32, {"vpp": [1, 2]}),  # ep, tp, pp, dp, stage split all free
        ("tiny", 32, 64, {"recompute": ["none", "full"], "zero": [1, 3], "vpp": [1]}),
        ("mixtral-8x7b", 16, 32, {"vpp": [1], "first_stage_layers": 0, "last_stage_layers": 0, "zero": [1]}),
    ],
)
@pytest.mark.slow
def test_planner_matches_enumerator_on_moe(case, objective):
    from parasol.solver.planner import enumerate_space, solve

    name, n, batch, mapping = case
    p = _moe_problem(TINY_MOE if name == "tiny" else name, n, batch, mapping, objective)
    enumerated = enumerate_space(p)
    solved = solve(p, time_limit=60)
    assert solved.status == enumerated.status
    if enumerated.plans:
        assert solved.objective_value == pytest.approx(enumerated.objective_value, rel=1e-3)
        best = solved.plans[0]
        assert best.evaluation.metrics["fits"]
        first = best.mapping.first_stage_layers
        assert best.mapping.pp == 1 or first >= p.model.moe.first_dense_layers  # lead layers on stage 0


def test_planner_chooses_expert_parallelism_for_a_moe_model():
    from parasol.solver.planner import solve

    # ZeRO-1 without tp or pp: 46.7B parameters' weights and gradients on every GPU (~280 GB) do not
    # fit, so the plan must shard the experts over ep ranks
    p = _moe_problem(
        "mixtral-8x7b", 64, 256, {"first_stage_layers": 0, "last_stage_layers": 0, "vpp": [1], "tp": 1, "pp": 1, "zero": 1}
    )
    result = solve(p, time_limit=60)
    assert result.status == "OPTIMAL"
    assert result.plans[0].mapping.ep > 1


# --- expert-parallel dispatch (model/expert_parallel.py) ---------------------------------------

from math import comb  # noqa: E402

from parasol.model import expert_parallel  # noqa: E402
from parasol.model.specs import Workload  # noqa: E402


def test_expert_set_hit_probability_is_hypergeometric():
    # one expert of 8, top-2: P(hit) = 1 - C(7,2)/C(8,2) = 1 - 21/28 = 0.25 = k/E
    assert expert_parallel.expert_set_hit_probability(8, 2, 1) == pytest.approx(0.25)
    assert expert_parallel.expert_set_hit_probability(256, 8, 32) == pytest.approx(1 - comb(224, 8) / comb(256, 8))
    assert expert_parallel.expert_set_hit_probability(8, 2, 8) == 1.0


def test_alltoall_dispatcher_sends_top_k_copies_split_by_domain():
    model = load_model("deepseek-v3")
    inside, across = expert_parallel.dispatch_copies_per_token(model, ep=64, local=8, dispatcher=MoeDispatcher.ALLTOALL)
    assert inside == pytest.approx(8 * 7 / 64) and across == pytest.approx(8 * 56 / 64)
    assert inside + across == pytest.approx(8 * 63 / 64)  # the copy to the rank itself stays put


def test_deepep_sends_each_token_once_per_remote_node_and_respects_node_limited_routing():
    model = load_model("deepseek-v3")  # top-8 of 256, M = 4 nodes per token
    _, plain = expert_parallel.dispatch_copies_per_token(model, ep=64, local=8, dispatcher=MoeDispatcher.ALLTOALL)
    _, dedup = expert_parallel.dispatch_copies_per_token(model, ep=64, local=8, dispatcher=MoeDispatcher.DEEPEP)
    assert dedup < plain
    # 8 nodes: unlimited, 8 x P(node hit) ~ 5.3 distinct nodes; the limit caps them at 4, 7/8 of them remote
    assert dedup == pytest.approx(4 * 7 / 8, rel=1e-9)
    import dataclasses

    free = dataclasses.replace(model, moe=dataclasses.replace(model.moe, max_nodes_per_token=0))
    _, unlimited = expert_parallel.dispatch_copies_per_token(free, ep=64, local=8, dispatcher=MoeDispatcher.DEEPEP)
    assert unlimited == pytest.approx(7 * expert_parallel.expert_set_hit_probability(256, 8, 32))


def test_deepep_fp8_dispatch_is_one_byte_plus_block_scales():
    wl = Workload(kind="training", seq_len=4096, global_batch=64, precision="fp8", moe_dispatcher="deepep", moe_fp8_dispatch=True)
    assert expert_parallel.dispatch_bytes_per_element(wl, "dispatch") == pytest.approx(1 + 4 / 128)
    assert expert_parallel.dispatch_bytes_per_element(wl, "combine") == 2.0
    plain = Workload(kind="training", seq_len=4096, global_batch=64, precision="fp8")
    assert expert_parallel.dispatch_bytes_per_element(plain, "dispatch") == 2.0
    # Megatron-Core's DeepEP dispatch sends 16-bit tokens: FP8 only where the workload says so
    megatron = Workload(kind="training", seq_len=4096, global_batch=64, precision="fp8", moe_dispatcher=MoeDispatcher.DEEPEP)
    assert expert_parallel.dispatch_bytes_per_element(megatron, "dispatch") == 2.0


def test_an_fp8_dispatch_needs_deepep_and_fp8():
    for workload in ({"moe_dispatcher": "alltoall", "precision": "fp8"}, {"moe_dispatcher": "deepep", "precision": "bf16"}):
        data = training_problem("deepseek-v3", "dgx-h800", 256, global_batch=256, moe_fp8_dispatch=True, **workload)
        with pytest.raises(ProblemError) as err:
            parse_problem(data, source="t.yaml")
        assert err.value.field == "workload.moe_fp8_dispatch" and "deepep" in str(err.value)


def test_an_overlapped_all_to_all_costs_the_compute_the_sms_its_kernels_take():
    """20 of H100's 132 SMs communicate (DeepSeek-V3 Sec. 3.2.2), so 5 s of a layer's compute takes
    5 x 132/112 s beside the all-to-all; what the slowed compute cannot cover shows too."""
    from parasol.model.training import ep_exposed_times_s, overlap_exposed_s

    device = load_system("dgx-h100", 8).device
    assert device.sms == 132
    on = Workload(kind="training", seq_len=4096, global_batch=64, moe_a2a_overlap=True)
    off = Workload(kind="training", seq_len=4096, global_batch=64)
    assert ep_exposed_times_s(device, off, 1.0, 2.0, 10.0) == (1.0, 2.0)
    f, b = ep_exposed_times_s(device, on, 1.0, 2.0, 5.0)
    assert f + b == pytest.approx(5.0 * 20 / 112) and f / b == pytest.approx(0.5)
    assert overlap_exposed_s(15.0, 10.0, 20, 132) == pytest.approx(5.0)  # more to send than to compute
    assert overlap_exposed_s(1.0, 10.0, 20, 132) == 1.0  # too little to hide: never worse than no overlap
    # a device without an SM count hides what its moe_overlap share of the compute can
    share = dataclasses.replace(device, sms=0, moe_overlap_efficiency=0.4)
    assert sum(ep_exposed_times_s(share, on, 1.0, 2.0, 5.0)) == pytest.approx(1.0)


def test_cpsat_equals_the_enumerator_with_the_all_to_all_overlapped():
    mapping = {"pp": [1, 2], "tp": [1], "ep": [8, 16], "vpp": [1], "micro_batch": [1, 2]}
    data = training_problem(
        "qwen3-30b-a3b", num_gpus=16, global_batch=64, mapping=mapping, moe_dispatcher="deepep", moe_a2a_overlap=True
    )
    solved_as_enumerated(parse_problem(data, source="t.yaml"), method="cpsat")


def test_deepep_with_overlap_is_faster_than_plain_alltoall_for_deepseek_v3():
    import dataclasses

    model, system = load_model("deepseek-v3"), load_system("dgx-h100", 1024)
    base = Workload(kind="training", seq_len=4096, global_batch=8192, precision="fp8")
    # DualPipe: the overlap needs a schedule that merges forwards with backwards (pipeline.a2a_overlap_problem)
    mapping = Mapping(tp=2, pp=8, dp=64, ep=64, micro_batch=1, sp=True, first_stage_layers=4, last_stage_layers=9, dualpipe=True)
    plain = evaluate_training(model, system, base, mapping).metrics["step_time_s"]
    deepep = evaluate_training(model, system, dataclasses.replace(base, moe_dispatcher=MoeDispatcher.DEEPEP), mapping).metrics[
        "step_time_s"
    ]
    both = evaluate_training(
        model, system, dataclasses.replace(base, moe_dispatcher="deepep", moe_a2a_overlap=True), mapping
    ).metrics["step_time_s"]
    assert both < deepep < plain


def test_megatron_lm_sends_no_fp8_dispatch():
    """Megatron-Core's DeepEP dispatch carries 16-bit tokens (Megatron-LM's GB200 guide: FP8 EP dispatch is not
    yet supported): its framework profile refuses the DeepSeek-style FP8 dispatch in one line."""
    fp8 = {"precision": "fp8", "moe_dispatcher": "deepep", "framework": "megatron-lm"}
    data = training_problem("deepseek-v3", "dgx-h800", 256, global_batch=256, moe_fp8_dispatch=True, **fp8)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.moe_fp8_dispatch" and "megatron-lm" in str(err.value)
    data["workload"]["moe_fp8_dispatch"] = False
    assert parse_problem(data, source="t.yaml").workload.moe_fp8_dispatch is False


def test_alltoall_dispatcher_sorts_the_received_rows_by_local_expert_and_back():
    """Megatron-Core's alltoall dispatcher reorders the rows it receives by local expert and restores them before the
    combine (sort_chunks_by_idxs, "Permutation 2"): read and write h per row each way, in the forward and again in
    the backward. DeepEP permutes once, as every dispatcher does; one local expert needs no sort."""
    model, system, wl, _ = _mixtral(ep=2)
    device = system.device
    alltoall, deepep = wl, dataclasses.replace(wl, moe_dispatcher=MoeDispatcher.DEEPEP)
    rows = compute.routed_rows_per_gpu(model, 4096, 1)
    assert expert_parallel.local_sort_bytes(model, alltoall, rows, 2) == 4 * model.hidden * 2 * rows  # 4 local experts
    assert expert_parallel.local_sort_bytes(model, alltoall, rows, 8) == 0.0  # one local expert
    assert expert_parallel.local_sort_bytes(model, deepep, rows, 2) == 0.0
    a2a = layer_compute_times_s(model, device, alltoall, 1, 1, 1, False, 2, True)
    flex = layer_compute_times_s(model, device, deepep, 1, 1, 1, False, 2, True)
    sort_s = compute.memory_bound_time_s(device, 4 * model.hidden * 2 * rows)
    assert a2a[:2] == flex[:2]  # the dispatcher changes neither the GEMMs nor the attention core
    assert a2a[2] - flex[2] == pytest.approx(sort_s, rel=1e-9) and a2a[3] - flex[3] == pytest.approx(sort_s, rel=1e-9)
