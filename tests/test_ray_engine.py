"""The Ray engine (issue 15): a suite's instances and a sweep's points fanned out as Ray tasks on a
one-node Ray instance started on this machine give, instance by instance, the local engine's results
(one CP-SAT worker and a fixed seed: the same status, objective, bound, gap, mapping, front, space and
CP-SAT deterministic time; only wall times differ). Skipped without the ray extra."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from conftest import run_main

pytest.importorskip("ray")

SAME = ["status", "objective", "value", "bound", "gap", "space_size", "num_gpus", "system", "mapping", "front", "reproduces"]

# two instances of the shipped suites (a serving solve and a front), with their records
SUITE = {
    "suite": "ray-check",
    "instances": [
        {"name": "serving", "tier": "easy", "problem": "SUITES/../examples/llama3-70b-serving.yaml"},
        {
            "name": "front",
            "tier": "easy",
            "problem": "SUITES/../examples/llama3-8b-pareto.yaml",
            "objectives": ["tokens_per_s_per_gpu", "tokens_per_s_per_user"],
        },
    ],  # training on Ray: test_sweep_on_local_ray_equals_the_local_engine
}


@pytest.fixture(scope="module")
def ray_on_loopback():
    """The engine starts a local Ray instance itself (no --address); it lives until the module ends."""
    import ray

    assert not ray.is_initialized()
    yield
    ray.shutdown()


@pytest.mark.slow
def test_suite_on_local_ray_equals_the_local_engine(ray_on_loopback, tmp_path):
    import ray

    from parasol.solver.suites import suites_dir

    text = yaml.safe_dump(SUITE).replace("SUITES/", f"{suites_dir()}/")
    path = tmp_path / "ray-check.yaml"
    path.write_text(text)
    local = run_main(["suite", "run", path, "--out", tmp_path / "local.json"])
    on_ray = run_main(["suite", "run", path, "--engine", "ray", "--workers", "2", "--out", tmp_path / "ray.json"])
    assert local.returncode == on_ray.returncode == 1, on_ray.stderr  # no records: nothing to reproduce
    a, b = pd.read_json(tmp_path / "local.json"), pd.read_json(tmp_path / "ray.json")
    assert list(a["instance"]) == list(b["instance"]) == ["serving", "front"]
    assert (a["engine"] == "local").all() and (b["engine"] == "ray").all()
    assert a["status"].isin(["OPTIMAL", "COMPLETE"]).all()
    pd.testing.assert_frame_equal(a[SAME], b[SAME])
    pd.testing.assert_series_equal(a["deterministic_time"], b["deterministic_time"])  # the same search, step by step
    assert "engine ray, workers 2" in on_ray.stdout
    nodes = [n for n in ray.nodes() if n["Alive"]]
    assert ray.is_initialized() and len(nodes) == 1  # the engine started a one-node instance on this machine


@pytest.mark.slow
@pytest.mark.auto_method  # solve's small-space shortcut on in this process as it is in the Ray workers
def test_sweep_on_local_ray_equals_the_local_engine(ray_on_loopback, tmp_path):
    spec = {
        "base": {
            "model": "megatron-gpt-1.7b",
            "system": {"name": "dgx-a100", "num_gpus": 8},
            "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"},
            "mapping": {"pp": 1, "cp": 1, "vpp": 1, "zero": 1, "recompute": "none"},
        },
        "sweep": {"system": ["dgx-a100", "dgx-h100"], "num_gpus": [8, 16], "precision": ["bf16", "fp8"]},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    local = run_main(["sweep", path, "--out", tmp_path / "local.csv"])
    on_ray = run_main(["sweep", path, "--engine", "ray", "--out", tmp_path / "ray.csv"])
    assert local.returncode == on_ray.returncode == 0, on_ray.stderr
    a, b = pd.read_csv(tmp_path / "local.csv"), pd.read_csv(tmp_path / "ray.csv")
    assert len(a) == 8 and (a["status"] == "INVALID").sum() == 2  # fp8 on the A100
    columns = [c for c in a.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(a[columns], b[columns])
