"""All-to-all (Ulysses) and all-gather context parallelism beside ring attention (issue 13): ``mapping.cp_comm``.

Ring attention passes K/V blocks around the CP group behind the attention compute; the all-to-all
form trades sequence shards for head shards before the attention and back after it, which needs
tp·cp to divide the heads and the kv heads, and hides nothing.
"""

import dataclasses

import pytest
from conftest import TINY_GQA, rel_close

from parasol.model.errors import ProblemError
from parasol.model.placement import Group, collective_time_s, layout
from parasol.model.specs import Mapping, Workload
from parasol.model.training import cp_a2a_times_s, cp_exposed_forward_time_s, cp_ring_backward_time_s, layer_times
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.planner import enumerate_space, planner_for, solve
from parasol.solver.problem import parse_problem

TINY = TINY_GQA


def test_the_all_to_alls_carry_q_k_v_and_the_output_and_hide_nothing():
    model, system = library.load_model("llama3-70b"), library.load_system("dgx-h100", 64)
    wl = Workload(kind="training", seq_len=131072, global_batch=8)
    t, back = cp_a2a_times_s(model, system, wl, 8, 8, 1)
    assert back == t  # 16-bit: the gradients go back as the tensors came
    tokens, e = 131072 / 8, 2.0
    where = layout(system, Group.of((8, 8)))  # the CP group's default layout: stride tp
    qkv = tokens * (model.q_width + 2 * model.kv_width) / 8 * e
    out = tokens * model.q_width / 8 * e
    assert t == pytest.approx(
        collective_time_s("alltoall", qkv, where, system) + collective_time_s("alltoall", out, where, system)
    )
    a2a = layer_times(model, system, wl, 8, 8, 1, True, "none", cp_comm="a2a")
    ring = layer_times(model, system, wl, 8, 8, 1, True, "none")
    assert a2a.cp_comm_fwd == a2a.cp_comm_bwd == pytest.approx(t)
    assert a2a.attention_fwd == ring.attention_fwd  # the same attention work, exchanged differently


def test_the_heads_must_split_over_tp_and_cp():
    model, system = library.load_model("llama3-70b"), library.load_system("dgx-h100", 64)
    wl = Workload(kind="training", seq_len=131072, global_batch=8)
    mapping = Mapping(tp=8, pp=1, dp=1, cp=8, micro_batch=1, sp=True, cp_comm="a2a")  # 64 GPUs, 8 kv heads
    with pytest.raises(ProblemError) as info:
        evaluate_training(model, system, wl, mapping)
    assert info.value.field == "mapping.cp_comm" and "kv_heads" in str(info.value)
    ok = evaluate_training(model, system, wl, Mapping(tp=4, pp=2, dp=4, cp=2, micro_batch=1, sp=True, cp_comm="a2a"))
    assert ok.metrics["step_time_s"] > 0


PROBLEM = {
    "model": TINY,
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 16384, "global_batch": 8},
    "mapping": {"cp": [1, 2, 4, 8], "cp_comm": ["ring", "a2a"], "vpp": [1], "zero": [1], "recompute": ["none", "full"]},
}


def test_a2a_is_left_out_where_the_heads_do_not_split_and_the_solver_equals_the_enumerator():
    problem = parse_problem(PROBLEM, source="t")
    space = planner_for(problem).space(problem)
    rows = next(r for r in space.relations if r.name == "cp_comm").frame
    a2a = rows[rows["cp_comm"] == 1]
    assert len(a2a) > 0 and all(4 % (tp * cp) == 0 for tp, cp in zip(a2a["tp"], a2a["cp"]))
    assert set(rows[rows["cp"] == 1]["cp_comm"]) == {0}  # cp 1 exchanges nothing: one row
    enum, sol = enumerate_space(problem), solve(problem, workers=2, time_limit=60)
    assert enum.status == sol.status == "OPTIMAL"
    assert rel_close(sol.objective_value, enum.objective_value, 1e-3)


def test_allgather_gathers_k_and_v_exposed_and_holds_them_while_the_attention_runs():
    """All-gather context parallelism (Megatron-Core --cp-comm-type allgather), as Llama 3 405B trained at
    128K tokens (the Llama 3 report, Sec. 3.3.2): the whole sequence's K and V, 2·b·s·kv/tp elements,
    gathered before the attention, gathered again and their gradients reduce-scattered in its backward; ring
    attention hides its exchange behind the attention, so it never exposes more here."""
    model, system = library.load_model("llama3.1-405b"), library.load_system("dgx-h100", 128)
    wl = Workload(kind="training", seq_len=131072, global_batch=8)
    where = layout(system, Group.of((16, 8)))
    gathered = 2.0 * 131072 * model.kv_width / 8 * 2.0
    gather = layer_times(model, system, wl, 8, 16, 1, True, "none", cp_comm="allgather")
    ring = layer_times(model, system, wl, 8, 16, 1, True, "none")
    assert gather.cp_comm_fwd == pytest.approx(collective_time_s("allgather", gathered, where, system))
    # the backward gathers K and V again (none kept) and reduce-scatters dK and dV
    again = collective_time_s("allgather", gathered, where, system) + collective_time_s("reducescatter", gathered, where, system)
    assert gather.cp_comm_bwd == pytest.approx(again)
    assert gather.cp_comm_fwd > ring.cp_comm_fwd and gather.attention_fwd == ring.attention_fwd
    mapping = dict(tp=8, pp=1, dp=1, cp=16, micro_batch=1, sp=True, recompute="full")
    small = library.load_model("llama3-8b")  # 32 layers fit one stage at 128K with full recomputation
    ev = {c: evaluate_training(small, system, wl, Mapping(**mapping, cp_comm=c)) for c in ("ring", "allgather")}
    held = 2 * 2.0 * 131072 * small.kv_width / 8 * 2.0  # the backward's gathered K and V and dK, dV of the layer in flight
    assert rel_close(ev["allgather"].metrics["peak_memory_gib"] - ev["ring"].metrics["peak_memory_gib"], held / 2**30, 1e-9)


def test_allgather_is_a_choice_megatron_emits_and_torchtitan_refuses():
    data = {**PROBLEM, "mapping": {**PROBLEM["mapping"], "cp_comm": ["ring", "allgather"]}}
    problem = parse_problem(data, source="t")
    enum, sol = enumerate_space(problem), solve(problem, workers=2, time_limit=60, method="cpsat")
    assert enum.status == sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-3)
    fixed = {"tp": 1, "pp": 1, "dp": 1, "cp": 8, "micro_batch": 1, "cp_comm": "allgather", "vpp": 1}
    megatron = {**PROBLEM, "mapping": fixed, "workload": {**PROBLEM["workload"], "framework": "megatron-lm"}}
    from parasol.solver.launch import emit  # noqa: PLC0415

    problem = parse_problem(megatron, source="t")
    assert "--cp-comm-type allgather" in emit(problem, 8, problem.fixed_mapping())
    titan = {**megatron, "workload": {**PROBLEM["workload"], "framework": "torchtitan"}}
    with pytest.raises(ProblemError) as err:
        parse_problem(titan, source="t")
    assert err.value.field == "mapping.cp_comm" and "allgather" in str(err.value)


def test_selective_recomputation_of_the_attention_core_redoes_its_exchange():
    """Transformer Engine's DotProductAttention holds the CP exchange, so recomputing the attention core
    (selective, core_attn) redoes it: an all-gather's or all-to-all's exposed time joins the recompute."""
    model, system = library.load_model("llama3.1-405b"), library.load_system("dgx-h100", 128)
    wl = Workload(kind="training", seq_len=131072, global_batch=8)
    for exchange, tp, cp in (("allgather", 8, 16), ("a2a", 4, 2)):  # a2a: the 8 kv heads split over tp·cp
        times = {c: layer_times(model, system, wl, tp, cp, 1, True, "selective", cp_comm=c) for c in ("ring", exchange)}
        assert times[exchange].recompute - times["ring"].recompute == pytest.approx(
            times[exchange].cp_comm_fwd - times["ring"].cp_comm_fwd
        )
        assert times[exchange].cp_comm_fwd > 0


def test_fp8_attention_exchanges_fp8_q_k_v_and_keeps_the_gathered_gradients_16_bit():
    """Under FP8 attention Transformer Engine quantises Q, K and V before context parallelism exchanges them
    and passes the FP8 data (context_parallel.py): K and V around the ring and dK, dV back, every all-to-all,
    the gathered K and V; all-gather's dK and dV are reduce-scattered in 16 bits. Each exchange's bytes are
    what the collective model is given, so the times follow from the same collectives at 1 byte."""
    model, system = library.load_model("llama3.1-405b"), library.load_system("dgx-h100", 128)
    plain = Workload(kind="training", seq_len=131072, global_batch=8, precision="fp8", low_precision_recipe="delayed")
    fp8 = dataclasses.replace(plain, fp8_attention=True)
    where = layout(system, Group.of((16, 8)))
    elements = 2.0 * 131072 * model.kv_width / 8
    gather = {w.fp8_attention: layer_times(model, system, w, 8, 16, 1, True, "none", cp_comm="allgather") for w in (plain, fp8)}
    assert gather[True].cp_comm_fwd == pytest.approx(collective_time_s("allgather", elements * 1.0, where, system))
    assert gather[True].cp_comm_bwd == pytest.approx(
        collective_time_s("allgather", elements * 1.0, where, system)
        + collective_time_s("reducescatter", elements * 2.0, where, system)
    )
    assert gather[False].cp_comm_fwd == pytest.approx(collective_time_s("allgather", elements * 2.0, where, system))
    # the ring: with the attention taken away (a zero-time compute), the whole transfer shows, at 1 byte
    ring = {w.fp8_attention: cp_exposed_forward_time_s(model, system, w, 8, 16, 1, 0.0) for w in (plain, fp8)}
    block = 2.0 * 131072 / 16 * model.kv_width / 8
    assert ring[True] == pytest.approx(15 * collective_time_s("p2p", block * 1.0, where, system))
    assert ring[False] == pytest.approx(15 * collective_time_s("p2p", block * 2.0, where, system))
    # the ring's backward: 16-bit, K, V and the dK, dV so far each step (twice the bytes); FP8, K and V each step
    # and the dK, dV blocks in one all-to-all of cp blocks at the last step, hidden only behind that step's compute
    back = {w.fp8_attention: cp_ring_backward_time_s(model, system, w, 8, 16, 1, 0.0) for w in (plain, fp8)}
    assert back[False] == pytest.approx(2 * 15 * collective_time_s("p2p", block * 2.0, where, system))
    assert back[True] == pytest.approx(
        15 * collective_time_s("p2p", block * 1.0, where, system) + collective_time_s("alltoall", 16 * block, where, system)
    )
    # a compute that hides every step's 1-byte transfer leaves the all-to-all beyond its last step's 1/cp share
    steps = 15 * collective_time_s("p2p", block * 1.0, where, system)
    compute = 2.0 * steps * 16 / 15
    gradients = collective_time_s("alltoall", 16 * block, where, system)
    assert gradients > compute / 16
    assert cp_ring_backward_time_s(model, system, fp8, 8, 16, 1, compute) == pytest.approx(gradients - compute / 16)
    # the all-to-alls: Q, K, V and every gradient at 1 byte; the output at 1 byte under delayed scaling, at 2
    # under current scaling (Transformer Engine keeps that output in 16 bits)
    pair = layout(system, Group.of((2, 4)))
    tokens = 131072 / 2
    qkv, out = tokens * (model.q_width + 2 * model.kv_width) / 4, tokens * model.q_width / 4
    a2a = {w.fp8_attention: cp_a2a_times_s(model, system, w, 4, 2, 1) for w in (plain, fp8)}
    moved = collective_time_s("alltoall", qkv, pair, system) + collective_time_s("alltoall", out, pair, system)
    wide = collective_time_s("alltoall", 2 * qkv, pair, system) + collective_time_s("alltoall", 2 * out, pair, system)
    assert a2a[True] == pytest.approx((moved, moved)) and a2a[False] == pytest.approx((wide, wide))
    current = dataclasses.replace(fp8, low_precision_recipe="tensorwise")
    forward, backward = cp_a2a_times_s(model, system, current, 4, 2, 1)
    assert backward == pytest.approx(moved)
    assert forward == pytest.approx(
        collective_time_s("alltoall", qkv, pair, system) + collective_time_s("alltoall", 2 * out, pair, system)
    )
    # memory: all-gather's backward holds the FP8 K and V and the 16-bit dK and dV of the layer in flight
    small = library.load_model("llama3-8b")
    mapping = dict(tp=8, pp=1, dp=1, cp=16, micro_batch=1, sp=True, recompute="full")
    ev = {
        (w.fp8_attention, c): evaluate_training(small, system, w, Mapping(**mapping, cp_comm=c))
        for w in (plain, fp8)
        for c in ("ring", "allgather")
    }
    held = 2.0 * 131072 * small.kv_width / 8 * (1.0 + 2.0)
    grew = ev[(True, "allgather")].metrics["peak_memory_gib"] - ev[(True, "ring")].metrics["peak_memory_gib"]
    assert rel_close(grew, held / 2**30, 1e-9)


def test_the_solver_equals_the_enumerator_with_fp8_attention_over_the_exchanges():
    data = {
        **PROBLEM,
        "workload": {**PROBLEM["workload"], "precision": "fp8", "low_precision_recipe": "delayed", "fp8_attention": True},
        "mapping": {**PROBLEM["mapping"], "cp_comm": ["ring", "a2a", "allgather"]},
    }
    problem = parse_problem(data, source="t")
    enum, sol = enumerate_space(problem), solve(problem, workers=2, time_limit=60, method="cpsat")
    assert enum.status == sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-3)
