"""Published inference runs (problems/validation/inference_runs.yaml) evaluated by the model."""

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


def family(entry: dict) -> str:
    """The published table a run comes from."""
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
