"""Accuracy against published runs (problems/validation/training_runs.yaml).

The device efficiencies were measured by microbenchmarks and one network efficiency per device
was fitted on these runs (benchmarks/calibrate.py), so these are in-sample figures; the thresholds
are the issue's targets, and a model change that loses accuracy fails here.
"""

import statistics

import pytest

from solver.validation import evaluate_all, load_runs

OUTSIDE_MODEL = {"Megatron SC'21 Table 2 ZeRO-3",  # DeepSpeed ZeRO-3 overheads: see README, Accuracy
                 "Megatron-Bridge 25.09 MoE"}  # the expert model is new: reported, not yet held to the dense targets


@pytest.fixture(scope="module")
def results():
    return evaluate_all()


def test_every_complete_run_evaluates(results):
    assert len(results) == len(load_runs()) >= 40
    assert all(r.predicted_step_s > 0 for r in results)


def test_mean_step_time_error_within_ten_percent(results):
    inside = [abs(r.error) for r in results if r.family not in OUTSIDE_MODEL]
    assert statistics.fmean(inside) <= 0.10


def test_megatron_ptd_p_and_nemo_runs_within_fifteen_percent_on_average(results):
    for family in ("Megatron SC'21 Table 2 PTD-P", "NeMo 24.07", "Megatron-Bridge 25.09", "BLOOM"):
        errors = [abs(r.error) for r in results if r.family == family]
        assert errors and statistics.fmean(errors) <= 0.15, family


def test_errors_are_not_all_one_sign(results):
    """A calibration that only shifts every prediction one way would show here."""
    signs = {r.error > 0 for r in results if r.family not in OUTSIDE_MODEL}
    assert signs == {True, False}
