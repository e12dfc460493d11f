"""issue 17: the shipped examples mutated as a careless or hostile user would (a value replaced by
a wrong type, a huge or tiny number, a control character, a long text, a list or mapping; a key
dropped or added), run through `evaluate` and `solve`: every run ends with exit 0, 1 or 2, no
traceback, one line on stderr when it refuses the file.

Seeded (hypothesis, derandomized): the small budget runs with the suite, in this process; `pytest -m
fuzz` runs a large one (FUZZ_EXAMPLES, default 3,000) in subprocesses under a time and memory cap.
"""

from __future__ import annotations

import copy
import os
import resource
import subprocess
import sys

import pytest
import yaml
from conftest import REPO, run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = ["gpt3-175b-a100.yaml", "llama3-70b-serving.yaml", "llama3-8b-pareto.yaml", "torus-placement.yaml"]
HOSTILE = [
    None,
    True,
    0,
    -1,
    1.5,
    float("nan"),
    float("inf"),
    1e308,
    2**31,
    2**63,
    10**40,
    "",
    "x" * 10_000,
    "../../../../etc/passwd",
    "/dev/zero",
    "a\nparasol: forged\x1b[2J",
    "\x00",
    "ünï©ødé",
    [],
    [1, 2, 3],
    [[[[1]]]],
    {},
    {"min": 1, "max": 3},
    {"a": {"b": {"c": 1}}},
]
SMALL_BUDGET = int(os.environ.get("FUZZ_SMALL_EXAMPLES", "40"))  # in CI; more on demand
TIME_LIMIT_S = 2


def _example(name) -> dict:
    return yaml.safe_load((REPO / "problems" / "examples" / name).read_text())


def _leaves(data, path=()):
    if isinstance(data, dict):
        yield path
        for k, v in data.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, (*path, i))
    else:
        yield path


@st.composite
def mutated(draw):
    """(example name, mutated problem dict, what was done)."""
    name = draw(st.sampled_from(EXAMPLES))
    data = _example(name)
    paths = [p for p in _leaves(data) if p]
    path = draw(st.sampled_from(paths))
    action = draw(st.sampled_from(["replace", "replace", "replace", "drop", "add"]))
    *head, last = path
    parent = data
    for key in head:
        parent = parent[key]
    if action == "drop" and isinstance(parent, dict):
        del parent[last]
    elif action == "add" and isinstance(parent, dict):
        parent[draw(st.sampled_from(["extra", "mapping", "tp", "\x1b[31m", "a" * 200]))] = draw(st.sampled_from(HOSTILE))
    else:
        value = draw(st.one_of(st.sampled_from(HOSTILE), st.integers(-(2**70), 2**70), st.text(max_size=30)))
        parent[last] = copy.deepcopy(value)
    return name, data, f"{action} {'.'.join(map(str, path))}"


def _check(code: int, err: str, what: str) -> None:
    assert code in (0, 1, 2), (what, code, err[-800:])
    assert "Traceback" not in err, (what, err[-800:])
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (what, err[-800:])


@settings(max_examples=SMALL_BUDGET, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated())
def test_mutated_examples_end_in_one_line_or_an_answer(tmp_path_factory, case):
    name, data, what = case
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    for command in (["evaluate"], ["solve", "--time-limit", str(TIME_LIMIT_S)]):
        proc = run_main([*command, str(path)])
        _check(proc.returncode, proc.stderr, f"{name}: {what}: {command[0]}")


def _run_measured(args: list, timeout_s: float) -> tuple:
    """(exit status, stderr, peak resident memory in bytes) of ``parasol *args`` in a subprocess."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "parasol", *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return None, "", 0
    _, status, usage = os.wait4(proc.pid, 0) if proc.returncode is None else (0, 0, resource.getrusage(resource.RUSAGE_CHILDREN))
    return proc.returncode, err, usage.ru_maxrss * 1024


@pytest.mark.fuzz
@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "3000")),
    derandomize=True,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(mutated())
def test_many_mutated_examples_in_subprocesses(tmp_path_factory, case):
    """No traceback, no run past its time limit + 30 s, no process of more than 1 GiB (the peak of every
    child so far: a run over the cap fails this example and every later one)."""
    name, data, what = case
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    for command in (["evaluate"], ["solve", "--time-limit", "5"]):
        code, err, peak = _run_measured([*command, str(path)], 5 + 30)
        assert code is not None, f"{name}: {what}: {command[0]} ran past its limit"
        _check(code, err, f"{name}: {what}: {command[0]}")
        assert peak < 1 << 30, f"{name}: {what}: {command[0]} peaked at {peak / 2**30:.1f} GiB"
