"""Design-space sweeps (issue 15): `parasol sweep SPEC.yaml`, the Cartesian product of its axes over a
base problem, every point solved, one table."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import REPO, run_main

from parasol.model.choices import ModelKind, WorkloadKind
from parasol.solver import library
from parasol.solver.accuracy_bands import Regime, bands_for
from parasol.solver.planner import solve
from parasol.solver.problem import parse_problem
from parasol.solver.sweep import Axis, load_sweep

# a small base: most of the mapping fixed, so each point is a space of a few dozen mappings
BASE = {
    "model": "megatron-gpt-1.7b",
    "system": {"name": "dgx-a100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"},
    "mapping": {"pp": 1, "cp": 1, "vpp": 1, "zero": 1, "recompute": "none", "tp": [1, 2]},
}


def _spec(tmp_path, sweep, **extra):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "sweep": sweep, **extra}, sort_keys=False))
    return path


@pytest.mark.auto_method  # as the command runs: solve() takes its shortcuts
def test_three_systems_four_gpu_counts_two_models_in_one_command(tmp_path):
    """The issue's sweep shape: 3 systems x 4 GPU counts x 2 models, one table; each point is the
    solve of its own problem file."""
    sweep = {
        "model": ["megatron-gpt-1.7b", "llama3-8b"],
        "system": ["dgx-a100", "dgx-h100", "dgx-b200"],
        "num_gpus": [8, 16, 32, 64],
    }
    out = tmp_path / "sweep.parquet"
    proc = run_main(["sweep", _spec(tmp_path, sweep, time_limit=30), "--out", out])
    assert proc.returncode == 0, proc.stderr
    table = pd.read_parquet(out)
    assert len(table) == 24 and (table["status"] == "OPTIMAL").all()
    combos = set(zip(table["model"], table["system"], table["num_gpus"].astype(int)))
    assert len(combos) == 24
    # one point checked against a solve of the same problem written out by hand
    row = table[(table["model"] == "llama3-8b") & (table["system"] == "dgx-h100") & (table["num_gpus"] == 32)].iloc[0]
    by_hand = dict(BASE, model="llama3-8b", system={"name": "dgx-h100", "num_gpus": 32})
    result = solve(parse_problem(by_hand), time_limit=30)
    assert row["value"] == pytest.approx(result.objective_value, rel=1e-9)
    assert row["tp"] == result.plans[0].mapping.tp and row["tokens_per_s"] == pytest.approx(row["value"])
    # at the same model and GPU count a newer system trains no slower: every term of the step is at least as
    # fast on it (FLOP/s, HBM, NVLink, the scale-out links) and its memory at least as large
    for (model, n), group in table.groupby(["model", "num_gpus"]):
        value = dict(zip(group["system"], group["value"]))
        assert value["dgx-b200"] >= value["dgx-h100"] >= value["dgx-a100"], (model, n, value)
    text = proc.stdout.splitlines()
    assert text[0].endswith("24 points over model x system x num_gpus") and len(text) == 2 + 24
    # each row carries the out-of-sample error of its regime's step time (docs/accuracy.md): dense training on its
    # system's architecture
    for system, group in table.groupby("system"):
        regime = Regime(WorkloadKind.TRAINING, ModelKind.DENSE, library.load_system(system, 8).device.architecture)
        (band, *_) = bands_for(regime)
        assert (group["oos_runs"] == band.runs).all() and (group["oos_mean_error"] == band.mean_error).all(), system


def test_axes_place_their_values_in_the_base(tmp_path):
    spec = _spec(
        tmp_path,
        {
            "precision": ["bf16", "fp8"],
            "workload": [{"seq_len": 1024}, {"seq_len": 2048, "global_batch": 128}],
            "chiplets": [1, 2],
            "system": [{"name": "dgx-b200"}],
            "objective": ["throughput"],
        },
    )
    sweep = load_sweep(str(spec))
    assert sweep.axes == (Axis.PRECISION, Axis.WORKLOAD, Axis.CHIPLETS, Axis.SYSTEM, Axis.OBJECTIVE)
    assert len(sweep.points) == 8
    last = sweep.points[-1]
    assert last.values == {
        "precision": "fp8",
        "workload": "seq_len=2048,global_batch=128",
        "chiplets": 2,
        "system": "dgx-b200",
        "objective": "throughput",
    }
    problem = last.task.problem
    assert problem["workload"] == {"kind": "training", "seq_len": 2048, "global_batch": 128, "precision": "fp8"}
    assert problem["system"] == {"name": "dgx-b200", "num_gpus": 8, "chiplets": 2}
    assert BASE["workload"]["seq_len"] == 2048 and "chiplets" not in BASE["system"]  # the base is not changed


def test_a_refused_point_is_a_row_and_an_all_refused_sweep_an_error(tmp_path):
    """fp8 on an A100 is refused for that point alone; the others are solved."""
    proc = run_main(["sweep", _spec(tmp_path, {"system": ["dgx-a100", "dgx-h100"], "precision": ["fp8"]}), "--json"])
    assert proc.returncode == 0, proc.stderr
    points = json.loads(proc.stdout)["points"]
    a100, h100 = points
    assert a100["status"] == "INVALID" and "workload.precision" in a100["message"] and a100["value"] is None
    assert h100["status"] == "OPTIMAL" and h100["value"] > 0
    proc = run_main(["sweep", _spec(tmp_path, {"model": ["gpt-9", "gpt-10"]})])
    assert proc.returncode == 2 and "model: unknown name 'gpt-9'" in proc.stderr and proc.stdout == ""


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"base": BASE, "sweep": {"colour": [1]}}, "sweep.colour: 'colour' is not allowed; allowed: model, system, num_gpus"),
        ({"base": BASE, "sweep": {"model": []}}, "sweep.model: must be a non-empty list"),
        ({"base": BASE, "sweep": {}}, "sweep: must name at least one axis"),
        ({"base": BASE, "sweep": {"workload": ["seq_len=4096"]}}, "sweep.workload[0]: must be a mapping, got str"),
        ({"sweep": {"model": ["llama3-8b"]}}, "base: is required"),
        ({"base": BASE, "sweep": {"num_gpus": list(range(1, 400))} | {"model": list(range(300))}}, "at most 100,000"),
    ],
)
def test_bad_specs_are_one_line_errors(tmp_path, spec, message):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = run_main(["sweep", path])
    assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_shipped_sweep_spec_reads_as_24_points():
    sweep = load_sweep(str(REPO / "problems" / "sweeps" / "llama3-three-systems.yaml"))
    assert len(sweep.points) == 24 and sweep.axes == (Axis.MODEL, Axis.SYSTEM, Axis.NUM_GPUS)


def test_address_without_ray_engine_is_refused(tmp_path):
    proc = run_main(["sweep", _spec(tmp_path, {"num_gpus": [8]}), "--address", "127.0.0.1:6379"])
    assert proc.returncode == 2 and "--address: --address names a Ray cluster; it needs --engine ray" in proc.stderr


def test_axis_values_and_the_plans_choices_are_both_kept(tmp_path):
    """An axis named like a result column keeps the spec's value; the plan's own choice within it is
    chosen_<key> (a GPU-count list: the count the plan uses)."""
    proc = run_main(["sweep", _spec(tmp_path, {"num_gpus": [[8, 16]], "objective": ["throughput", "bogus"]}), "--json"])
    assert proc.returncode == 0, proc.stderr
    ok, refused = json.loads(proc.stdout)["points"]
    assert ok["num_gpus"] == "[8,16]" and ok["chosen_num_gpus"] in (8, 16) and ok["objective"] == "throughput"
    assert refused["status"] == "INVALID" and refused["objective"] == "bogus"


def test_an_all_refused_sweep_names_the_spec_and_seed_flags_hold(tmp_path):
    spec = _spec(tmp_path, {"objective": [5]})
    proc = run_main(["sweep", spec])
    assert proc.returncode == 2 and proc.stderr.startswith(f"parasol: {spec}: sweep: every point is refused; the first:")
    seeded = _spec(tmp_path, {"num_gpus": [8]}, seed=5)
    assert load_sweep(str(seeded)).points[0].task.seed == 5
    assert load_sweep(str(seeded), seed=0).points[0].task.seed == 0  # --seed 0 wins over the spec's
    big = _spec(tmp_path, {"num_gpus": [8]}, seed=2**40)
    proc = run_main(["sweep", big])
    assert proc.returncode == 2 and "seed: must be at most 2,147,483,647" in proc.stderr
