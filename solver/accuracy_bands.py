"""How far a plan's figures can be trusted: the model's error on published runs it was never fitted to,
for the plan's regime (training or serving, a dense or a mixture-of-experts model, the device's architecture).

A band is the out-of-sample runs of one regime and one figure (``BandMetric``: a training step's time; a serving
plan's output tokens/s per GPU; a single request's first-token latency or time per output token): how many, the
mean absolute and the mean signed error, and the worst run. ``problems/validation/accuracy_bands.yaml`` holds them;
``python benchmarks/accuracy.py --write-bands`` writes it from the validation runs (and the table of
docs/accuracy.md), and a test holds both to what the runs give now. A regime without a band has no published run
outside the calibration set, and a package rescaled to another chiplet count has none either: its error is unknown,
and the report says so rather than borrowing another regime's figure. The reserved sets of issue 13 never enter here.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
from enum import StrEnum
from typing import NamedTuple

from parasol.model import checks
from parasol.model.choices import Architecture, ModelKind, WorkloadKind, allowed, plain
from parasol.model.errors import ProblemError

from . import library
from .library import library_root, read_yaml

BANDS_FILE = "validation/accuracy_bands.yaml"


class BandMetric(StrEnum):
    """The figure a band measures: an evaluation's metric, and how a report names it (``label``)."""

    STEP_TIME = "step_time_s"
    THROUGHPUT = "tokens_per_s_per_gpu"
    TTFT = "ttft_s"
    TPOT = "tpot_s"

    @property
    def label(self) -> str:
        return {
            BandMetric.STEP_TIME: "step time",
            BandMetric.THROUGHPUT: "output tokens/s per GPU",
            BandMetric.TTFT: "first-token latency (single request)",
            BandMetric.TPOT: "time per output token (single request)",
        }[self]

    @property
    def higher_is_faster(self) -> bool:
        """A rate (tokens/s), where a prediction above the measurement is faster; the others are times."""
        return self == BandMetric.THROUGHPUT


BAND_KEYS = (
    "task",
    "model",
    "architecture",
    "metric",
    "runs",
    "mean_abs_error",
    "mean_error",
    "worst_error",
    "worst_run",
    "families",
)
ERROR_KEYS = ("mean_abs_error", "mean_error", "worst_error")


class Regime(NamedTuple):
    """What a published run (or a plan) is: the task, the model's kind, the device's architecture, and whether
    the device is a package rescaled to another chiplet count (``rescaled_to``: its compute dies; 0 if not)."""

    task: WorkloadKind
    model: ModelKind
    architecture: Architecture | None  # None: a device file that does not say
    rescaled_to: int = 0

    def label(self) -> str:
        model = "MoE" if self.model == ModelKind.MOE else "dense"
        task = "training" if self.task == WorkloadKind.TRAINING else "serving"
        device = plain(self.architecture) if self.architecture else "an unstated architecture"
        dies = f"{self.rescaled_to} compute die{'s' if self.rescaled_to != 1 else ''}"
        package = f" (a package of {dies})" if self.rescaled_to else ""
        return f"{model} {task} on {device}{package}"


class AccuracyBand(NamedTuple):
    """The out-of-sample error of one regime's figure: ``runs`` published runs, their mean absolute and mean
    signed relative error ((predicted - measured) / measured), and the worst of them."""

    regime: Regime
    metric: BandMetric
    runs: int
    mean_abs_error: float
    mean_error: float
    worst_error: float
    worst_run: str
    families: tuple

    def as_dict(self) -> dict:
        return {
            "task": str(self.regime.task),
            "model": str(self.regime.model),
            "architecture": plain(self.regime.architecture),
            "metric": str(self.metric),
            "runs": self.runs,
            "mean_abs_error": self.mean_abs_error,
            "mean_error": self.mean_error,
            "worst_error": self.worst_error,
            "worst_run": self.worst_run,
            "families": list(self.families),
        }

    def lean(self) -> str:
        """Which way the model leans on average: predicted faster or slower than measured, or neither."""
        if self.mean_error == 0:
            return "neither faster nor slower on average"
        faster = (self.mean_error > 0) == self.metric.higher_is_faster
        return f"predicted {'faster' if faster else 'slower'} by {100 * abs(self.mean_error):.1f} % on average"

    def cells(self) -> tuple[str, str]:
        """(the figure, what was measured of it): a report's row."""
        runs = f"{self.runs} published run{'s' if self.runs != 1 else ''}"
        return (
            self.metric.label,
            f"{runs}, mean |error| {100 * self.mean_abs_error:.1f} %, worst {100 * self.worst_error:+.1f} % "
            f"({self.worst_run}); {self.lean()}",
        )

    def line(self) -> str:
        return ": ".join(self.cells())


def regime_of(problem, chiplets: int | None = None) -> Regime:
    """The regime of a (single-system) problem: its workload's kind, its model's, its device's architecture,
    and the compute dies of a package rescaled from the library's device (``chiplets``, a plan's count: its
    metrics' ``chiplets``; else the problem's first)."""
    if chiplets is not None:
        problem = dataclasses.replace(problem, chiplets=(chiplets,))
    device = problem.system().device
    rescaled = 0
    if problem.chiplets != (None,):
        base = library.load_system(problem.system_name, problem.num_gpus[0]).device
        rescaled = problem.chiplets[0] if device.name != base.name else 0
    return Regime(
        WorkloadKind(problem.workload.kind),
        ModelKind.MOE if problem.model.moe is not None else ModelKind.DENSE,
        device.architecture,
        rescaled,
    )


def bands_from_errors(rows) -> list[AccuracyBand]:
    """Bands from (regime, metric, run id, family, signed error) rows, one per regime and metric, in the order
    they first appear."""
    groups: dict = {}
    for regime, metric, run_id, family, error in rows:
        groups.setdefault((regime, BandMetric(metric)), []).append((run_id, family, error))
    bands = []
    for (regime, metric), runs in groups.items():
        errors = [e for _, _, e in runs]
        worst = max(runs, key=lambda r: abs(r[2]))
        bands.append(
            AccuracyBand(
                regime,
                metric,
                len(runs),
                statistics.fmean(abs(e) for e in errors),
                statistics.fmean(errors),
                worst[2],
                worst[0],
                tuple(dict.fromkeys(f for _, f, _ in runs)),
            )
        )
    return bands


def measured_bands() -> list[AccuracyBand]:
    """The bands the validation runs give now: the out-of-sample training runs (``validation.out_of_sample``,
    step time) and serving runs (max-throughput tokens/s per GPU at the planner's batch; single-request
    latencies), each by its own problem's regime."""
    from . import inference_validation, validation  # noqa: PLC0415 (the validation sets: only when measuring)

    rows = [
        (regime_of(r.problem), BandMetric.STEP_TIME, r.run_id, r.family, r.error)
        for r in validation.evaluate_all()
        if validation.out_of_sample(r.family)
    ]
    serving = inference_validation.evaluate_oos() + inference_validation.evaluate_all(
        inference_validation.load_latency_oos_runs()
    )
    # MLPerf Inference Offline: its out-of-sample runs (five v5.0 Blackwell runs fit the devices' serving GEMM share)
    serving += [r for r in inference_validation.evaluate_mlperf() if validation.out_of_sample(r.family)]
    rows += [(regime_of(r.problem), r.metric, r.run_id, r.family, r.error) for r in serving]
    return bands_from_errors(rows)


def bands_document(bands) -> list[dict]:
    """The bands as the file holds them, errors rounded to a thousandth of a point."""
    out = []
    for band in bands:
        row = band.as_dict()
        for key in ERROR_KEYS:
            row[key] = round(row[key], 5)
        out.append(row)
    return out


def bands_table(bands) -> tuple[list[str], list[list[str]]]:
    """(head, rows) of the bands as docs/accuracy.md shows them."""
    head = ["regime", "figure", "runs", "mean abs. error", "mean signed error", "worst"]
    rows = [
        [
            b.regime.label(),
            b.metric.label,
            str(b.runs),
            f"{100 * b.mean_abs_error:.1f} %",
            f"{100 * b.mean_error:+.1f} %",
            f"{100 * b.worst_error:+.1f} % ({b.worst_run})",
        ]
        for b in bands
    ]
    return head, rows


def _band(row, src: str, field: str) -> AccuracyBand:
    if not isinstance(row, dict):
        raise ProblemError("must be a mapping of " + ", ".join(BAND_KEYS), source=src, field=field)
    checks.keys(row, BAND_KEYS, BAND_KEYS, src, field + ".")
    families = row["families"]
    if not isinstance(families, list) or not families or not all(isinstance(f, str) for f in families):
        raise ProblemError("must be a list of publication families", source=src, field=field + ".families")
    return AccuracyBand(
        Regime(
            checks.choice(row["task"], WorkloadKind, field + ".task", src),
            checks.choice(row["model"], ModelKind, field + ".model", src),
            checks.choice(row["architecture"], Architecture, field + ".architecture", src),
        ),
        checks.choice(row["metric"], BandMetric, field + ".metric", src),
        checks.positive_int(row["runs"], field + ".runs", src),
        checks.non_negative_number(row["mean_abs_error"], field + ".mean_abs_error", src),
        _signed(row["mean_error"], src, field + ".mean_error"),
        _signed(row["worst_error"], src, field + ".worst_error"),
        checks.text(row["worst_run"], field + ".worst_run", src),
        tuple(families),
    )


def _signed(value, src: str, field: str) -> float:
    number = checks.as_float(value)
    if number is None or not -1.0 < number < 100.0:
        raise ProblemError(f"must be a relative error above -1, got {checks.shown(value)}", source=src, field=field)
    return number


@functools.cache
def load_bands(path: str | None = None) -> tuple[AccuracyBand, ...]:
    """The bands of ``BANDS_FILE`` (or ``path``), each row checked, none repeated (one line naming the file and
    field otherwise)."""
    src = path or str(library_root() / BANDS_FILE)
    data = read_yaml(src, "accuracy bands file")
    rows = data.get("bands") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ProblemError(
            "must hold a list of bands (python benchmarks/accuracy.py --write-bands writes it)", source=src, field="bands"
        )
    bands = tuple(_band(row, src, f"bands[{i}]") for i, row in enumerate(rows))
    repeat = checks.first_repeat((b.regime, b.metric) for b in bands)
    if repeat is not None:
        first, again = repeat
        raise ProblemError(
            f"repeats bands[{first}]'s {bands[again].regime.label()} {bands[again].metric}: one band per regime and figure",
            source=src,
            field=f"bands[{again}]",
        )
    return bands


def bands_for(regime: Regime, bands=None) -> list[AccuracyBand]:
    """The bands of ``regime``, in ``BandMetric`` order (step time or throughput first)."""
    found = [b for b in (load_bands() if bands is None else bands) if b.regime == regime]
    return sorted(found, key=lambda b: list(BandMetric).index(b.metric))


def unmeasured(regime: Regime) -> str:
    """Why no band measures ``regime``."""
    if regime.architecture is None:
        return (
            "the device file states no architecture (allowed: " + allowed(Architecture) + "), so no published run speaks for it: "
            "the error of these figures is unknown"
        )
    if regime.rescaled_to:
        return "no published run measures a package rescaled to another chiplet count: the error of these figures is unknown"
    return f"no published run outside the calibration set measures {regime.label()}: the error of these figures is unknown"


def measured_regime(problem, bands=None, chiplets: int | None = None) -> tuple[Regime, list[AccuracyBand]]:
    """The problem's regime (``regime_of``) and the bands that measure it (``bands_for``; empty: none does)."""
    regime = regime_of(problem, chiplets)
    return regime, bands_for(regime, bands)


def headline_band(problem, bands=None, chiplets: int | None = None) -> AccuracyBand | None:
    """The band of the figure a plan is mostly judged by (step time, serving throughput; ``BandMetric`` order) for
    the problem's regime; None where no run measures it."""
    found = measured_regime(problem, bands, chiplets)[1]
    return found[0] if found else None


def plan_accuracy(problem, bands=None, chiplets: int | None = None) -> dict:
    """A plan's ``accuracy`` block: its regime (``regime_of``) and the out-of-sample bands that measure it (none:
    a note why its error is unknown)."""
    regime, found = measured_regime(problem, bands, chiplets)
    out = {"regime": regime.label(), "out_of_sample": [b.as_dict() for b in found]}
    if not found:
        out["note"] = unmeasured(regime)
    return out


def accuracy_rows(problem, bands=None, chiplets: int | None = None) -> tuple[str, list[tuple[str, str]]]:
    """(the heading, rows of figure and text) of a report's accuracy block (``regime_of``); one row without a
    figure when the regime is unmeasured."""
    regime, found = measured_regime(problem, bands, chiplets)
    head = f"accuracy (out of sample, {regime.label()}; docs/accuracy.md)"
    return head, [b.cells() for b in found] if found else [("", unmeasured(regime))]


def accuracy_lines(problem, bands=None, chiplets: int | None = None) -> list[str]:
    """The ``accuracy`` block of a readable report."""
    head, rows = accuracy_rows(problem, bands, chiplets)
    return [head] + ["  " + (": ".join(r) if r[0] else r[1]) for r in rows]
