"""Framework profiles (problems/frameworks/), the restriction of the planner's space to a framework's
features, and ``--emit``'s launch configurations, checked against the flag and key names recorded from
each framework's own source (problems/frameworks/flags/, benchmarks/framework_flags.py)."""

from __future__ import annotations

import json
import re
import shlex

import pytest
from conftest import REPO, TINY_GQA, TINY_MOE, run_main, write_yaml

import parasol
from parasol.model.errors import ProblemError
from parasol.solver import frameworks, launch, library
from parasol.solver.problem import parse_problem
from parasol.solver.training_space import build_space, placements_by_point

LLAMA_MEGATRON = {
    "model": "llama3-70b",
    "system": {"name": "dgx-h100", "num_gpus": 64},
    "workload": {"kind": "training", "seq_len": 8192, "global_batch": 128, "precision": "bf16", "framework": "megatron-lm"},
}


def tokens(text: str) -> list[str]:
    return shlex.split(text.replace("\\\n", " "))


def flag_values(args: list[str]) -> dict:
    """{--flag: [values]} of a command line's tokens after its program."""
    out, current = {}, None
    for token in args:
        if token.startswith("--"):
            current = token
            out[current] = []
        elif current is not None:
            out[current].append(token)
    return out


def emitted(tmp_path, problem: dict, command: str = "solve", extra=()) -> tuple[dict, dict]:
    proc = run_main([command, str(write_yaml(tmp_path / "p.yaml", problem)), "--emit", "--json", *extra])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    return doc, flag_values(tokens(doc["launch"])[3:])  # after torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py


def check_megatron_flags(flags: dict) -> None:
    recorded = frameworks.recorded_flags(frameworks.load("megatron-lm"))
    assert len(recorded) > 300  # the whole of megatron/training/arguments.py
    unknown = sorted(set(flags) - recorded)
    assert not unknown, f"flags not in Megatron-LM's arguments.py: {unknown}"
    for flag in flags:
        sized = flag.endswith("-size") and flag != "--window-size"  # --window-size is tuple_type "left,right"
        if sized or flag in ("--num-layers", "--seq-length", "--recompute-num-layers"):
            assert len(flags[flag]) == 1 and flags[flag][0].isdigit(), (flag, flags[flag])


def test_megatron_plan_is_restricted_and_its_arguments_are_megatrons(tmp_path):
    doc, flags = emitted(tmp_path, LLAMA_MEGATRON, extra=("--time-limit", "60"))
    m = doc["mapping"]
    assert m["zero"] <= 1 and not m["weight_offload"] and m["offload_layers"] == 0
    assert m["placement"] == "tp-cp-ep-dp-pp"
    check_megatron_flags(flags)
    # round trip: the arguments give back the plan's degrees
    tp, pp = int(flags["--tensor-model-parallel-size"][0]), int(flags["--pipeline-model-parallel-size"][0])
    cp = int(flags.get("--context-parallel-size", ["1"])[0])
    assert (tp, pp, cp) == (m["tp"], m["pp"], m["cp"])
    assert 64 % (tp * pp * cp) == 0 and 64 // (tp * pp * cp) == m["dp"]
    assert int(flags["--micro-batch-size"][0]) == m["micro_batch"]
    assert int(flags["--global-batch-size"][0]) == 128 and int(flags["--seq-length"][0]) == 8192
    if "--pipeline-model-parallel-layout" in flags:
        chunks = flags["--pipeline-model-parallel-layout"][0].split("|")
        assert len(chunks) == pp * m["vpp"]
        assert sum(c.count("t") for c in chunks) == 80
        first = sum(chunks[v * pp].count("t") for v in range(m["vpp"]))
        assert first == m["first_stage_layers"]
    elif m["vpp"] > 1:
        assert int(flags["--num-layers-per-virtual-pipeline-stage"][0]) * m["vpp"] * pp == 80
    assert ("--use-distributed-optimizer" in flags) == (m["zero"] == 1)
    assert ("--sequence-parallel" in flags) == m["sp"]


def test_evaluate_emits_the_fixed_mapping(tmp_path):
    problem = {**LLAMA_MEGATRON, "mapping": {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "vpp": 5, "recompute": "selective"}}
    doc, flags = emitted(tmp_path, problem, command="evaluate")
    check_megatron_flags(flags)
    assert flags["--num-layers-per-virtual-pipeline-stage"] == ["4"]
    assert flags["--recompute-granularity"] == ["selective"] and flags["--recompute-modules"] == ["core_attn"]
    assert "--use-distributed-optimizer" in flags  # evaluate's default zero 1, allowed by Megatron-LM


def test_megatrons_tp_pp_dp_mapping_is_emitted_and_stays_a_choice_of_the_file(tmp_path):
    """Megatron-LM's second rank order (--use-tp-pp-dp-mapping, data parallelism outermost) is emitted when the
    problem fixes it; left free on a DGX the planner keeps the default order (placement is no decision there)."""
    fixed = {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "vpp": 5, "placement": "tp-cp-ep-pp-dp"}
    doc, flags = emitted(tmp_path, {**LLAMA_MEGATRON, "mapping": fixed}, command="evaluate")
    check_megatron_flags(flags)
    assert doc["mapping"]["placement"] == "tp-cp-ep-pp-dp" and "--use-tp-pp-dp-mapping" in flags
    doc, flags = emitted(
        tmp_path, {**LLAMA_MEGATRON, "mapping": {k: v for k, v in fixed.items() if k != "placement"}}, command="evaluate"
    )
    assert doc["mapping"]["placement"] == "tp-cp-ep-dp-pp" and "--use-tp-pp-dp-mapping" not in flags
    assert parse_problem(LLAMA_MEGATRON).mapping["placement"] == ("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp")


def test_the_profiles_rank_orders_are_a_decision_only_where_the_planner_decides_placement():
    """Left free, the profile's two orders stay the default on a DGX (placement no decision there,
    docs/placement.md) and are both tried where the topology decides it, classes allowing."""
    dgx = placements_by_point(build_space(parse_problem(LLAMA_MEGATRON)))
    assert set(dgx.values()) == {("tp-cp-ep-dp-pp",)}
    torus = placements_by_point(
        build_space(parse_problem({**LLAMA_MEGATRON, "system": {"name": "tpu-v5p-torus", "num_gpus": 64}}))
    )
    tried = {p for v in torus.values() for p in v}
    assert tried == {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}


@pytest.mark.parametrize(
    ("mapping", "field", "allowed"),
    [({"zero": [1, 2]}, "mapping.zero", "allowed: 0, 1"), ({"weight_offload": True}, "mapping.weight_offload", "allowed: false")],
)
def test_a_listed_value_the_framework_lacks_is_one_line(tmp_path, mapping, field, allowed):
    path = write_yaml(tmp_path / "p.yaml", {**LLAMA_MEGATRON, "mapping": mapping})
    proc = run_main(["solve", str(path)])
    assert proc.returncode == 2 and proc.stdout == ""
    line = proc.stderr.strip()
    assert "\n" not in line and field in line and "megatron-lm" in line and allowed in line


def test_unknown_framework_and_emit_without_one_are_one_line(tmp_path):
    bad = {**LLAMA_MEGATRON, "workload": {**LLAMA_MEGATRON["workload"], "framework": "nemo-9"}}
    proc = run_main(["solve", str(write_yaml(tmp_path / "a.yaml", bad))])
    assert proc.returncode == 2 and "workload.framework" in proc.stderr and "megatron-lm" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    plain = {**LLAMA_MEGATRON, "workload": {k: v for k, v in LLAMA_MEGATRON["workload"].items() if k != "framework"}}
    proc = run_main(["solve", str(write_yaml(tmp_path / "b.yaml", plain)), "--emit"])
    assert proc.returncode == 2 and "--emit needs workload.framework" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(ProblemError, match="no release"):
        frameworks.load("megatron-lm@v0.0")


def test_the_restriction_fills_free_keys_and_keeps_listed_ones():
    problem = parse_problem({**LLAMA_MEGATRON, "mapping": {"zero": 0}})
    assert problem.mapping["zero"] == (0,)
    assert problem.mapping["weight_offload"] == (False,) and "zero" not in problem.framework_keys
    free = parse_problem(LLAMA_MEGATRON)
    assert free.mapping["zero"] == (0, 1) and "zero" in free.framework_keys


def test_megatron_layout_holds_every_layer_once():
    layout = launch.megatron_layout(61, 4, 2, 15, 14, mtp=1)
    chunks = layout.split("|")
    assert len(chunks) == 8 and layout.startswith("E") and layout.endswith("mL")
    assert sum(c.count("t") for c in chunks) == 61
    assert [sum(chunks[v * 4 + r].count("t") for v in range(2)) for r in range(4)] == [15, 16, 16, 14]


def test_emitters_refuse_what_the_framework_cannot_express():
    problem = parse_problem({**LLAMA_MEGATRON, "model": TINY_GQA, "system": {"name": "dgx-h100", "num_gpus": 8}})
    from parasol.solver.problem import mapping_with_defaults  # noqa: PLC0415

    with pytest.raises(launch.Unexpressible, match="ZeRO-3"):
        launch.emit(problem, 8, mapping_with_defaults({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "zero": 3}))


def test_recorded_flag_lists_name_their_source():
    for path in sorted((REPO / "problems" / "frameworks" / "flags").glob("*.txt")):
        header = path.read_text().splitlines()[0]  # the repository file and commit the names come from
        assert header.startswith(("# extracted by benchmarks/framework_flags.py", "# source: ")), path
        assert re.search(r"\b[0-9a-f]{40}\b", header) and re.search(r"\w+/\w+", header), path


SERVING = {
    "model": "llama3.3-70b",
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {
        "kind": "inference",
        "input_len": 2048,
        "output_len": 512,
        "precision": "fp8",
        "kv_precision": "fp8",
        "weight_precision": "fp8",
        "serving": "continuous",
    },
}
SERVING_PROGRAMS = {"vllm": ["vllm", "serve"], "trtllm": ["trtllm-serve"], "sglang": ["python", "-m", "sglang.launch_server"]}


def servers(text: str) -> list[tuple[int, list[str]]]:
    """(replicas, tokens) of each server command in an emitted serving launch."""
    out = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        replicas = [int(line.split("(dp ")[1].rstrip(")")) for line in lines if line.startswith("#") and "(dp " in line]
        out.append((replicas[0] if replicas else 1, tokens("\n".join(x for x in lines if not x.startswith("#")))))
    return out


@pytest.mark.parametrize("name", ["vllm", "trtllm", "sglang"])
def test_serving_launch_lines_use_recorded_flags_and_the_plans_degrees(tmp_path, name):
    problem = {**SERVING, "workload": {**SERVING["workload"], "framework": name}}
    doc, _ = emitted(tmp_path, problem, extra=("--time-limit", "30"))
    recorded = frameworks.recorded_flags(frameworks.load(name))
    ((replicas, toks),) = servers(doc["launch"])
    program = SERVING_PROGRAMS[name]
    assert toks[: len(program)] == program
    flags = flag_values(toks[len(program) :])
    assert set(flags) <= recorded, sorted(set(flags) - recorded)
    short = {
        "vllm": ("--tensor-parallel-size", "--pipeline-parallel-size", "--max-num-seqs"),
        "trtllm": ("--tp_size", "--pp_size", "--max_batch_size"),
        "sglang": ("--tp-size", "--pp-size", "--max-running-requests"),
    }[name]
    tp, pp, batch = (int(flags[f][0]) for f in short)
    m = doc["mapping"]
    if name == "trtllm":  # its max_batch_size bounds each of the pp micro-batches in flight
        batch *= pp
    assert (tp, pp, batch, replicas) == (m["tp"], m["pp"], m["batch"], m["dp"])
    assert tp * pp * replicas == 8


def test_sglang_disaggregated_emits_a_prefill_and_a_decode_server(tmp_path):
    problem = {**SERVING, "workload": {**SERVING["workload"], "serving": "disaggregated", "framework": "sglang"}}
    doc, _ = emitted(tmp_path, problem, extra=("--time-limit", "30"))
    (pr, prefill), (dr, decode) = servers(doc["launch"])
    pf, df = flag_values(prefill[3:]), flag_values(decode[3:])
    assert pf["--disaggregation-mode"] == ["prefill"] and df["--disaggregation-mode"] == ["decode"]
    gpus = pr * int(pf["--tp-size"][0]) * int(pf["--pp-size"][0]) + dr * int(df["--tp-size"][0]) * int(df["--pp-size"][0])
    assert gpus == 8 and set(pf) | set(df) <= frameworks.recorded_flags(frameworks.load("sglang"))


def test_a_serving_mode_the_framework_lacks_is_one_line(tmp_path):
    problem = {**SERVING, "workload": {**SERVING["workload"], "serving": "static", "framework": "vllm"}}
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", problem))])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "workload.serving" in proc.stderr and "allowed: continuous" in proc.stderr
    training = {**SERVING, "workload": {**SERVING["workload"], "framework": "megatron-lm"}}
    proc = run_main(["solve", str(write_yaml(tmp_path / "q.yaml", training))])
    assert proc.returncode == 2 and "training framework" in proc.stderr


def test_trtllm_05_brings_its_engine_profile_and_has_no_command_line(tmp_path):
    problem = parse_problem({**SERVING, "workload": {**SERVING["workload"], "framework": "trtllm@0.5"}})
    assert problem.workload.engine == "trtllm-0.5"
    proc = run_main(
        [
            "solve",
            str(write_yaml(tmp_path / "p.yaml", {**SERVING, "workload": {**SERVING["workload"], "framework": "trtllm@0.5"}})),
            "--emit",
        ]
    )
    assert proc.returncode == 2 and "no recorded launch flags" in proc.stderr


def test_torchtitan_toml_parses_with_known_keys_and_the_plans_degrees(tmp_path):
    import tomllib  # noqa: PLC0415

    problem = {**LLAMA_MEGATRON, "workload": {**LLAMA_MEGATRON["workload"], "framework": "torchtitan"}}
    doc, _ = emitted(tmp_path, problem, extra=("--time-limit", "60"))
    config = tomllib.loads(doc["launch"])
    recorded = frameworks.recorded_flags(frameworks.load("torchtitan"))
    for section, keys in config.items():
        assert f"[{section}]" in recorded
        assert {f"{section}.{k}" for k in keys} <= recorded, sorted({f"{section}.{k}" for k in keys} - recorded)
    p, m = config["parallelism"], doc["mapping"]
    assert m["zero"] in (0, 3) and m["recompute"] in ("none", "full")
    dp = p["data_parallel_replicate_degree"] * p["data_parallel_shard_degree"]
    assert all(isinstance(v, int) for k, v in p.items() if k.endswith("_degree"))
    assert dp * p["tensor_parallel_degree"] * p["pipeline_parallel_degree"] * p["context_parallel_degree"] == 64
    assert (p["tensor_parallel_degree"], p["pipeline_parallel_degree"], dp) == (m["tp"], m["pp"], m["dp"])
    if m["pp"] > 1:
        parts = p["module_fqns_per_model_part"]
        assert len(parts) == m["pp"] * m["vpp"]
        names = [n for part in parts for n in part]
        assert names == ["tok_embeddings", *(f"layers.{i}" for i in range(80)), "norm", "output"]
    assert config["activation_checkpoint"]["mode"] == m["recompute"]


def test_deepspeed_json_has_known_keys_and_consistent_batches(tmp_path):
    problem = {
        **LLAMA_MEGATRON,
        "model": "llama3-8b",
        "system": {"name": "dgx-h100", "num_gpus": 16},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 64, "framework": "deepspeed"},
        "mapping": {"optimizer_offload": [0.0, 0.5], "weight_offload": [False, True]},
    }
    doc, _ = emitted(tmp_path, problem, extra=("--time-limit", "30"))
    text = "\n".join(line for line in doc["launch"].splitlines() if not line.startswith("#"))
    config = json.loads(text)
    recorded = frameworks.recorded_flags(frameworks.load("deepspeed"))
    assert set(config) <= recorded
    zero = config["zero_optimization"]
    assert {f"zero_optimization.{k}" for k in zero} <= recorded
    for key in ("offload_optimizer", "offload_param"):
        assert {f"offload.{k}" for k in zero.get(key, {})} <= recorded
    assert set(config["bf16"]) <= recorded
    m = doc["mapping"]
    assert (m["tp"], m["pp"], m["cp"], m["dp"]) == (1, 1, 1, 16) and zero["stage"] == m["zero"]
    assert config["train_batch_size"] == config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * 16
    assert ("offload_param" in zero) == m["weight_offload"]


def test_deepspeed_refuses_model_parallel_degrees(tmp_path):
    problem = {**LLAMA_MEGATRON, "workload": {**LLAMA_MEGATRON["workload"], "framework": "deepspeed"}, "mapping": {"tp": 8}}
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", problem))])
    assert proc.returncode == 2 and "mapping.tp" in proc.stderr and "deepspeed" in proc.stderr and "allowed: 1" in proc.stderr


def test_megatron_moe_fp8_and_optimizer_offload_arguments(tmp_path):
    problem = {
        "model": TINY_MOE,
        "system": {"name": "dgx-h100", "num_gpus": 16},
        "workload": {
            "kind": "training",
            "seq_len": 4096,
            "global_batch": 64,
            "precision": "fp8",
            "low_precision_recipe": "mxfp8",
            "moe_dispatcher": "deepep",
            "framework": "megatron-lm",
        },
        "mapping": {"tp": 2, "pp": 1, "dp": 8, "ep": 4, "micro_batch": 1, "optimizer_offload": 0.5, "cp": 1},
    }
    doc, flags = emitted(tmp_path, problem, command="evaluate")
    check_megatron_flags(flags)
    assert flags["--expert-model-parallel-size"] == ["4"] and flags["--expert-tensor-parallel-size"] == ["1"]
    assert flags["--moe-token-dispatcher-type"] == ["flex"] and "--moe-enable-deepep" in flags
    assert flags["--fp8-recipe"] == ["mxfp8"] and float(flags["--optimizer-offload-fraction"][0]) == 0.5
    assert "--optimizer-cpu-offload" in flags


def test_torchtitan_keeps_sequence_parallelism_exactly_with_tensor_parallelism(tmp_path):
    """torchtitan's TP plan always shards the norms (SequenceParallel): its space has sp = (tp > 1) only, so
    every plan it enumerates is one its emitter can write, and tp 2 without sp is no plan at all."""
    small = {
        "model": "llama3-8b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32, "framework": "torchtitan"},
        "mapping": {"tp": [1, 2, 4], "pp": 1},
    }
    table = parasol.enumerate(small, keep_all=True).to_frame()
    assert len(table) and ((table["tp"] > 1) == table["sp"].astype(bool)).all()
    assert {1, 2, 4} <= set(table["tp"])
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", small | {"mapping": {"tp": 2, "sp": False}}))])
    assert proc.returncode in (1, 2) and "Traceback" not in proc.stderr


@pytest.mark.parametrize("name", ["llama3-70b", "deepseek-v3", "gpt-oss-120b"])
def test_megatron_model_arguments_give_back_the_model(name):
    """The architecture arguments, read back as Megatron-LM would, rebuild the library model's shapes: a launch
    line holds the model, not only the parallel degrees."""
    model = library.load_model(name)
    flags = flag_values(tokens(launch.command_line(["pretrain_gpt.py"], launch.megatron_model_args(model)))[1:])
    check_megatron_flags(flags)
    one = {flag: values[0] for flag, values in flags.items() if values}
    assert (int(one["--num-layers"]), int(one["--hidden-size"]), int(one["--num-attention-heads"])) == (
        model.layers,
        model.hidden,
        model.heads,
    )
    assert int(one["--vocab-size"]) == model.vocab and int(one["--ffn-hidden-size"]) == model.ffn
    if model.mla is not None:
        assert "--multi-latent-attention" in flags and int(one["--kv-lora-rank"]) == model.mla.kv_lora_rank
        assert int(one["--qk-head-dim"]) + int(one["--qk-pos-emb-head-dim"]) == model.mla.qk_head_dim
    else:
        assert int(one.get("--num-query-groups", model.heads)) == model.kv_heads
    if model.moe is not None:
        assert int(one["--num-experts"]) == model.moe.experts and int(one["--moe-router-topk"]) == model.moe.top_k
        layers = eval(one.get("--moe-layer-freq", f"[1]*{model.layers}"))  # moe_freq_type's Python list expression
        assert len(layers) == model.layers and layers.count(0) == model.moe.first_dense_layers
    if model.sliding_window:
        assert one["--window-size"] == f"{model.sliding_window},0"
    assert ("--swiglu" in flags) == (model.activation == "swiglu")


def test_the_expandable_allocator_travels_with_the_launch(tmp_path):
    """workload.allocator expandable: Megatron's command line sets PyTorch's environment before torchrun,
    torchtitan's TOML and DeepSpeed's JSON name it in a first comment line (still parsing as before);
    PyTorch's default allocator sets nothing."""
    import tomllib  # noqa: PLC0415

    mapping = {"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1}
    for allocator in ("caching", "expandable"):
        workload = {**LLAMA_MEGATRON["workload"], "allocator": allocator}
        doc, flags = emitted(tmp_path, {**LLAMA_MEGATRON, "workload": workload, "mapping": mapping}, command="evaluate")
        expandable = allocator == "expandable"
        assert doc["launch"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True torchrun") == expandable
        assert ("PYTORCH_CUDA_ALLOC_CONF" in doc["launch"]) == expandable
        if not expandable:
            check_megatron_flags(flags)
        titan = {
            **LLAMA_MEGATRON,
            "workload": {**workload, "framework": "torchtitan"},
            "mapping": {"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "zero": 3, "recompute": "full"},
        }
        doc, _ = emitted(tmp_path, titan, command="evaluate")
        assert doc["launch"].startswith("# launch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True") == expandable
        assert tomllib.loads(doc["launch"])["parallelism"]["tensor_parallel_degree"] == 8
