"""workload.offload_modules: Megatron-Core's fine-grained activation offloading (--offload-modules), each
listed module's saved input kept in host memory between its forward and its backward."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import yaml
from conftest import REPO, run_cli, solved_as_enumerated, training_problem

from parasol.model import memory, offload, training
from parasol.model.errors import ProblemError
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.problem import parse_problem
from parasol.solver.validation import evaluate_run, load_runs

QWEN = {"tp": 1, "pp": 4, "dp": 16, "ep": 16, "micro_batch": 1, "zero": 1, "vpp": 1, "recompute": "none"}


def _evaluate(system="gb200-nvl72", offload=(), model="qwen3-30b-a3b", mapping=QWEN, precision="bf16", **workload):
    data = training_problem(
        model, system, 64, global_batch=192, precision=precision, mapping=mapping, offload_modules=list(offload), **workload
    )
    problem = parse_problem(data, source="t.yaml")
    sys_ = library.load_system(system, 64)
    return problem, evaluate_training(problem.model, sys_, problem.workload, problem.fixed_mapping())


def _solved_qwen(mapping: dict):
    """Qwen3-30B-A3B on 64 GB200 at tp 1 with its routed experts' inputs offloadable, solved and enumerated."""
    data = training_problem(
        "qwen3-30b-a3b",
        "gb200-nvl72",
        64,
        global_batch=64,
        offload_modules=["expert_fc1", "moe_act"],
        mapping={"module_offload": [False, True], "tp": 1, **mapping},
    )
    return solved_as_enumerated(parse_problem(data, source="t.yaml"))


def test_the_routed_experts_inputs_are_their_rows_times_the_fc1_input_and_the_activation_input():
    """Qwen3-30B-A3B (h 2048, expert width 768, top-8, SwiGLU) on 4,096 tokens in 16 bits: expert_fc1 copies
    4,096 x 8 rows x 2,048 x 2 bytes and releases the 16-bit permuted rows as well; moe_act copies
    4,096 x 8 rows x 768 x (gate + up) x 2 bytes."""
    model = library.load_model("qwen3-30b-a3b")
    rows, h = 4096 * 8, 2048

    def moved(*modules, gemm_input_bytes=2.0, **kw):
        return memory.offloaded_input_bytes(model, memory.LayerTokens(4096, 1, False, gemm_input_bytes, True), modules, **kw)

    assert moved("expert_fc1") == (rows * h * 2, rows * h * 4)
    assert moved("moe_act") == (rows * 768 * 2 * 2,) * 2
    # MXFP8: FC1 keeps its 1-byte cast; per-tensor FP8: Megatron-Core makes it keep its 16-bit original instead
    assert moved("expert_fc1", gemm_input_bytes=1.0) == (rows * h, rows * h * 3)
    assert moved("expert_fc1", gemm_input_bytes=1.0, fc1_saves_original=True) == (rows * h * 2, rows * h * 3)
    # a dense layer has neither; its norms are fused into their linears (IdentityOp: Megatron-Core skips them)
    dense = memory.offloaded_input_bytes(
        model, memory.LayerTokens(4096, 1, False), ("expert_fc1", "moe_act", "attn_norm", "mlp_norm")
    )
    assert dense == (0.0, 0.0)
    assert moved("mlp_norm").copied == 4096 * h * 2  # an MoE layer's pre-MLP norm runs apart


def test_the_attention_modules_inputs_and_what_recomputation_already_drops():
    """Qwen3-30B-A3B's attention (32 query heads and 4 KV heads of 128, h 2,048) on 4,096 tokens at tp 2 with
    sequence parallelism: qkv_linear copies the fused norm's input and the QKV GEMM input (tokens/tp each),
    core_attn Q, K and V (tokens x (4,096 + 2 x 512) / tp), attn_proj the 4,096-wide output / tp; the attention
    core recomputed leaves core_attn nothing (its checkpoint bypasses the offload)."""
    model = library.load_model("qwen3-30b-a3b")

    def copied(*modules, recomputed=()):
        return memory.offloaded_input_bytes(model, memory.LayerTokens(4096, 2, True), modules, recomputed=recomputed).copied

    assert copied("qkv_linear") == 4096 / 2 * 2048 * (2 + 2)
    assert copied("core_attn") == 4096 * (4096 + 2 * 512) * 2 / 2
    assert copied("attn_proj") == 4096 * 4096 * 2 / 2
    assert copied("core_attn", recomputed=("core_attn",)) == 0
    assert copied("core_attn", "attn_proj", recomputed=("core_attn",)) == copied("attn_proj")
    # MLA (DeepSeek-V3): its input norm runs apart (attn_norm moves its input); mla_up_proj recomputed has already
    # dropped the decompressed Q, K and V, and layernorm recomputed the norm's output, the down-projections' input
    mla = library.load_model("deepseek-v3")
    assert memory.offloaded_input_bytes(mla, memory.LayerTokens(4096, 1, False), ("attn_norm",)).copied == 4096 * 7168 * 2

    def mla_copied(*modules, recomputed=()):
        return memory.offloaded_input_bytes(mla, memory.LayerTokens(4096, 1, False), modules, recomputed=recomputed).copied

    assert mla_copied("core_attn") > 0 and mla_copied("core_attn", recomputed=("mla_up_proj",)) == 0
    assert mla_copied("qkv_linear") > 0 and mla_copied("qkv_linear", recomputed=("layernorm",)) == 0


def test_offloading_frees_device_memory_and_costs_no_time_over_a_fast_host_link():
    """Qwen3-235B-A22B's experts at 3 x 4,096 tokens per micro-batch (the Model Zoo's GB200 MXFP8 shape):
    over NVLink-C2C (225 GB/s per direction per GPU) each layer's copies hide behind its compute."""
    mapping = {**QWEN, "micro_batch": 3}
    kw = {"model": "qwen3-235b-a22b", "mapping": mapping, "precision": "fp8", "low_precision_recipe": "mxfp8"}
    _, plain = _evaluate(**kw)
    _, offloaded = _evaluate(offload=("expert_fc1", "moe_act"), **kw)
    assert offloaded.metrics["peak_memory_gib"] < plain.metrics["peak_memory_gib"] - 10.0
    assert offloaded.metrics["step_time_s"] == pytest.approx(plain.metrics["step_time_s"])
    # a small model's layer computes too little to hide them: Qwen3-30B-A3B's grows
    _, small_plain = _evaluate()
    _, small = _evaluate(offload=("expert_fc1", "moe_act"))
    assert small.metrics["peak_memory_gib"] < small_plain.metrics["peak_memory_gib"]
    assert small.metrics["step_time_s"] > small_plain.metrics["step_time_s"]


def test_a_slow_host_link_leaves_the_copies_beyond_the_compute_exposed():
    device = library.load_system("dgx-h100", 8).device  # PCIe Gen5 x16, 63 GB/s per direction
    assert offload.offload_copy_exposed_s(device, 6.3e9, 0.04) == pytest.approx(0.06)
    assert offload.offload_copy_exposed_s(device, 6.3e9, 0.2) == 0.0
    mapping = {**QWEN, "micro_batch": 4}
    _, plain = _evaluate("dgx-h100", mapping=mapping)
    _, offloaded = _evaluate("dgx-h100", offload=("expert_fc1", "moe_act", "core_attn", "qkv_linear"), mapping=mapping)
    assert offloaded.metrics["step_time_s"] > plain.metrics["step_time_s"]
    exposed = offloaded.breakdown["time_s"]["memory/offload"]  # the report names what the copies cost
    assert exposed > 0 and offloaded.metrics["step_time_s"] - plain.metrics["step_time_s"] >= exposed * 0.99


def test_the_whole_moe_block_recomputed_only_conflicts_under_selective_recomputation():
    """Megatron-Core refuses expert_fc1/moe_act offloading beside recompute_modules moe only where the recompute
    granularity is selective (TransformerConfig.__post_init__); with recompute none the modules list is idle."""
    kw = {"offload": ("moe_act",), "recompute_modules": ["moe"]}
    _, ev = _evaluate(**kw)  # QWEN: recompute none
    assert ev.metrics["fits"] is not None
    with pytest.raises(ProblemError) as err:
        _evaluate(mapping={**QWEN, "recompute": "selective"}, **kw)
    assert "recompute_modules holds moe" in str(err.value)


def test_no_emitter_launches_it_without_a_flag_for_it():
    """The recorded releases have no --offload-modules: their profiles refuse the modules (a user error, above),
    and an emitter reached with the decision on anyway stops (``launch.Unexpressible``: a profile bug)."""
    from parasol.solver import frameworks  # noqa: PLC0415
    from parasol.solver.launch import Unexpressible, emit  # noqa: PLC0415

    problem, _ = _evaluate(offload=("moe_act",))
    mapping = problem.fixed_mapping()
    assert mapping.module_offload
    with pytest.raises(Unexpressible, match="fine-grained activation offloading"):
        emit(dataclasses.replace(problem, framework=frameworks.load("megatron-lm")), 64, mapping)
    # with the decision off the same plan launches
    assert "--fine-grained" not in emit(
        dataclasses.replace(problem, framework=frameworks.load("megatron-lm")),
        64,
        dataclasses.replace(mapping, module_offload=False),
    )


def test_full_recomputation_leaves_nothing_to_offload_so_evaluate_refuses_it_and_solve_skips_it():
    full = {**QWEN, "recompute": "full"}
    with pytest.raises(ProblemError) as err:
        _evaluate(offload=("expert_fc1", "moe_act"), mapping=full)
    assert err.value.field == "mapping.module_offload" and "nothing for offload_modules to move" in str(err.value)
    with pytest.raises(ProblemError) as err:  # a mapping that lists both recomputations fails on the fixed one
        _evaluate(offload=("moe_act",), mapping={**full, "module_offload": True, "recompute": ["full", "none"]})
    # the model keeps nothing to move under full recomputation even where the decision is on
    model = library.load_model("qwen3-30b-a3b")
    wl = parse_problem(training_problem("qwen3-30b-a3b", "gb200-nvl72", 64, offload_modules=["moe_act"]), "t").workload
    tokens = training.layer_tokens(wl, 1, 1, 1, False, True, 1)
    assert offload.offloaded_activation_bytes(model, wl, tokens, "full", True) == (0.0, 0.0)
    # solve, left to choose both, never pairs them
    plan = _solved_qwen({"recompute": ["full", "none"], "pp": 1})
    assert not (plan.mapping.module_offload and plan.mapping.recompute == "full")


def test_no_host_link_no_offloading():
    device = library.load_system("dgx-h100", 8).device
    assert offload.module_offload_problem(library.load_model("qwen3-30b-a3b"), device, ("moe_act",)) is None
    linkless = dataclasses.replace(device, host_bytes_per_s=0.0)
    reason = offload.module_offload_problem(library.load_model("qwen3-30b-a3b"), linkless, ("moe_act",))
    assert "host_bytes_per_s" in reason


@pytest.mark.parametrize(
    "workload, model, mapping, field, words",
    [
        ({"offload_modules": ["experts"]}, "qwen3-30b-a3b", QWEN, "workload.offload_modules", "allowed: attn_norm"),
        ({"offload_modules": ["attn_proj"]}, "qwen3-30b-a3b", QWEN, "workload.offload_modules", "needs core_attn"),
        (
            {"offload_modules": ["moe_act"], "recompute_modules": ["moe"]},
            "qwen3-30b-a3b",
            {**QWEN, "recompute": "selective"},
            "mapping.module_offload",
            "recompute_modules holds moe",
        ),
        ({"offload_modules": ["expert_fc1"]}, "llama3-8b", None, "workload.offload_modules", "has no MoE layers"),
        (
            {"offload_modules": ["core_attn"]},
            "llama3-8b",
            {"tp": 1, "pp": 1, "dp": 64, "micro_batch": 1, "offload_layers": 2},
            "mapping.module_offload",
            "offload_layers",
        ),
        (
            {"offload_modules": ["core_attn"], "framework": "megatron-lm"},
            "llama3-8b",
            None,
            "workload.offload_modules",
            "[core_attn] is not supported by megatron-lm@core_v0.15.3; allowed: []",
        ),
    ],
)
def test_what_megatron_core_refuses_is_refused_in_one_line(workload, model, mapping, field, words):
    data = training_problem(model, "gb200-nvl72", 64, global_batch=64, mapping=mapping, **workload)
    with pytest.raises(ProblemError) as err:
        problem = parse_problem(data, source="t.yaml")
        if mapping is not None:  # the checks that need the model and the device run on the mapping
            system = library.load_system("gb200-nvl72", 64)
            training.check_mapping(problem.model, system, problem.workload, problem.fixed_mapping())
    assert err.value.field == field and words in str(err.value) and "\n" not in str(err.value)


def test_listing_modules_turns_it_on_and_a_mapping_can_turn_it_off_or_leave_it_to_solve():
    def mapping(**kw):
        data = training_problem("qwen3-30b-a3b", "gb200-nvl72", 64, global_batch=64, **kw)
        return parse_problem(data, source="t.yaml").mapping.get("module_offload")

    assert mapping() is None and mapping(offload_modules=["moe_act"]) == (True,)
    assert mapping(offload_modules=["moe_act"], mapping={"module_offload": [False, True]}) == (False, True)
    with pytest.raises(ProblemError) as err:
        mapping(mapping={"module_offload": True})
    assert err.value.field == "mapping.module_offload" and "workload.offload_modules" in str(err.value)


def test_solver_equals_the_enumerator_with_it_as_a_decision():
    """Qwen3-30B-A3B on 64 GB200: its layers compute too little to hide the copies, so where memory does not
    bind the planner leaves the modules on the device."""
    plan = _solved_qwen({"pp": [1, 2]})
    assert plan.mapping.module_offload is False


def test_solve_offloads_where_the_plan_only_fits_with_it():
    """The Model Zoo's GB200 MXFP8 shape (Qwen3-235B-A22B, 256 GPUs, pp 4 x vpp 6, ep 64, micro-batch 3),
    offloading left to the planner: only the offloaded plan fits, so solve takes it."""
    (entry,) = [e for e in load_runs() if e["id"] == "moezoo-bw-qwen3_235b-gb200-256gpu-mxfp8-offload-tp1-ep64-pp4"]
    data = {
        "model": entry["model"],
        "system": {"name": entry["system"], "num_gpus": entry["num_gpus"]},
        "workload": {k: v for k, v in entry["workload"].items()},
        "mapping": {**{k: v for k, v in entry["mapping"].items()}, "module_offload": [False, True]},
        "objective": "throughput",
    }
    plan = solved_as_enumerated(parse_problem(data, source="t.yaml"))
    assert plan.mapping.module_offload is True and plan.evaluation.metrics["fits"]


def test_the_published_gb200_mxfp8_run_fits_only_with_its_offloading():
    """The Model Zoo's Qwen3-235B-A22B MXFP8 row on 256 GB200 ("activation offloading required"), evaluated with
    each subset of its offloaded modules (``python benchmarks/offload_memory.py``; 2026-11-28: 76.7, 134.3,
    192.7 and 250.4 GiB of 183.0, host 97.0, 38.8, 58.2 and 0 GiB): every module offloaded frees device memory
    and fills the host, the copies cost no time over NVLink-C2C, and the run fits only with expert_fc1's
    inputs (and their permuted rows) off the device."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from offload_memory import subsets  # noqa: PLC0415

    rows = {tuple(r["modules"]): r for r in subsets()}
    both, fc1, act, none = (rows[k] for k in (("expert_fc1", "moe_act"), ("expert_fc1",), ("moe_act",), ()))
    assert both["peak_memory_gib"] < fc1["peak_memory_gib"] < act["peak_memory_gib"] < none["peak_memory_gib"]
    assert both["host_memory_gib"] > max(fc1["host_memory_gib"], act["host_memory_gib"]) > 0 == none["host_memory_gib"]
    assert (both["fits"], fc1["fits"], act["fits"], none["fits"]) == (True, True, False, False)
    assert len({r["step_time_s"] for r in rows.values()}) == 1
    # the published run states the modules it ran with, and the model keeps its step time
    (entry,) = [e for e in load_runs() if e["id"] == "moezoo-bw-qwen3_235b-gb200-256gpu-mxfp8-offload-tp1-ep64-pp4"]
    offloaded = evaluate_run(entry).evaluation
    assert entry["workload"]["offload_modules"] == ["expert_fc1", "moe_act"]
    assert offloaded.metrics["host_memory_gib"] == pytest.approx(max(s["host_bytes"] for s in offloaded.stages) / 2**30)
    assert 0 < offloaded.stages[0]["host_bytes"] < 480e9 / 2  # inside a Grace's 480 GB of LPDDR5X shared by its two GPUs


def test_the_host_holds_the_in_flight_chunks_offloaded_inputs():
    """One stage (pp 1) keeps every micro-batch's chunk in flight up to its limit: the host holds the layers'
    offloaded inputs (``memory.offloaded_input_bytes``) times the in-flight micro-batches."""
    problem, ev = _evaluate(offload=("expert_fc1",), mapping={**QWEN, "pp": 1, "dp": 64, "ep": 64})
    model = problem.model
    per_layer = memory.offloaded_input_bytes(model, memory.LayerTokens(4096, 1, False, 2.0, True), ("expert_fc1",)).copied
    assert ev.stages[0]["host_bytes"] == pytest.approx(model.layers * per_layer)  # 1 micro-batch in flight on pp 1


def test_the_shipped_example_offloads_because_nothing_fits_without():
    out = run_cli(["solve", str(REPO / "problems/examples/qwen3-235b-gb200-offload.yaml"), "--json"])
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["status"] == "OPTIMAL" and doc["mapping"]["module_offload"] is True and doc["metrics"]["host_memory_gib"] > 0


@pytest.mark.parametrize("method", ["cpsat", "bound"])
def test_each_search_takes_the_decision_as_the_enumerator_does(method):
    """CP-SAT and the block-by-block bounded search (``--method bound``) over the shipped example's space,
    with micro-batch, recomputation and the offloading left free: the enumerator's optimum."""
    data = yaml.safe_load((REPO / "problems/examples/qwen3-235b-gb200-offload.yaml").read_text())
    data["mapping"]["micro_batch"] = [1, 3]
    solved_as_enumerated(parse_problem(data, source="t.yaml"), method=method)
