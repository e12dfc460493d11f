"""Files the commands write: a folder that cannot take a file, an output on the command's own input and two
outputs on one path are each refused in one line (exit 2) before any work, and nothing the user wrote is
touched, even under --force."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_main, write_yaml

SMALL = {
    "model": "llama3-8b",
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32},
    "mapping": {"tp": [1, 2], "pp": [1], "vpp": [1]},
}
# a folder that exists but takes no file: /proc refuses creation (as root too), /sys refuses permission
UNWRITABLE = [folder for folder in ("/proc", "/sys") if os.path.isdir(folder)]


def _one_line_refusal(proc, flag: str) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert f"parasol: {flag}: " in proc.stderr
    return proc.stderr


@pytest.mark.skipif(not UNWRITABLE, reason="no folder here refuses new files")
@pytest.mark.parametrize("folder", UNWRITABLE)
def test_a_folder_that_takes_no_file_is_refused_before_the_work(folder, tmp_path):
    problem = write_yaml(tmp_path / "p.yaml", SMALL)
    cases = (
        (["solve", problem, "--out", f"{folder}/x.csv"], "--out"),
        (["enumerate", problem, "--out", f"{folder}/x.json"], "--out"),
        (["report", problem, "-o", f"{folder}/x.html"], "-o"),
        (["pareto", problem, "--objectives", "throughput,memory", "--plot", f"{folder}/x.png"], "--plot"),
        (["suite", "export", "dense-training", "--out", f"{folder}/parasol-export"], "--out"),
    )
    for args, flag in cases:
        message = _one_line_refusal(run_main(args), flag)
        assert folder in message


def test_an_output_on_a_file_the_command_reads_is_refused_even_with_force(tmp_path):
    """JSON inputs, so that the table writer's suffix check (.csv, .parquet, .json) cannot be what refuses them: the
    problem file, the same file through a link, a sweep's spec and the base problem it names, a problem's model
    file (report -o takes any suffix), a suite file and a results table given to --compare."""
    problem = tmp_path / "p.json"
    problem.write_text(json.dumps(SMALL))
    link = tmp_path / "same.json"
    link.symlink_to(problem)
    spec = tmp_path / "s.json"
    spec.write_text(json.dumps({"base": "p.json", "sweep": {"num_gpus": [8]}}))
    model = write_yaml(tmp_path / "model.yaml", {"layers": 4, "hidden": 256, "heads": 8, "ffn": 1024, "vocab": 1000})
    with_model = write_yaml(tmp_path / "q.yaml", {**SMALL, "model": {"file": "model.yaml"}})
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps(yaml.safe_load((REPO / "problems" / "suites" / "dense-training.yaml").read_text())))
    before = {path: path.read_bytes() for path in (problem, spec, model, suite)}
    cases = (
        (["report", problem, "-o", problem, "--force"], "-o"),
        (["solve", problem, "--out", link, "--force"], "--out"),  # the same file by another name
        (["sweep", spec, "--out", spec, "--force"], "--out"),
        (["sweep", spec, "--out", problem, "--force"], "--out"),  # the base the spec names
        (["report", with_model, "--evaluate", "-o", model, "--force"], "-o"),
        (["suite", "run", suite, "--tier", "easy", "--out", suite, "--force"], "--out"),
    )
    for args, flag in cases:
        message = _one_line_refusal(run_main(args), flag)
        assert "is the file this command reads" in message, args
    assert all(path.read_bytes() == content for path, content in before.items())


def test_two_outputs_on_one_path_are_refused_and_nothing_is_written(tmp_path):
    problem = write_yaml(tmp_path / "p.yaml", SMALL)
    target = tmp_path / "front.csv"
    args = ["pareto", problem, "--objectives", "throughput,memory", "--out", target, "--plot", target]
    message = _one_line_refusal(run_main(args), "--plot")
    assert "also the --out file" in message and not target.exists()


def test_writable_outputs_still_work(tmp_path):
    out = Path(tmp_path) / "plans.csv"
    proc = run_main(["solve", write_yaml(tmp_path / "p.yaml", SMALL), "--out", out, "--time-limit", "30"])
    assert proc.returncode == 0, proc.stderr
    assert "tp" in out.read_text().splitlines()[0].split(",")
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".parasol-probe-")]  # the probe leaves nothing
