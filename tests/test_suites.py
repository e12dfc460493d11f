"""Benchmark suites (issue 15): the shipped suites and their records, `parasol suite run` held to the
known optima (the easy tier is the regression guard), its summary and performance profile, and
`parasol suite export --format cpsat`."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from conftest import run_main

from parasol.solver.fanout import TaskKind, TaskResult
from parasol.solver.suite_report import profile_curves, shifted_geometric_mean
from parasol.solver.suites import Tier, load_suite, reproduces, suite_names

SUITES = ("dense-training", "moe-context-placement-sizing", "serving-cost-pareto")


def test_three_suites_of_at_least_60_instances_each_with_a_proven_record():
    assert set(SUITES) <= set(suite_names())
    total = 0
    for name in SUITES:
        suite = load_suite(name)
        total += len(suite.instances)
        assert {i.tier for i in suite.instances} == set(Tier), f"{name}: every tier"
        for instance in suite.instances:
            record = suite.known.get(instance.name)
            assert record, f"{name}/{instance.name} has no record"
            assert record["status"] == ("COMPLETE" if instance.kind is TaskKind.PARETO else "OPTIMAL")
            assert record["proof"]["cpsat"] == record["status"]
            assert record["proof"]["enumerator"].startswith(("agrees", "not run: space"))
            assert record["space_size"] > 0 and record["version"] and record["mapping"]
            assert ("front" in record) == (instance.kind is TaskKind.PARETO)
    assert total >= 60


def test_tiers_grow_with_the_space():
    """Easy instances have small spaces; a suite's hard tier a larger median space than its easy tier (a
    hard instance may be small but hard by structure: three metrics, several systems, disaggregation)."""
    for name in SUITES:
        suite = load_suite(name)
        size = {i.name: suite.known[i.name]["space_size"] for i in suite.instances}
        easy = sorted(size[i.name] for i in suite.select((Tier.EASY,)))
        hard = sorted(size[i.name] for i in suite.select((Tier.HARD,)))
        assert easy[-1] <= 100_000 and hard[len(hard) // 2] > 10 * easy[len(easy) // 2], name


@pytest.mark.parametrize("name", SUITES)
def test_easy_tier_reproduces_every_recorded_optimum(name, tmp_path):
    """The regression guard: an optimum that changes, or a proof that is lost, fails here."""
    out = tmp_path / "easy.csv"
    proc = run_main(["suite", "run", name, "--tier", "easy", "--out", out])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = pd.read_csv(out)
    assert len(table) == len(load_suite(name).select((Tier.EASY,)))
    assert table["reproduces"].all() and table["status"].isin(["OPTIMAL", "COMPLETE"]).all()
    assert (table["gap"].fillna(0) == 0).all() and (table["deterministic_time"] >= 0).all()
    summary = proc.stdout.strip().splitlines()[-1]
    n = len(table)
    assert summary.startswith(f"summary: {n}/{n} solved (proven), {n}/{n} reproduce their known optima, mean gap 0.000 %")


def _result(kind=TaskKind.SOLVE, status="OPTIMAL", value=100.0, front=()):
    return TaskResult("x", str(kind), status, value=value, front=[list(p) for p in front])


def test_reproduces_needs_the_proof_and_the_value():
    record = {"status": "OPTIMAL", "value": 100.0}
    assert reproduces(_result(value=100.0 * (1 + 1e-9)), record)
    assert not reproduces(_result(value=100.01), record)  # an optimum that moved
    assert not reproduces(_result(status="FEASIBLE"), record)  # a proof lost
    assert not reproduces(_result(), None)  # nothing to hold it to
    front = {"status": "COMPLETE", "front": [[1.0, 2.0], [2.0, 1.0]]}
    assert reproduces(_result(TaskKind.PARETO, "COMPLETE", None, [(2.0, 1.0), (1.0, 2.0)]), front)
    assert not reproduces(_result(TaskKind.PARETO, "COMPLETE", None, [(1.0, 2.0)]), front)  # a point lost
    assert not reproduces(_result(TaskKind.PARETO, "PARTIAL", None, [(1.0, 2.0), (2.0, 1.0)]), front)


def test_shifted_geometric_mean_and_profiles():
    assert shifted_geometric_mean([]) == 0.0
    assert shifted_geometric_mean([0.0, 0.0]) == pytest.approx(0.0)
    assert shifted_geometric_mean([1.0, 3.0]) == pytest.approx(8**0.5 - 1)  # exp(mean ln(t + 1)) - 1
    a = pd.DataFrame({"instance": ["p", "q", "r"], "status": ["OPTIMAL", "OPTIMAL", "FEASIBLE"], "wall_s": [1.0, 4.0, 9.0]})
    b = pd.DataFrame({"instance": ["p", "q", "r"], "status": ["OPTIMAL", "OPTIMAL", "OPTIMAL"], "wall_s": [2.0, 2.0, 3.0]})
    axis, one = profile_curves({"a": a})
    assert axis.startswith("wall time") and one["a"] == ([1.0, 4.0], [1 / 3, 2 / 3])
    axis, two = profile_curves({"a": a, "b": b})
    assert axis.startswith("performance ratio")
    assert two["a"] == ([1.0, 2.0], [1 / 3, 2 / 3])  # r unsolved: a never reaches 1
    assert two["b"] == ([1.0, 1.0, 2.0], [1 / 3, 2 / 3, 1.0])


def _one_instance_suite(tmp_path, record_value=None, **instance):
    suite = {
        "suite": "tiny",
        "instances": [
            {
                "name": "gpt-1.7b-8",
                "tier": "easy",
                "problem": {
                    "model": "megatron-gpt-1.7b",
                    "system": {"name": "dgx-a100", "num_gpus": 8},
                    "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16"},
                    "mapping": {"tp": [1, 2], "pp": 1, "cp": 1, "vpp": 1, "zero": 1, "recompute": "none"},
                },
                **instance,
            }
        ],
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(suite))
    if record_value is not None:
        known = {"suite": "tiny", "instances": {"gpt-1.7b-8": {"status": "OPTIMAL", "value": record_value}}}
        (tmp_path / "tiny.known.yaml").write_text(yaml.safe_dump(known))
    return path


def test_a_changed_optimum_fails_the_run_with_exit_1(tmp_path):
    path = _one_instance_suite(tmp_path, record_value=1.0)
    proc = run_main(["suite", "run", path, "--json"])
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    row = doc["instances"][0]
    assert row["status"] == "OPTIMAL" and row["reproduces"] is False and row["known"] == "1"
    assert doc["summary"]["solved"] == 1 and doc["summary"]["reproduced"] == 0
    # the same instance held to the value it has reproduces
    good = _one_instance_suite(tmp_path / "..", record_value=row["value"])
    assert run_main(["suite", "run", good]).returncode == 0


@pytest.mark.parametrize(
    "change, field",
    [
        ({"tier": "medium-rare"}, "instances[0].tier: 'medium-rare' is not allowed; allowed: easy, medium, hard"),
        ({"objectives": ["throughput"]}, "instances[0].objectives: must be a list of two or three metric names"),
        ({"speed": 1}, "instances[0].speed: unknown key 'speed'"),
        ({"objective": "ttft"}, "instances[0] (gpt-1.7b-8): objective"),
        ({"name": "a b"}, "instances[0].name: must be a name of letters"),
    ],
)
def test_bad_suite_files_are_one_line_errors(tmp_path, change, field):
    path = _one_instance_suite(tmp_path, **change)
    proc = run_main(["suite", "run", path])
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and field in proc.stderr, proc.stderr


def test_unknown_suite_and_a_bad_problem_name_the_suite_and_instance(tmp_path):
    proc = run_main(["suite", "run", "no-such-suite"])
    assert proc.returncode == 2 and "unknown suite 'no-such-suite'; allowed: " in proc.stderr
    path = _one_instance_suite(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["instances"][0]["problem"]["model"] = "gpt-9"
    path.write_text(yaml.safe_dump(data))
    proc = run_main(["suite", "run", path])
    assert proc.returncode == 2 and "instances[0] (gpt-1.7b-8): model: unknown name 'gpt-9'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_plot_draws_the_profile_against_an_earlier_run(tmp_path):
    pytest.importorskip("matplotlib")
    path = _one_instance_suite(tmp_path, record_value=1.0)
    first = tmp_path / "first.parquet"
    assert run_main(["suite", "run", path, "--out", first]).returncode == 1
    png = tmp_path / "profile.png"
    proc = run_main(["suite", "run", path, "--plot", png, "--compare", first])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", proc.stderr
    again = run_main(["suite", "run", path, "--plot", png])  # never over a file
    assert again.returncode == 2 and "exists" in again.stderr


def test_export_writes_models_that_solve_to_the_recorded_optimum(tmp_path):
    """Each exported CpModelProto, read back and solved alone, decodes to a plan whose objective is the record's."""
    from ortools.sat.python import cp_model

    from parasol.solver.cpsat_export import instance_models
    from parasol.solver.cpsat_search import Search
    from parasol.solver.planner import planner_for
    from parasol.solver.problem import parse_problem

    out = tmp_path / "models"
    proc = run_main(["suite", "export", "serving-cost-pareto", "--tier", "easy", "--out", out])
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    suite = load_suite("serving-cost-pareto")
    easy = suite.select((Tier.EASY,))
    assert {m["instance"] for m in manifest["models"]} == {i.name for i in easy}
    front = next(m for m in manifest["models"] if m["kind"] == "pareto")
    assert any(name.startswith("front_") for name in front["named"])
    instance = next(i for i in easy if i.name == "llama3.3-70b-h100-8-serving")
    entry = next(m for m in manifest["models"] if m["instance"] == instance.name)
    assert entry["known"]["value"] == suite.known[instance.name]["value"]
    from google.protobuf import text_format
    from ortools.sat import cp_model_pb2

    proto = cp_model_pb2.CpModelProto()
    proto.ParseFromString((out / entry["file"]).read_bytes())  # the binary file, as any protobuf reader reads it
    model = cp_model.CpModel()
    model.proto.parse_text_format(text_format.MessageToString(proto))
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(model) == cp_model.OPTIMAL
    # decode the exported model's solution with the planner's own search of the same instance
    problem = parse_problem(instance.problem, source=instance.source)
    planner = planner_for(problem)
    [(part, built, _, objective)] = instance_models(instance)
    assert part == "" and objective == entry["objective"] == "throughput"
    assert len(built.proto.variables) == len(model.proto.variables)
    search = Search(planner, problem, planner.space(problem), (problem.objective,))
    n, mapping = planner.decode(problem, search.space, search.ops.stored(solver))
    value = planner.objective_value(problem, problem.objective, planner.evaluate(problem, n, mapping).metrics)
    assert value == pytest.approx(suite.known[instance.name]["value"], rel=1e-6)
    again = run_main(["suite", "export", "serving-cost-pareto", "--tier", "easy", "--out", out])
    assert again.returncode == 2 and "exists" in again.stderr  # nothing written is replaced


@pytest.mark.parametrize(
    "record, field",
    [
        ([1, 2], "instances.gpt-1.7b-8: must be a mapping"),
        ({"status": "OPTIMAL"}, "instances.gpt-1.7b-8.value: must be a number, got None"),
        ({"status": "OPTIMAL", "value": "x"}, "instances.gpt-1.7b-8.value: must be a number"),
        ({"status": "COMPLETE", "front": 3}, "instances.gpt-1.7b-8.front: must be a list of points"),
    ],
)
def test_bad_records_are_one_line_errors_before_the_run(tmp_path, record, field):
    path = _one_instance_suite(tmp_path)
    (tmp_path / "tiny.known.yaml").write_text(yaml.safe_dump({"suite": "tiny", "instances": {"gpt-1.7b-8": record}}))
    for command in (["suite", "run", path], ["suite", "export", path, "--out", tmp_path / "models"]):
        proc = run_main(command)
        assert proc.returncode == 2 and field in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_bad_compare_tables_and_out_suffixes_are_refused_before_the_run(tmp_path):
    path = _one_instance_suite(tmp_path)
    bad = tmp_path / "bad.csv"
    bad.write_text("instance,status,wall_s\na,OPTIMAL,fast\n")
    proc = run_main(["suite", "run", path, "--compare", bad, "--plot", tmp_path / "p.png"])
    assert proc.returncode == 2 and "column 'wall_s' must hold seconds" in proc.stderr
    proc = run_main(["suite", "run", path, "--out", tmp_path / "out.txt"])
    assert proc.returncode == 2 and "allowed suffixes: .csv, .parquet, .json" in proc.stderr
    proc = run_main(["suite", "run", path, "--seed", "99999999999"])
    assert proc.returncode == 2 and "--seed" in proc.stderr and "2147483647" in proc.stderr


def test_a_suite_key_mistake_names_the_suite_file(tmp_path):
    path = _one_instance_suite(tmp_path, objectives=["throughput", "bogus"])
    proc = run_main(["suite", "run", path])
    assert proc.returncode == 2 and proc.stderr.startswith(f"parasol: {path}: instances[0] (gpt-1.7b-8): objectives:")
