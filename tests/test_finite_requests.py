"""Finite request sets: workload.requests, N identical requests queued at once (an offline run such as
trtllm-bench throughput), served in waves of the pool's dp·batch slots (model/inference.request_waves,
model/serving_step.compose)."""

from __future__ import annotations

import copy

import pytest
from conftest import rel_close, run_cli, solved_as_enumerated

from parasol.model.errors import ProblemError
from parasol.model.inference import request_waves, wave_batches
from parasol.model.serving_step import evaluate_inference
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem


def _data(serving="continuous", requests=None, batch=64, dp=2, objective="throughput"):
    wl = {"kind": "inference", "input_len": 512, "output_len": 128, "precision": "fp8", "serving": serving}
    if requests is not None:
        wl["requests"] = requests
    mapping = {"tp": 1, "pp": 1, "dp": dp, "batch": batch}
    if serving == "disaggregated":
        mapping = {"prefill": {"tp": 1, "dp": 1}, "decode": {"tp": 1, "dp": dp}, "batch": batch}
    return {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": dp + (serving == "disaggregated")},
        "workload": wl,
        "mapping": mapping,
        "objective": objective,
    }


def _metrics(**kw):
    problem = parse_problem(_data(**kw), source="t")
    ev = evaluate_inference(problem.model, problem.system(), problem.workload, problem.fixed_serving_mapping())
    return ev.metrics


@pytest.mark.parametrize(
    ("requests", "slots", "waves"), [(1, 128, 1), (128, 128, 1), (129, 128, 2), (3000, 464, 7), (30000, 1, 30000)]
)
def test_waves_are_the_requests_over_the_slots_rounded_up(requests, slots, waves):
    assert request_waves(requests, slots) == waves


def test_the_batches_that_fill_a_sets_waves():
    """ceil(N / k) for every wave count k, up to the largest batch: 3,000 requests fill 7 waves of 429 and
    8 of 375; every listed batch needs more waves than the next larger one."""
    batches = wave_batches(3000, 467)
    assert batches == tuple(sorted(set(batches))) and batches[0] == 1 and batches[-1] == 429
    assert {429, 375, 334, 300} <= set(batches) and 464 not in batches
    assert all(request_waves(3000, a) > request_waves(3000, b) for a, b in zip(batches, batches[1:]))
    assert wave_batches(5, 1024) == (1, 2, 3, 5)


@pytest.mark.parametrize("serving", ["static", "continuous"])
def test_a_set_takes_one_end_to_end_latency_per_wave(serving):
    """128 slots (dp 2 x batch 64): 1,000 requests are 8 waves, each one request's end-to-end latency;
    the throughput is the set's output tokens over that time, per GPU over the 2 GPUs."""
    steady = _metrics(serving=serving)
    finite = _metrics(serving=serving, requests=1000)
    assert finite["ttft_s"] == steady["ttft_s"] and finite["tpot_s"] == steady["tpot_s"]
    assert rel_close(finite["makespan_s"], 8 * steady["e2e_latency_s"], 1e-12)
    assert rel_close(finite["tokens_per_s"], 1000 * 128 / finite["makespan_s"], 1e-12)
    assert rel_close(finite["tokens_per_s_per_gpu"], finite["tokens_per_s"] / 2, 1e-12)
    assert rel_close(finite["requests_per_s"], 1000 / finite["makespan_s"], 1e-12)
    assert "makespan_s" not in steady


@pytest.mark.parametrize("serving", ["static", "continuous"])
def test_a_remainder_costs_a_whole_wave_and_full_waves_approach_the_steady_state(serving):
    """129 requests in 128 slots take two waves: about half the rate of 128. Full waves, many of them,
    come within the first wave's ramp-up of the steady state; they never beat it."""
    full, one_more = _metrics(serving=serving, requests=128), _metrics(serving=serving, requests=129)
    assert one_more["makespan_s"] > 1.5 * full["makespan_s"]
    assert rel_close(full["makespan_s"], full["e2e_latency_s"], 1e-12)  # one wave: every request runs at once
    steady = _metrics(serving=serving)
    many = _metrics(serving=serving, requests=128 * 400)
    assert many["tokens_per_s"] <= steady["tokens_per_s"] * (1 + 1e-9)
    assert rel_close(many["tokens_per_s"], steady["tokens_per_s"], 0.02 if serving == "continuous" else 1e-9)
    assert rel_close(_metrics(serving=serving, requests=128 * 399)["makespan_s"], 399 * steady["e2e_latency_s"], 1e-12)


@pytest.mark.parametrize("batch", [16, 64, 512])
def test_a_disaggregated_set_pipelines_its_two_pools(batch):
    """After the first request's latency, the later decode waves (output_len - 1 TPOTs each) or the later
    prefill passes, whichever take longer; over many requests that is the steady state's rate (the slower
    pool's), and a prefill-bound plan (the largest batch) is limited by its prefill passes, not its slots."""
    steady = _metrics(serving="disaggregated", batch=batch, dp=1)
    finite = _metrics(serving="disaggregated", batch=batch, dp=1, requests=1000)
    decode_later = (request_waves(1000, batch) - 1) * 127 * steady["tpot_s"]
    assert finite["makespan_s"] >= steady["e2e_latency_s"] + decode_later * (1 - 1e-9)
    many = _metrics(serving="disaggregated", batch=batch, dp=1, requests=batch * 1000)
    assert rel_close(many["requests_per_s"], steady["requests_per_s"], 0.01)
    assert many["requests_per_s"] <= steady["requests_per_s"] * (1 + 1e-9)


@pytest.mark.parametrize("serving", ["static", "continuous", "disaggregated"])
def test_cpsat_equals_the_enumerator_on_a_finite_set_with_the_batch_free(serving):
    """With the batch a decision the optimum may leave slots empty to save a wave: CP-SAT (forced: the space
    is small enough to be enumerated otherwise) agrees with the enumerator, and its plan re-evaluates to its
    objective."""
    data = _data(serving=serving, requests=700)
    data["mapping"]["batch"] = [8, 16, 32, 48, 64, 96, 128, 176, 256]
    problem = parse_problem(data, source="t")
    plan = solved_as_enumerated(problem, workers=1, method="cpsat")
    table = enumerate_space(problem, keep_all=True).table
    assert rel_close(table["tokens_per_s"].max(), plan.evaluation.metrics["tokens_per_s"], 1e-3)


def test_cpsat_holds_a_set_on_many_gpu_counts():
    """Llama 3.3 70B on 8 to 64 H100, 1,000 requests, tp, pp, dp and the batch free: the wave table is long
    enough to be encoded piecewise, whose loose bounds once sent an integer past CP-SAT's range (a one-line
    refusal of a valid problem); CP-SAT now proves the enumerator's optimum."""
    wl = {"kind": "inference", "input_len": 2048, "output_len": 2048, "precision": "fp8", "serving": "continuous"}
    data = {"model": "llama3.3-70b", "system": {"name": "dgx-h100", "num_gpus": [8, 16, 32, 64]}, "workload": wl}
    data["workload"]["requests"] = 1000
    plan = solved_as_enumerated(parse_problem(data, source="t"), workers=1, method="cpsat")
    met = plan.evaluation.metrics
    assert rel_close(met["requests_per_s"], 1000 / met["makespan_s"], 1e-12)


def test_the_optimum_of_a_set_need_not_be_the_largest_batch():
    """1,000 requests on one GPU: 176 slots leave 6 waves (the last 120 full), 128 take 8, 256 only 4 but
    longer ones; whichever wins, the enumerator's best is the fastest makespan over the listed batches."""
    data = _data(requests=1000, dp=1)
    data["mapping"]["batch"] = [128, 176, 200, 256]
    problem = parse_problem(data, source="t")
    table = enumerate_space(problem, keep_all=True).table
    best = enumerate_space(problem).plans[0].evaluation.metrics
    assert rel_close(best["makespan_s"], table["makespan_s"].min(), 1e-12)
    assert best["batch"] < 256  # the largest batch is not the fastest way through this set
    assert best["batch"] in (200, 250)  # the listed batches that fill their waves: 5 of 200, 4 of 250


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be a positive integer"),
        (-5, "must be a positive integer"),
        ("many", "must be a positive integer"),
        (1.5, "must be a positive integer"),
        (10**7, "must be at most 1,000,000"),
    ],
)
def test_a_bad_request_count_is_one_line_naming_the_field(value, message):
    with pytest.raises(ProblemError, match=message) as err:
        parse_problem(_data(requests=value), source="t")
    assert err.value.field == "workload.requests"


def test_a_finite_set_and_a_sustained_load_exclude_each_other(tmp_path):
    data = copy.deepcopy(_data(requests=100))
    data["workload"]["request_rate"] = 5
    with pytest.raises(ProblemError, match="exclude each other") as err:
        parse_problem(data, source="t")
    assert err.value.field == "workload.requests"
    path = tmp_path / "p.yaml"
    path.write_text(
        "model: llama3.1-8b\nsystem: {name: dgx-h100, num_gpus: 1}\n"
        "workload: {kind: inference, input_len: 64, output_len: 64, batch: 8, requests: 100, request_rate: 5}\n"
    )
    proc = run_cli(["evaluate", str(path)])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "workload.requests" in proc.stderr


def test_the_shipped_offline_example_leaves_no_small_last_wave():
    """problems/examples/llama3-8b-offline-requests.yaml: the best batch serves the 3,000 requests in
    ceil(3000 / batch) waves, and no longer than the largest batch that fits would (a small last wave)."""
    from conftest import REPO  # noqa: PLC0415

    from parasol.model.specs import ServingMapping  # noqa: PLC0415
    from parasol.solver.problem import load_problem  # noqa: PLC0415

    problem = load_problem(REPO / "problems" / "examples" / "llama3-8b-offline-requests.yaml")
    plan = solve(problem, workers=1, time_limit=60).plans[0]
    met = plan.evaluation.metrics
    assert rel_close(met["makespan_s"], request_waves(3000, met["batch"]) * met["e2e_latency_s"], 1e-12)
    largest = ServingMapping(batch=met["max_batch"], decode=plan.mapping.decode)
    full = evaluate_inference(problem.model, problem.system(), problem.workload, largest).metrics
    assert met["makespan_s"] <= full["makespan_s"] and met["batch"] <= met["max_batch"]


def test_the_text_and_html_reports_say_how_long_the_set_takes(tmp_path):
    from conftest import REPO  # noqa: PLC0415

    example = str(REPO / "problems" / "examples" / "llama3-8b-offline-requests.yaml")
    text = run_cli(["solve", example])
    assert text.returncode == 0 and "time to serve the set" in text.stdout and "3,000 requests queued at once" in text.stdout
    page = tmp_path / "plan.html"
    assert run_cli(["report", example, "-o", str(page)]).returncode == 0
    assert "the set served in" in page.read_text()
