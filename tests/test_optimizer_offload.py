"""Offloading model states to host memory (issue 13): Megatron-Core's HybridDeviceOptimizer keeps
``mapping.optimizer_offload`` of the optimizer state a rank owns in host memory and steps it on the CPU;
DeepSpeed's ZeRO-3 offload_param keeps the rank's weight shard there (``mapping.weight_offload``).

The memory follows from the states the rank owns; the time from the three streams of the host step
(gradients down, the CPU's Adam, weights up), the slowest of which sets it, and from the copies each
ZeRO-3 pass makes of the weight shard."""

import dataclasses

import pytest
from conftest import rel_close, solved_as_enumerated, stretch_of, training_problem

from parasol.model import compute, memory
from parasol.model.errors import ProblemError
from parasol.model.specs import Mapping, Workload
from parasol.model.training import stage_host_bytes, stage_state_bytes
from parasol.model.training_step import evaluate_training
from parasol.solver.library import load_model, load_system
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem

H100 = load_system("dgx-h100", 64)


def _workload():
    return Workload(kind="training", seq_len=4096, global_batch=64)


def test_the_offloaded_share_of_the_owned_state_leaves_the_gpu_for_the_host():
    model, wl = load_model("llama3-70b"), _workload()
    params = 8e9
    base = Mapping(tp=4, pp=2, dp=8, micro_batch=1, zero=1)
    kept = stage_state_bytes(model, wl, base, params)
    for share in (0.25, 0.5, 1.0):
        m = dataclasses.replace(base, optimizer_offload=share)
        state = stage_state_bytes(model, wl, m, params)
        assert rel_close(state["optimizer"], (1 - share) * kept["optimizer"], 1e-12)
        assert state["weights"] == kept["weights"] and state["gradients"] == kept["gradients"]
        # the host holds the owned 1/dp shard in fp32 (master, two moments) and a pinned fp32 gradient copy
        assert rel_close(stage_host_bytes(wl, m, params), share * params / 8 * 16.0, 1e-12)
    assert stage_host_bytes(wl, base, params) == 0.0
    assert memory.host_optimizer_bytes_per_param() == 16.0


def test_the_host_step_is_set_by_its_slowest_stream():
    device = H100.device
    n = 1e9
    fast_link = dataclasses.replace(device, host_bytes_per_s=1e15)
    # the CPU steps fp32 master and moments in place (24 B) and reads the fp32 gradient copy (4 B)
    cpu = n * 28.0 / (device.host_memory_bytes_per_s * device.host_adam_efficiency)
    assert rel_close(compute.host_optimizer_step_time_s(fast_link, n, 4.0), cpu, 1e-12)
    fast_host = dataclasses.replace(device, host_memory_bytes_per_s=1e15)
    assert rel_close(compute.host_optimizer_step_time_s(fast_host, n, 4.0), n * 4.0 / device.host_bytes_per_s, 1e-12)
    assert compute.host_optimizer_step_time_s(device, 0.0, 4.0) == 0.0
    # the GPU steps the rest at the same time: the step is the longer of the two
    gpu_all = compute.optimizer_step_time_s(device, n, 4.0)
    half = compute.optimizer_step_time_s(device, n, 4.0, host_share=0.5)
    assert rel_close(half, max(gpu_all / 2, compute.host_optimizer_step_time_s(device, n / 2, 4.0)), 1e-12)
    assert compute.optimizer_step_time_s(device, n, 4.0, host_share=0.0) == gpu_all


def test_offloading_trades_gpu_memory_for_step_time():
    model, wl = load_model("llama3-70b"), _workload()
    m0 = Mapping(tp=4, pp=4, dp=4, micro_batch=1, vpp=5, sp=True, zero=1)
    e0 = evaluate_training(model, H100, wl, m0)
    e1 = evaluate_training(model, H100, wl, dataclasses.replace(m0, optimizer_offload=1.0))
    assert e1.metrics["peak_memory_gib"] < e0.metrics["peak_memory_gib"] - 10
    assert e1.metrics["step_time_s"] > e0.metrics["step_time_s"]
    assert e1.breakdown["memory_gib"]["optimizer"] == 0.0
    assert e1.metrics["host_memory_gib"] > 10 and "host_memory_gib" not in e0.metrics
    # the step grows by the host step minus the GPU step it replaces, nothing else
    assert rel_close(
        e1.metrics["step_time_s"] - e0.metrics["step_time_s"],
        (e1.breakdown["time_s"]["optimizer"] - e0.breakdown["time_s"]["optimizer"]) * stretch_of(e1),
        1e-6,
    )


@pytest.mark.parametrize(
    ("mapping", "system", "says"),
    [
        ({"zero": 0, "optimizer_offload": 0.5}, "dgx-h100", "zero 1 or more"),
        ({"optimizer_offload": 1.5}, "dgx-h100", "share from 0 to 1"),
        ({"optimizer_offload": "half"}, "dgx-h100", "share from 0 to 1"),
        ({"optimizer_offload": True}, "dgx-h100", "share from 0 to 1"),
        ({"optimizer_offload": 1.0}, "tpu-v5p-torus", "gives no host_"),
    ],
)
def test_what_cannot_offload_names_the_field(mapping, system, says):
    data = training_problem(
        model="llama2-7b",
        system=system,
        num_gpus=64,
        global_batch=64,
        mapping={"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, **mapping},
    )
    with pytest.raises(ProblemError) as info:  # at parsing, or where evaluate checks the mapping
        parse_problem(data, source="t").fixed_mapping()
    assert "mapping.optimizer_offload" in str(info.value) and says in str(info.value)


PROBLEM = training_problem(
    model="llama2-7b",
    system="dgx-h100",
    num_gpus=8,
    seq_len=4096,
    global_batch=16,
    mapping={"optimizer_offload": [0, 0.5, 1.0], "vpp": [1], "zero": [0, 1, 3], "cp": [1], "recompute": ["none", "full"]},
)


@pytest.mark.parametrize("objective", ["throughput", "memory"])
def test_optimizer_offload_is_a_decision_and_the_solver_equals_the_enumerator(objective):
    problem = parse_problem({**PROBLEM, "objective": objective}, source="t")
    plan = solved_as_enumerated(problem)
    if objective == "memory":  # nothing holds less than an optimizer state on the host
        assert plan.mapping.optimizer_offload == 1.0
    else:  # with memory to spare the host step only costs time
        assert plan.mapping.optimizer_offload == 0.0


def test_zero_0_plans_never_offload():
    problem = parse_problem({**PROBLEM, "objective": "memory", "mapping": {**PROBLEM["mapping"], "zero": [0]}}, "t")
    plan = solve(problem, workers=2, time_limit=60).plans[0]
    assert plan.mapping.zero == 0 and plan.mapping.optimizer_offload == 0.0


def test_offloading_lets_llama3_70b_train_on_one_dgx_h100():
    """147.8 GiB of states per GPU without it (no mapping fits 8 GPUs); with the optimizer on the host it fits."""
    data = training_problem(model="llama3-70b", system="dgx-h100", num_gpus=8, seq_len=4096, global_batch=64)
    without = solve(parse_problem({**data, "mapping": {"optimizer_offload": [0]}}, "t"), workers=2, time_limit=60)
    assert without.status == "INFEASIBLE" and "memory" in without.message
    with_ = solve(parse_problem({**data, "mapping": {"optimizer_offload": [0, 1.0]}}, "t"), workers=2, time_limit=60)
    assert with_.status == "OPTIMAL" and with_.plans[0].mapping.optimizer_offload == 1.0
    assert with_.plans[0].evaluation.metrics["fits"]


def test_weight_offloading_moves_zero3s_weight_shard_to_the_host():
    model, wl = load_model("llama3-70b"), _workload()
    params = 8e9
    base = Mapping(tp=4, pp=2, dp=8, micro_batch=1, zero=3)
    kept = stage_state_bytes(model, wl, base, params)
    off = dataclasses.replace(base, weight_offload=True)
    state = stage_state_bytes(model, wl, off, params)
    assert state["weights"] == 0.0 and kept["weights"] > 0
    assert state["gradients"] == kept["gradients"] > 0  # gradients stay (DeepSpeed moves them only with the optimizer)
    assert state["optimizer"] == kept["optimizer"] and state["zero3_buffers"] == kept["zero3_buffers"]
    assert rel_close(stage_host_bytes(wl, off, params), kept["weights"], 1e-12)


def _zero3(host_bytes_per_s=None, **mapping):
    system = load_system("dgx-h100", 8)
    if host_bytes_per_s is not None:
        system = dataclasses.replace(system, device=dataclasses.replace(system.device, host_bytes_per_s=host_bytes_per_s))
    m = Mapping(tp=1, pp=1, dp=8, micro_batch=1, zero=3, **mapping)
    return evaluate_training(load_model("llama2-7b"), system, _workload(), m)


def test_weight_offloading_costs_the_copies_of_each_pass():
    plain, off = _zero3(), _zero3(weight_offload=True)
    assert off.metrics["peak_memory_gib"] < plain.metrics["peak_memory_gib"]
    assert off.metrics["host_memory_gib"] > 0
    # a link that costs nothing leaves the step as it was; a slow one makes every pass wait for it
    assert rel_close(_zero3(1e18, weight_offload=True).metrics["step_time_s"], plain.metrics["step_time_s"], 1e-8)
    slow = _zero3(1e9, weight_offload=True).metrics["step_time_s"]
    assert slow > 1.5 * plain.metrics["step_time_s"]


@pytest.mark.parametrize(
    ("mapping", "says"),
    [({"zero": 1, "weight_offload": True}, "needs zero 3"), ({"zero": 3, "weight_offload": "yes"}, "allowed: false, true")],
)
def test_what_cannot_offload_weights_names_the_field(mapping, says):
    data = training_problem(
        model="llama2-7b", num_gpus=64, global_batch=64, mapping={"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, **mapping}
    )
    with pytest.raises(ProblemError, match=says) as info:
        parse_problem(data, source="t").fixed_mapping()
    assert "mapping.weight_offload" in str(info.value)


def test_weight_offload_is_a_decision_and_the_solver_equals_the_enumerator():
    data = {**PROBLEM, "objective": "memory", "mapping": {**PROBLEM["mapping"], "weight_offload": [False, True]}}
    problem = parse_problem(data, source="t")
    plan = solved_as_enumerated(problem)
    assert plan.mapping.weight_offload and plan.mapping.zero == 3  # nothing holds less
    throughput = solved_as_enumerated(parse_problem({**data, "objective": "throughput"}, source="t"))
    # offloading weights never makes a step faster: the best plan without it is as fast (here the copy
    # hides under compute, so both tie and either may be returned)
    kept = {**data, "objective": "throughput", "mapping": {**data["mapping"], "weight_offload": [False]}}
    best_kept = enumerate_space(parse_problem(kept, source="t")).plans[0].evaluation.metrics["step_time_s"]
    assert best_kept <= throughput.evaluation.metrics["step_time_s"] * (1 + 1e-3)
