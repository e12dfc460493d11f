"""Hugging Face config.json files as models (solver/hf_config.py) and model, device and engine files
given by path. The configs under tests/data/hf are the published ones (sources in its README)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_main, write_yaml

from parasol.model.errors import ProblemError
from parasol.model.params import total_params
from parasol.solver import hf_config, library
from parasol.solver.problem import load_problem, parse_problem

HF = REPO / "tests" / "data" / "hf"
# the library's model for each config the library also describes
SAME_AS_LIBRARY = ("llama3-70b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b", "deepseek-v3", "gpt-oss-120b")
# published total parameters (billions), see tests/data/hf/README.md
PUBLISHED_B = {"mistral-7b": 7.24, "qwen2-7b": 7.62, "gemma-2-9b": 9.24, "gemma-7b": 8.54}
TRAINING = {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"}


def from_config(name: str, **overrides):
    return library.model_from_hf_config({"hf_config": str(HF / name / "config.json"), **overrides}, None)


def structure(model):
    """The fields that shape the model: all but its name, published counts and context length (the
    library states the pre-training context where config.json gives the extended one)."""
    return dataclasses.replace(model, name="x", params_b=None, active_params_b=None, max_seq_len=1, source=None)


@pytest.mark.parametrize("name", SAME_AS_LIBRARY)
def test_config_matches_the_library_model(name):
    ours, lib = from_config(name), library.load_model(name)
    assert structure(ours) == structure(lib)
    assert total_params(ours) == total_params(lib)
    if lib.moe:
        assert total_params(ours, active=True) == total_params(lib, active=True)


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_parameter_count_matches_the_published_one(name):
    assert total_params(from_config(name)) / 1e9 == pytest.approx(PUBLISHED_B[name], rel=0.01)


def test_family_specific_keys():
    mistral = from_config("mistral-7b")
    assert (mistral.sliding_window, mistral.sliding_window_share, mistral.kv_heads) == (4096, 1.0, 8)
    gemma2 = from_config("gemma-2-9b")  # alternating local/global layers, GeGLU, tied embeddings, head_dim 256
    assert (gemma2.sliding_window, gemma2.sliding_window_share) == (4096, 0.5)
    assert gemma2.tied_embeddings and gemma2.activation == "swiglu" and gemma2.head_dim == 256
    assert from_config("gemma-7b").sliding_window == 0
    qwen2 = from_config("qwen2-7b")  # q/k/v biases; use_sliding_window false turns the window off
    assert qwen2.bias and qwen2.sliding_window == 0
    assert from_config("deepseek-v3").moe.max_nodes_per_token == 4  # topk_group of n_group 8


def test_layer_types_and_layouts_are_read(tmp_path):
    data = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
    data["mlp_only_layers"] = [0, 1]
    assert hf_config.model_fields(data, "x")["moe"]["first_dense_layers"] == 2
    data["mlp_only_layers"] = [5]  # a dense layer between MoE ones is not modelled
    with pytest.raises(ProblemError, match="mlp_only_layers"):
        hf_config.model_fields(data, "x")
    data["mlp_only_layers"], data["decoder_sparse_step"] = [], 2
    with pytest.raises(ProblemError, match="decoder_sparse_step"):
        hf_config.model_fields(data, "x")
    qwen2 = json.loads((HF / "qwen2-7b" / "config.json").read_text())
    qwen2.update(use_sliding_window=True, sliding_window=4096, max_window_layers=21)
    fields = hf_config.model_fields(qwen2, "x")
    assert (fields["sliding_window"], fields["sliding_window_share"]) == (4096, 7 / 28)
    oss = json.loads((HF / "gpt-oss-120b" / "config.json").read_text())
    oss["layer_types"] = ["full_attention"] * 36
    assert "sliding_window" not in hf_config.model_fields(oss, "x")


def test_problem_file_resolves_the_config_and_overrides(tmp_path):
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "config.json").write_text((HF / "mixtral-8x7b" / "config.json").read_text())
    problem = write_yaml(
        tmp_path / "p.yaml",
        {
            "model": {"hf_config": "cfg/config.json", "max_seq_len": 4096, "moe": {"capacity_factor": 1.25}},
            "system": {"name": "dgx-h100", "num_gpus": 8},
            "workload": TRAINING,
        },
    )
    model = load_problem(problem).model
    assert model.name == "cfg"  # the folder of a file named config.json
    assert model.max_seq_len == 4096
    assert (model.moe.experts, model.moe.top_k, model.moe.capacity_factor) == (8, 2, 1.25)


def test_the_example_parses():
    model = load_problem(REPO / "problems" / "examples" / "mistral-7b-hf.yaml").model
    assert model.name == "mistral-7b" and structure(model) == structure(from_config("mistral-7b"))


def _bad(tmp_path, config) -> Path:
    path = tmp_path / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return write_yaml(
        tmp_path / "p.yaml",
        {"model": {"hf_config": "config.json"}, "system": {"name": "dgx-h100", "num_gpus": 8}, "workload": TRAINING},
    )


def _mistral() -> dict:
    return json.loads((HF / "mistral-7b" / "config.json").read_text())


@pytest.mark.parametrize(
    "change, words",
    [
        ({"architectures": ["FalconForCausalLM"]}, ["architectures", "FalconForCausalLM", "MistralForCausalLM"]),
        ({"num_hidden_layers": None}, ["num_hidden_layers", "required"]),
        ({"moe_layer_layout": "interleaved"}, ["moe_layer_layout", "not understood"]),
        ({"hidden_act": "relu"}, ["hidden_act", "relu"]),
    ],
)
def test_bad_config_exits_2_naming_file_and_key(tmp_path, change, words):
    config = {**_mistral(), **change}
    config = {k: v for k, v in config.items() if v is not None or k == "sliding_window"}
    proc = run_main(["evaluate", str(_bad(tmp_path, config))])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and str(tmp_path / "config.json") in line
    for word in words:
        assert word in line


def test_unreadable_configs_raise_naming_the_file(tmp_path):
    problem = _bad(tmp_path, "{not json")
    with pytest.raises(ProblemError, match="not JSON") as exc:
        load_problem(problem)
    assert exc.value.source == str(tmp_path / "config.json")
    (tmp_path / "config.json").unlink()
    proc = run_main(["evaluate", str(problem)])
    assert proc.returncode == 2 and "config.json" in proc.stderr and "not found" in proc.stderr


def test_model_device_and_engine_files_by_path(tmp_path):
    """Files outside the library are named by {file: PATH} (issue 17: a bare path in a name is refused)."""
    model = yaml.safe_load((REPO / "problems" / "models" / "llama3-8b.yaml").read_text())
    model.pop("name", None)
    (tmp_path / "models").mkdir()
    write_yaml(tmp_path / "models" / "my-llama.yaml", model)
    data = {"model": "models/my-llama.yaml", "system": {"name": "dgx-h100", "num_gpus": 8}, "workload": TRAINING}
    with pytest.raises(ProblemError, match=r"write \{file: 'models/my-llama.yaml'\}") as exc:
        parse_problem(data, str(write_yaml(tmp_path / "p.yaml", data)))
    assert exc.value.field == "model"
    data["model"] = {"file": "models/my-llama.yaml"}
    spec = parse_problem(data, str(write_yaml(tmp_path / "p.yaml", data))).model
    assert spec.name == "my-llama" and structure(spec) == structure(library.load_model("llama3-8b"))
    model["layers"] = 0  # validated as the library's models are
    write_yaml(tmp_path / "models" / "my-llama.yaml", model)
    with pytest.raises(ProblemError, match="layers") as exc:
        parse_problem(data, str(tmp_path / "p.yaml"))
    assert exc.value.source == str(tmp_path / "models" / "my-llama.yaml")

    # a system file naming its device by path (relative to the system file)
    device = yaml.safe_load((REPO / "problems" / "systems" / "devices" / "h100-sxm-80gb.yaml").read_text())
    device.pop("name", None)
    write_yaml(tmp_path / "my-h100.yaml", device)
    system = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    system["device"] = "my-h100.yaml"
    with pytest.raises(ProblemError, match="file: PATH") as exc:
        library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
    assert exc.value.field == "device"
    system["device"] = {"file": "my-h100.yaml"}
    spec = library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
    assert spec.device == dataclasses.replace(library.load_device("h100-sxm-80gb"), name="my-h100")
    for bad, words in ((-132, "non-negative integer"), (16, "more than the 20 SMs")):  # named by file and field
        device["sms"] = bad
        write_yaml(tmp_path / "my-h100.yaml", device)
        with pytest.raises(ProblemError, match=words) as exc:
            library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
        assert exc.value.field == "sms" and exc.value.source == str(tmp_path / "my-h100.yaml")
    system["device"] = {"file": "missing.yaml"}
    with pytest.raises(ProblemError, match="not found") as exc:
        library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
    assert exc.value.source == str(tmp_path / "missing.yaml")

    # a serving workload's engine by path
    engine = yaml.safe_load((REPO / "problems" / "engines" / "trtllm-0.5.yaml").read_text())
    write_yaml(tmp_path / "engine.yaml", engine)
    serving = {
        "model": "llama3-8b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "inference", "input_len": 128, "output_len": 16, "precision": "bf16", "engine": "engine.yaml"},
    }
    with pytest.raises(ProblemError, match="file: PATH"):
        parse_problem(serving, str(write_yaml(tmp_path / "s.yaml", serving)))
    serving["workload"]["engine"] = {"file": "engine.yaml"}
    problem = parse_problem(serving, str(write_yaml(tmp_path / "s.yaml", serving)))
    assert (
        problem.system().device.stream_efficiency
        == library.device_under_engine(library.load_device("h100-sxm-80gb"), "trtllm-0.5").stream_efficiency
    )
    serving["workload"]["engine"] = {"file": "nope.yaml"}
    with pytest.raises(ProblemError, match="not found") as exc:
        parse_problem(serving, str(write_yaml(tmp_path / "s.yaml", serving)))
    assert exc.value.source == str(tmp_path / "nope.yaml")
