"""The routed experts' GEMMs against grouped-GEMM kernels measured on an H100.

problems/measurements/h100-kernel-microbench.yaml times torch._grouped_mm (bf16) on the expert up and
down projections of five MoE models, E local experts x r rows each (32 to 8,192 rows per expert).
The model times the experts as E separate GEMMs of r rows on the device's size-dependent GEMM
efficiency curve (``compute.moe_routed_forward_time_s``). These tests hold that the curve alone
already carries the grouped kernels' loss at few rows per expert, so that the fitted MoE efficiency
of a device (``efficiency.moe_expert``) is left with what is not a GEMM (router, permutation, the
dropless host sync, launch gaps) rather than the shape of the GEMMs.
"""

import collections
import statistics
import sys

import pytest
import yaml
from conftest import REPO

from parasol.model.compute import gemm_time_s
from parasol.solver import library


@pytest.fixture(scope="module")
def measured():
    path = library.library_root() / "measurements" / "h100-kernel-microbench.yaml"
    return yaml.safe_load(path.read_text())["grouped_gemm"]["entries"]


def test_grouped_gemm_time_is_the_per_expert_gemm_roofline_at_every_expert_size(measured):
    device = library.load_device("h100-sxm-80gb")
    ratios = collections.defaultdict(list)
    for e in measured:
        model = e["experts"] * gemm_time_s(device, e["rows_per_expert"], e["n"], e["k"], "bf16")
        ratios[e["rows_per_expert"]].append(e["seconds"] / model)
    assert sorted(ratios) == [32, 128, 512, 2048, 8192]
    for rows, values in ratios.items():
        # medians measured 0.91, 0.87, 1.01, 0.98, 1.06 (32 ... 8,192 rows per expert)
        assert 0.8 <= statistics.median(values) <= 1.2, rows


def test_grouped_kernels_lose_to_one_dense_gemm_at_few_rows_per_expert(measured):
    """The measurement itself: against one dense GEMM of the same FLOPs the grouped kernel runs at
    about a fifth of the rate at 32 rows per expert and at par from 2,048 rows, so a single fitted
    constant could not stand in for the shape effect; the per-expert curve above does."""
    by_rows = collections.defaultdict(list)
    for e in measured:
        by_rows[e["rows_per_expert"]].append(e["efficiency_vs_dense"])
    assert statistics.median(by_rows[32]) < 0.3 < 0.9 < statistics.median(by_rows[2048])


def test_fp8_grouped_kernels_fall_short_of_the_fp8_dense_curve_and_the_device_files_say_by_how_much():
    """FP8 grouped GEMMs (torch._scaled_grouped_mm, row-wise scales) run about 1.5x the FP8 per-expert
    roofline at the training runs' sizes; ``efficiency.grouped_fp8`` stores the median
    (benchmarks/calibrate.py --moe derives it), which the H100 and H200 files hold, each its own
    measurement, and the others assume."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from calibrate import GROUPED_MEASUREMENTS, grouped_fp8_efficiency  # noqa: PLC0415

    for device_name in GROUPED_MEASUREMENTS:
        measured = grouped_fp8_efficiency(device_name)
        assert 0.6 < measured < 0.75, device_name  # 0.67 (H100) and 0.68 (H200) when measured
        assert library.load_device(device_name).grouped_fp8_efficiency == pytest.approx(measured, abs=0.005), device_name
    assert library.load_device("a100-sxm-80gb").grouped_fp8_efficiency == 1.0  # no FP8 on A100


def test_the_routed_expert_efficiency_the_device_files_hold_is_the_calibration_scripts_fit():
    """``efficiency.moe_expert`` is what benchmarks/calibrate.py --moe fits on the calibration set's 20
    Megatron-Bridge MoE runs (25.09 and 25.11; 0.61 on 25.09's three alone): 0.64 at 22.1 % mean |error|,
    a weak fit (docs/accuracy.md); the devices without MoE runs assume the same value."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from calibrate import MOE_CALIBRATION, moe_expert_fit  # noqa: PLC0415

    from parasol.solver.validation import family, load_runs  # noqa: PLC0415

    calibration = [e for e in load_runs() if family(e["id"]) in MOE_CALIBRATION]
    error, fitted = moe_expert_fit(calibration)
    assert len(calibration) == 20 and error < 0.235
    devices = library.names("systems/devices")
    assert len(devices) >= 10
    assert {name: library.load_device(name).moe_expert_efficiency for name in devices} == dict.fromkeys(devices, fitted)
