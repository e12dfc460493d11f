"""Requests whose lengths vary (workload.output_len_dispersion, workload.prompt_output_comoment): the decode step's
mean context is the length-biased mean (model.inference.mean_decode_context), and benchmarks/dataset_lengths.py
reads both moments off a dataset."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO, run_main, solved_as_enumerated, write_yaml

from parasol.model.inference import held_sequence_tokens, mean_decode_context
from parasol.model.specs import InferenceWorkload
from parasol.solver.api import evaluate
from parasol.solver.inference_validation import load_mlperf_runs
from parasol.solver.problem import parse_problem

sys.path.insert(0, str(REPO / "benchmarks"))
from dataset_lengths import length_moments  # noqa: E402
from dataset_lengths import main as dataset_lengths_main

# (prompt, generated) tokens of five requests, one of them long: the long one holds its slot for most steps
PAIRS = [(100, 10), (50, 200), (300, 40), (20, 1000), (80, 5)]


def test_the_mean_context_is_the_per_token_mean_over_the_requests():
    """Summed over its steps, a request of p prompt and o generated tokens attends to p·o + o²/2 cached tokens (the
    continuous form of the identical-request mean, p + o/2); per generated token over the set that is what the two
    moments give, and nearly twice the mean request's p + o/2."""
    exact = sum(p * o + o * o / 2 for p, o in PAIRS) / sum(o for _, o in PAIRS)
    m = length_moments(PAIRS)
    workload = InferenceWorkload(
        input_len=m.input_len,
        output_len=m.output_len,
        output_len_dispersion=m.output_len_dispersion,
        prompt_output_comoment=m.prompt_output_comoment,
    )
    assert mean_decode_context(workload) == pytest.approx(exact)
    assert m.decode_context() == pytest.approx(exact)
    assert exact > 1.9 * (m.input_len + m.output_len / 2)
    identical = length_moments([(100, 10)] * 3)
    assert identical.output_len_dispersion == identical.prompt_output_comoment == 1.0
    assert mean_decode_context(InferenceWorkload(input_len=100, output_len=10)) == 105.0


def _problem(**workload):
    return {
        "model": "llama3.1-8b",
        "system": {"name": "hgx-h200", "num_gpus": 1},
        "workload": {"kind": "inference", "input_len": 512, "output_len": 512, "precision": "fp8", "serving": "continuous"}
        | workload,
        "mapping": {"tp": 1},
        "objective": "throughput",
    }


def test_a_wider_spread_slows_decode_and_holds_more_kv_cache():
    """At the same batch, a dispersion of 3 (the batch's mean context 512 + 768 tokens instead of 512 + 256) makes each
    decode step read more KV cache: a longer TPOT and fewer tokens/s. Each slot holds the length-biased whole request,
    512 + 3 x 512 tokens instead of 1,024 (inference.held_sequence_tokens): more KV cache, fewer sequences fit."""
    same, spread = (evaluate(parse_problem(_problem(batch=256, output_len_dispersion=d), source="t")).metrics for d in (1.0, 3.0))
    assert spread["tpot_s"] > 1.05 * same["tpot_s"] and spread["tokens_per_s"] < same["tokens_per_s"]
    assert spread["peak_memory_gib"] > same["peak_memory_gib"] and spread["max_batch"] < same["max_batch"]
    workload = parse_problem(_problem(output_len_dispersion=3.0, prompt_output_comoment=0.5), source="t").workload
    assert held_sequence_tokens(workload) == 0.5 * 512 + 3.0 * 512


def test_the_solver_equals_the_enumerator_on_a_spread():
    """CP-SAT (forced) and the enumerator agree, and the spread moves the optimum's rate."""
    spread = solved_as_enumerated(
        parse_problem(_problem(output_len_dispersion=2.5, prompt_output_comoment=0.8), source="t"), method="cpsat"
    )
    plain = solved_as_enumerated(parse_problem(_problem(), source="t"), method="cpsat")
    assert spread.metrics["tokens_per_s"] < plain.metrics["tokens_per_s"]


def test_the_launch_line_sizes_the_longest_sequence_at_least_at_the_length_biased_request(tmp_path):
    """A spread says the longest request is at least c·input_len + d·output_len (a length-biased mean is at most the
    maximum): trtllm-serve's --max_seq_len takes that, identical requests input_len + output_len."""
    for moments, longest in (({}, 1024), ({"output_len_dispersion": 2.5, "prompt_output_comoment": 0.8}, 1690)):
        data = _problem(batch=64, framework="trtllm", **moments) | {"mapping": {"tp": 1, "pp": 1, "dp": 1, "ep": 1}}
        proc = run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", data)), "--emit"])
        assert proc.returncode == 0 and f"--max_seq_len {longest}" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    "field, value",
    [
        ("output_len_dispersion", 0.5),
        ("output_len_dispersion", "wide"),
        ("output_len_dispersion", 1e12),
        ("prompt_output_comoment", 0),
        ("prompt_output_comoment", -1),
        ("prompt_output_comoment", None),
    ],
)
def test_a_bad_moment_is_one_line_and_exit_2(tmp_path, field, value):
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", _problem(**{field: value})))])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"workload.{field}" in proc.stderr and "p.yaml" in proc.stderr


def test_dataset_lengths_reads_the_moments_off_a_csv(tmp_path, capsys):
    path = tmp_path / "lengths.csv"
    path.write_text("input_length,output_length\n" + "".join(f"{p},{o}\n" for p, o in PAIRS))
    assert dataset_lengths_main([str(path)]) == 0
    out = capsys.readouterr().out
    m = length_moments(PAIRS)
    assert f"output_len_dispersion {m.output_len_dispersion:.4f}" in out and "5 requests" in out
    mean_o = sum(o for _, o in PAIRS) / 5
    assert m.output_len_dispersion == pytest.approx(sum(o * o for _, o in PAIRS) / 5 / mean_o**2)


def test_dataset_lengths_cuts_the_answers_at_the_engines_max_output_len(tmp_path, capsys):
    """An engine stops a request at its max output length, so a run's answers are the dataset's cut there: the long
    answer (1,000 tokens) counts as 300, the mean and the spread fall, the rest is unchanged; a cut below one token is
    refused in one line."""
    cut = length_moments(PAIRS, max_output_len=300)
    assert cut == length_moments([(p, min(o, 300)) for p, o in PAIRS])
    assert (
        cut.output_len < length_moments(PAIRS).output_len
        and cut.output_len_dispersion < length_moments(PAIRS).output_len_dispersion
    )
    path = tmp_path / "lengths.csv"
    path.write_text("input_length,output_length\n" + "".join(f"{p},{o}\n" for p, o in PAIRS))
    assert dataset_lengths_main([str(path), "--max-output-len", "300"]) == 0
    assert f"output_len_dispersion {cut.output_len_dispersion:.4f}" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        dataset_lengths_main([str(path), "--max-output-len", "0"])
    assert stop.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize("text", ["input_length,output_length\n", "prompt,answer\n1,2\n", "input_length,output_length\n5,0\n"])
def test_dataset_lengths_refuses_a_file_without_lengths(tmp_path, capsys, text):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SystemExit) as stop:
        dataset_lengths_main([str(path)])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1 and "bad.csv" in err


def test_the_mlperf_runs_carry_their_datasets_moments():
    """Each MLPerf run whose dataset file gives generated lengths in tokens carries that file's two moments (the
    data file's header; `python benchmarks/dataset_lengths.py` on the CSVs it names); Llama 3.1 8B's file does not,
    so its runs keep identical requests."""
    moments = {
        "llama2-70b": (1.6198, 0.8973),
        "mixtral-8x7b": (1.6055, 1.0262),
        "llama3.1-405b": (1.1451, 0.9750),
        "deepseek-v3": (2.2409, 0.7778),  # cut at the engine's max_output_len 20,000
        "llama3.1-8b": (1.0, 1.0),
    }
    for e in load_mlperf_runs():
        wl = e["workload"]
        got = (wl.get("output_len_dispersion", 1.0), wl.get("prompt_output_comoment", 1.0))
        assert got == moments[e["model"]], e["id"]
