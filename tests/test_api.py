"""Issue 14: the documented Python API. docs/api.md's examples run as written, and the API agrees
with the command line on the same problems."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import pandas as pd
import pytest
from conftest import REPO, run_json

import parasol

BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "api.md").read_text(), flags=re.S)


@pytest.mark.auto_method  # as a user runs them: solve() takes its shortcuts
@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=["training", "serving"][: len(BLOCKS)])
def test_every_example_in_docs_api_runs(index, monkeypatch):
    assert len(BLOCKS) == 2, "docs/api.md has a training and a serving example"
    monkeypatch.chdir(REPO)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BLOCKS[index], f"docs/api.md block {index + 1}", "exec"), {})
    printed = out.getvalue()
    assert ("OPTIMAL" in printed) if index == 0 else ("COMPLETE" in printed and "<dict>: objective:" in printed), printed


def test_api_agrees_with_the_cli_on_a_file():
    path = "problems/examples/llama3-8b-pareto.yaml"
    api = parasol.solve(str(REPO / path))
    cli = run_json(["solve", path])
    assert cli["status"] == api.status == "OPTIMAL"
    assert cli["objective"] == pytest.approx(api.objective_value, rel=1e-9)


def test_loading_a_file_a_dict_and_a_problem_give_the_same_problem():
    from_file = parasol.load(REPO / "problems" / "examples" / "gpt3-175b-a100.yaml")
    import yaml

    data = yaml.safe_load((REPO / "problems" / "examples" / "gpt3-175b-a100.yaml").read_text())
    from_dict = parasol.load(data)
    assert from_dict == from_file and parasol.load(from_file) is from_file
    assert parasol.evaluate(from_dict).metrics["step_time_s"] == parasol.evaluate(from_file).metrics["step_time_s"]


def test_results_convert_to_frames():
    problem = parasol.load(REPO / "problems" / "examples" / "gpt3-175b-a100.yaml")
    plan = parasol.evaluate(problem)
    row = plan.to_frame()
    assert isinstance(row, pd.DataFrame) and len(row) == 1 and row["tp"].iloc[0] == plan.mapping.tp
    assert row["step_time_s"].iloc[0] == plan.metrics["step_time_s"]


def test_bad_input_is_a_problem_error_naming_the_field():
    with pytest.raises(parasol.ProblemError, match=r"^<dict>: workload.seq_len: "):
        parasol.load(
            {
                "model": "llama3-8b",
                "system": {"name": "dgx-h100", "num_gpus": 8},
                "workload": {"kind": "training", "seq_len": -1, "global_batch": 8},
            }
        )
    with pytest.raises(parasol.ProblemError, match="expected a path, a dict or a Problem"):
        parasol.load(42)


def test_import_parasol_model_stays_light():
    code = "import sys, parasol.model.training; print('ortools' in sys.modules, 'pandas' in sys.modules)"
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO).stdout.split()
    assert out == ["False", "False"], out
    assert json.loads(json.dumps(sorted(dir(parasol))))  # dir() lists the API
