"""Data-parallel traffic overlapped chunk by chunk (model.pipeline.exposed_dp_traffic): what a step exposes of its
gradients' reduction and its weights' gather under Megatron's --overlap-grad-reduce / --overlap-param-gather, with
and without interleaving."""

from __future__ import annotations

import random

import pytest

from parasol.model.ops import FloatOps
from parasol.model.pipeline import exposed_dp_traffic
from parasol.solver.validation import evaluate_run, load_runs

O = FloatOps(None, {})


def _queued(traffic: float, window: float, vpp: int, pp: int) -> float:
    """The same exposure by simulation: chunk c's share traffic/vpp may start when its last micro-batch's backward
    starts, (c·pp + 1)·window/vpp before the first chunk's backward ends (c = 0 last), and one link serves the
    chunks in turn; what runs past the end is exposed."""
    free = float("-inf")
    for c in reversed(range(vpp)):
        start = max(free, -(c * pp + 1) * window / vpp)
        free = start + traffic / vpp
    return max(0.0, free)


def test_without_interleaving_only_the_last_micro_batch_hides_the_traffic():
    assert exposed_dp_traffic(O, 5.0, 2.0, 1, 8) == 3.0
    assert exposed_dp_traffic(O, 1.0, 2.0, 1, 8) == 0.0


@pytest.mark.parametrize("seed", range(60))
def test_the_closed_form_is_the_queue_of_chunks(seed):
    rng = random.Random(seed)
    traffic, window = rng.uniform(0, 10), rng.uniform(0.01, 3)
    vpp, pp = rng.choice((1, 2, 3, 4, 6, 8)), rng.choice((1, 2, 4, 8, 16))
    assert exposed_dp_traffic(O, traffic, window, vpp, pp) == pytest.approx(_queued(traffic, window, vpp, pp), abs=1e-12)


def test_interleaving_hides_more_and_at_least_the_last_chunk_stays_exposed():
    """Eight chunks over eight stages give the reduction 57 chunk-steps (7·8 + 1) of the cooldown to hide behind: 4
    s of traffic behind 0.5 s micro-batch backwards leaves 0.4375 s, where one chunk leaves 3.5 s; traffic beyond
    what the cooldown holds still shows, and the last chunk's share minus its own backward always does."""
    assert exposed_dp_traffic(O, 4.0, 0.5, 8, 8) == pytest.approx(4.0 - 57 * 0.5 / 8)
    assert exposed_dp_traffic(O, 4.0, 0.5, 1, 8) == 3.5
    assert exposed_dp_traffic(O, 1.0, 0.5, 8, 8) == pytest.approx((1.0 - 0.5) / 8)
    exposures = [exposed_dp_traffic(O, 4.0, 0.5, v, 8) for v in (1, 2, 4, 8)]
    assert exposures == sorted(exposures, reverse=True)


def test_the_405b_at_5120_gb200_exposes_less_than_one_micro_batch_would():
    """MLPerf Training v5.1's Llama 3.1 405B on 5,120 GB200 (pp 8, vpp 8, 80-way data parallelism across racks): the
    step exposes a small part of its data-parallel traffic, less than a tenth of the step."""
    entry = next(e for e in load_runs() if e["id"] == "mlperf-v51-llama31-405b-gb200-5120gpu-nvfp4")
    result = evaluate_run(entry)
    times = result.evaluation.breakdown["time_s"]
    assert 0 < times["comm/dp_exposed"] < 0.1 * result.evaluation.metrics["step_time_s"]


def _stage0_chunk_times(pp: int, vpp: int, m: int, f: float = 1.0, b: float = 2.0) -> tuple[list, list]:
    """Megatron-Core's interleaved 1F1B order (forward_backward_pipelining_with_interleaving: per rank r,
    (pp - r - 1)·2 + (vpp - 1)·pp warm-up forwards, then one forward and one backward in turn, then the cooldown's
    backwards; virtual micro-batch k runs chunk (k mod pp·vpp) // pp, reversed for backwards), played out with
    forward chunk-steps of f and backward ones of b and each waiting for its neighbour stage. Returns, on stage 0,
    how long before the step's last backward each chunk's last backward ends, and how long after the first forward
    each chunk's first forward starts."""
    total, done = m * vpp, {}

    def chunk(k, forward):
        c = (k % (pp * vpp)) // pp
        return c if forward else vpp - 1 - c

    def micro(k):
        return (k // (pp * vpp)) * pp + k % pp

    orders = []
    for r in range(pp):
        warm = min((pp - r - 1) * 2 + (vpp - 1) * pp, total)
        order = [("F", k) for k in range(warm)]
        for k in range(warm, total):
            order += [("F", k), ("B", k - warm)]
        orders.append(order + [("B", k) for k in range(total - warm, total)])
    clock, position = [0.0] * pp, [0] * pp
    while any(position[r] < len(orders[r]) for r in range(pp)):
        for r in range(pp):
            while position[r] < len(orders[r]):
                kind, k = orders[r][position[r]]
                stage, j = chunk(k, kind == "F") * pp + r, micro(k)
                if kind == "F":
                    after = None if stage == 0 else ("F", stage - 1, j)
                else:
                    after = ("F", stage, j) if stage == pp * vpp - 1 else ("B", stage + 1, j)
                if after is not None and after not in done:
                    break
                start = max(clock[r], done[after] if after else 0.0)
                done[(kind, stage, j)] = clock[r] = start + (f if kind == "F" else b)
                position[r] += 1
    end = max(done[("B", c * pp, j)] for c in range(vpp) for j in range(m))
    last = [end - max(done[("B", c * pp, j)] for j in range(m)) for c in range(vpp)]
    first = [min(done[("F", c * pp, j)] for j in range(m)) - f for c in range(vpp)]
    return last, first


@pytest.mark.parametrize("pp, vpp, m", [(4, 2, 8), (4, 4, 16), (8, 8, 16), (8, 4, 64), (2, 3, 6)])
def test_chunk_c_ends_its_backward_and_starts_its_forward_c_pp_chunk_steps_from_the_step_edges(pp, vpp, m):
    """What exposed_dp_traffic assumes of the schedule, checked on Megatron's order itself: on the first stage chunk c's
    last backward ends c·pp backward chunk-steps before the step's last one, and its first forward starts c·pp forward
    chunk-steps after the first."""
    last, first = _stage0_chunk_times(pp, vpp, m, f=1.0, b=2.0)
    assert last == [2.0 * c * pp for c in range(vpp)]
    assert first == [1.0 * c * pp for c in range(vpp)]


# ---- the computation beside the traffic slows (model.pipeline.contended_exposure) ----------------------------------


def _played_out(traffic: float, compute: float, slowdown: float, dt: float = 1e-4) -> float:
    """What traffic of ``traffic`` seconds beside ``compute`` seconds of computation adds to it, by stepping time: while
    the traffic runs the computation advances at 1/(1 + slowdown) of its rate, after it at its own."""
    t, done, work = 0.0, 0.0, compute
    while done < work - 1e-12 or t < traffic - 1e-12:
        rate = 1.0 / (1.0 + slowdown) if t < traffic else 1.0
        done = min(work, done + rate * dt)
        t += dt
    return t - compute


@pytest.mark.parametrize("traffic, compute", [(0.5, 2.0), (1.9, 2.0), (2.3, 2.0), (5.0, 2.0), (0.0, 1.0)])
def test_traffic_beside_computation_adds_what_the_slowed_computation_takes(traffic, compute):
    """max(A - C, A·sigma/(1 + sigma)) with sigma the published 18.9 % is what playing the pair out gives."""
    from parasol.model.pipeline import OVERLAP_COMPUTE_SLOWDOWN, contended_exposure  # noqa: PLC0415

    added = contended_exposure(O, max(0.0, traffic - compute), traffic)
    assert added == pytest.approx(_played_out(traffic, compute, OVERLAP_COMPUTE_SLOWDOWN), abs=2e-3)
    assert added >= max(0.0, traffic - compute)  # never less than the part the computation cannot hide


def test_the_slowdown_is_charged_where_the_traffic_overlaps_and_not_where_it_runs_alone():
    """The University of Florida's MLPerf Llama 3.1 8B on 8 B200 (ZeRO-1, one stage) overlaps its gradient reduction and
    weight gather: the step exposes 0.159 of that traffic although the backward could hide it all. The same run without
    the overlap exposes the traffic in full, no more: nothing runs beside it."""
    from parasol.model.pipeline import OVERLAP_CONTENTION_BP  # noqa: PLC0415

    entry = next(e for e in load_runs() if e["id"] == "mlperf-v51-llama31-8b-dgx-b200-8gpu-fp8-uf")
    assert entry["mapping"]["zero"] == 1 and entry["mapping"]["pp"] == 1
    overlapped = evaluate_run(entry).evaluation.breakdown["time_s"]["comm/dp_exposed"]
    serial_entry = {**entry, "workload": {**entry["workload"], "overlap_dp": False}}
    serial = evaluate_run(serial_entry).evaluation.breakdown["time_s"]["comm/dp_exposed"]
    assert OVERLAP_CONTENTION_BP == 1590
    assert overlapped == pytest.approx(serial * OVERLAP_CONTENTION_BP / 10_000, rel=1e-3) and serial > 0
