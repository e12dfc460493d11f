"""Inputs a fuzzing pass over the command line found accepted or crashing (2026-11-28), each now refused in
one line naming the file, the field and what is allowed (exit 2): a switch level whose size is null, names
that are not text, a network efficiency above 1, a framework with an empty release, a memory headroom that
leaves nothing after the system's reserve, a repeated sweep value, a sweep spec's bad values under a
command-line override, a Hugging Face config's zero MoE step, and a chiplet count that no wafer holds."""

from __future__ import annotations

import json

import pytest
import yaml
from conftest import REPO, run_main, write_yaml

from parasol.model.errors import ProblemError
from parasol.solver import hf_config
from parasol.solver.training_planner import apart

SYSTEM = {
    "name": "mysys",
    "device": "h100-sxm-80gb",
    "gpus_per_node": 8,
    "memory_reserve_bytes": 2147483648,
    "scale_up": {"domain_size": 8, "bandwidth_bytes_per_s": 450.0e9, "latency_s": 3.0e-6, "efficiency": 0.7},
    "scale_out": {"bandwidth_bytes_per_s": 50.0e9, "latency_s": 5.0e-6, "efficiency": 0.7},
    "topology": {
        "levels": [
            {
                "name": "nvswitch",
                "kind": "switch",
                "size": 8,
                "link": {"bandwidth_bytes_per_s": 25.0e9, "latency_s": 3.0e-6, "count": 18},
                "efficiency": 0.8,
            }
        ]
    },
}
PROBLEM = {
    "model": "llama3-8b",
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32},
}


def _refused(proc, *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    return proc.stderr


def _system(tmp_path, change) -> str:
    data = json.loads(json.dumps(SYSTEM))
    change(data)
    return str(write_yaml(tmp_path / "sys.yaml", data))


def test_the_system_file_itself_is_accepted(tmp_path):
    proc = run_main(["cost", "--system", _system(tmp_path, lambda d: None)])
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d["topology"]["levels"][0].update(size=None), "topology.levels[0].size: is required"),
        (lambda d: d.update(name=[1, 2]), "name: must be a non-empty name"),
        (lambda d: d["topology"]["levels"][0].update(name=None), "topology.levels[0].name: must be a non-empty name"),
        (lambda d: d["scale_up"].update(efficiency=1e30), "scale_up.efficiency: must be a fraction in (0, 1]"),
        (lambda d: d["scale_out"].update(efficiency="8"), "scale_out.efficiency: must be a fraction in (0, 1]"),
    ],
)
def test_bad_system_files_are_refused_in_one_line(tmp_path, change, field):
    path = _system(tmp_path, change)
    _refused(run_main(["cost", "--system", path]), path, field)
    _refused(run_main(["collective", "--op", "allreduce", "--system", path, "--bytes", "1M", "--gpus", "8"]), field)


def test_a_framework_with_an_empty_release_is_refused(tmp_path):
    data = {**PROBLEM, "workload": {**PROBLEM["workload"], "framework": "megatron-lm@"}}
    _refused(run_main(["evaluate", write_yaml(tmp_path / "p.yaml", data)]), "workload.framework", "NAME@RELEASE")


@pytest.mark.parametrize("headroom", [{"memory_headroom": 0.9999999}, {"memory_headroom": 0.99}, {"memory_headroom_gib": 79.0}])
def test_a_headroom_that_leaves_nothing_after_the_reserve_is_refused(tmp_path, headroom):
    """The H100's 79.6 GiB less the DGX's reserve leaves 77.6 GiB: a headroom at or above that leaves no plan any
    memory (it was accepted while under the device's raw 79.6 GiB, and the binding message said 'offers -2.0 GiB')."""
    data = {**PROBLEM, "constraints": headroom}
    field = "constraints." + next(iter(headroom))
    _refused(run_main(["solve", write_yaml(tmp_path / "p.yaml", data)]), field, "leaves nothing", "h100-sxm-80gb of dgx-h100")
    fine = {**PROBLEM, "constraints": {"memory_headroom": 0.5}, "mapping": {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1}}
    assert run_main(["evaluate", write_yaml(tmp_path / "q.yaml", fine)]).returncode == 0


def test_sweep_specs_repeat_no_value_and_are_checked_under_overrides(tmp_path):
    base = str(REPO / "problems" / "examples" / "gpt3-175b-a100.yaml")
    twice = write_yaml(tmp_path / "twice.yaml", {"base": base, "sweep": {"num_gpus": [8, 8]}})
    _refused(run_main(["sweep", twice]), "sweep.num_gpus", "repeats value 0")
    negative = write_yaml(tmp_path / "neg.yaml", {"base": base, "sweep": {"num_gpus": [8]}, "time_limit": -1})
    _refused(run_main(["sweep", negative, "--time-limit", "5"]), "time_limit: must be a positive number")
    seed = write_yaml(tmp_path / "seed.yaml", {"base": base, "sweep": {"num_gpus": [8]}, "seed": -3})
    _refused(run_main(["sweep", seed, "--seed", "1"]), "seed")


def test_a_zero_moe_step_in_a_hugging_face_config_is_refused():
    """transformers takes (i + 1) % decoder_sparse_step: 0 would divide by zero there; it had made every layer dense."""
    data = json.loads((REPO / "tests" / "data" / "hf" / "qwen3-30b-a3b" / "config.json").read_text())
    data["decoder_sparse_step"] = 0
    with pytest.raises(ProblemError) as err:
        hf_config.model_fields(data, "config.json")
    assert err.value.field == "decoder_sparse_step" and "positive" in str(err.value)


def test_a_chiplet_count_no_wafer_holds_names_the_count_and_the_device(tmp_path):
    message = _refused(run_main(["cost", "--system", "dgx-h100", "--chiplets", "5"]), "--chiplets: 5 compute dies")
    assert "h100-sxm-80gb" in message and "allowed: 1 to " in message
    largest = int(message.rsplit("allowed: 1 to ", 1)[1])
    assert run_main(["cost", "--system", "dgx-h100", "--chiplets", str(largest)]).returncode == 0  # the bound is real
    data = {**PROBLEM, "system": {"name": "dgx-b200", "num_gpus": 8, "chiplets": 100}}
    path = write_yaml(tmp_path / "p.yaml", data)
    _refused(run_main(["solve", path]), f"{path}: system.chiplets: 100 compute dies per b200")
    assert yaml.safe_load((tmp_path / "p.yaml").read_text())["system"]["chiplets"] == 100


def test_a_binding_run_length_shows_the_need_and_the_limit_apart():
    """max_run_hours 0.001 was written 'over the limit 0 h', and a need of 2,160.2 h 'over the limit 2,160 h'."""
    assert apart(2160.2, 2160.0) == ("2,160.2", "2,160.0")
    assert apart(0.0123, 0.001) == ("0.012", "0.001")
    assert apart(12345.6, 10000.0) == ("12,345.6", "10,000.0")
