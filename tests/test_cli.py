"""CLI smoke tests of the public contracts: `parasol evaluate` (issue 2 section 5) and
`parasol solve` / `parasol enumerate` (issue 3). The commands run as real subprocesses,
started concurrently per phase to keep the suite fast."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml
from conftest import EXAMPLE, MAPPING_KEYS, METRIC_KEYS, rel_close, run_cli, write_yaml

SMALL = {
    "model": "llama2-7b",
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32, "precision": "bf16"},
    "mapping": {"vpp": [1, 2], "first_stage_layers": 0, "last_stage_layers": 0},
    "objective": "throughput",
}
SOLVE = ["--workers", "2", "--time-limit", "30"]
pytestmark = pytest.mark.slow  # every test here starts parasol processes


def _run_all(jobs: dict) -> dict:
    def one(item):
        name, (args, entry) = item
        return name, run_cli(args, entry=entry)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(one, jobs.items()))


def _ok(proc):
    assert proc.returncode == 0, f"exit {proc.returncode}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr
    return proc


@pytest.fixture(scope="module")
def small_file(tmp_path_factory):
    return write_yaml(tmp_path_factory.mktemp("cli") / "small.yaml", SMALL)


@pytest.fixture(scope="module")
def runs(small_file):
    ex, sm = str(EXAMPLE), str(small_file)
    return _run_all(
        {
            "evaluate_table": (["evaluate", ex], "script"),
            "evaluate_json": (["evaluate", ex, "--json"], "script"),
            "evaluate_json_module": (["evaluate", ex, "--json"], "module"),
            "solve_json": (["solve", sm, "--json", *SOLVE], "script"),
            "solve_top3": (["solve", sm, "--json", "--top", "3", *SOLVE], "module"),
            "solve_table": (["solve", sm, *SOLVE], "script"),
            "enumerate_json": (["enumerate", sm, "--json"], "script"),
            "enumerate_top3": (["enumerate", sm, "--json", "--top", "3"], "module"),
        }
    )


def _json(runs, name):
    return json.loads(_ok(runs[name]).stdout)


# ---------------------------------------------------------------- evaluate


def test_evaluate_json_contract(runs):
    doc = _json(runs, "evaluate_json")
    for key in METRIC_KEYS:
        assert key in doc["metrics"], key
    assert isinstance(doc["metrics"]["fits"], bool)
    for key in ("step_time_s", "tokens_per_s", "mfu", "tflops_per_gpu", "peak_memory_gib"):
        assert isinstance(doc["metrics"][key], float) and doc["metrics"][key] > 0, key
    assert isinstance(doc["breakdown"], dict) and doc["breakdown"]
    m = doc["mapping"]
    want = yaml.safe_load(EXAMPLE.read_text())["mapping"]
    for key, value in want.items():
        assert m[key] == value, key
    assert m["num_gpus"] == 1024


def test_evaluate_json_breakdowns_add_up(runs):
    doc = _json(runs, "evaluate_json")
    met, bd = doc["metrics"], doc["breakdown"]
    assert rel_close(sum(bd["time_s"].values()), met["step_time_s"], 1e-9)
    assert rel_close(sum(bd["memory_gib"].values()), met["peak_memory_gib"], 1e-9)


def test_python_m_solver_equals_parasol(runs):
    assert _json(runs, "evaluate_json_module") == _json(runs, "evaluate_json")


def test_evaluate_table(runs):
    out = _ok(runs["evaluate_table"]).stdout
    doc = _json(runs, "evaluate_json")
    assert "gpt3-175b" in out
    step = re.search(r"step time\s+([0-9.]+) s", out)
    assert step, out
    assert abs(float(step.group(1)) - doc["metrics"]["step_time_s"]) < 1e-3 + 1e-12
    mfu = re.search(r"MFU\s+([0-9.]+) %", out)
    assert mfu and abs(float(mfu.group(1)) - 100 * doc["metrics"]["mfu"]) < 0.051
    assert "GiB" in out and "{" not in out  # a table, not JSON


# ---------------------------------------------------------------- solve

SOLVE_KEYS = ("status", "mapping", "metrics", "objective", "bound", "gap", "solve_time_s", "space_size")


def test_solve_json_contract(runs):
    doc = _json(runs, "solve_json")
    for key in SOLVE_KEYS:
        assert key in doc, key
    assert doc["status"] in ("OPTIMAL", "FEASIBLE")
    assert doc["status"] == "OPTIMAL"  # a 1.6k-point space is proven within the time limit
    for key in MAPPING_KEYS + ("num_gpus",):
        assert key in doc["mapping"], key
    for key in MAPPING_KEYS:
        assert not isinstance(doc["mapping"][key], (list, dict)), key
    for key in METRIC_KEYS:
        assert key in doc["metrics"], key
    assert doc["metrics"]["fits"] is True
    assert rel_close(doc["objective"], doc["metrics"]["tokens_per_s"], 1e-12)  # objective in tokens/s
    assert doc["gap"] <= 1e-6 and rel_close(doc["bound"], doc["objective"], 1e-6)
    assert doc["space_size"] > 0 and doc["solve_time_s"] >= 0


def test_enumerate_json_contract(runs):
    doc = _json(runs, "enumerate_json")
    for key in SOLVE_KEYS + ("points_evaluated",):
        assert key in doc, key
    assert doc["points_evaluated"] == doc["space_size"]
    solved = _json(runs, "solve_json")
    assert doc["space_size"] == solved["space_size"]
    assert rel_close(doc["objective"], solved["objective"], 1e-3)


def test_solve_top3(runs):
    doc = _json(runs, "solve_top3")
    plans = doc["plans"]
    assert len(plans) == 3
    mappings = [json.dumps(p["mapping"], sort_keys=True) for p in plans]
    assert len(set(mappings)) == 3, "plans must be distinct mappings"
    tps = [p["metrics"]["tokens_per_s"] for p in plans]
    assert all(a >= b * (1 - 1e-3) for a, b in zip(tps, tps[1:])), tps
    assert plans[0]["mapping"] == doc["mapping"]
    # the k best values agree with the enumerator's k best
    enum = [p["metrics"]["tokens_per_s"] for p in _json(runs, "enumerate_top3")["plans"]]
    for a, b in zip(tps, enum):
        assert rel_close(a, b, 1e-3), (tps, enum)


def test_solve_table(runs):
    out = _ok(runs["solve_table"]).stdout
    assert "OPTIMAL" in out and "step time" in out and "{" not in out


@pytest.fixture(scope="module")
def round_trip(runs, small_file, tmp_path_factory):
    """Solve and enumerate results written back into the problem's mapping, then evaluated."""
    folder = tmp_path_factory.mktemp("round_trip")
    jobs, docs = {}, {}
    for name in ("solve_json", "enumerate_json"):
        doc = _json(runs, name)
        docs[name] = doc
        mapping = {k: v for k, v in doc["mapping"].items() if k != "num_gpus"}
        data = {**SMALL, "mapping": mapping, "system": {**SMALL["system"], "num_gpus": doc["mapping"]["num_gpus"]}}
        jobs[name] = (["evaluate", str(write_yaml(folder / f"{name}.yaml", data)), "--json"], "script")
        # the contract's literal reading: the returned mapping object, num_gpus included, as `mapping:`
        literal = {**SMALL, "mapping": dict(doc["mapping"])}
        jobs[name + "_literal"] = (["evaluate", str(write_yaml(folder / f"{name}_literal.yaml", literal)), "--json"], "script")
    return docs, _run_all(jobs)


@pytest.mark.parametrize("name", ["solve_json", "enumerate_json"])
def test_round_trip_mapping_into_evaluate(round_trip, name):
    docs, procs = round_trip
    evaluated = json.loads(_ok(procs[name]).stdout)
    for key in METRIC_KEYS:
        a, b = docs[name]["metrics"][key], evaluated["metrics"][key]
        if isinstance(a, bool):
            assert a == b, key
        else:
            assert rel_close(a, b, 1e-9), (key, a, b)
    assert {k: v for k, v in evaluated["mapping"].items()} == docs[name]["mapping"]


def test_round_trip_literal_mapping_with_num_gpus(round_trip):
    docs, procs = round_trip
    evaluated = json.loads(_ok(procs["solve_json_literal"]).stdout)
    assert rel_close(evaluated["metrics"]["step_time_s"], docs["solve_json"]["metrics"]["step_time_s"], 1e-9)


# ---------------------------------------------------------------- tables and the import root


def test_enumerate_all_is_a_data_frame_and_out_writes_csv_and_parquet(small_file, tmp_path):
    """enumerate --all is a pandas DataFrame in the Python API (one row per feasible point: mapping
    columns, then metrics) and --out writes it as CSV or Parquet with the same rows; --out never
    replaces a file (one-line error, exit 2)."""
    import pandas as pd

    from parasol.solver.planner import enumerate_space
    from parasol.solver.problem import load_problem

    result = enumerate_space(load_problem(small_file), keep_all=True)
    table = result.table
    assert isinstance(table, pd.DataFrame) and len(table) > 10
    assert {"num_gpus", "tp", "pp", "dp", "micro_batch", "vpp", "step_time_s", "tokens_per_s", "peak_memory_gib"} <= set(table)
    assert table["tokens_per_s"].max() == pytest.approx(result.objective_value, rel=1e-9)
    csv, parquet = tmp_path / "all.csv", tmp_path / "all.parquet"
    procs = [run_cli(["enumerate", str(small_file), "--all", "--out", str(path)]) for path in (csv, parquet)]
    for proc in procs:
        _ok(proc)
    for frame in (pd.read_csv(csv), pd.read_parquet(parquet)):
        assert len(frame) == len(table)
        assert sorted(frame["step_time_s"]) == pytest.approx(sorted(table["step_time_s"]), rel=1e-9)
    before = csv.read_bytes()
    again = run_cli(["enumerate", str(small_file), "--all", "--out", str(csv)])
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "--out" in again.stderr and "exists" in again.stderr
    assert csv.read_bytes() == before


def test_solve_top_k_out_writes_the_plans_best_first(small_file, tmp_path):
    """solve --top K --out writes K plans, best first."""
    out = tmp_path / "top.json"
    _ok(run_cli(["solve", str(small_file), "--top", "3", "--out", str(out), *SOLVE]))
    rows = json.loads(out.read_text())
    assert len(rows) == 3 and rows[0]["tokens_per_s"] >= rows[1]["tokens_per_s"] >= rows[2]["tokens_per_s"]
    # a front as a DataFrame: tests/test_api.py (ParetoResult.to_frame) and tests/test_cost_planning.py


def test_one_import_root(tmp_path):
    """Only `parasol` is installed as a top-level name: a user's own model.py or solver.py next to a
    notebook neither shadows parasol nor is shadowed by it, and `python -m parasol` runs."""
    import subprocess
    import sys

    (tmp_path / "model.py").write_text("raise SystemExit('the user module was imported')\n")
    (tmp_path / "solver.py").write_text("raise SystemExit('the user module was imported')\n")
    probe = (
        "import importlib.util, sys; sys.path.remove(sys.path[0]) if sys.path[0] in ('', '.') else None; "
        "print(importlib.util.find_spec('model'), importlib.util.find_spec('solver'))"
    )
    other = subprocess.run([sys.executable, "-c", probe], cwd="/", capture_output=True, text=True)
    assert other.stdout.split() == ["None", "None"], other.stdout + other.stderr
    proc = subprocess.run(
        [sys.executable, "-c", "import parasol.solver.cli, parasol.model.training_step; print('ok')"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
    help_ = subprocess.run([sys.executable, "-m", "parasol", "--help"], cwd=tmp_path, capture_output=True, text=True)
    assert help_.returncode == 0 and "evaluate" in help_.stdout and "solve" in help_.stdout
