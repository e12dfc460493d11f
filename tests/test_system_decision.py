"""The system as a decision (issue 14): ``system.name`` a list of systems (or a system file by path)
that one solve, enumerate or pareto compares; the answer names the system. Each multi-system
result is checked against the single-system runs made one by one."""

from __future__ import annotations

import copy
import json
import shutil

import pytest
from conftest import REPO, run_main, write_yaml

from parasol.solver.pareto import non_dominated, pareto_front
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.training_planner import TRAINING

SMALL = {"vpp": [1], "first_stage_layers": 0, "last_stage_layers": 0, "zero": [1], "recompute": ["none", "full"]}
SYSTEMS = ["dgx-a100", "dgx-h100", "hgx-h200"]


def _training(systems=SYSTEMS, num_gpus=(8, 16), constraints=None, objective="throughput") -> dict:
    data = {
        "model": "megatron-gpt-1.7b",
        "system": {"name": systems, "num_gpus": list(num_gpus) if isinstance(num_gpus, tuple) else num_gpus},
        "workload": {"kind": "training", "seq_len": 2048, "global_batch": 64, "precision": "bf16", "train_tokens": 1.0e9},
        "mapping": SMALL,
        "objective": objective,
    }
    if constraints:
        data["constraints"] = constraints
    return data


def _single(data: dict, name: str, num_gpus=None) -> dict:
    one = copy.deepcopy(data)
    counts = data["system"]["num_gpus"]
    one["system"] = {"name": name, "num_gpus": num_gpus if num_gpus is not None else counts}
    return one


def _best_one_by_one(data: dict, names, run):
    """(objective value, system) of the best single-system result, each system solved on its own."""
    results = [(name, run(parse_problem(_single(data, name), source="t"))) for name in names]
    feasible = [(r.objective_value, name) for name, r in results if r.plans]
    return results, feasible


def test_multi_system_solve_is_the_best_of_the_single_system_solves():
    data = _training()
    multi = solve(parse_problem(data, source="t"), top=3)
    results, feasible = _best_one_by_one(data, SYSTEMS, lambda p: solve(p))
    assert all(r.status == "OPTIMAL" for _, r in results)
    value, name = max(feasible)  # throughput: larger is better
    assert multi.status == "OPTIMAL"
    assert multi.objective_value == pytest.approx(value, rel=1e-9)
    assert multi.plans[0].system_name == name
    # the top 3 are ordered by the objective and each names one of the compared systems
    values = [p.evaluation.metrics["tokens_per_s"] for p in multi.plans]
    assert values == sorted(values, reverse=True) and {p.system_name for p in multi.plans} <= set(SYSTEMS)


def test_a_capex_cap_that_rules_out_the_fastest_system_chooses_another():
    data = _training()
    best = solve(parse_problem(data, source="t")).plans[0]
    fastest = best.system_name
    # a cap below the fastest system's smallest cluster, above another system's smallest
    capex = {n: parse_problem(_single(data, n), source="t").system_cost(8)["capex_usd"] for n in SYSTEMS}
    cheaper = [n for n in SYSTEMS if capex[n] < capex[fastest]]
    assert cheaper, capex
    cap = (capex[fastest] + max(capex[n] for n in cheaper)) / 2
    capped = _training(constraints={"max_capex_usd": cap})
    result = solve(parse_problem(capped, source="t"))
    assert result.status == "OPTIMAL"
    assert result.plans[0].system_name != fastest
    assert result.plans[0].evaluation.metrics["capex_usd"] <= cap
    results, feasible = _best_one_by_one(capped, SYSTEMS, lambda p: solve(p))
    assert dict(results)[fastest].status == "INFEASIBLE"
    value, name = max(feasible)
    assert result.objective_value == pytest.approx(value, rel=1e-9) and result.plans[0].system_name == name


def test_enumerate_agrees_with_solve_on_a_multi_system_problem():
    problem = parse_problem(_training(["dgx-a100", "dgx-h100"], objective="cost"), source="t")
    sol, enum = solve(problem), enumerate_space(problem, keep_all=True)
    assert sol.status == enum.status == "OPTIMAL"
    assert sol.objective_value == pytest.approx(enum.objective_value, rel=2e-3)
    assert sol.plans[0].system_name == enum.plans[0].system_name
    # enumerate --all: every point of both systems, with a system column
    assert set(enum.table["system"]) == {"dgx-a100", "dgx-h100"}
    assert len(enum.table) == enum.points_evaluated


def test_pareto_over_two_systems_is_the_non_dominated_union_of_their_fronts():
    # per-system counts: more, slower A100s against fewer H100s, so the union mixes both systems
    counts = {"dgx-a100": [32, 64], "dgx-h100": [8, 16]}
    data = _training(["dgx-a100", "dgx-h100"], num_gpus=counts)
    objectives = ("throughput", "cost")
    multi = pareto_front(parse_problem(data, source="t"), objectives, time_limit=60)
    fronts = [
        pareto_front(parse_problem(_single(data, n, counts[n]), source="t"), objectives, time_limit=60)
        for n in ("dgx-a100", "dgx-h100")
    ]
    assert multi.status == "COMPLETE" and all(f.status == "COMPLETE" for f in fronts)
    problem = parse_problem(_single(data, "dgx-a100", counts["dgx-a100"]), source="t")
    sense = {TRAINING.front_metric(problem, n).metric: TRAINING.front_metric(problem, n).sense for n in objectives}
    union = non_dominated([p for f in fronts for p in f.plans], tuple(sense), sense)
    assert multi.plans, "an empty front proves nothing"

    def points(plans):
        return sorted((p.system_name, p.num_gpus, tuple(round(p.evaluation.metrics[k], 6) for k in sense)) for p in plans)

    assert points(multi.plans) == points(union)
    assert {p.system_name for p in multi.plans} == {"dgx-a100", "dgx-h100"}
    assert len(union) < sum(len(f.plans) for f in fronts)  # the union drops dominated points


def test_num_gpus_per_system_gives_each_its_counts():
    data = _training(["dgx-a100", "dgx-h100"], num_gpus={"dgx-a100": [8], "dgx-h100": {"min": 16, "max": 32, "step": 16}})
    problem = parse_problem(data, source="t")
    assert [(p.system_name, p.num_gpus) for p in problem.systems] == [("dgx-a100", (8,)), ("dgx-h100", (16, 32))]


def test_a_list_of_system_mappings_is_accepted():
    data = _training()
    data["system"] = [{"name": "dgx-a100", "num_gpus": 8}, {"name": "dgx-h100", "num_gpus": [8, 16], "gpu_hour_usd": 2.5}]
    problem = parse_problem(data, source="t")
    assert [(p.system_name, p.num_gpus, p.gpu_hour_usd) for p in problem.systems] == [
        ("dgx-a100", (8,), None),
        ("dgx-h100", (8, 16), 2.5),
    ]


@pytest.mark.auto_method  # as the command runs: solve() takes its shortcuts
def test_multi_system_cli_reports_name_the_system(tmp_path):
    path = write_yaml(tmp_path / "p.yaml", _training(["dgx-a100", "dgx-h100"]))
    doc = json.loads(run_main(["solve", str(path), "--top", "3", "--json"]).stdout)
    assert doc["system"] in ("dgx-a100", "dgx-h100")
    assert all(p["system"] in ("dgx-a100", "dgx-h100") for p in doc["plans"]) and doc["plans"][0]["system"] == doc["system"]
    proc = run_main(["solve", str(path), "--top", "3", "--out", str(tmp_path / "plans.csv")])
    assert proc.returncode == 0, proc.stderr
    assert f"x {doc['system']} (" in proc.stdout  # the best plan's header line names its system
    assert "system" in proc.stdout.split("top 3:")[1].splitlines()[1]  # the top-K table's system column
    header = (tmp_path / "plans.csv").read_text().splitlines()[0].split(",")
    assert header[0] == "system" and "num_gpus" in header
    front = json.loads(run_main(["pareto", str(path), "--objectives", "throughput,cost", "--json"]).stdout)["front"]
    assert front and all(p["system"] in ("dgx-a100", "dgx-h100") for p in front)
    points = json.loads(run_main(["enumerate", str(path), "--all", "--json"]).stdout)["points"]
    assert {p["system"] for p in points} == {"dgx-a100", "dgx-h100"} and "system" not in points[0]["metrics"]


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d["system"].update(name=["dgx-h100", "no-such-system"]), "system.name"),
        (lambda d: d["system"].update(num_gpus={"dgx-h100": 8, "dgx-b200": 8}), "system.num_gpus.dgx-b200"),
        (lambda d: d["system"].update(num_gpus={"dgx-h100": 8}), "system.num_gpus"),
        (lambda d: d["system"].update(name=[]), "system.name"),
        (lambda d: d.update(system=[]), "system"),
        (lambda d: d["system"].update(name=["dgx-h100", "dgx-h100"]), "system.name"),
    ],
)
def test_bad_system_lists_are_one_line_errors(tmp_path, change, field):
    data = _training(["dgx-h100", "dgx-a100"])
    change(data)
    path = write_yaml(tmp_path / "p.yaml", data)
    proc = run_main(["solve", str(path)])
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(path) in lines[0] and field in lines[0]


def test_evaluate_with_a_list_of_systems_is_a_one_line_error(tmp_path):
    data = _training(["dgx-h100", "dgx-a100"], num_gpus=8)
    data["mapping"] = {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1}
    path = write_yaml(tmp_path / "p.yaml", data)
    proc = run_main(["evaluate", str(path)])
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "one system" in proc.stderr and "system.name" in proc.stderr


def test_a_system_file_by_path_solves_as_the_library_system(tmp_path):
    folder = tmp_path / "systems"
    folder.mkdir()
    shutil.copy(REPO / "problems" / "systems" / "dgx-h100.yaml", folder / "dgx-h100.yaml")
    data = _single(_training(), "dgx-h100")
    by_name = solve(parse_problem(data, source=str(tmp_path / "p.yaml")))
    data["system"]["name"] = {"file": "systems/dgx-h100.yaml"}  # relative to the problem file's folder
    path = write_yaml(tmp_path / "p.yaml", data)
    doc = json.loads(run_main(["solve", str(path), "--json"]).stdout)
    assert doc["status"] == by_name.status == "OPTIMAL"
    assert doc["objective"] == pytest.approx(by_name.objective_value, rel=1e-9)
    assert doc["mapping"] == {**by_name.plans[0].mapping.as_dict(), "num_gpus": by_name.plans[0].num_gpus}
    assert doc["metrics"]["capex_usd"] == pytest.approx(by_name.plans[0].evaluation.metrics["capex_usd"], rel=1e-12)
    assert doc["system"] == str((folder / "dgx-h100.yaml").resolve())


def test_a_missing_or_bad_system_file_names_the_file_and_field(tmp_path):
    data = _single(_training(), {"file": "missing/system.yaml"})
    path = write_yaml(tmp_path / "p.yaml", data)
    proc = run_main(["solve", str(path)])
    assert proc.returncode == 2 and "system.name.file" in proc.stderr and "missing/system.yaml" in proc.stderr
    bad = write_yaml(tmp_path / "bad.yaml", {"device": "h100-sxm-80gb", "gpus_per_node": 0, "scale_up": {}, "scale_out": {}})
    data["system"]["name"] = {"file": "bad.yaml"}
    path = write_yaml(tmp_path / "p2.yaml", data)
    proc = run_main(["solve", str(path)])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert str(bad) in proc.stderr and "gpus_per_node" in proc.stderr


SERVING = {
    "model": "llama3.1-8b",
    "system": {"name": ["dgx-a100", "hgx-h200"], "num_gpus": 8},
    "workload": {
        "kind": "inference",
        "input_len": 1024,
        "output_len": 256,
        "precision": "bf16",
        "serving": "continuous",
        "slo": {"tpot_s": 0.05},
    },
    "mapping": {"batch": [1, 4, 16, 64]},
    "objective": "throughput",
}


def test_multi_system_serving_solve_is_the_best_of_the_single_system_solves():
    multi = solve(parse_problem(SERVING, source="t"))
    results, feasible = _best_one_by_one(SERVING, ["dgx-a100", "hgx-h200"], lambda p: solve(p))
    assert multi.status == "OPTIMAL" and all(r.status == "OPTIMAL" for _, r in results)
    value, name = max(feasible)
    assert multi.objective_value == pytest.approx(value, rel=1e-9)
    assert multi.plans[0].system_name == name


def test_evaluate_on_a_system_file_equals_the_library_system(tmp_path):
    shutil.copy(REPO / "problems" / "systems" / "dgx-h100.yaml", tmp_path / "dgx-h100.yaml")
    data = _single(_training(), "dgx-h100", 8)
    data["mapping"] = {"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1}
    by_name = run_main(["evaluate", str(write_yaml(tmp_path / "a.yaml", data)), "--json"])
    data["system"]["name"] = {"file": "./dgx-h100.yaml"}
    by_path = run_main(["evaluate", str(write_yaml(tmp_path / "b.yaml", data)), "--json"])
    assert by_name.returncode == by_path.returncode == 0, by_path.stderr
    assert json.loads(by_path.stdout)["metrics"] == json.loads(by_name.stdout)["metrics"]


def test_a_best_over_parts_cut_short_reports_the_best_of_their_bounds():
    """issue 16: a solve over several parts (systems, chiplet counts) that stops on time returns a bound
    and gap: the best of the parts' bounds (each part's optimum lies within its own)."""
    from parasol.solver.planner import PlanResult, _combined_bound

    feasible = [PlanResult("FEASIBLE", "throughput", bound=120.0), PlanResult("FEASIBLE", "throughput", bound=150.0)]
    infeasible = PlanResult("INFEASIBLE", "throughput")
    bound, gap = _combined_bound(-1, 100.0, [*feasible, infeasible])  # a rate: larger is better
    assert bound == 150.0 and gap == pytest.approx(1 - 100 / 150)
    bound, gap = _combined_bound(+1, 10.0, [PlanResult("OPTIMAL", "cost", bound=10.0), PlanResult("FEASIBLE", "cost", bound=8.0)])
    assert bound == 8.0 and gap == pytest.approx(0.2)  # a cost: smaller is better
    assert _combined_bound(-1, 100.0, [*feasible, PlanResult("UNKNOWN", "throughput")]) == (None, None)  # no bound known
