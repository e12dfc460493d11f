"""The pipeline schedule played out with boundary transfers (``pipeline.pipeline_schedule``): sent
synchronously it ends where ``compose``'s charge puts it (vpp sends each way per micro-batch in every
stage's time); overlapped (Megatron-Core's interleaved default) the transfers leave the steady state and
cost about pp sends in the fill and drain (docs/accuracy.md, the trial of overlapped sends)."""

from __future__ import annotations

import pytest

from parasol.model.pipeline import pipeline_schedule, pipeline_time_s

F, B = 0.05, 0.10  # a stage's forward and backward per micro-batch, seconds


def end(pp: int, m: int, v: int, transfer: float, overlapped: bool = False, warmup_flush: bool = False) -> float:
    return max(p[5] for p in pipeline_schedule([F] * pp, [B] * pp, m, v, transfer, overlapped, warmup_flush))


@pytest.mark.parametrize(("pp", "m", "v", "h"), [(4, 8, 1, 0.004), (8, 64, 6, 0.004), (4, 16, 5, 0.01), (16, 32, 8, 0.002)])
def test_synchronous_sends_end_where_the_model_charges_them(pp, m, v, h):
    """Within 2 % of (m + (p-1)/v)(f + b + 2·v·h), the composition's charge, never above it (a stage's
    first-chunk backward on stage 0 and last-chunk forward on the last stage send nothing)."""
    charged = pipeline_time_s([F + B + 2 * v * h] * pp, m, v)
    assert end(pp, m, v, h) == pytest.approx(charged, rel=0.02) and end(pp, m, v, h) <= charged + 1e-12


@pytest.mark.parametrize(("pp", "m", "v", "h"), [(8, 64, 6, 0.004), (4, 16, 5, 0.01), (16, 32, 8, 0.002), (2, 16, 8, 0.002)])
def test_overlapped_sends_cost_pp_sends_in_the_fill_and_drain(pp, m, v, h):
    """Interleaved with overlapped sends: m·max(c, s) + (p-1)·c/v + p·s with c = f + b and s = 2·v·h, the sends
    of one micro-batch through a stage, within 2 %; well under the synchronous schedule. Megatron's default keeps
    the warm-up's and the flush's sends synchronous: they fall in time the stage would wait anyway, and the
    schedule ends as with every send overlapped."""
    c, s = F + B, 2 * v * h
    default = end(pp, m, v, h, True)
    assert default == pytest.approx(m * max(c, s) + (pp - 1) * c / v + pp * s, rel=0.02)
    assert default == pytest.approx(end(pp, m, v, h, True, True), rel=0.005)
    assert default < end(pp, m, v, h) - (m - pp) * s / 2


def test_without_transfers_overlap_changes_nothing_and_1f1b_never_overlaps():
    assert pipeline_schedule([F] * 4, [B] * 4, 8, 2) == pipeline_schedule([F] * 4, [B] * 4, 8, 2, 0.0, True)
    assert end(4, 8, 1, 0.004, True, True) == end(4, 8, 1, 0.004)  # Megatron's 1F1B without interleaving sends synchronously
