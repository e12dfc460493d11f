"""issue 17 (in part): hostile files and arguments end as one line on stderr, exit 2, before any
work: YAML aliases, deep nesting, huge files, duplicate keys, files that are not regular files,
control characters in keys, numbers out of range on the command line, a switch radix that never
builds a fat tree."""

from __future__ import annotations

import pytest
import yaml
from conftest import REPO, run_main, training_problem, write_yaml

GOOD = (REPO / "problems/examples/gpt3-175b-a100.yaml").read_text()


def _one_line_exit_2(proc, *words):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("parasol: "), proc.stderr
    assert "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "text,words",
    [
        ("a: &x [1, 2]\nb: *x\n", ("alias (*x)", "line 2")),
        ("lol: &a [1, 1]\nlol2: &b [*a, *a, *a]\nlol3: [*b, *b, *b]\n", ("alias",)),
        ("model: " + "[" * 100 + "]" * 100 + "\n", ("nested deeper than 32",)),
        ("model: gpt3-175b\nmodel: llama3-8b\n", ("found the key 'model' twice",)),
        (GOOD + "\nsystem: {name: dgx-h100, num_gpus: 8}\n", ("twice",)),
        ("- 1\n- 2\n", ("must be a YAML mapping",)),
    ],
    ids=["alias", "billion-laughs", "deep", "duplicate", "duplicate-section", "not-a-mapping"],
)
def test_hostile_yaml_is_refused_in_one_line(tmp_path, text, words):
    path = tmp_path / "p.yaml"
    path.write_text(text)
    _one_line_exit_2(run_main(["evaluate", str(path)]), str(path), *words)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("model: gpt3-175b\n" + "#" * (5 << 20) + "\n")
    _one_line_exit_2(run_main(["evaluate", str(path)]), "larger than 4 MiB")


@pytest.mark.parametrize("target", ["/dev/zero", "DIR"])
def test_a_path_that_is_not_a_regular_file_is_refused(tmp_path, target):
    target = str(tmp_path) if target == "DIR" else target
    _one_line_exit_2(run_main(["evaluate", target]), "not a regular file")


def test_control_characters_from_a_file_are_escaped(tmp_path):
    data = yaml.safe_load(GOOD)
    data["bad\nparasol: forged line\x1b[2J"] = 1
    line = _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", data))]), "unknown key")
    assert "\\n" in line and "\\x1b" in line and "\x1b" not in line


@pytest.mark.parametrize(
    "args,words",
    [
        (["--workers", "100000"], ("--workers", "up to 256")),
        (["--time-limit", "nan"], ("--time-limit",)),
        (["--time-limit", "inf"], ("--time-limit",)),
        (["--top", "99999999999999999999"], ("--top",)),
        (["--seed", "99999999999999999999"], ("--seed",)),
    ],
)
def test_numbers_out_of_range_on_the_command_line(args, words):
    _one_line_exit_2(run_main(["solve", "problems/examples/gpt3-175b-a100.yaml", *args]), *words)


def test_cost_refuses_an_infinite_price():
    _one_line_exit_2(run_main(["cost", "dgx-h100", "--gpu-hour-usd", "inf", "--json"]), "--gpu-hour-usd")


@pytest.mark.parametrize("radix", [2, 3, 0, 10**6])
def test_a_switch_radix_that_builds_no_fat_tree_is_refused(tmp_path, radix):
    """A radix-2 fat tree never grows (k/2 = 1): `parasol cost` looped forever on such a system file."""
    data = yaml.safe_load((REPO / "problems/systems/dgx-h100.yaml").read_text())
    data["cost"] = {**(data.get("cost") or {}), "switch_radix": radix}
    path = write_yaml(tmp_path / "sys.yaml", data)
    _one_line_exit_2(run_main(["cost", "--system", str(path)]), "switch_radix")


def test_the_fat_tree_itself_refuses_a_radix_below_four():
    from parasol.model.system_cost import fat_tree_tiers  # noqa: PLC0415

    with pytest.raises(ValueError):
        fat_tree_tiers(1024, 2)
    assert fat_tree_tiers(1024, 64) == 2  # 32 leaves and 16 spines serve 2 (64/2)^2 = 2,048 ports


@pytest.mark.parametrize("name", ["x" * 5000, "gpt3\x00-175b", "gpt3 175b", ".hidden", 12])
def test_a_model_name_outside_the_library_alphabet_is_refused(tmp_path, name):
    data = yaml.safe_load(GOOD)
    data["model"] = name
    line = _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", data))]), "model")
    assert "x" * 100 not in line  # a long name is not echoed whole


@pytest.mark.parametrize(
    "path,value,words",
    [
        (("workload", "global_batch"), 2**31, ("workload.global_batch", "at most 16,777,216")),
        (("workload", "seq_len"), 2**40, ("workload.seq_len", "at most")),
        (("system", "num_gpus"), 10**12, ("system.num_gpus", "at most 1,048,576")),
        (("system", "num_gpus"), {"min": 1, "max": 100000}, ("system.num_gpus.step", "more than 4,096")),
        (("workload", "global_batch"), 10**60, ("an integer of about 61 digits",)),
    ],
    ids=["global-batch", "seq-len", "devices", "device-range", "huge-integer"],
)
def test_counts_beyond_their_documented_range_are_refused_before_any_work(tmp_path, path, value, words):
    """These ran for minutes (divisors of 2^31 counted one by one, 100,000 systems built) or crashed."""
    data = yaml.safe_load(GOOD)
    data[path[0]][path[1]] = value
    data.pop("mapping")
    _one_line_exit_2(run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))]), *words)


def test_an_integer_of_thousands_of_digits_is_refused_in_one_line(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(GOOD.replace("global_batch: 1536", "global_batch: " + "9" * 5000))
    _one_line_exit_2(run_main(["evaluate", str(path)]), "malformed YAML")


def test_divisors_by_trial_division_to_the_square_root():
    from parasol.solver.training_space import divisors  # noqa: PLC0415

    for n in (1, 2, 36, 97, 5120, 15360, 2**20):
        assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@pytest.mark.parametrize("target", ["DIR", "FILE", "/dev/null"])
def test_pareto_never_replaces_what_is_at_its_plot_path_and_says_so_before_searching(tmp_path, target):
    if target == "DIR":
        target = str(tmp_path)
    elif target == "FILE":
        target = str(tmp_path / "mine.png")
        (tmp_path / "mine.png").write_text("the user's")
    args = ["pareto", "problems/examples/llama3-8b-pareto.yaml", "--objectives", "tokens_per_s_per_gpu,tokens_per_s_per_user"]
    proc = run_main([*args, "--plot", target])
    _one_line_exit_2(proc, "--plot")
    assert proc.stdout == ""  # refused before the front was searched
    if target.endswith("mine.png"):
        assert (tmp_path / "mine.png").read_text() == "the user's"


def test_a_time_limit_holds_while_the_tables_are_built():
    """Under a 0.5 s limit, DeepSeek-V3 on 2,048 H800 by CP-SAT stops within the limit + 1 s and says why,
    rather than running on: the limit passes while its factor tables are built (about 1 s on 2 cores)
    or, on a faster machine, in the search before CP-SAT has a plan."""
    import time  # noqa: PLC0415

    start = time.perf_counter()
    proc = run_main(["solve", "problems/examples/deepseek-v3-h800.yaml", "--time-limit", "0.5", "--method", "cpsat"])
    assert time.perf_counter() - start < 0.5 + 1 + 1.0  # the limit, the grace the issue allows, loading the file
    assert proc.returncode == 1 and "status UNKNOWN" in proc.stdout and "time limit passed" in proc.stdout


def test_a_search_that_runs_out_of_time_without_a_plan_says_so():
    """CP-SAT's UNKNOWN (no plan when the time ran out) comes with the reason and what to do."""
    from parasol.solver import cpsat_search  # noqa: PLC0415
    from parasol.solver.planner import planner_for  # noqa: PLC0415
    from parasol.solver.problem import parse_problem  # noqa: PLC0415

    problem = parse_problem(training_problem("llama3-70b", num_gpus=512, global_batch=512), source="t.yaml")
    result = cpsat_search.solve_one(planner_for(problem), problem, "throughput", 1, 1e-6, 1, 0)  # 10 ms, the floor
    assert result.status == "UNKNOWN" and not result.plans
    assert result.message == cpsat_search.SEARCH_TIME_UP and "raise --time-limit" in result.message


def _secret(tmp_path):
    """A YAML file elsewhere on the machine whose content must never reach an error message."""
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "secret.yaml").write_text("password_hash: s3cr3t-value\n")
    return folder / "secret.yaml"


@pytest.mark.parametrize("where", ["model", "engine", "system", "system-list", "device"])
def test_a_name_never_reads_a_file_outside_the_library(tmp_path, where):
    """A path where a name belongs (absolute, ../, a .yaml name) is refused before anything is read:
    files outside the library are named explicitly, {file: PATH}; the message shows that form."""
    secret = _secret(tmp_path)
    problem = yaml.safe_load(GOOD)
    if where == "model":
        problem["model"] = str(secret)
    elif where == "engine":
        problem = yaml.safe_load((REPO / "problems/examples/llama3-70b-serving.yaml").read_text())
        problem["workload"]["engine"] = "../elsewhere/secret.yaml"
    elif where == "system":
        problem["system"]["name"] = str(secret)
    elif where == "system-list":
        problem["system"]["name"] = ["dgx-a100", "elsewhere/secret.yml"]
    else:  # a system file (named explicitly) naming its device by a bare path
        system = yaml.safe_load((REPO / "problems/systems/dgx-a100.yaml").read_text())
        system["device"] = str(secret)
        problem["system"]["name"] = {"file": str(write_yaml(tmp_path / "sys.yaml", system))}
    line = _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", problem))]), "{file:")
    assert "s3cr3t" not in line and "password_hash" not in line


def test_a_file_named_explicitly_is_read_and_its_errors_name_it(tmp_path):
    secret = _secret(tmp_path)
    problem = yaml.safe_load(GOOD)
    problem["model"] = {"file": "elsewhere/secret.yaml"}  # relative to the problem file's folder
    line = _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", problem))]), str(secret))
    assert "password_hash" in line  # the user named this file: its unknown key is shown
    problem["model"] = {"file": "elsewhere/secret.yaml", "extra": 1}
    _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", problem))]), "model.extra")
    problem["model"] = {"file": "x" * 5000}
    line = _one_line_exit_2(run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", problem))]), "model.file")
    assert "x" * 100 not in line


PARETO = ["pareto", "problems/examples/llama3-8b-pareto.yaml", "--objectives", "tokens_per_s_per_gpu,tokens_per_s_per_user"]


@pytest.mark.parametrize("kind", ["folder", "fifo", "link", "device"])
def test_an_output_option_never_replaces_anything_but_a_regular_file(tmp_path, kind):
    """Not even with --force: a folder, a FIFO, a symbolic link or a device node is left as it was."""
    import os  # noqa: PLC0415

    target = tmp_path / "out.csv"
    if kind == "folder":
        target.mkdir()
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "link":
        (tmp_path / "real.csv").write_text("mine\n")
        target.symlink_to(tmp_path / "real.csv")
    else:
        target = "/dev/null"
    why = "--out" if kind == "device" else "not a regular file"  # /dev/null: no table suffix either
    for force in ([], ["--force"]):
        _one_line_exit_2(run_main([*PARETO, "--out", str(target), *force]), why)
        _one_line_exit_2(run_main(["solve", "problems/examples/gpt3-175b-a100.yaml", "--out", str(target), *force]), "--out")
    if kind == "link":
        assert target.is_symlink() and (tmp_path / "real.csv").read_text() == "mine\n"


def test_force_replaces_a_regular_file_and_only_when_asked(tmp_path):
    out = tmp_path / "front.csv"
    out.write_text("mine\n")
    _one_line_exit_2(run_main([*PARETO, "--out", str(out)]), "exists", "--force")
    assert out.read_text() == "mine\n"
    proc = run_main([*PARETO, "--out", str(out), "--force"])
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("tp,") or "tokens_per_s_per_gpu" in out.read_text().splitlines()[0]
    assert not [p for p in tmp_path.iterdir() if p.name != "front.csv"]  # no temporary file left beside it


def test_keeping_every_point_of_a_huge_space_is_refused_before_the_search():
    """`enumerate --all` keeps every point's metrics: 24M mappings took 380 s and 5.5 GB before."""
    _one_line_exit_2(run_main(["enumerate", "problems/examples/chiplet-codesign.yaml", "--all", "--json"]), "--all", "1,000,000")


def test_a_model_deeper_than_the_cap_is_refused(tmp_path):
    data = yaml.safe_load(GOOD)
    data["model"] = {"layers": 5000, "hidden": 4096, "heads": 32, "ffn": 16384, "vocab": 32000, "activation": "gelu"}
    data.pop("mapping")
    _one_line_exit_2(run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))]), "model.layers", "at most 1,024")


@pytest.mark.parametrize("case", ["range", "infeasible"])
def test_the_time_limit_bounds_the_whole_command(tmp_path, case):
    """issue 17: building a 4,096-count space and explaining an infeasible problem ran 1-2 s past a
    3 s limit (4.95 s and 4.59 s, loading included); now nothing new starts past the limit. The margin, 1.5 s,
    holds the interpreter's start under the suite's two workers (4.02 s measured once with 1.0) and still fails
    both old overruns."""
    import time  # noqa: PLC0415

    data = yaml.safe_load((REPO / "problems/examples/gpt3-175b-a100-free.yaml").read_text())
    data["system"]["num_gpus"] = {"min": 1, "max": 4096} if case == "range" else 8
    path = write_yaml(tmp_path / "p.yaml", data)
    start = time.perf_counter()
    proc = run_main(["solve", str(path), "--time-limit", "3", "--quiet"])
    wall = time.perf_counter() - start
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert wall < 3 + 1.5, f"{wall:.2f} s"


def test_a_huge_listed_value_codes_without_a_table_as_large():
    """A serving batch of 2^31 - 1 requests took 24 GB (a lookup table from 0 to the largest value);
    above 2^20 the codes are searched, and a value outside the domain is still -1."""
    import numpy as np  # noqa: PLC0415

    from parasol.solver.relations import LUT_LIMIT, numeric  # noqa: PLC0415

    small, huge = numeric([1, 4, 64]), numeric([1, 4, 2**31 - 1])
    assert huge._lut is None and small._lut is not None and LUT_LIMIT <= 2**31 - 1
    assert huge.codes(np.array([2**31 - 1, 1, 4, 5])).tolist() == [2, 0, 1, -1]
    assert small.codes(np.array([64, 1, 4, 5])).tolist() == [2, 0, 1, -1]


def test_a_serving_batch_of_two_billion_requests_solves_in_bounded_memory(tmp_path):
    import resource  # noqa: PLC0415

    data = yaml.safe_load((REPO / "problems/examples/llama3-8b-pareto.yaml").read_text())
    data["mapping"]["batch"] = [1, 2**31 - 1]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data)), "--time-limit", "5"])
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: under 0.5 GiB more


def test_serving_lengths_beyond_their_range_are_refused(tmp_path):
    """An answer of 442,979,766 tokens reached CP-SAT as an integer past 64 bits (a TypeError traceback,
    found by the fuzz run)."""
    data = yaml.safe_load((REPO / "problems/examples/llama3-8b-pareto.yaml").read_text())
    data["workload"]["output_len"] = 442_979_766
    path = write_yaml(tmp_path / "p.yaml", data)
    _one_line_exit_2(run_main(["solve", str(path), "--method", "cpsat"]), "workload.output_len", "at most 16,777,216")


def test_a_quantity_past_the_solvers_integers_is_one_line():
    from parasol.model.errors import ProblemError  # noqa: PLC0415
    from parasol.solver.cpsat_ops import INT_LIMIT, CpSatOps  # noqa: PLC0415

    with pytest.raises(ProblemError, match="64-bit"):
        CpSatOps._check(None, 0, INT_LIMIT * 4, "e2e")
