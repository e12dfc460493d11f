"""Expert tensor parallelism (issue 13): ``mapping.etp``, Megatron-Core's --expert-tensor-parallel-size.

Each routed expert is split over the etp ranks of its expert tensor-parallel group: a GPU holds 1/etp
of each of its E/ep experts, the group all-gathers the routed rows it received before the experts and
reduce-scatters them after, and the expert data-parallel group shrinks to tp·dp·cp/(ep·etp).
"""

import pytest
from conftest import TINY_MOE, rel_close, solved_as_enumerated

from parasol.model import compute, params
from parasol.model.errors import ProblemError
from parasol.model.placement import Group, collective_time_s, layout, parallel_groups
from parasol.model.specs import Mapping, Workload
from parasol.model.training import check_mapping, etp_comm_time_s, expert_dp_group_size, layer_times, stage_expert_params
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.planner import planner_for
from parasol.solver.problem import parse_problem

TINY_MOE_ETP = {  # conftest's small MoE model with 8 wider experts and no shared or leading dense layer
    **TINY_MOE,
    "name": "tiny-moe-etp",
    "layers": 4,
    "moe": {"experts": 8, "top_k": 2, "expert_ffn": 2048, "first_dense_layers": 0},
}


def _qwen(num_gpus=64):
    model, system = library.load_model("qwen3-235b-a22b"), library.load_system("dgx-h100", num_gpus)
    return model, system, Workload(kind="training", seq_len=4096, global_batch=64, precision="bf16")


def test_expert_weights_split_over_etp_and_the_expert_dp_group_shrinks():
    model, _, _ = _qwen()
    one = stage_expert_params(model, 10, ep=8)
    assert stage_expert_params(model, 10, ep=8, etp=4) == pytest.approx(one / 4)
    assert one == pytest.approx(10 * params.expert_params_per_layer(model) / 8)
    m = Mapping(tp=4, pp=2, dp=8, ep=8, etp=4, micro_batch=1)
    assert expert_dp_group_size(m) == 4 * 8 // (8 * 4) == 1


def test_the_expert_grid_puts_etp_innermost_then_ep_then_edp():
    groups = parallel_groups("tp-cp-ep-dp-pp", tp=4, cp=1, dp=8, pp=2, ep=4, etp=2)
    assert groups["etp"] == Group.of((2, 1))  # consecutive ranks, in the tp slot
    assert groups["ep"] == Group.of((4, 2))  # stride etp
    assert groups["edp"] == Group.of((4, 8))  # tp·dp/(ep·etp) = 4 ranks at stride ep·etp
    assert groups["tp"] == Group.of((4, 1))  # the dense grid is unchanged


def test_the_same_expert_flops_in_narrower_gemms_plus_a_gather_and_a_reduce_scatter():
    model, system, wl = _qwen()
    device, tokens = system.device, 4096.0
    t1 = compute.moe_routed_forward_time_s(model, device, "bf16", tokens, 4, 8)
    t4 = compute.moe_routed_forward_time_s(model, device, "bf16", tokens, 4, 8, etp=4)
    # the same FLOPs on each GPU (4x the rows, 1/4 of the width): within the GEMM curve's shape effect
    assert rel_close(t1, t4, 0.25)
    rows = compute.routed_rows_per_gpu(model, tokens, 4)
    nbytes = 4 * rows * model.hidden * 2.0
    where = layout(system, Group.of((4, 1)))
    expected = collective_time_s("allgather", nbytes, where, system) + collective_time_s("reducescatter", nbytes, where, system)
    assert etp_comm_time_s(model, system, wl, 4, 1, 1, 4) == pytest.approx(expected) and expected > 0
    assert etp_comm_time_s(model, system, wl, 4, 1, 1, 1) == 0.0
    plain = layer_times(model, system, wl, 4, 1, 1, True, "none", 8, True)
    split = layer_times(model, system, wl, 4, 1, 1, True, "none", 8, True, etp=4)
    assert split.ep_comm_fwd == pytest.approx(plain.ep_comm_fwd + expected)


def test_etp_lowers_the_peak_memory_of_an_expert_heavy_mapping():
    model, system, wl = _qwen()
    base = dict(tp=4, pp=4, dp=4, ep=4, micro_batch=1, sp=True, recompute="full")
    one = evaluate_training(model, system, wl, Mapping(**base))
    four = evaluate_training(model, system, wl, Mapping(**base, etp=4))
    assert four.stages[0]["expert_params"] == pytest.approx(one.stages[0]["expert_params"] / 4)
    assert four.metrics["peak_memory_gib"] < one.metrics["peak_memory_gib"]
    assert four.breakdown["time_s"]["comm/ep"] > one.breakdown["time_s"]["comm/ep"]


@pytest.mark.parametrize(
    "mapping, says",
    [
        (dict(tp=4, pp=2, dp=8, ep=8, etp=3), "etp 3"),  # does not divide the expert width 1536
        (dict(tp=1, pp=8, dp=8, ep=8, etp=2), "ep·etp = 16"),  # 16 does not divide tp·dp·cp = 8
        (dict(tp=4, pp=2, dp=8, ep=8, etp=0), "positive integer"),
    ],
)
def test_megatron_cores_expert_grid_rules(mapping, says):
    model, system, wl = _qwen()
    with pytest.raises(ProblemError, match=says) as info:
        check_mapping(model, system, wl, Mapping(micro_batch=1, sp=mapping["tp"] > 1, **mapping))
    assert info.value.field == "mapping.etp"


def test_a_dense_model_has_no_expert_tensor_parallelism():
    problem = {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32},
        "mapping": {"etp": [1, 2]},
    }
    with pytest.raises(ProblemError, match="etp 1") as info:
        planner_for(parse_problem(problem, source="t")).space(parse_problem(problem, source="t"))
    assert info.value.field == "mapping.etp"


PROBLEM = {
    "model": TINY_MOE_ETP,
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 4096, "global_batch": 16, "precision": "bf16"},
    "mapping": {"etp": [1, 2, 4], "vpp": [1], "zero": [1], "recompute": ["none", "full"], "cp": [1]},
}


@pytest.mark.parametrize("objective", ["throughput", "memory"])
def test_etp_is_a_decision_and_the_solver_equals_the_enumerator(objective):
    data = {**PROBLEM, "objective": objective}
    if objective == "memory":  # with ep held at 1, only etp can split the experts
        data["mapping"] = {**PROBLEM["mapping"], "ep": [1]}
    problem = parse_problem(data, source="t")
    grid = next(r for r in planner_for(problem).space(problem).relations if r.name == "grid").frame
    assert set(grid["etp"]) == {1, 2, 4}
    assert all((tp * dp) % (ep * etp) == 0 for tp, dp, ep, etp in zip(grid["tp"], grid["dp"], grid["ep"], grid["etp"]))
    plan = solved_as_enumerated(problem)
    if objective == "memory":  # splitting the experts lowers the memory floor: the planner uses it
        assert plan.mapping.etp == 4
