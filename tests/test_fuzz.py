"""issue 17: the shipped examples mutated as a careless or hostile user would (a value replaced by
a wrong type, a huge or tiny number, a control character, a long text, a list or mapping; a key
dropped or added), run through `evaluate` and `solve`: every run ends with exit 0, 1 or 2, no
traceback, one line on stderr when it refuses the file.

Seeded (hypothesis, derandomized): the small budget runs with the suite, in this process; `pytest -m
fuzz` runs a large one (FUZZ_EXAMPLES, default 3,000 files; YAML-level mutations too: aliases, deep
nesting, tags, binary garbage, huge numbers and files) through evaluate, solve, enumerate and
pareto in subprocesses, holding each to the issue's done-when: no traceback, no hang, no process
above 1 GiB, no command more than 1 s past its --time-limit.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import threading
import time

import pytest
import yaml
from conftest import REPO, run_main
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = [
    "gpt3-175b-a100.yaml",
    "llama3-70b-serving.yaml",
    "llama3-8b-pareto.yaml",
    "torus-placement.yaml",
    "llama3-8b-offline-requests.yaml",
    "qwen3-235b-gb200-offload.yaml",
    "deepseek-r1-offline-b200.yaml",
]
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
SMALL_BUDGET = int(os.environ.get("FUZZ_SMALL_EXAMPLES", "30"))  # in CI; more on demand
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


# YAML-level mutations of an example's text (the dict-level ones above cannot write these)
TEXT_MUTATIONS = {
    "alias": lambda t, i: t + "\nextra: &a [1, 2]\nmore: *a\n",
    "billion-laughs": lambda t, i: "a: &a [x, x]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n" + t,
    "deep": lambda t, i: t + "\nextra: " + "[" * (20 + i % 200) + "]" * (20 + i % 200) + "\n",
    "python-tag": lambda t, i: t + "\nextra: !!python/object/apply:os.system [echo pwned]\n",
    "other-tag": lambda t, i: t.replace(": ", ": !!binary ", 1),
    "garbage": lambda t, i: t[: i % max(len(t), 1)] + "\x00\xff\xfe\x1b[2J" + t[i % max(len(t), 1) :],
    "truncated": lambda t, i: t[: i % max(len(t), 1)],
    "indent": lambda t, i: t.replace("\n", "\n   ", 1 + i % 3),
    "huge-int": lambda t, i: t + "\nextra: " + "9" * (10 + i % 6000) + "\n",
    "duplicate": lambda t, i: t + "\n" + t.splitlines()[i % len(t.splitlines())] + "\n",
    "yaml-1.1": lambda t, i: t.replace("true", "yes").replace("false", "off").replace(": 1", ": 0x1", 1),
    "repeated": lambda t, i: t * (2 + i % 40),
    "long-line": lambda t, i: t + "\nextra: " + "x" * (1000 + 97 * i) + "\n",
    "unicode-key": lambda t, i: t + "\n\u202eevil\u0007: 1\n",
}


@st.composite
def mutated_text(draw):
    """(example name, a file's text, what was done): one dict-level mutation (``mutated``) written out,
    or an example's own text mutated as YAML."""
    if draw(st.booleans()):
        name, data, what = draw(mutated())
        return name, yaml.safe_dump(data, allow_unicode=True), what
    name = draw(st.sampled_from(EXAMPLES))
    kind = draw(st.sampled_from(sorted(TEXT_MUTATIONS)))
    return name, TEXT_MUTATIONS[kind]((REPO / "problems" / "examples" / name).read_text(), draw(st.integers(0, 10**6))), kind


@settings(max_examples=SMALL_BUDGET // 2, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
@given(mutated_text())
def test_mutated_yaml_ends_in_one_line_or_an_answer(tmp_path_factory, case):
    """The same with YAML-level mutations (aliases, deep nesting, tags, garbage, huge numbers)."""
    name, text, what = case
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    for command in (["evaluate"], ["solve", "--time-limit", str(TIME_LIMIT_S)]):
        proc = run_main([*command, str(path)])
        _check(proc.returncode, proc.stderr, f"{name}: {what}: {command[0]}")


HANG_S = 120  # a command still running after this is killed and counted as a hang


def _start(args: list) -> tuple:
    proc = subprocess.Popen(
        [sys.executable, "-m", "parasol", *args], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    killer = threading.Timer(HANG_S, proc.kill)
    killer.start()
    return proc, time.perf_counter(), killer


def _finish(proc, started: float, killer) -> tuple:
    """(exit status or None when killed as hung, stderr, wall seconds, peak resident bytes)."""
    try:
        err = proc.stderr.read() if proc.stderr else ""
        _, status, usage = os.wait4(proc.pid, 0)
    except (ChildProcessError, OSError):
        return proc.wait(), "", time.perf_counter() - started, 0
    killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if wall >= HANG_S:
        return None, err, wall, usage.ru_maxrss * 1024
    return proc.returncode, err, wall, usage.ru_maxrss * 1024


FUZZ_LIMIT_S = int(os.environ.get("FUZZ_LIMIT_S", "5"))  # --time-limit of solve, enumerate and pareto (the issue: 5)
OBJECTIVES = {"training": "throughput,memory", "inference": "tokens_per_s_per_gpu,tokens_per_s_per_user"}


@pytest.mark.fuzz
@settings(
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "3000")),
    derandomize="FUZZ_FRESH" not in os.environ,  # FUZZ_FRESH=1: files never drawn before (with --hypothesis-seed=N)
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(mutated_text())
def test_many_mutated_files_in_subprocesses(tmp_path_factory, case):
    """issue 17's done-when, per file, through evaluate, solve, enumerate and pareto (two at a time on
    2 cores): exit 0, 1, 2 or (killed) nothing else; no traceback; one line when refused; no process
    above 1 GiB; a command with --time-limit done within the limit + 1 s (start-up included)."""
    name, text, what = case
    path = tmp_path_factory.mktemp("fuzz") / "p.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    kind = "inference" if "serving" in name or "pareto" in name else "training"
    limit = ["--time-limit", str(FUZZ_LIMIT_S)]
    commands = [
        (["evaluate"], None),
        (["solve", *limit, "--quiet"], FUZZ_LIMIT_S + 1),
        (["enumerate", *limit, "--quiet"], FUZZ_LIMIT_S + 1),
        (["pareto", "--objectives", OBJECTIVES[kind], *limit, "--quiet"], FUZZ_LIMIT_S + 1),
    ]
    for pair in (commands[:2], commands[2:]):
        running = [(args, bound, *_start([args[0], str(path), *args[1:]])) for args, bound in pair]
        for args, bound, proc, started, killer in running:
            code, err, wall, peak = _finish(proc, started, killer)
            label = f"{name}: {what}: {args[0]}"
            assert code is not None, f"{label} ran past {HANG_S} s"
            _check(code, err, label)
            assert peak < 1 << 30, f"{label} peaked at {peak / 2**30:.2f} GiB"
            if bound is not None:
                assert wall <= bound, f"{label} took {wall:.1f} s under --time-limit {FUZZ_LIMIT_S}"
