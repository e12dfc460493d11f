"""The MoE dispatcher as a decision (``mapping.moe_dispatcher``): solve chooses among the dispatchers the mapping
lists (default: the workload's), the solver equals the enumerator on the choice, a plan's dispatcher is what its
step is timed with and what its launch line starts, and a dense model or an unknown dispatcher is refused in one line."""

import pytest
from conftest import assert_refused_in_one_line, solved_as_enumerated, training_problem

from parasol.model.errors import ProblemError
from parasol.solver import launch
from parasol.solver.planner import planner_for, solve
from parasol.solver.problem import parse_problem

# Qwen3-30B-A3B on 64 H100 (8 per node): the dispatch leaves the node from ep 16 on
CHOICE = {"cp": 1, "pp": 1, "vpp": 1, "tp": [1, 2], "zero": [1], "recompute": ["none"], "ep": [4, 8, 16]}


def _problem(dispatchers=None, workload_dispatcher="alltoall", mapping=None, model="qwen3-30b-a3b"):
    chosen = {**CHOICE, **(mapping or {})}
    if dispatchers is not None:
        chosen["moe_dispatcher"] = dispatchers
    data = training_problem(
        model, "dgx-h100", 64, global_batch=256, mapping=chosen, moe_dispatcher=workload_dispatcher, objective="throughput"
    )
    return parse_problem(data, source="t.yaml")


def test_solve_equals_the_enumerator_when_it_chooses_the_dispatcher():
    plan = solved_as_enumerated(_problem(["alltoall", "deepep"]), method="cpsat")
    assert plan.mapping.moe_dispatcher in ("alltoall", "deepep")


def test_the_choice_is_the_better_of_the_two_dispatchers_alone():
    both = solve(_problem(["alltoall", "deepep"]), time_limit=60)
    alone = {d: solve(_problem([d]), time_limit=60) for d in ("alltoall", "deepep")}
    best = max(alone, key=lambda d: alone[d].objective_value)
    assert both.objective_value == pytest.approx(alone[best].objective_value, rel=1e-9)
    assert both.plans[0].mapping.moe_dispatcher == best
    assert alone["alltoall"].plans[0].mapping.moe_dispatcher == "alltoall"  # one listed: that one, whatever the workload
    assert alone["deepep"].objective_value != pytest.approx(alone["alltoall"].objective_value, rel=1e-6)  # it matters


def test_without_a_list_the_workload_dispatcher_is_the_only_one():
    for dispatcher in ("alltoall", "deepep"):
        plan = solve(_problem(workload_dispatcher=dispatcher), time_limit=60).plans[0]
        assert plan.mapping.moe_dispatcher == dispatcher


def test_a_mapping_dispatcher_times_the_step_as_the_workload_one_does():
    fixed = {"tp": 1, "ep": 16, "micro_batch": 1, "dp": 64, "zero": 1}
    by_mapping = _problem(["deepep"], "alltoall", fixed)
    by_workload = _problem(None, "deepep", fixed)
    planner = planner_for(by_mapping)
    a = planner.evaluate(by_mapping, 64, by_mapping.fixed_mapping())
    b = planner.evaluate(by_workload, 64, by_workload.fixed_mapping())
    assert a.metrics["step_time_s"] == b.metrics["step_time_s"]
    plain = planner.evaluate(by_workload, 64, _problem(["alltoall"], "deepep", fixed).fixed_mapping())
    assert plain.metrics["step_time_s"] != a.metrics["step_time_s"]


def test_the_launch_line_starts_the_plan_dispatcher():
    problem = _problem(["deepep"], "alltoall")
    plan = solve(problem, time_limit=60).plans[0]
    args = dict(launch.megatron_args(problem, plan.num_gpus, plan.mapping))
    assert args["--moe-token-dispatcher-type"] == "flex" and "--moe-enable-deepep" in args
    problem = _problem(["alltoall"], "deepep")
    plan = solve(problem, time_limit=60).plans[0]
    assert dict(launch.megatron_args(problem, plan.num_gpus, plan.mapping))["--moe-token-dispatcher-type"] == "alltoall"


def test_a_dense_model_or_an_unknown_dispatcher_is_refused():
    with pytest.raises(ProblemError) as err:
        solve(_problem(["deepep"], mapping={"ep": 1}, model="llama3-8b"), time_limit=10)
    assert err.value.field == "mapping.moe_dispatcher" and "no experts" in str(err.value)
    with pytest.raises(ProblemError) as err:
        _problem(["nccl"])
    assert err.value.field == "mapping.moe_dispatcher" and "alltoall, deepep" in str(err.value)


def test_the_cli_names_the_file_and_field_of_a_bad_dispatcher(tmp_path):
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 64, global_batch=256, mapping={"moe_dispatcher": ["nvshmem"]})
    assert_refused_in_one_line(tmp_path / "p.yaml", data, "mapping.moe_dispatcher")


def test_a_framework_that_lacks_a_listed_dispatcher_refuses_it():
    from parasol.solver import frameworks

    only_alltoall = frameworks.Framework("f", "1", "training", "megatron", workload={"moe_dispatcher": ("alltoall",)})
    assert frameworks.restrict(only_alltoall, {"moe_dispatcher": ("alltoall",)}, "t.yaml") == {"moe_dispatcher": ("alltoall",)}
    with pytest.raises(ProblemError) as err:
        frameworks.restrict(only_alltoall, {"moe_dispatcher": ("alltoall", "deepep")}, "t.yaml")
    assert err.value.field == "mapping.moe_dispatcher" and "allowed: alltoall" in str(err.value)
    chosen = {**CHOICE, "moe_dispatcher": ["alltoall", "deepep"]}
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 64, global_batch=256, mapping=chosen, framework="megatron-lm")
    assert set(parse_problem(data, source="t.yaml").mapping["moe_dispatcher"]) == {"alltoall", "deepep"}


def test_a_plan_line_names_deepep_beyond_megatron_default():
    from parasol.solver.training_report import plan_label

    labels = {d: plan_label(solve(_problem([d]), time_limit=60).plans[0]) for d in ("alltoall", "deepep")}
    assert labels["deepep"].endswith(", deepep") and "deepep" not in labels["alltoall"]
