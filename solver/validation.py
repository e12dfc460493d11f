"""Published runs (problems/validation/training_runs.yaml) evaluated by the model.

A run's mapping may list several values for a setting its source does not publish; the model's
best fitting choice among them is taken (the authors tuned theirs), and the run says so.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from parasol.model.errors import ProblemError
from parasol.model.evaluation import Evaluation
from parasol.model.specs import Mapping, SystemSpec
from parasol.model.training import check_mapping
from parasol.model.training_step import evaluate_training

from . import library
from .problem import Problem, mapping_with_defaults, parse_problem


@dataclass(frozen=True)
class RunResult:
    run_id: str
    family: str
    problem: Problem
    mapping: Mapping
    evaluation: Evaluation
    measured_step_s: float
    measured_memory_gib: float | None

    @property
    def predicted_step_s(self) -> float:
        return self.evaluation.metrics["step_time_s"]

    @property
    def predicted_device_memory_gib(self) -> float:
        """What nvidia-smi shows on the peak GPU, as the published memory figures read: the model's peak
        (states, activations, buffers), the caching allocator's reserve and the runtime's (the CUDA
        context and NCCL buffers): the evaluation's ``device_memory_gib``."""
        return self.evaluation.metrics["device_memory_gib"]

    @property
    def memory_error(self) -> float | None:
        """Signed relative peak-memory error against the published figure; None where none is published."""
        if not self.measured_memory_gib:
            return None
        return self.predicted_device_memory_gib / self.measured_memory_gib - 1.0

    @property
    def error(self) -> float:
        """Signed relative step-time error, (predicted - measured) / measured."""
        return self.predicted_step_s / self.measured_step_s - 1.0


# the files of published training runs: the calibration set with its out-of-sample families, LLM Foundry's MPT
# benchmarks and Megatron-Bridge 25.09's Blackwell runs (benchmarks/llm_foundry_runs.py and mbridge_2509_runs.py write
# them; out of sample)
TRAINING_RUN_FILES = ("training_runs.yaml", "llm_foundry_runs.yaml", "mbridge_2509_runs.yaml")


def load_all_runs() -> list[dict]:
    """The expressible runs of every training validation file (``TRAINING_RUN_FILES``)."""
    return [e for name in TRAINING_RUN_FILES for e in load_runs(name=name)]


def load_runs(path=None, name: str = "training_runs.yaml", expressible: bool = True) -> list[dict]:
    """The run entries of a validation file (problems/validation/``name`` unless ``path``): those the
    model can express, or (``expressible=False``) those marked ``not_expressible`` with the reason
    (a published setting the model lacks; tests check that they are still rejected)."""
    return [e for e in _entries(path, name) if ("not_expressible" not in e) == expressible and not ran_out_of_memory(e)]


def load_out_of_memory_runs(path=None, name: str = "training_runs.yaml") -> list[dict]:
    """The published configurations that ran out of memory (``measured.out_of_memory``): no step time,
    and a planner should refuse them (``best_listed_mapping`` evaluates them)."""
    return [e for e in _entries(path, name) if ran_out_of_memory(e)]


def ran_out_of_memory(entry: dict) -> bool:
    """Whether a validation entry is a configuration its publication reports out of memory."""
    return bool(entry.get("measured", {}).get("out_of_memory"))


def _entries(path, name: str) -> list[dict]:
    path = path or library.library_root() / "validation" / name
    return library.read_yaml(path, "validation file")["runs"]


def problem_from_entry(entry: dict) -> Problem:
    """The problem a validation entry describes (its model, system, device count, workload, mapping)."""
    data = {k: entry[k] for k in ("model", "workload", "mapping")}
    data["system"] = {"name": entry["system"], "num_gpus": entry["num_gpus"]}
    return parse_problem(data, source=f"validation run {entry['id']}")


# the MoE models a run id names; publications whose tables mix dense and MoE runs report them apart
MOE_RUN_KEYS = ("deepseek", "qwen", "gpt_oss", "gpt-oss", "mixtral")


OUT_OF_SAMPLE_MARK = "(out of sample)"  # in the name of every family no number of the model was fitted on


def out_of_sample(family_name: str) -> bool:
    """Whether a family (``family``) is out of sample: published runs no fitted number has seen."""
    return OUT_OF_SAMPLE_MARK in family_name


def family(run_id: str) -> str:
    """Group of a run for reporting: the publication it comes from (MoE runs apart)."""
    moe = any(k in run_id for k in MOE_RUN_KEYS)
    if run_id.startswith("mbridge2509bw"):
        return "Megatron-Bridge 25.09 Blackwell MoE (out of sample)" if moe else "Megatron-Bridge 25.09 Blackwell (out of sample)"
    if run_id.startswith("mbridge2509") and moe:
        return "Megatron-Bridge 25.09 MoE"
    if run_id.startswith("mbridge2511"):
        return "Megatron-Bridge 25.11 MoE" if moe else "Megatron-Bridge 25.11"
    if run_id.startswith("moezoo-lc"):
        return "MoE Model Zoo long context (out of sample)"
    if run_id.startswith("moezoo-bw"):
        return "MoE Model Zoo Blackwell (out of sample)"
    if run_id.startswith("mlmguide"):
        return "Megatron-LM GB200 guide (out of sample)"
    if run_id.startswith("moezoo"):
        return "MoE Model Zoo (out of sample)"
    if run_id.startswith("llama3paper"):
        return "Llama 3 paper (out of sample)"
    if run_id.startswith(("nemo2502", "nemo2504")):
        return "NeMo 25.02-25.04 MoE (out of sample)" if moe else "NeMo 25.02-25.04 (out of sample)"
    if run_id.startswith("foundry"):
        return "LLM Foundry MPT (out of sample)"
    if run_id.startswith("mlperf"):
        return "MLPerf Training MoE (out of sample)" if moe else "MLPerf Training (out of sample)"
    for prefix, name in (
        ("megatron21-t1", "Megatron SC'21 Table 1"),
        ("megatron21-t2-ptd", "Megatron SC'21 Table 2 PTD-P"),
        ("megatron21-t2-zero", "Megatron SC'21 Table 2 ZeRO-3"),
        ("mtnlg", "MT-NLG"),
        ("bloomprequel", "BLOOM 02-28 benchmarks (out of sample)"),
        ("bloom", "BLOOM"),
        ("nemo2407", "NeMo 24.07"),
        ("mbridge2509", "Megatron-Bridge 25.09"),
    ):
        if run_id.startswith(prefix):
            return name
    return "other"


def candidate_mappings(problem: Problem, system: SystemSpec):
    """Every mapping the run's (possibly listed) settings allow, valid for the problem."""
    keys = list(problem.mapping)
    for combo in itertools.product(*(problem.mapping[k] for k in keys)):
        mapping = mapping_with_defaults(dict(zip(keys, combo)))
        try:
            check_mapping(problem.model, system, problem.workload, mapping)
        except ProblemError:
            continue
        yield mapping


def best_listed_mapping(entry: dict, system_override=None) -> tuple[Problem, Mapping, Evaluation]:
    """The run's problem and, among the mappings its settings list, the one the model finds fastest
    among those that fit (the fastest of all when none fits), with its evaluation."""
    problem = problem_from_entry(entry)
    system = problem.system()
    if system_override is not None:
        system = system_override(system)
    best = None
    for mapping in candidate_mappings(problem, system):
        ev = evaluate_training(problem.model, system, problem.workload, mapping)
        key = (not ev.metrics["fits"], ev.metrics["step_time_s"])
        if best is None or key < best[0]:
            best = (key, mapping, ev)
    if best is None:
        raise ProblemError("no listed mapping is valid", source=f"validation run {entry['id']}")
    return problem, best[1], best[2]


def evaluate_run(entry: dict, system_override=None) -> RunResult:
    """Evaluate one published run; ``system_override(system) -> system`` swaps in trial
    efficiencies during calibration."""
    problem, mapping, evaluation = best_listed_mapping(entry, system_override)
    measured = entry["measured"]
    return RunResult(
        run_id=entry["id"],
        family=family(entry["id"]),
        problem=problem,
        mapping=mapping,
        evaluation=evaluation,
        measured_step_s=float(measured["step_time_s"]),
        measured_memory_gib=measured.get("memory_gib"),
    )


def evaluate_all(entries=None, system_override=None) -> list[RunResult]:
    return [evaluate_run(e, system_override) for e in (entries if entries is not None else load_all_runs())]
