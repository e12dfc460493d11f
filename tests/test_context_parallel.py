"""All-to-all (Ulysses) context parallelism beside ring attention (issue 13): ``mapping.cp_comm``.

Ring attention passes K/V blocks around the CP group behind the attention compute; the all-to-all
form trades sequence shards for head shards before the attention and back after it, which needs
tp·cp to divide the heads and the kv heads, and hides nothing.
"""

import pytest
from conftest import TINY_GQA, rel_close

from parasol.model.errors import ProblemError
from parasol.model.placement import Group, collective_time_s, layout
from parasol.model.specs import Mapping, Workload
from parasol.model.training import cp_a2a_forward_time_s, layer_times
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.planner import enumerate_space, planner_for, solve
from parasol.solver.problem import parse_problem

TINY = TINY_GQA


def test_the_all_to_alls_carry_q_k_v_and_the_output_and_hide_nothing():
    model, system = library.load_model("llama3-70b"), library.load_system("dgx-h100", 64)
    wl = Workload(kind="training", seq_len=131072, global_batch=8)
    t = cp_a2a_forward_time_s(model, system, wl, 8, 8, 1)
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
