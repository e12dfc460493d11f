"""The expert all-to-all's overlap as a decision (``mapping.moe_a2a_overlap``): solve chooses it where the mapping
lists both values (default: the workload's), only where a schedule can merge one micro-batch's forward with another's
backward (Megatron-Core's asserts, ``pipeline.a2a_overlap_problem``), with the interleaved schedule's extra warm-up
chunk in memory; the solver equals the enumerator on it, the launch line asks for it, and what cannot run is refused
in one line naming the field."""

import pytest
from conftest import assert_refused_in_one_line, solved_as_enumerated, training_problem

from parasol.model.errors import ProblemError
from parasol.model.memory import in_flight_chunk_limit
from parasol.model.pipeline import a2a_overlap_problem
from parasol.solver import launch
from parasol.solver.planner import planner_for, solve
from parasol.solver.problem import parse_problem
from parasol.solver.training_report import plan_label

# Qwen3-30B-A3B on 64 H100 (8 per node): from ep 16 on the all-to-all leaves the node
CHOICE = {"cp": 1, "pp": [1, 2], "vpp": [1, 2], "tp": [1, 2], "zero": [1], "recompute": ["none", "full"], "ep": [4, 8, 16]}


def _problem(overlap=None, workload_overlap=False, mapping=None, model="qwen3-30b-a3b", **workload):
    chosen = {**CHOICE, **(mapping or {})}
    if overlap is not None:
        chosen["moe_a2a_overlap"] = overlap
    data = training_problem(model, "dgx-h100", 64, global_batch=256, mapping=chosen, moe_a2a_overlap=workload_overlap, **workload)
    return parse_problem(data, source="t.yaml")


def _fixed(pp, vpp, ep, overlap, **workload):
    return _problem(
        [overlap],
        mapping={"tp": 1, "pp": pp, "vpp": vpp, "ep": ep, "dp": 64 // pp, "micro_batch": 1, "recompute": "none"},
        **workload,
    )


def test_solve_equals_the_enumerator_when_it_chooses_the_overlap():
    plan = solved_as_enumerated(_problem([False, True]), method="cpsat")
    assert plan.mapping.moe_a2a_overlap is True


def test_the_choice_is_the_better_of_the_two_alone_and_only_where_a_schedule_merges_passes():
    both = solve(_problem([False, True]), time_limit=60)
    alone = {o: solve(_problem([o]), time_limit=60) for o in (False, True)}
    assert alone[True].objective_value > alone[False].objective_value  # hiding the all-to-all pays here
    assert both.objective_value == pytest.approx(alone[True].objective_value, rel=1e-9)
    for result in (both, alone[True]):
        for plan in result.plans:
            m = plan.mapping
            if m.moe_a2a_overlap:
                assert m.ep > 1 and m.recompute != "full" and (m.pp == 1 or m.vpp > 1)
    assert all(not p.mapping.moe_a2a_overlap for p in alone[False].plans)


def test_without_a_list_the_workload_says_and_at_ep_1_nothing_is_overlapped():
    assert solve(_problem(workload_overlap=True), time_limit=60).plans[0].mapping.moe_a2a_overlap is True
    assert solve(_problem(workload_overlap=False), time_limit=60).plans[0].mapping.moe_a2a_overlap is False
    plan = solve(_problem(workload_overlap=True, mapping={"ep": 1, "zero": [3]}), time_limit=60).plans[0]
    assert plan.mapping.ep == 1 and plan.mapping.moe_a2a_overlap is False  # no all-to-all to hide


def test_the_overlap_hides_time_and_the_interleaved_schedule_holds_one_chunk_more():
    planner = planner_for(_fixed(2, 2, 16, True))
    runs = {(vpp, o): _fixed(2, vpp, 16, o) for vpp in (1, 2) for o in (False, True) if vpp > 1 or not o}
    ev = {key: planner.evaluate(p, 64, p.fixed_mapping()) for key, p in runs.items()}
    assert ev[2, True].metrics["step_time_s"] < ev[2, False].metrics["step_time_s"]
    # Megatron-Core's interleaved warm-up runs one micro-batch chunk more under the overlap
    assert in_flight_chunk_limit(0, 2, 2, True) == in_flight_chunk_limit(0, 2, 2, False) + 1
    more = ev[2, True].metrics["peak_memory_gib"] - ev[2, False].metrics["peak_memory_gib"]
    assert more > 0.1  # a chunk's activations: 12 of the 48 layers for one micro-batch
    pp1 = {o: _fixed(1, 1, 16, o) for o in (False, True)}
    mem = {o: planner.evaluate(p, 64, p.fixed_mapping()).metrics["peak_memory_gib"] for o, p in pp1.items()}
    assert mem[True] == pytest.approx(mem[False], rel=1e-12)  # no pipeline: the merged passes free as they fill


def test_megatron_cores_refusals():
    assert a2a_overlap_problem(1, 1, False, "none", ("core_attn",), 0) is None
    assert a2a_overlap_problem(4, 2, False, "selective", ("core_attn",), 1) is None
    assert a2a_overlap_problem(4, 1, True, "none", (), 0) is None  # DualPipe merges its own passes
    assert "interleaved" in a2a_overlap_problem(4, 1, False, "none", (), 0)
    assert "full recomputation" in a2a_overlap_problem(1, 1, False, "full", (), 0)
    assert "MoE block" in a2a_overlap_problem(1, 1, False, "selective", ("moe",), 0)
    assert "MTP" in a2a_overlap_problem(1, 1, False, "none", (), 2)


def test_evaluate_refuses_an_overlap_no_schedule_can_run_naming_where_it_was_asked():
    with pytest.raises(ProblemError) as err:
        _fixed(2, 1, 16, True).fixed_mapping()
    assert err.value.field == "mapping.moe_a2a_overlap" and "vpp" in str(err.value)
    fixed = {"tp": 1, "pp": 2, "vpp": 1, "ep": 16, "dp": 32, "micro_batch": 1, "recompute": "none"}
    with pytest.raises(ProblemError) as err:
        _problem(mapping=fixed, workload_overlap=True).fixed_mapping()
    assert err.value.field == "workload.moe_a2a_overlap"
    assert _problem([False], mapping=fixed, workload_overlap=True).fixed_mapping().moe_a2a_overlap is False


def test_a_dense_model_is_refused_and_the_cli_names_file_and_field(tmp_path):
    with pytest.raises(ProblemError) as err:
        _problem([True], mapping={"ep": 1}, model="llama3-8b")
    assert err.value.field == "mapping.moe_a2a_overlap" and "no experts" in str(err.value)
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 64, global_batch=256, mapping={"moe_a2a_overlap": ["yes"]})
    assert_refused_in_one_line(tmp_path / "p.yaml", data, "mapping.moe_a2a_overlap")


def test_the_launch_line_asks_for_the_overlap_the_plan_made():
    for overlap in (False, True):
        problem = _problem([overlap])
        plan = solve(problem, time_limit=60).plans[0]
        args = dict(launch.megatron_args(problem, plan.num_gpus, plan.mapping))
        assert ("--overlap-moe-expert-parallel-comm" in args) is overlap
        assert plan_label(plan).endswith(", a2a overlap") is overlap


def test_torchtitan_has_no_overlap_outside_dualpipev():
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 64, global_batch=256, framework="torchtitan", moe_a2a_overlap=True)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.moe_a2a_overlap" and "torchtitan" in str(err.value)
    data = training_problem(
        "qwen3-30b-a3b", "dgx-h100", 64, global_batch=256, framework="torchtitan", mapping={"moe_a2a_overlap": [False, True]}
    )
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "mapping.moe_a2a_overlap"
