"""How far a plan's figures can be trusted: the model's error on published runs it was never fitted to,
for the plan's regime (training or serving, a dense or a mixture-of-experts model, the device's architecture).

A band is the out-of-sample runs of one regime and one figure (a training step's time; a serving plan's output
tokens/s per GPU, first-token latency or time per output token): how many, the mean absolute and the mean
signed error, and the worst run. ``problems/validation/accuracy_bands.yaml`` holds them; ``python
benchmarks/accuracy.py --write-bands`` writes it from the validation runs, and a test holds that it matches what
the runs give now. A regime without a band has no published run outside the calibration set: its error is
unknown, and the report says so rather than borrowing another regime's figure. The reserved sets of issue 13
never enter here.
"""

from __future__ import annotations

import functools
import statistics
from typing import NamedTuple

from parasol.model import checks
from parasol.model.choices import Architecture, WorkloadKind, allowed, plain
from parasol.model.errors import ProblemError

from .library import library_root, read_yaml

BANDS_FILE = "validation/accuracy_bands.yaml"
METRICS = {  # the figure a band measures -> how a report names it
    "step_time_s": "step time",
    "tokens_per_s_per_gpu": "output tokens/s per GPU",
    "ttft_s": "first-token latency",
    "tpot_s": "time per output token",
}
MODEL_KINDS = ("dense", "moe")
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


class Regime(NamedTuple):
    """What a published run (or a plan) is: the task, the model's kind and the device's architecture."""

    task: WorkloadKind
    model: str  # MODEL_KINDS
    architecture: Architecture | None  # None: a device file that does not say

    def label(self) -> str:
        model = "MoE" if self.model == "moe" else "dense"
        task = "training" if self.task == WorkloadKind.TRAINING else "serving"
        return f"{model} {task} on {plain(self.architecture) if self.architecture else 'an unstated architecture'}"


class AccuracyBand(NamedTuple):
    """The out-of-sample error of one regime's figure: ``runs`` published runs, their mean absolute and mean
    signed relative error ((predicted - measured) / measured), and the worst of them."""

    regime: Regime
    metric: str  # METRICS
    runs: int
    mean_abs_error: float
    mean_error: float
    worst_error: float
    worst_run: str
    families: tuple

    def as_dict(self) -> dict:
        return {
            "task": str(self.regime.task),
            "model": self.regime.model,
            "architecture": plain(self.regime.architecture),
            "metric": self.metric,
            "runs": self.runs,
            "mean_abs_error": self.mean_abs_error,
            "mean_error": self.mean_error,
            "worst_error": self.worst_error,
            "worst_run": self.worst_run,
            "families": list(self.families),
        }

    def line(self) -> str:
        """One line of a report: the figure, the runs, the mean and worst error, which way the model leans."""
        lean = "slower" if self.mean_error > 0 else "faster"
        if self.metric == "tokens_per_s_per_gpu":
            lean = "faster" if self.mean_error > 0 else "slower"
        return (
            f"{METRICS[self.metric]}: {self.runs} published run{'s' if self.runs != 1 else ''}, mean |error| "
            f"{100 * self.mean_abs_error:.1f} %, worst {100 * self.worst_error:+.1f} % ({self.worst_run}); "
            f"predicted {lean} by {100 * abs(self.mean_error):.1f} % on average"
        )


def regime_of(problem) -> Regime:
    """The regime of a (single-system) problem: its workload's kind, its model's, its device's architecture."""
    return Regime(
        WorkloadKind(problem.workload.kind),
        "moe" if problem.model.moe is not None else "dense",
        problem.system().device.architecture,
    )


def bands_from_errors(rows) -> list[AccuracyBand]:
    """Bands from (regime, metric, run id, family, signed error) rows, one per regime and metric, in the order
    they first appear."""
    groups: dict = {}
    for regime, metric, run_id, family, error in rows:
        groups.setdefault((regime, metric), []).append((run_id, family, error))
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
        (regime_of(r.problem), "step_time_s", r.run_id, r.family, r.error)
        for r in validation.evaluate_all()
        if validation.out_of_sample(r.family)
    ]
    serving = inference_validation.evaluate_oos() + inference_validation.evaluate_all(
        inference_validation.load_latency_oos_runs()
    )
    rows += [(regime_of(r.problem), r.metric, r.run_id, r.family, r.error) for r in serving]
    return bands_from_errors(rows)


def bands_document(bands) -> list[dict]:
    """The bands as the file holds them, errors rounded to a thousandth of a point."""
    out = []
    for band in bands:
        row = band.as_dict()
        for key in ("mean_abs_error", "mean_error", "worst_error"):
            row[key] = round(row[key], 5)
        out.append(row)
    return out


def _band(row, src: str, field: str) -> AccuracyBand:
    if not isinstance(row, dict):
        raise ProblemError("must be a mapping of " + ", ".join(BAND_KEYS), source=src, field=field)
    checks.keys(row, BAND_KEYS, BAND_KEYS, src, field + ".")
    families = row["families"]
    if not isinstance(families, list) or not all(isinstance(f, str) for f in families):
        raise ProblemError("must be a list of publication families", source=src, field=field + ".families")
    return AccuracyBand(
        Regime(
            checks.choice(row["task"], WorkloadKind, field + ".task", src),
            checks.choice(row["model"], MODEL_KINDS, field + ".model", src),
            checks.choice(row["architecture"], Architecture, field + ".architecture", src),
        ),
        checks.choice(row["metric"], tuple(METRICS), field + ".metric", src),
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
    """The bands of ``BANDS_FILE`` (or ``path``), each row checked (one line naming the file and field otherwise)."""
    src = path or str(library_root() / BANDS_FILE)
    data = read_yaml(src, "accuracy bands file")
    rows = data.get("bands") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise ProblemError(
            "must hold a list of bands (python benchmarks/accuracy.py --write-bands writes it)", source=src, field="bands"
        )
    return tuple(_band(row, src, f"bands[{i}]") for i, row in enumerate(rows))


def bands_for(regime: Regime, bands=None) -> list[AccuracyBand]:
    """The bands of ``regime``, step time or throughput first."""
    found = [b for b in (load_bands() if bands is None else bands) if b.regime == regime]
    return sorted(found, key=lambda b: list(METRICS).index(b.metric))


def plan_accuracy(problem, bands=None) -> dict:
    """A plan's ``accuracy`` block: its regime and the out-of-sample bands that measure it (none: unknown)."""
    regime = regime_of(problem)
    found = bands_for(regime, bands)
    out = {"regime": regime.label(), "out_of_sample": [b.as_dict() for b in found]}
    if not found:
        out["note"] = unmeasured(regime)
    return out


def unmeasured(regime: Regime) -> str:
    if regime.architecture is None:
        return (
            "the device file states no architecture (allowed: " + allowed(Architecture) + "), so no published run speaks for it: "
            "the error of these figures is unknown"
        )
    return f"no published run outside the calibration set measures {regime.label()}: the error of these figures is unknown"


def accuracy_lines(problem, bands=None) -> list[str]:
    """The ``accuracy`` block of a readable report."""
    regime = regime_of(problem)
    found = bands_for(regime, bands)
    head = f"accuracy (out of sample, {regime.label()}; docs/accuracy.md)"
    if not found:
        return [head, "  " + unmeasured(regime)]
    return [head] + ["  " + b.line() for b in found]
