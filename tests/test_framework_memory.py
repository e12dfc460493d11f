"""Framework buffers in the memory model (issue 13, "memory of real runs"): what ZeRO-3 holds
unsharded (``workload.zero3_gather``: FSDP's two whole blocks, DeepSpeed's largest module) and the
16-bit .grad DeepSpeed's BF16_Optimizer keeps beside its fp32 accumulation (``workload.lowp_grad_bytes``).
A framework profile that allows one value of such a key implies it when the problem leaves it out."""

import dataclasses

import pytest
from conftest import rel_close, run_main, solved_as_enumerated, training_problem

from parasol.model import params
from parasol.model.errors import ProblemError
from parasol.model.specs import Mapping, Workload
from parasol.model.training import stage_state_bytes
from parasol.solver.library import load_model
from parasol.solver.problem import parse_problem

WORKLOAD = Workload(kind="training", seq_len=2048, global_batch=64)


def test_the_largest_module_is_the_widest_linear_or_the_embedding_table():
    # GPT 529.6B (GeLU, f = 4h, V = 51,200): the MLP's first linear, h x 4h, outweighs the table (V x h)
    gpt = load_model("megatron-gpt-529.6b")
    assert params.largest_module_params_per_gpu(gpt, True, 1) == gpt.hidden * gpt.ffn == 4 * gpt.hidden**2
    # Llama 3.1 405B (SwiGLU, gate and up fused: h x 2f = 1.74e9) has a larger table, 128,256 x 16,384 = 2.10e9
    llama = load_model("llama3.1-405b")
    assert params.largest_module_params_per_gpu(llama, True, 1) == llama.vocab * llama.hidden > 2 * llama.hidden * llama.ffn


@pytest.mark.parametrize("tp", [1, 4])
def test_zero3_holds_two_blocks_under_fsdp_and_the_largest_module_under_deepspeed(tp):
    model = load_model("megatron-gpt-529.6b")
    mapping = Mapping(tp=tp, pp=1, dp=64, micro_batch=1, zero=3)
    block = stage_state_bytes(model, WORKLOAD, mapping, 1e9)
    module = stage_state_bytes(model, dataclasses.replace(WORKLOAD, zero3_gather="module"), mapping, 1e9)
    # FSDP: the current and the prefetched block's 16-bit weights; DeepSpeed: the largest module's 16-bit
    # weights and gradients (its estimator's 4 B per parameter of the largest layer)
    assert rel_close(block["zero3_buffers"], 2 * params.layer_params(model) / tp * 2, 1e-12)
    assert rel_close(module["zero3_buffers"], 4 * model.hidden * model.ffn / tp, 1e-12)
    assert module["zero3_buffers"] < block["zero3_buffers"]
    assert {k: v for k, v in module.items() if k != "zero3_buffers"} == {k: v for k, v in block.items() if k != "zero3_buffers"}


@pytest.mark.parametrize(("zero", "held"), [(1, 1.0), (3, 1 / 8)])
def test_a_kept_bf16_grad_adds_two_bytes_per_parameter_held_and_nothing_else(zero, held):
    model, count = load_model("llama3-8b"), 2e9
    mapping = Mapping(tp=1, pp=1, dp=8, micro_batch=1, zero=zero)
    plain = stage_state_bytes(model, WORKLOAD, mapping, count)
    kept = stage_state_bytes(model, dataclasses.replace(WORKLOAD, lowp_grad_bytes=2.0), mapping, count)
    assert rel_close(kept["gradients"] - plain["gradients"], 2.0 * count * held, 1e-12)
    assert {k: v for k, v in kept.items() if k != "gradients"} == {k: v for k, v in plain.items() if k != "gradients"}


def test_deepspeed_implies_module_gathering_and_torchtitan_block_gathering():
    def gather(framework, **extra):
        data = training_problem("llama3-8b", framework=framework, **extra)
        return parse_problem(data, source="t.yaml").workload.zero3_gather

    assert gather("deepspeed") == "module"
    assert gather("torchtitan") == "block"
    assert parse_problem(training_problem("llama3-8b"), source="t.yaml").workload.zero3_gather == "block"
    assert gather("deepspeed", zero3_gather="module") == "module"
    with pytest.raises(ProblemError) as err:
        gather("deepspeed", zero3_gather="block")
    assert err.value.field == "workload.zero3_gather" and "deepspeed" in str(err.value)


@pytest.mark.parametrize(
    ("key", "value", "allowed"), [("zero3_gather", "layer", "block, module"), ("lowp_grad_bytes", 4, "0, 2")]
)
def test_a_value_outside_the_choices_is_one_line_naming_the_field(tmp_path, key, value, allowed):
    import yaml  # noqa: PLC0415

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(training_problem("llama3-8b", **{key: value})))
    proc = run_main(["evaluate", str(path)])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"workload.{key}" in proc.stderr and allowed in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("framework", ["deepspeed", "torchtitan"])
def test_cpsat_equals_the_enumerator_with_each_zero3_gathering(framework):
    """A plan space where ZeRO-3 is a choice and memory binds (Llama 3 70B on 16 and 32 H100s: 16 do not hold it)."""
    mapping = {"tp": [1, 2], "pp": [1, 2], "cp": [1]} if framework == "torchtitan" else None  # a small space
    data = training_problem("llama3-70b", num_gpus=[16, 32], seq_len=4096, global_batch=64, mapping=mapping, framework=framework)
    plan = solved_as_enumerated(parse_problem(data, source="t.yaml"), method="cpsat")
    assert plan.evaluation.metrics["fits"] and plan.num_gpus == 32


def test_gradient_copies_count_the_largest_module_and_the_stage():
    """DeepSpeed 2022 (BLOOM's branch): the fp32 cast of the largest parameter's bf16 gradient (4 B per element: the
    vocab-parallel table on an edge stage, a layer's widest linear elsewhere; a routed expert's split by etp) and the
    bf16 copy of the stage's fp32 flat group for the fallback all-reduce (2 B per parameter)."""
    from parasol.model import memory  # noqa: PLC0415

    bloom = load_model("bloom-176b")  # at tp 4: the table 250,880 x 14,336 / 4; the MLP's first linear 14,336 x 57,344 / 4
    assert params.largest_module_params_per_gpu(bloom, True, 4) == 899_153_920
    assert params.largest_module_params_per_gpu(bloom, False, 4) == 205_520_896
    assert memory.accumulate_copy_bytes(899_153_920, 4.0) / 2**30 == pytest.approx(3.35, abs=0.005)  # docs/accuracy.md
    assert memory.reduce_copy_bytes(3.98e9, 2.0) / 2**30 == pytest.approx(7.41, abs=0.005)  # stage 0 at tp 4
    v3 = load_model("deepseek-v3")
    # a routed expert's fused gate and up (7,168 x 2 x 2,048) stays whole at etp 1; tp 16 splits the dense layers'
    # 7,168 x 2 x 18,432 below it, tp 8 does not; an edge stage's table (129,280 x 7,168 / 8) outweighs both
    assert params.largest_module_params_per_gpu(v3, False, 16, 1) == 29_360_128
    assert params.largest_module_params_per_gpu(v3, False, 8, 1) == 33_030_144
    assert params.largest_module_params_per_gpu(v3, False, 16, 2) == 16_515_072
    assert params.largest_module_params_per_gpu(v3, True, 8, 1) == 115_834_880


def _bloom_stages(**workload):
    """BLOOM at tp 4, pp 12, dp 8, micro-batch 2 on 384 H100s under full recompute, with ``workload`` set."""
    from parasol.model.training_step import evaluate_training  # noqa: PLC0415

    data = training_problem("bloom-176b", num_gpus=384, seq_len=2048, global_batch=2048, precision="bf16", **workload)
    data["mapping"] = {"tp": 4, "pp": 12, "dp": 8, "micro_batch": 2, "vpp": 1, "recompute": "full", "zero": 1}
    problem = parse_problem(data, source="t.yaml")
    return evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping()), problem


def test_the_accumulation_copy_replaces_the_working_set_where_larger():
    """The fp32 cast of the largest gradient is live once a micro-batch's backward has freed its working set: under
    BLOOM's materialised attention an edge stage holding the table (3.35 GiB at tp 4) peaks by what it exceeds the
    working set (1.27 GiB); the middle stages' largest linear (0.77 GiB) is under it and changes nothing."""
    from parasol.model.ops import FloatOps  # noqa: PLC0415
    from parasol.model.training_step import TrainingContext, layer_factors, mapping_decisions  # noqa: PLC0415

    plain, problem = _bloom_stages(attention="standard")
    copied, _ = _bloom_stages(attention="standard", grad_accumulate_copy_bytes=4)
    ctx = TrainingContext(problem.model, problem.system(), problem.workload)
    working = FloatOps(ctx, mapping_decisions(ctx, problem.fixed_mapping())).lookup(layer_factors(ctx.model)[1]).working
    model = problem.model
    table, mlp = 4 * model.vocab * model.hidden / 4, 4 * model.hidden * model.ffn / 4
    assert mlp < working < table
    for a, b in zip(plain.stages, copied.stages, strict=True):
        edge = a["stage"] in (0, 11)
        assert b["memory_bytes"] - a["memory_bytes"] == pytest.approx(table - working if edge else 0.0, abs=1.0)
    assert copied.metrics["step_time_s"] == plain.metrics["step_time_s"]


def test_the_reduction_copy_sits_beside_the_states_and_keeps_its_segment():
    """The reduction's copy of the stage's flat group is live beside the states alone: the peak is the larger of the
    backward's and that (flash attention, bf16: that here); its segment stays reserved, so nvidia-smi's figure
    grows, at most to the device's memory."""
    (plain, problem), (copied, _) = _bloom_stages(), _bloom_stages(grad_reduce_copy_bytes=2)
    peaks = [max(s["memory_bytes"], sum(s["state"].values()) + 2 * s["params"]) for s in plain.stages]
    assert rel_close(copied.metrics["peak_memory_gib"] * 2**30, max(peaks), 1e-9)
    assert copied.metrics["peak_memory_gib"] > plain.metrics["peak_memory_gib"]
    assert plain.metrics["device_memory_gib"] < copied.metrics["device_memory_gib"] <= problem.system().device.hbm_bytes / 2**30
    # the peak by component at its moment: the states and the copy, the activations freed
    parts, peak_stage = copied.breakdown["memory_gib"], copied.stages[copied.breakdown["peak_memory_stage"]]
    assert parts["activations"] == 0.0 and rel_close(parts["reduction_copy"] * 2**30, 2 * peak_stage["params"], 1e-9)
    assert rel_close(sum(parts.values()), copied.metrics["peak_memory_gib"], 1e-9)


def test_an_moe_model_with_the_reduction_copy_is_one_line(tmp_path):
    """DeepSpeed 2022's fallback all-reduce refuses gradients of MoE layers: the field is refused on an MoE model."""
    import yaml  # noqa: PLC0415

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(training_problem("deepseek-v3", num_gpus=256, grad_reduce_copy_bytes=2)))
    proc = run_main(["evaluate", str(path)])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "workload.grad_reduce_copy_bytes" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("key", "value"), [("grad_accumulate_copy_bytes", 3), ("grad_reduce_copy_bytes", 1)])
def test_a_gradient_copy_outside_its_choices_is_one_line(tmp_path, key, value):
    import yaml  # noqa: PLC0415

    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(training_problem("llama3-8b", **{key: value})))
    proc = run_main(["evaluate", str(path)])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert f"workload.{key}" in proc.stderr and "0, 2, 4" in proc.stderr and "Traceback" not in proc.stderr


def bloom_deepspeed(**mapping) -> dict:
    """BLOOM's 184B benchmark shape (hidden 12,288, 100 layers) on Jean Zay's 384 A100s as DeepSpeed ran it in
    2022: BF16_Optimizer buffers and gradient copies, materialised attention, full recompute."""
    data = training_problem(
        "bloom-176b", system="jean-zay-a100", num_gpus=384, seq_len=2048, global_batch=2048, lowp_grad_bytes=2,
        attention="standard", overlap_dp=False, overlap_tp_grad=False, grad_accumulate_copy_bytes=4, grad_reduce_copy_bytes=2,
        mapping={"vpp": 1, "sp": False, "recompute": "full", "zero": 1, **mapping},
    )  # fmt: skip
    from parasol.solver.validation import load_out_of_memory_runs  # noqa: PLC0415

    data["model"] = next(e["model"] for e in load_out_of_memory_runs() if "-184b-" in e["id"])  # its table's shape
    return data


def test_the_reduction_copy_beside_the_states_decides_the_fit():
    """At tp 4, pp 6, dp 16 (a published out-of-memory configuration) stage 0 holds 8.0B parameters: states of
    8.75 B each and the fallback all-reduce's bf16 copy of its flat group (2 B each) exceed the A100's usable
    memory although the activations' peak does not; at dp 8, tp 8 (it ran) the copy stays under the peak."""
    oom = parse_problem(bloom_deepspeed(tp=4, pp=6, dp=16, micro_batch=2), source="t.yaml")
    ran = parse_problem(bloom_deepspeed(tp=8, pp=6, dp=8, micro_batch=2), source="t.yaml")
    for problem, fits in ((oom, False), (ran, True)):
        plain = dataclasses.replace(problem.workload, grad_reduce_copy_bytes=0.0)
        from parasol.model.training_step import evaluate_training  # noqa: PLC0415

        with_copy = evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping()).metrics
        without = evaluate_training(problem.model, problem.system(), plain, problem.fixed_mapping()).metrics
        assert without["fits"] and with_copy["fits"] == fits
        assert with_copy["peak_memory_gib"] >= without["peak_memory_gib"]


def test_cpsat_equals_the_enumerator_where_the_reduction_copy_binds():
    """The plan space holds the out-of-memory configuration (tp 4, pp 6, dp 16), the fastest without the copy."""
    data = bloom_deepspeed(tp=[4, 8], pp=[6, 12], micro_batch=[1, 2])
    plan = solved_as_enumerated(parse_problem(data, source="t.yaml"), method="cpsat")
    assert plan.evaluation.metrics["fits"] and (plan.mapping.tp, plan.mapping.pp) != (4, 6)
