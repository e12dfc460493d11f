"""Published inference runs evaluated by the model: problems/validation/inference_runs.yaml (the fixed
batches of the calibration set's tables) and problems/validation/inference_runs_oos.yaml (newer
max-throughput runs, out of sample, where the batch is the planner's choice)."""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from dataclasses import dataclass

from parasol.model.evaluation import Evaluation
from parasol.model.serving_step import evaluate_inference

from . import library
from .problem import Problem
from .validation import load_runs as _load_runs
from .validation import problem_from_entry


@dataclass(frozen=True)
class InferenceRunResult:
    run_id: str
    family: str
    metric: str  # tokens_per_s_per_gpu, ttft_s or tpot_s
    problem: Problem
    evaluation: Evaluation
    measured: float

    @property
    def predicted(self) -> float:
        return self.evaluation.metrics[self.metric]

    @property
    def error(self) -> float:
        """Signed relative error of the published figure, (predicted - measured) / measured."""
        return self.predicted / self.measured - 1.0


def load_runs(path=None) -> list[dict]:
    """The run entries of problems/validation/inference_runs.yaml."""
    return _load_runs(path, "inference_runs.yaml")


def load_oos_runs(path=None) -> list[dict]:
    """The run entries of problems/validation/inference_runs_oos.yaml (out of sample, batch free)."""
    return _load_runs(path, "inference_runs_oos.yaml")


def family(entry: dict) -> str:
    """The published table a run comes from (``family`` when the entry names it)."""
    if "family" in entry:
        return entry["family"]
    device = "H100 FP8" if entry["system"] == "dgx-h100" else "A100 FP16"
    if "ttft_s" in entry["measured"]:
        return f"TensorRT-LLM 0.5 first-token latency, {device}"
    return f"TensorRT-LLM 0.6.1 static-batch throughput, {device}"


def load_engine_runs(path=None) -> list[dict]:
    """The run entries of problems/validation/engine_runs.yaml (the calibration set of the serving-engine
    profile problems/engines/trtllm-0.5.yaml)."""
    return _load_runs(path, "engine_runs.yaml")


def load_latency_oos_runs(path=None) -> list[dict]:
    """The run entries of problems/validation/latency_runs_oos.yaml (single-request TTFT and TPOT, out of sample)."""
    return _load_runs(path, "latency_runs_oos.yaml")


def evaluate_run(entry: dict, system_override=None, with_max_batch: bool = True) -> InferenceRunResult:
    """Evaluate one published serving run at its fixed mapping; ``system_override(system) -> system``
    swaps in trial efficiencies while a profile is fitted (which needs no ``max_batch``)."""
    problem = problem_from_entry(entry)
    mapping = problem.fixed_serving_mapping()
    system = problem.system()
    if system_override is not None:
        system = system_override(system)
    evaluation = evaluate_inference(problem.model, system, problem.workload, mapping, with_max_batch)
    metric, measured = next(iter(entry["measured"].items()))
    return InferenceRunResult(
        run_id=entry["id"], family=family(entry), metric=metric, problem=problem, evaluation=evaluation, measured=float(measured)
    )


def evaluate_all(entries=None) -> list[InferenceRunResult]:
    return [evaluate_run(e) for e in (entries if entries is not None else load_runs())]


def mean_abs_error(results) -> float:
    return statistics.fmean(abs(r.error) for r in results)


# the grids an engine profile's keys are fitted on, steps of 0.01: a fraction that replaces the device
# file's 0.20-0.95; gemm, the share of the device file's GEMM curves, 0.50-1.00
ENGINE_FIT_GRID = tuple(round(0.20 + 0.01 * i, 2) for i in range(76))
ENGINE_FIT_GRIDS = {"gemm": tuple(round(0.50 + 0.01 * i, 2) for i in range(51))}


def with_device_fields(**fields):
    """A ``system_override`` (``evaluate_run``, ``validation.evaluate_all``): the system with these fields of
    its device replaced, as a fit tries them."""

    def override(system):
        return dataclasses.replace(system, device=dataclasses.replace(system.device, **fields))

    return override


def grid_fit(entries, grids, fields_of) -> tuple[tuple, float]:
    """(values, mean |error|): the point of the product of ``grids`` whose device fields (``fields_of(values)``)
    minimise the entries' mean absolute error, by exhaustive search (ties to the smaller values)."""
    best = None
    for values in itertools.product(*grids):
        override = with_device_fields(**fields_of(values))
        error = mean_abs_error([evaluate_run(e, override, with_max_batch=False) for e in entries])
        if best is None or (error, values) < best:
            best = (error, values)
    return best[1], best[0]


def fit_engine_profile(entries, device: str, keys, near: dict | None = None, steps: int = 3) -> tuple[dict, float]:
    """({key: value}, mean |error|): the profile's ``keys`` on ``device`` fitted together, by exhaustive
    search of the product of their grids (``ENGINE_FIT_GRIDS``, else ``ENGINE_FIT_GRID``; ties to the
    smaller values): the mean absolute error of the entries run on that device, every other number as the
    device file and the entries' engine profile give it. Exhaustive, because the error surface has ridges
    along which a descent one key at a time stops at different points depending on its start and order.
    ``near`` ({key: value}) searches only the grid points within ``steps`` of each value: the best point
    around a stored fit, a product of (2·steps + 1)^keys points instead of the whole grid's thousands."""
    keys = [key for key in library.ENGINE_EFFICIENCY_FIELDS if key in keys]
    own = [e for e in entries if problem_from_entry(e).system().device.name == device]
    if not own:
        raise ValueError(f"no run on device {device}")
    grids = [ENGINE_FIT_GRIDS.get(key, ENGINE_FIT_GRID) for key in keys]
    if near is not None:
        grids = [grid_window(grid, near[key], steps) for grid, key in zip(grids, keys)]
    values, error = grid_fit(own, grids, lambda values: library.engine_fields(dict(zip(keys, values))))
    return dict(zip(keys, values)), error


def grid_window(grid: tuple, value: float, steps: int) -> tuple:
    """The points of ``grid`` at most ``steps`` places from the point nearest ``value``."""
    centre = min(range(len(grid)), key=lambda i: abs(grid[i] - value))
    return grid[max(0, centre - steps) : centre + steps + 1]


# the grid the serving runtime's per-pass overhead is fitted on: 0 to 5 ms in steps of 0.01 ms
STEP_OVERHEAD_STEP_S = 1e-5
STEP_OVERHEAD_GRID = tuple(round(STEP_OVERHEAD_STEP_S * i, 7) for i in range(501))


def step_overhead_runs() -> list[dict]:
    """The runs the per-pass overhead is fitted on: the throughput rows of inference_runs.yaml that name
    no engine profile (TensorRT-LLM 0.6.1's static-batch tables, H100 FP8 and A100 FP16)."""
    return [e for e in load_runs() if not e["workload"].get("engine") and "tokens_per_s_per_gpu" in e["measured"]]


def step_overhead_error(entries, seconds: float) -> float:
    """Mean absolute error of the entries with the device's per-pass overhead set to ``seconds``."""
    override = with_device_fields(serving_step_overhead_s=seconds)
    return mean_abs_error([evaluate_run(e, override, with_max_batch=False) for e in entries])


def fit_step_overhead(entries, near: float | None = None, steps: int = 20) -> tuple[float, float]:
    """(seconds, mean |error|): the device files' ``serving_step_overhead_s`` that minimises the
    entries' mean absolute error, one value for every device, by exhaustive search of
    ``STEP_OVERHEAD_GRID`` (ties to the smaller), every other number as the device files give it;
    ``near`` searches only the grid points within ``steps`` of it (the best point around a stored fit)."""
    grid = STEP_OVERHEAD_GRID if near is None else grid_window(STEP_OVERHEAD_GRID, near, steps)
    (seconds,), error = grid_fit(entries, [grid], lambda values: {"serving_step_overhead_s": values[0]})
    return seconds, error


def evaluate_planned_run(entry: dict) -> InferenceRunResult:
    """A max-throughput run whose batch the engine chose: the planner's best plan for the entry's
    problem (the batch free, tp/pp/dp as published; ``enumerate_space``, the exhaustive oracle that
    ``solve`` is tested against), its metric compared with the published one."""
    from .planner import enumerate_space  # noqa: PLC0415  (the planner imports this package's problem)

    problem = problem_from_entry(entry)
    metric, measured = next(iter(entry["measured"].items()))
    result = enumerate_space(problem, "throughput" if metric.startswith("tokens") else metric)
    if not result.plans:
        raise ValueError(f"validation run {entry['id']}: no plan fits ({result.status})")
    return InferenceRunResult(
        run_id=entry["id"],
        family=family(entry),
        metric=metric,
        problem=problem,
        evaluation=result.plans[0].evaluation,
        measured=float(measured),
    )


def load_mlperf_runs(path=None) -> list[dict]:
    """The run entries of problems/validation/mlperf_inference_runs.yaml (MLPerf Inference Offline, batch free)."""
    return _load_runs(path, "mlperf_inference_runs.yaml")


def evaluate_mlperf(entries=None) -> list[InferenceRunResult]:
    """The MLPerf Inference runs (``load_mlperf_runs``), each at the planner's best batch."""
    return [evaluate_planned_run(e) for e in (entries if entries is not None else load_mlperf_runs())]


def evaluate_oos(entries=None) -> list[InferenceRunResult]:
    """The out-of-sample runs (``load_oos_runs``), each at the planner's best batch."""
    return [evaluate_planned_run(e) for e in (entries if entries is not None else load_oos_runs())]
