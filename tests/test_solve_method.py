"""issue 16: solve() enumerates a space small enough that every point through the model costs less than
a CP-SAT solve (Planner.enumerate_below, measured), and solves the others; both are exact."""

from __future__ import annotations

import pytest
from conftest import run_main

from parasol.solver import library
from parasol.solver.planner import SolveMethod, planner_for, solve
from parasol.solver.problem import parse_problem

pytestmark = pytest.mark.auto_method


def _example(name):
    return parse_problem(library.read_yaml(library.library_root() / "examples" / name), source=name)


@pytest.mark.parametrize("example", ["llama3-70b-serving.yaml", "gpt3-175b-a100.yaml"])
def test_a_small_space_is_enumerated_and_equals_cpsat(example):
    problem = _example(example)
    planner = planner_for(problem)
    assert planner.space(problem).size() <= planner.enumerate_below(problem)
    auto = solve(problem, top=2)
    cpsat = solve(problem, top=2, method=SolveMethod.CPSAT)
    assert auto.method == "enumerate" and cpsat.method == "cpsat"
    assert auto.status == cpsat.status == "OPTIMAL" and auto.gap == 0.0 and auto.deterministic_time == 0.0
    assert auto.objective_value == pytest.approx(cpsat.objective_value, rel=1e-3)  # CP-SAT's integer scaling
    assert auto.points_evaluated == auto.space_size == cpsat.space_size
    assert len(auto.plans) == 2


def test_a_large_space_is_solved_and_the_method_can_be_forced():
    problem = _example("gpt3-175b-a100-free.yaml")  # 6.4M mappings
    planner = planner_for(problem)
    assert planner.space(problem).size() > planner.enumerate_below(problem)
    small = _example("llama3-70b-serving.yaml")
    assert solve(small, method="cpsat").method == "cpsat"
    assert solve(small, method="enumerate").method == "enumerate"
    with pytest.raises(ValueError):
        solve(small, method="guess")


def test_the_command_lines_methods_are_the_planners():
    from parasol.solver.cli import METHODS  # noqa: PLC0415

    assert METHODS == tuple(SolveMethod)


def test_the_command_line_says_how_the_plan_was_found():
    proc = run_main(["solve", "problems/examples/llama3-70b-serving.yaml", "--json"])
    assert proc.returncode == 0 and '"method": "enumerate"' in proc.stdout
    proc = run_main(["solve", "problems/examples/llama3-70b-serving.yaml", "--json", "--method", "cpsat"])
    assert proc.returncode == 0 and '"method": "cpsat"' in proc.stdout
    proc = run_main(["solve", "problems/examples/llama3-70b-serving.yaml", "--method", "fast"])
    assert proc.returncode == 2 and "--method" in proc.stderr
