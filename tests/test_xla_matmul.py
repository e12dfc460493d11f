"""XLA's published GEMM table (problems/measurements/xla_matmul.yaml, written by benchmarks/xla_matmul_table.py) and
the size penalty benchmarks/device_curves.py derives from it for Blackwell's GEMM curves."""

from __future__ import annotations

import math
import statistics
import sys

import pytest
import yaml
from conftest import REPO

from parasol.solver.library import load_device

sys.path.insert(0, str(REPO / "benchmarks"))
import device_curves  # noqa: E402  (benchmarks/device_curves.py)
import xla_matmul_table as xla  # noqa: E402  (benchmarks/xla_matmul_table.py)

STORED = yaml.safe_load(xla.OUT.read_text())["devices"]


def entry(b: int, m: int, n: int, k: int, **rates: int) -> str:
    """One shape as XLA's table writes it."""
    flops = "".join(f'\n        flops {{ key: "{key}" value: {value} }}' for key, value in rates.items())
    return f"\n      entries {{\n        b: {b}\n        m: {m}\n        n: {n}\n        k: {k}{flops}\n      }}"


def table(key: str, *entries: str) -> str:
    return f'  entries {{\n    key: "{key}"\n    value {{{"".join(entries)}\n    }}\n  }}\n'


def test_import_keeps_hoppers_bf16_and_b200s_bf16_and_fp8_rates_in_tflops():
    bf16, fp8 = {"bf16xbf16->bf16": 0}, {"f8e4m3fnxf8e4m3fn->bf16": 0}
    text = (
        'constexpr char kDefaultMatmulPTable[] = R"pb(\n'
        + table(
            "sm_90",
            entry(1, 256, 512, 1024, **{**{k: 123_456_000_000_000 for k in bf16}, **{k: 9 * 10**15 for k in fp8}}),
        )
        + table(
            "sm_100",
            entry(2, 4096, 4096, 4096, **{k: 1_670_512_000_000_000 for k in bf16}, **{k: 3_280_100_000_000_000 for k in fp8}),
            entry(1, 256, 256, 256, **{k: 6_765_006_451_612 for k in bf16}),  # no FP8 rate: not kept
        )
    )
    out = xla.entries(xla.parse(text))
    assert out["h100-sxm-80gb"]["rows"] == [[1, 256, 512, 1024, 123.5]]  # Hopper's FP8 rate is not kept
    assert out["b200"]["columns"] == ["b", "m", "n", "k", "bf16_tflops", "fp8_tflops"]
    assert out["b200"]["rows"] == [[2, 4096, 4096, 4096, 1670.5, 3280.1]]


def test_bad_table_exits_2_naming_the_file(tmp_path, capsys):
    missing = tmp_path / "none.h"
    assert xla.main([str(missing)]) == 2
    assert str(missing) in capsys.readouterr().err
    empty = tmp_path / "empty.h"
    empty.write_text("nothing here")
    assert xla.main([str(empty)]) == 2
    assert "sm_90" in capsys.readouterr().err


def test_stored_table_is_one_grid_below_each_peak():
    """375 shapes on each GPU, b in 1, 2, 4 and m, n, k in 256..4096; no rate above the device's dense peak."""
    for device, column_peaks in (("h100-sxm-80gb", ("bf16",)), ("b200", ("bf16", "fp8"))):
        rows = STORED[device]["rows"]
        assert len(rows) == 375
        assert {r[0] for r in rows} == {1, 2, 4}
        assert {r[1] for r in rows} == {r[2] for r in rows} == {r[3] for r in rows} == {256, 512, 1024, 2048, 4096}
        peaks = load_device(device).peak_flops
        for i, precision in enumerate(column_peaks):
            assert max(r[4 + i] for r in rows) * 1e12 < peaks[precision]


def median_share(device: str, flops: float) -> float:
    """The median share of the bf16 peak over XLA's shapes within a quarter decade of ``flops``."""
    peak = load_device(device).peak_flops["bf16"]
    near = [
        r[4] * 1e12 / peak
        for r in STORED[device]["rows"]
        if abs(math.log10(2.0 * math.prod(r[:4])) - math.log10(flops)) <= device_curves.PENALTY_HALF_WIDTH
    ]
    return statistics.median(near)


def test_hoppers_xla_rates_follow_our_own_h200_curve():
    """The grid's Hopper medians at 3e10 and 1e11 FLOPs (0.730 and 0.749 of the peak) are within 2 % of our own H200
    curve (0.728, 0.752): the grid's shapes stand for transformer GEMMs there, which the ratio to B200 relies on."""
    hopper = load_device("h100-sxm-80gb")
    for flops in (3.16e10, 1e11):
        assert median_share("h100-sxm-80gb", flops) == pytest.approx(hopper.gemm_efficiency_at(flops), rel=0.02)


def test_b200_loses_more_of_its_peak_than_hopper_on_small_gemms():
    """B200 reaches 0.34 of its peak at 1e10 FLOPs where Hopper reaches 0.54; the penalty rises with size to 1 beyond
    the table's largest shape (5.5e11 FLOPs)."""
    assert median_share("b200", 1e10) < 0.7 * median_share("h100-sxm-80gb", 1e10)
    mamf = device_curves._eff({"tflops": 1745.0, "peak_tflops": 2250}) / device_curves._eff({"tflops": 794.5, "peak_tflops": 989})
    penalty = device_curves.gemm_size_penalty(STORED, mamf)
    points = [penalty(f) for f in (1e9, 1e10, 1e11, 3.16e11)]
    assert points == sorted(points)
    assert 0.4 < points[0] < points[-1] < 0.9
    assert penalty(1e12) == penalty(1e13) == 1.0


def test_penalty_refuses_a_size_the_table_does_not_reach_from_below():
    penalty = device_curves.gemm_size_penalty(STORED, 1.0)
    with pytest.raises(ValueError, match="no shape"):
        penalty(1e5)


def test_blackwell_curves_carry_the_penalty_and_keep_mamf_at_large_sizes():
    """B200's bf16 curve at 1e11 FLOPs is Hopper's x MAMF ratio x the penalty there; at 1e13 the MAMF ratio alone."""
    hopper, b200 = load_device("h100-sxm-80gb"), load_device("b200")
    mamf = (1745.0 / 2250) / (794.5 / 989)
    penalty = device_curves.gemm_size_penalty(STORED, mamf)
    assert b200.gemm_efficiency_at(1e11) == pytest.approx(hopper.gemm_efficiency_at(1e11) * mamf * penalty(1e11), abs=6e-4)
    assert b200.gemm_efficiency_at(1e13) == pytest.approx(hopper.gemm_efficiency_at(1e13) * mamf, abs=6e-4)


def model_over_xla(device: str, column: int, precision: str, flops: float) -> float:
    """The median, over XLA's shapes within a quarter decade of ``flops``, of the device file's GEMM rate over XLA's."""
    from parasol.model.compute import gemm_time_s

    spec = load_device(device)
    ratios = [
        (2.0 * math.prod(r[:4]) / gemm_time_s(spec, r[0] * r[1], r[2], r[3], precision)) / (r[column] * 1e12)
        for r in STORED[device]["rows"]
        if abs(math.log10(2.0 * math.prod(r[:4])) - math.log10(flops)) <= device_curves.PENALTY_HALF_WIDTH
    ]
    return statistics.median(ratios)


def test_b200_fp8_loses_more_at_small_sizes_than_the_bf16_penalty_gives_it():
    """A known gap, documented in docs/accuracy.md: FP8 takes the bf16 penalty, yet XLA's B200 FP8 rates at 1e10-3e10
    FLOPs sit 1.2-1.6x below the derived FP8 curve where its bf16 rates sit 1.0-1.2x below the bf16 curve, and Hopper's
    bf16 rates 1.0-1.15x below our own. Should FP8 get its own penalty, this fails and the doc's sentence goes."""
    for flops in (1e10, 3.16e10):
        fp8, bf16 = model_over_xla("b200", 5, "fp8", flops), model_over_xla("b200", 4, "bf16", flops)
        hopper = model_over_xla("h100-sxm-80gb", 4, "bf16", flops)
        assert fp8 > 1.15 and fp8 > bf16 + 0.15
        assert abs(bf16 - hopper) < 0.1
