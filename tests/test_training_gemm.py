"""The share of their GEMM curves the Blackwell devices sustain through a training step (efficiency.training_gemm),
fitted by benchmarks/calibrate.py --training-gemm on the dense calibration runs of those devices."""

import dataclasses
import sys
from pathlib import Path

import pytest

from parasol.model.errors import ProblemError
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.library import load_device
from parasol.solver.problem import mapping_with_defaults, parse_problem
from parasol.solver.validation import evaluate_all, load_runs

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import calibrate  # noqa: E402  (benchmarks/calibrate.py)


def _problem(system: str, kind: str):
    training = {"kind": kind, "seq_len": 4096, "global_batch": 64}
    workload = training if kind == "training" else {"kind": kind, "input_len": 128, "output_len": 128}
    return parse_problem(
        {"model": "llama3.1-8b", "system": {"name": system, "num_gpus": 8}, "workload": workload},
        source="t",
    )


def test_only_the_blackwell_files_carry_a_share_and_each_group_one_value():
    """B200, GB200 and B300 carry one value, GB300 its own; the devices whose curves we measured ourselves (Hopper) or
    that no training run calibrates keep 1."""
    stored = {name: load_device(name).training_gemm_efficiency for name in library.names("systems/devices")}
    carriers = {name for name, share in stored.items() if share != 1.0}
    assert carriers == {"b200", "b300", "gb200", "gb300"}
    assert stored["b200"] == stored["gb200"] == stored["b300"] < 1.0 < stored["gb300"]


@pytest.mark.parametrize(("fit_devices", "carriers"), list(calibrate.TRAINING_GEMM_GROUPS.items()))
def test_each_stored_share_is_the_fit_on_its_devices_runs(fit_devices, carriers):
    """python benchmarks/calibrate.py --training-gemm (2026-11-29): B200 and GB200, 5 runs, 0.88 (mean |error| 6.6 ->
    2.9 %; leaving out B200 0.89, GB200 0.85); GB300, 3 runs, 1.10 (6.4 -> 3.9 %; leaving out one run 1.10-1.11).
    Here: the stored value is the best of the grid within 0.03 of it, and the fit beats the curves as published."""
    entries = [e for device in fit_devices for e in calibrate.device_entries(load_runs(), device)]
    stored = load_device(carriers[0]).training_gemm_efficiency
    assert {load_device(name).training_gemm_efficiency for name in carriers} == {stored}
    near = [x for x in calibrate.TRAINING_GEMM_GRID if abs(x - stored) < 0.035]
    share, error = calibrate.training_gemm_fit(entries, carriers, near)
    assert share == stored
    at_one = evaluate_all(entries, calibrate.training_gemm_override(dict.fromkeys(carriers, 1.0)))
    assert error < 0.8 * sum(abs(r.error) for r in at_one) / len(at_one)


def test_a_training_problem_takes_the_training_share_and_a_serving_one_the_serving_share():
    b200, gb300, h100 = load_device("b200"), load_device("gb300"), load_device("h100-sxm-80gb")
    assert _problem("dgx-b200", "training").system().device.gemm_scale == b200.training_gemm_efficiency
    assert _problem("gb300-nvl72", "training").system().device.gemm_scale == gb300.training_gemm_efficiency
    assert _problem("dgx-b200", "inference").system().device.gemm_scale == b200.serving_gemm_efficiency
    assert _problem("dgx-h100", "training").system().device.gemm_scale == h100.training_gemm_efficiency == 1.0


def test_the_share_divides_a_training_steps_gemm_time():
    """A compute-bound GEMM takes 1/share as long: the step's GEMM component scales by exactly that."""
    problem = _problem("dgx-b200", "training")
    system = problem.system()
    mapping = mapping_with_defaults({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1})
    scaled = evaluate_training(problem.model, system, problem.workload, mapping).breakdown["time_s"]["compute/gemm"]
    plain_system = dataclasses.replace(system, device=dataclasses.replace(system.device, gemm_scale=1.0))
    plain = evaluate_training(problem.model, plain_system, problem.workload, mapping).breakdown["time_s"]["compute/gemm"]
    assert scaled == pytest.approx(plain / system.device.gemm_scale, rel=1e-9)


@pytest.mark.parametrize("value", [0, -0.5, 2.5, "fast"])
def test_a_bad_share_in_a_device_file_is_named(tmp_path, value):
    text = (ROOT / "problems" / "systems" / "devices" / "b200.yaml").read_text()
    bad = tmp_path / "b200.yaml"
    bad.write_text(text.replace("training_gemm: 0.88", f"training_gemm: {value}"))
    with pytest.raises(ProblemError, match="efficiency.training_gemm"):
        library.load_device(str(bad))
