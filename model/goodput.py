"""Goodput of a whole training run: the share of its wall-clock time that advances training.

A run on N GPUs fails at the rate lambda·N (lambda: failures per GPU-hour, independent; the job's
mean time between failures M = 1 / (lambda·N)). It writes a checkpoint every tau seconds, stalling
delta seconds each time; a failure loses the work since the last checkpoint (tau/2 on average) and R
seconds to restart (detect, reschedule, reload). With Young's optimal interval tau = sqrt(2·delta·M)
(Young, "A first order approximation to the optimum checkpoint interval", CACM 1974), the share of
time lost is, to first order, delta/tau + (tau/2 + R)/M, and the goodput is one minus it (Daly, FGCS
2006, gives the higher-order terms, negligible while tau << M).

The numbers (``problems/cost/reliability.yaml``) come from the Llama 3 report's interruption
statistics; ``benchmarks/goodput.py`` derives them and prints the goodput against the GPU count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .errors import ProblemError

MIN_GOODPUT = 0.05  # below it a run is not a plan (and its stretch would overflow the integer backend)


@dataclass(frozen=True)
class Reliability:
    """How often a cluster's GPUs fail and what a failure and a checkpoint cost."""

    failures_per_gpu_hour: float  # lambda, 1 / GPU-hour
    checkpoint_stall_s: float  # delta: training paused per checkpoint, seconds
    restart_s: float  # R: from a failure to training again, seconds
    source: str | None = field(default=None, compare=False)


def job_mtbf_s(num_gpus: int, reliability: Reliability) -> float:
    """Mean time between failures of a job on ``num_gpus`` GPUs, M = 3600 / (lambda·N), seconds."""
    return 3600.0 / (reliability.failures_per_gpu_hour * num_gpus)


def checkpoint_interval_s(num_gpus: int, reliability: Reliability) -> float:
    """Young's optimal checkpoint interval tau = sqrt(2·delta·M), seconds."""
    return math.sqrt(2.0 * reliability.checkpoint_stall_s * job_mtbf_s(num_gpus, reliability))


def run_goodput(num_gpus: int, reliability: Reliability) -> float:
    """Share of a run's wall-clock time that trains: 1 - delta/tau - (tau/2 + R)/M, dimensionless.
    ProblemError when failures leave no time to train (the bound names workload.goodput, which a
    problem may set instead)."""
    mtbf = job_mtbf_s(num_gpus, reliability)
    tau = checkpoint_interval_s(num_gpus, reliability)
    lost = reliability.checkpoint_stall_s / tau + (tau / 2.0 + reliability.restart_s) / mtbf
    if 1.0 - lost < MIN_GOODPUT:
        raise ProblemError(
            f"on {num_gpus} GPUs a failure every {mtbf:,.0f} s (reliability: {reliability.failures_per_gpu_hour:g} per GPU-hour) "
            f"leaves less than {MIN_GOODPUT:.0%} of the time to train; give workload.goodput",
            field="workload.goodput",
        )
    return 1.0 - lost


BASIS_POINTS = 10_000  # a ratio carried as a whole number of 1/10^4, so that every backend scales by it exactly


def basis_points(ratio: float) -> int:
    """``ratio`` as a whole number of basis points, round(10^4 x ratio)."""
    return round(BASIS_POINTS * ratio)


def stretch_basis_points(goodput: float) -> int:
    """Wall-clock seconds per 10,000 seconds of training, in basis points of 1 / goodput: the whole number
    by which every backend scales a run's step time to its wall-clock share (``training_step.compose``'s
    run-length limit), so that all three agree exactly."""
    return basis_points(1.0 / goodput)
