"""Which modules selective recomputation redoes, as a decision (``mapping.recompute_modules``: a list of module
lists for solve to choose among, or one list; default: the workload's ``recompute_modules``): the solver equals the
enumerator on it, the choice is the best of the sets alone, a plan names its set and the launch line carries it, the
rules that depend on the set (the expert all-to-all's overlap, the fused grouped MLP) hold per set, and what cannot run
is refused in one line naming the field."""

import pytest
from conftest import assert_refused_in_one_line, run_json, solved_as_enumerated, training_problem, write_yaml

from parasol.model.training_step import evaluate_training
from parasol.solver import launch
from parasol.solver.planner import solve
from parasol.solver.problem import parse_problem
from parasol.solver.training_report import plan_label

SETS = [["core_attn"], ["moe_act"], ["core_attn", "moe_act", "layernorm"], ["moe"]]
# Qwen3-30B-A3B on 16 H100, recomputing selectively: what to redo is the only question left to the modules
MAPPING = {"recompute": ["selective"], "tp": [1, 2], "pp": [1, 2], "vpp": [1], "zero": [1], "ep": [8]}


def _problem(sets=None, mapping=None, **workload):
    chosen = {**MAPPING, **(mapping or {})}
    if sets is not None:
        chosen["recompute_modules"] = sets
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 16, global_batch=256, mapping=chosen, **workload)
    return parse_problem(data, source="t.yaml")


def test_solve_equals_the_enumerator_when_it_chooses_the_modules():
    plan = solved_as_enumerated(_problem(SETS), method="cpsat")
    assert plan.mapping.recompute_modules in {tuple(s) for s in SETS}


def test_the_choice_is_the_best_of_the_sets_alone():
    """Measured 2026-11-29 (each set solved alone): moe_act 188,516 tokens/s, core_attn 175,840 (it needs pp 2 to fit),
    the three together 181,277, the whole MoE block 167,694: the experts' activation is cheap to redo and large to keep."""
    both = solve(_problem(SETS), time_limit=60)
    alone = {tuple(s): solve(_problem([s]), time_limit=60).objective_value for s in SETS}
    assert len(set(alone.values())) == len(SETS)  # the sets differ in what they cost
    assert both.objective_value == pytest.approx(max(alone.values()), rel=1e-9)
    assert both.plans[0].mapping.recompute_modules == max(alone, key=alone.get)


def test_one_list_is_one_set_and_without_one_the_workload_says():
    one = _problem(["moe_act", "core_attn"])
    assert one.mapping["recompute_modules"] == (("moe_act", "core_attn"),)
    plan = solve(_problem(), time_limit=60).plans[0]
    assert plan.mapping.recompute_modules is None and "recompute_modules" not in plan.mapping.as_dict()
    fixed = {"tp": 1, "pp": 1, "dp": 16, "ep": 8, "micro_batch": 1, "recompute": "selective"}
    by_mapping = _problem([["moe_act"]], mapping=fixed)
    by_workload = parse_problem(
        training_problem("qwen3-30b-a3b", "dgx-h100", 16, global_batch=256, mapping=fixed, recompute_modules=["moe_act"]),
        source="t.yaml",
    )
    steps = [
        evaluate_training(p.model, p.system(), p.workload, p.fixed_mapping()).metrics["step_time_s"]
        for p in (by_mapping, by_workload)
    ]
    assert steps[0] == steps[1]  # the mapping's set is the workload's set, where it is evaluated


def test_a_set_that_redoes_the_moe_block_cannot_hide_the_all_to_all():
    """Megatron-Core refuses overlap_moe_expert_parallel_comm beside a recomputed MoE block: with the overlap forced,
    only the other sets remain."""
    plan = solve(_problem(SETS, mapping={"moe_a2a_overlap": [True], "pp": [1]}), time_limit=60).plans[0]
    assert plan.mapping.moe_a2a_overlap is True and "moe" not in plan.mapping.recompute_modules


def test_the_plan_names_its_set_and_the_launch_line_carries_it():
    data = training_problem(
        "qwen3-30b-a3b", "dgx-h100", 16, global_batch=256, mapping={**MAPPING, "recompute_modules": SETS}, framework="megatron-lm"
    )
    problem = parse_problem(data, source="t.yaml")
    plan = solve(problem, time_limit=60).plans[0]
    chosen = list(plan.mapping.recompute_modules)
    assert f"recompute ({'/'.join(chosen)})" in plan_label(plan)
    args = dict(launch.megatron_args(problem, plan.num_gpus, plan.mapping))
    assert args["--recompute-granularity"] == "selective" and list(args["--recompute-modules"]) == chosen


def test_the_json_plan_pastes_back_as_one_set(tmp_path):
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 16, global_batch=256, mapping={**MAPPING, "recompute_modules": SETS})
    out = run_json(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert out["mapping"]["recompute_modules"] in SETS


@pytest.mark.parametrize(
    "value,words",
    [([], "empty list"), (["core_attn", "attention"], "allowed"), ([["core_attn"], []], "empty list"), ("mlp_act", "allowed")],
)
def test_a_bad_set_is_refused_in_one_line(tmp_path, value, words):
    data = training_problem("qwen3-30b-a3b", "dgx-h100", 16, global_batch=256, mapping={**MAPPING, "recompute_modules": value})
    assert_refused_in_one_line(tmp_path / "p.yaml", data, "mapping.recompute_modules")


def test_the_fused_grouped_mlp_refuses_a_set_that_redoes_the_expert_activation(tmp_path):
    data = training_problem(
        "qwen3-30b-a3b",
        "dgx-b200",
        16,
        global_batch=256,
        precision="fp8",
        low_precision_recipe="mxfp8",
        fused_grouped_mlp=True,
        mapping={**MAPPING, "recompute_modules": [["core_attn"], ["moe_act"]]},
    )
    assert_refused_in_one_line(tmp_path / "p.yaml", data, "mapping.recompute_modules")
