"""Published inference runs evaluated by the model: problems/validation/inference_runs.yaml (the fixed
batches of the calibration set's tables) and problems/validation/inference_runs_oos.yaml (newer
max-throughput runs, out of sample, where the batch is the planner's choice)."""

from __future__ import annotations

from dataclasses import dataclass

from model.inference import evaluate_inference
from model.training import Evaluation

from .problem import Problem
from .validation import load_runs as _load_runs, problem_from_entry


@dataclass(frozen=True)
class InferenceRunResult:
    run_id: str
    family: str
    metric: str  # tokens_per_s_per_gpu or ttft_s
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


def evaluate_run(entry: dict) -> InferenceRunResult:
    problem = problem_from_entry(entry)
    mapping = problem.fixed_serving_mapping()
    evaluation = evaluate_inference(problem.model, problem.system(), problem.workload, mapping)
    metric, measured = next(iter(entry["measured"].items()))
    return InferenceRunResult(run_id=entry["id"], family=family(entry), metric=metric, problem=problem, evaluation=evaluation,
                              measured=float(measured))


def evaluate_all(entries=None) -> list[InferenceRunResult]:
    return [evaluate_run(e) for e in (entries if entries is not None else load_runs())]


def evaluate_planned_run(entry: dict) -> InferenceRunResult:
    """A max-throughput run whose batch the engine chose: the planner's best plan for the entry's
    problem (the batch free, tp/pp/dp as published; ``enumerate_space``, the exhaustive oracle that
    ``solve`` is tested against), its metric compared with the published one."""
    from .inference_plan import enumerate_space  # noqa: PLC0415  (the planner imports this package's problem)

    problem = problem_from_entry(entry)
    metric, measured = next(iter(entry["measured"].items()))
    result = enumerate_space(problem, "throughput" if metric.startswith("tokens") else metric)
    if not result.plans:
        raise ValueError(f"validation run {entry['id']}: no plan fits ({result.status})")
    return InferenceRunResult(run_id=entry["id"], family=family(entry), metric=metric, problem=problem,
                              evaluation=result.plans[0].evaluation, measured=float(measured))


def evaluate_oos(entries=None) -> list[InferenceRunResult]:
    """The out-of-sample runs (``load_oos_runs``), each at the planner's best batch."""
    return [evaluate_planned_run(e) for e in (entries if entries is not None else load_oos_runs())]
