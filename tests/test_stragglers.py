"""What grows with the GPU count (issue 13): every GPU of a synchronous step waits for the slowest, so
the step stretches by the expected maximum of N per-GPU delays (``training.straggler_stretch``,
``system.straggler``), fitted with the networks by benchmarks/calibrate.py."""

import dataclasses
import math

import pytest
from conftest import rel_close, solved_as_enumerated, training_problem

from parasol.model.specs import Mapping, Workload
from parasol.model.training import harmonic_number, straggler_stretch
from parasol.model.training_step import evaluate_training
from parasol.solver.library import load_model, load_system
from parasol.solver.problem import parse_problem


def test_the_stretch_is_the_expected_maximum_of_n_exponential_delays():
    assert straggler_stretch(1, 0.02) == 1.0  # one GPU waits for nobody
    assert rel_close(straggler_stretch(2, 0.02), 1 + 0.02 * 0.5, 1e-12)  # max of two: 1.5 means, one more half
    assert harmonic_number(4) == pytest.approx(1 + 1 / 2 + 1 / 3 + 1 / 4)
    # doubling the GPUs adds ~ share x ln 2, whatever the scale
    for n in (1024, 8192):
        assert straggler_stretch(2 * n, 0.02) - straggler_stretch(n, 0.02) == pytest.approx(0.02 * math.log(2), rel=1e-3)
    assert straggler_stretch(16384, 0.0) == 1.0


def _run(num_gpus: int, straggler: float | None = None):
    system = load_system("dgx-h100", num_gpus)
    if straggler is not None:
        system = dataclasses.replace(system, straggler=straggler)
    wl = Workload(kind="training", seq_len=4096, global_batch=num_gpus // 8 * 32)
    m = Mapping(tp=8, pp=1, dp=num_gpus // 8, micro_batch=1, sp=True)
    return evaluate_training(load_model("llama2-70b"), system, wl, m)


def test_the_step_is_the_synchronous_step_stretched_and_the_breakdown_says_by_how_much():
    for n in (8, 512):
        still, stretched = _run(n, 0.0), _run(n, 0.03)
        stretch = round(1e4 * straggler_stretch(n, 0.03)) / 1e4
        assert rel_close(stretched.metrics["step_time_s"], still.metrics["step_time_s"] * stretch, 1e-9)
        added = stretched.breakdown["time_s"]["scale/stragglers"]
        assert rel_close(added, stretched.metrics["step_time_s"] - still.metrics["step_time_s"], 1e-9)
        assert abs(still.breakdown["time_s"]["scale/stragglers"]) < 1e-12
    # weak scaling: the same work per GPU takes longer on more GPUs
    assert _run(512, 0.03).metrics["step_time_s"] / _run(8, 0.03).metrics["step_time_s"] > 1.05


def test_the_library_systems_carry_the_one_fitted_share():
    from parasol.solver.library import names  # noqa: PLC0415

    shares = {load_system(name, 8).straggler for name in names("systems")}
    assert len(shares) == 1 and 0 < shares.pop() < 0.05


def test_the_planner_sees_the_stretch_and_the_solver_equals_the_enumerator():
    data = training_problem(
        model="llama2-7b",
        num_gpus=[8, 16, 32],
        global_batch=64,
        mapping={"tp": [1, 2], "pp": [1], "vpp": [1], "zero": [1], "cp": [1], "recompute": ["none"]},
        objective="tokens_per_gpu",
    )
    plan = solved_as_enumerated(parse_problem(data, source="t"))
    assert plan.num_gpus == 8  # the same work per GPU, least stretched on the fewest GPUs
