"""Shared helpers for parasol's test suite.

Problems are built as plain dicts (the problem-file contract) and parsed with
``solver.problem.parse_problem``, or written to ``tmp_path`` as YAML for the CLI tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def cpsat_unless_marked(request, monkeypatch):
    """The tests hold the CP-SAT backend to the enumerator: in this process, solve() and pareto_front() with
    SolveMethod.AUTO search every space with CP-SAT (no space is small enough to enumerate, none is
    bounded block by block), unless the test is marked ``auto_method`` (the shortcuts' own tests). Commands run as
    subprocesses keep the shortcuts."""
    if request.node.get_closest_marker("auto_method") is None:
        from parasol.solver import serving_planner, training_planner  # noqa: PLC0415

        for module, name in (
            (training_planner, "DENSE_ENUMERATE_BELOW"),
            (training_planner, "MOE_ENUMERATE_BELOW"),
            (serving_planner, "SERVING_ENUMERATE_BELOW"),
            (serving_planner, "SERVING_FRONT_ENUMERATE_BELOW"),
        ):
            monkeypatch.setattr(module, name, 0)
        monkeypatch.setattr(training_planner, "BOUND_ABOVE", None)


EXAMPLE = REPO / "problems" / "examples" / "gpt3-175b-a100.yaml"

# Keys `evaluate --json` must always hold under "metrics" (issue 2, section 5).
METRIC_KEYS = ("step_time_s", "tokens_per_s", "mfu", "tflops_per_gpu", "peak_memory_gib", "fits")
# A small GQA model for planner tests (8 layers, 16 heads, 4 KV heads), inline as a problem file gives it.
TINY_GQA = {
    "name": "tiny-gqa",
    "layers": 8,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 4,
    "ffn": 2816,
    "vocab": 32000,
    "activation": "swiglu",
    "position_embedding": "rope",
    "norm": "rmsnorm",
    "bias": False,
}
# A small MoE model (16 experts, top-2, one shared expert, one leading dense layer) for planner tests.
TINY_MOE = {
    "name": "tiny-moe",
    "layers": 6,
    "hidden": 1024,
    "heads": 16,
    "kv_heads": 4,
    "ffn": 4096,
    "vocab": 32000,
    "activation": "swiglu",
    "position_embedding": "rope",
    "norm": "rmsnorm",
    "bias": False,
    "dropout": False,
    "moe": {"experts": 16, "top_k": 2, "expert_ffn": 1024, "shared_experts": 1, "first_dense_layers": 1},
}
# Every mapping key of the problem-file contract (issue 2 section 2, issue 3 decision space).
MAPPING_KEYS = (
    "tp",
    "pp",
    "dp",
    "cp",
    "ep",
    "micro_batch",
    "vpp",
    "sp",
    "recompute",
    "zero",
    "first_stage_layers",
    "last_stage_layers",
    "placement",
    "uneven_chunks",  # issue 13: interleaved chunks of unequal size (a pipeline layout)
    "offload_layers",  # issue 13: layers per stage whose activations wait in host memory
    "cp_comm",  # issue 13: ring or a2a (Ulysses) context parallelism
    "etp",  # issue 13: expert tensor parallelism
    "tp_comm_overlap",  # issue 13: TP collectives overlapped with their GEMMs
    "optimizer_offload",  # issue 13: share of the optimizer state held and stepped on the host
    "weight_offload",  # issue 13: ZeRO-3's weight shard held on the host
    "dualpipe",  # issue 13: DeepSeek-V3's bidirectional pipeline schedule
    "module_offload",  # issue 13: the listed modules' inputs offloaded (fine-grained activation offloading)
)


def stretch_of(evaluation) -> float:
    """The factor by which a training evaluation's step waits for its slowest GPU (its breakdown's
    scale/stragglers over the synchronous rest: ``training.straggler_stretch``, to a basis point)."""
    step = evaluation.metrics["step_time_s"]
    return step / (step - evaluation.breakdown["time_s"]["scale/stragglers"])


def tiny_training(num_gpus: int = 8, model=None, **workload) -> dict:
    """A training problem of the small GQA model (or ``model``) on ``num_gpus`` H100s, 2,048 tokens, 2 sequences per
    GPU, with ``workload``'s keys added to its workload."""
    workload = {"kind": "training", "seq_len": 2048, "global_batch": 2 * num_gpus, **workload}
    return {"model": model or TINY_GQA, "system": {"name": "dgx-h100", "num_gpus": num_gpus}, "workload": workload}


def rel_close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


def write_yaml(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def _env() -> dict:
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    return env


def run_cli(args: list[str], entry: str = "module", timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run parasol as ``python -m parasol ARGS`` (entry='module') or the ``parasol`` script."""
    if entry == "module":
        cmd = [sys.executable, "-m", "parasol", *args]
    else:
        exe = shutil.which("parasol")
        assert exe is not None, "the `parasol` console script is not on PATH (pyproject [project.scripts])"
        cmd = [exe, *args]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=_env())


def run_main(args: list[str]) -> subprocess.CompletedProcess:
    """The command line run in this process (``solver.cli.main``, what `parasol` calls), from the
    repository's root, its stdout, stderr and exit status captured as ``run_cli`` returns them: the
    same program without a new interpreter's start-up (about 2 s of imports on 2 cores)."""
    from parasol.solver.cli import main  # noqa: PLC0415

    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(REPO)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse: --version, --help, usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def assert_refused_in_one_line(path: Path, data: dict, field: str, command: str = "solve") -> None:
    """Write ``data`` to ``path`` and run ``parasol COMMAND`` on it (``run_main``): exit 2, no traceback, one line
    naming the file and ``field``."""
    out = run_main([command, write_yaml(path, data)])
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(path) in out.stderr and field in out.stderr and out.stderr.strip().count("\n") == 0


def run_json(args: list[str], entry: str = "module") -> dict:
    proc = run_cli([*args, "--json"], entry=entry)
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout)


@pytest.fixture(scope="session")
def example_problem_dict() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def training_problem(
    model="llama2-7b",
    system="dgx-h100",
    num_gpus=8,
    seq_len=4096,
    global_batch=32,
    precision="bf16",
    mapping=None,
    objective="throughput",
    **workload,
) -> dict:
    """A problem-file dict (the public YAML contract)."""
    wl = {"kind": "training", "seq_len": seq_len, "global_batch": global_batch, "precision": precision, **workload}
    out = {"model": model, "system": {"name": system, "num_gpus": num_gpus}, "workload": wl, "objective": objective}
    if mapping is not None:
        out["mapping"] = mapping
    return out


def solved_as_enumerated(problem, workers: int = 2, method: str = "auto"):
    """Solve ``problem`` (``method``: cpsat forces CP-SAT where a small space would be enumerated) and
    enumerate it; assert both are OPTIMAL with the same objective and that the plan re-evaluates on
    floats to the step time (training) or tokens/s (serving) it reports; return the solver's plan."""
    from parasol.solver.planner import enumerate_space, planner_for, solve  # noqa: PLC0415

    enum, sol = enumerate_space(problem), solve(problem, workers=workers, time_limit=60, method=method)
    assert sol.method == method or method == "auto"
    assert enum.status == sol.status == "OPTIMAL"
    assert rel_close(sol.objective_value, enum.objective_value, 1e-3)
    plan = sol.plans[0]
    again = planner_for(problem).evaluate(problem, plan.num_gpus, plan.mapping)
    key = "step_time_s" if problem.workload.kind == "training" else "tokens_per_s"
    assert rel_close(again.metrics[key], plan.evaluation.metrics[key], 1e-9)
    return plan
