"""Pipeline layouts beyond equal chunks, the multi-token-prediction module and activation offloading
(issue 13).

Megatron-Core's --pipeline-model-parallel-layout lets interleaved chunks differ in size, as
Megatron-Bridge's DeepSeek-V3 recipes set (61 layers as ``Et*3|(t*4|)*14ttL``: stages of 15, 16,
16, 14 layers with vpp 4); ``mapping.uneven_chunks`` allows it. DeepSeek-V3's MTP module
(``workload.mtp_layers``) sits on the last stage with its own pass through the output layer.
"""

import dataclasses

import pytest
from conftest import stretch_of

from parasol.model.errors import ProblemError
from parasol.model.pipeline import vpp_splits_stage
from parasol.model.specs import Mapping, Workload
from parasol.model.training_step import evaluate_training
from parasol.solver import library

DSV3_GB200 = Mapping(tp=1, pp=4, dp=64, micro_batch=1, ep=64, vpp=4, first_stage_layers=15, last_stage_layers=14)


@pytest.fixture(scope="module")
def deepseek():
    model = library.load_model("deepseek-v3")
    system = library.load_system("gb200-nvl72", 256)
    workload = Workload(kind="training", seq_len=4096, global_batch=4096, precision="bf16", moe_dispatcher="deepep")
    return model, system, workload


def test_equal_chunks_rule():
    assert vpp_splits_stage(16, 4, 0) and vpp_splits_stage(15, 4, 1)  # 15 layers + the embedding
    assert not vpp_splits_stage(14, 4, 1) and not vpp_splits_stage(14, 4, 0)
    assert vpp_splits_stage(14, 4, 2)  # 14 layers + the loss + one MTP layer
    assert vpp_splits_stage(14, 4, 1, uneven=True) and vpp_splits_stage(3, 4, 1, uneven=True)
    assert not vpp_splits_stage(2, 4, 1, uneven=True)  # four chunks need four layers or modules


def test_the_recipes_layout_needs_uneven_chunks(deepseek):
    model, system, workload = deepseek
    with pytest.raises(ProblemError) as info:
        evaluate_training(model, system, workload, DSV3_GB200)
    assert info.value.field == "mapping.vpp" and "uneven_chunks" in str(info.value)
    ev = evaluate_training(model, system, workload, dataclasses.replace(DSV3_GB200, uneven_chunks=True))
    assert [s["layers"] for s in ev.stages] == [15, 16, 16, 14]


def test_the_mtp_module_costs_one_layer_and_one_output_pass_on_the_last_stage(deepseek):
    model, system, workload = deepseek
    mapping = dataclasses.replace(DSV3_GB200, uneven_chunks=True)
    base = evaluate_training(model, system, workload, mapping)
    mtp = evaluate_training(model, system, dataclasses.replace(workload, mtp_layers=1), mapping)
    last, last_mtp = base.stages[-1], mtp.stages[-1]
    middle = base.stages[1]
    added = last_mtp["time_per_microbatch_s"] - last["time_per_microbatch_s"]
    # one MoE layer (a middle stage's time per layer, its sends aside) and one more output layer + loss
    layer = (middle["time_fwd_s"] + middle["time_bwd_s"]) / middle["layers"]
    assert added == pytest.approx(layer + last["extra_s"], rel=0.02)
    assert [s["time_per_microbatch_s"] for s in mtp.stages[:-1]] == [s["time_per_microbatch_s"] for s in base.stages[:-1]]
    assert last_mtp["memory_bytes"] > last["memory_bytes"]
    assert last_mtp["params"] > last["params"]
    assert mtp.metrics["step_time_s"] >= base.metrics["step_time_s"]


def test_offloading_moves_activations_to_the_host_at_the_cost_of_the_exposed_copies():
    """Llama 3 70B on 64 GB200 as Megatron-Bridge 25.11 runs it (FSDP, 40 layers offloaded): without
    offloading it does not fit; each offloaded layer frees one layer's activations (one stays as the
    copy buffer) and adds the copies' exposed seconds (``training.activation_offload_exposed_s``)."""
    model, system = library.load_model("llama3-70b"), library.load_system("gb200-nvl72", 64)
    workload = Workload(kind="training", seq_len=8192, global_batch=256, precision="fp8", grad_bytes=2)
    mapping = Mapping(tp=1, pp=1, dp=64, micro_batch=2, zero=3)
    base = evaluate_training(model, system, workload, mapping)
    off = evaluate_training(model, system, workload, dataclasses.replace(mapping, offload_layers=40))
    assert not base.metrics["fits"] and off.metrics["fits"]
    per_layer = (base.stages[0]["activations_bytes"] - off.stages[0]["activations_bytes"]) / 39
    assert per_layer == pytest.approx(base.stages[0]["activations_bytes"] / 80, rel=0.05)
    assert off.stages[0]["offload_s"] > 0
    assert off.metrics["step_time_s"] == pytest.approx(
        base.metrics["step_time_s"] + off.stages[0]["offload_s"] * off.metrics["microbatches"] * stretch_of(off), rel=1e-6
    )


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"pp": 2, "dp": 4}, "pp 1"),  # Megatron-Core: no pipelined CPU offloading
        ({"recompute": "full"}, "recompute none"),  # nor with recomputation
        ({"offload_layers": 32}, "below the model's 32 layers"),  # fewer layers than the model's
    ],
)
def test_offloading_follows_megatron_cores_rules(change, says):
    model, workload = library.load_model("llama3-8b"), Workload(kind="training", seq_len=4096, global_batch=64)
    mapping = dataclasses.replace(Mapping(tp=1, pp=1, dp=8, micro_batch=1, offload_layers=4), **change)
    with pytest.raises(ProblemError) as info:
        evaluate_training(model, library.load_system("dgx-h100", 8), workload, mapping)
    assert info.value.field == "mapping.offload_layers" and says in str(info.value)


def test_offloading_needs_a_host_link():
    model, workload = library.load_model("llama3-8b"), Workload(kind="training", seq_len=4096, global_batch=64)
    mapping = Mapping(tp=1, pp=1, dp=8, micro_batch=1, offload_layers=4)
    with pytest.raises(ProblemError) as info:
        evaluate_training(model, library.load_system("tpu-v5p-torus", 8), workload, mapping)
    assert info.value.field == "mapping.offload_layers" and "host_bytes_per_s" in str(info.value)


def test_a_plans_short_label_names_the_choices_beyond_the_defaults():
    """Pareto tables and top-n lists tell plans apart that differ only in the new choices."""
    from types import SimpleNamespace

    from parasol.solver.training_report import plan_label

    def label(**kw):
        return plan_label(
            SimpleNamespace(
                num_gpus=8, mapping=Mapping(tp=1, pp=2, dp=4, micro_batch=1, **kw), evaluation=SimpleNamespace(metrics={})
            )
        )

    assert label(vpp=3) == "8 GPUs  1/2/4/1/1, mb 1, vpp 3"
    assert label(vpp=3, uneven_chunks=True).endswith(", uneven")
    assert label(offload_layers=2).endswith(", offload 2")
    assert label(ep=2, etp=2).endswith(", etp 2")
