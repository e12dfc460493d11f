"""mapping.pipeline_layout: Megatron-Core's --pipeline-model-parallel-layout as a problem states it
(model/pipeline_layout.py), read into the stage partition the model holds."""

from __future__ import annotations

import pytest
from conftest import solved_as_enumerated, training_problem

from parasol.model.errors import ProblemError
from parasol.model.pipeline import stage_layer_counts
from parasol.model.pipeline_layout import parse_pipeline_layout, unrolled_chunks
from parasol.solver.launch import emit, megatron_layout
from parasol.solver.problem import parse_problem

MLPERF_DSV3 = "Et*4|(t*4|)*14tmL"  # MLPerf Training v6.0's DeepSeek-V3 configs, PIPELINE_LAYOUT


def test_megatrons_repetitions_unroll_as_megatron_core_does():
    # the examples of Megatron-Core's parse_str_to_list docstring
    assert unrolled_chunks("Ettt|(tt|)*29,m|L") == ["Ettt"] + ["tt"] * 29 + ["m", "L"]
    assert unrolled_chunks("(tt)*3") == ["t" * 6]
    assert unrolled_chunks(MLPERF_DSV3) == ["Etttt"] + ["tttt"] * 14 + ["tmL"]


def test_the_mlperf_deepseek_layout_is_16_16_16_13_layers_in_four_chunks():
    placed = parse_pipeline_layout(MLPERF_DSV3, 4)
    assert placed.vpp == 4 and placed.stage_layers == (16, 16, 16, 13) and placed.mtp_layers == 1
    assert placed.uneven  # rank 0's first chunk holds the embedding beside four layers, rank 3's last one layer
    unequal = parse_pipeline_layout("Ett|tt|tt|ttL", 2)  # rank 0: Ett, tt; rank 1: tt, ttL
    assert unequal.stage_layers == (4, 4) and unequal.vpp == 2 and unequal.uneven
    equal = parse_pipeline_layout("Ettt|tttt|tttt|tttL", 2)  # rank 0: Ettt, tttt; rank 1: tttt, tttL: chunks of 4
    assert equal.stage_layers == (7, 7) and equal.vpp == 2 and not equal.uneven


@pytest.mark.parametrize(
    ("layout", "pp", "words"),
    [
        ("Ettx|tL", 2, "'x' is no layout item"),
        ("Ett|tt|ttL", 2, "not a multiple of pp 2"),
        ("Ett||ttL", 3, "chunk 1 is empty"),
        ("tEt|ttL", 2, "begin with the embedding"),
        ("Ett|tLtL", 2, "end with the loss"),
        ("Ett|tmtL", 2, "MTP layers"),
        ("Ettt|(tt|)*29,m|L", 4, "MTP layers"),  # MTP standalone on another rank: Megatron-Core allows it, the model does not
        ("", 2, "layout string"),
        ("Et t|tL", 2, "' ' is no layout item"),  # Megatron-Core refuses a space too
        ("E(t|" + "(" * 20_000, 2, "more than 10,000"),
        ("Et*999999999L", 2, "unrolls to more than 100,000 items"),  # refused before it is written out
        ("E(t*60000|)*60000L", 2, "unrolls to more than 100,000 items"),
    ],
)
def test_a_layout_the_model_cannot_hold_is_refused_in_one_line(layout, pp, words):
    with pytest.raises(ProblemError) as err:
        parse_pipeline_layout(layout, pp)
    assert err.value.field == "mapping.pipeline_layout" and words in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("layers", "pp", "vpp", "first", "last", "mtp"), [(61, 4, 4, 16, 13, 1), (126, 8, 8, 15, 15, 0), (32, 4, 2, 0, 0, 0)]
)
def test_the_emitters_layouts_read_back_to_their_stages(layers, pp, vpp, first, last, mtp):
    placed = parse_pipeline_layout(megatron_layout(layers, pp, vpp, first, last, mtp), pp)
    assert placed.stage_layers == tuple(stage_layer_counts(layers, pp, first, last))
    assert placed.vpp == vpp and placed.mtp_layers == mtp


def _dsv3(**mapping):
    data = training_problem(
        "deepseek-v3",
        "gb300-nvl72",
        256,
        global_batch=15360,
        precision="fp8",
        low_precision_recipe="mxfp8",
        mtp_layers=1,
        moe_dispatcher="deepep",
        framework="megatron-lm",
        mapping={"tp": 1, "pp": 4, "dp": 64, "ep": 32, "micro_batch": 1, "zero": 1, **mapping},
    )
    return parse_problem(data, source="t.yaml")


def test_a_problem_takes_its_stages_from_the_layout_and_emits_it_as_written():
    problem = _dsv3(pipeline_layout=MLPERF_DSV3)
    m = problem.fixed_mapping()
    assert (m.vpp, m.first_stage_layers, m.last_stage_layers, m.uneven_chunks) == (4, 16, 13, True)
    assert f"--pipeline-model-parallel-layout '{MLPERF_DSV3}'" in emit(problem, 256, m)
    # the same stages given as numbers: the emitter writes a layout of its own
    plain = _dsv3(vpp=4, first_stage_layers=16, last_stage_layers=13, uneven_chunks=True)
    assert plain.fixed_mapping() == m and MLPERF_DSV3 not in emit(plain, 256, m)


@pytest.mark.parametrize(
    ("mapping", "field", "words"),
    [
        ({"pipeline_layout": MLPERF_DSV3, "vpp": 2}, "mapping.vpp", "where the pipeline layout sets 4"),
        ({"pipeline_layout": MLPERF_DSV3, "pp": [2, 4]}, "mapping.pp", "one mapping.pp"),
        ({"pipeline_layout": "Et*16|t*16|t*16|t*13L"}, "mapping.pipeline_layout", "places 0 MTP layers"),
        ({"pipeline_layout": "Et*16|t*16|t*16|t*12mL"}, "mapping.pipeline_layout", "places 60 transformer layers"),
        ({"pipeline_layout": "Et*16|t*15|t*17|t*13mL"}, "mapping.pipeline_layout", "middle ranks 15, 17"),
        ({"pipeline_layout": "E|t*16|t*16|t*16|t*13mL", "pp": 5}, "mapping.pipeline_layout", "the first rank no transformer"),
        ({"pipeline_layout": "Et*2|t*19|t*20|t*20mL"}, "mapping.pipeline_layout", "its 3 dense leading layers"),
        ({"pipeline_layout": "Et*30|t*31mL", "pp": 1}, "mapping.pipeline_layout", "interleaving needs pp > 1"),
    ],
)
def test_a_layout_that_disagrees_with_the_problem_names_the_field(mapping, field, words):
    with pytest.raises(ProblemError) as err:
        _dsv3(**mapping)
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_a_framework_that_builds_its_own_stages_refuses_the_layout():
    data = training_problem(
        "llama3-8b", "dgx-h100", 64, global_batch=128, framework="torchtitan", mapping={"pp": 2, "pipeline_layout": "Et*16|t*16L"}
    )
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "mapping.pipeline_layout" and "torchtitan" in str(err.value)


def test_solver_equals_the_enumerator_under_a_layout():
    # Llama 3 8B's 32 layers as 7, 9, 9, 7 on four ranks: the rest of the mapping free
    data = training_problem(
        "llama3-8b", "dgx-h100", 64, global_batch=128, mapping={"pp": 4, "pipeline_layout": "Et*7|t*9|t*9|t*7L"}
    )
    plan = solved_as_enumerated(parse_problem(data, source="t.yaml"))
    assert (plan.mapping.pp, plan.mapping.first_stage_layers, plan.mapping.last_stage_layers) == (4, 7, 7)
