"""The engine's token budget of a pass (workload.max_prefill_tokens: TensorRT-LLM max_num_tokens, vLLM
max_num_batched_tokens), which counts a decoding sequence's token as well as prompt tokens
(model/inference.budget_micro_batch): a limit of plans where stated, the launch line's value where not."""

from __future__ import annotations

import math
import sys

import pytest
import yaml
from conftest import REPO, run_main, solved_as_enumerated, write_yaml
from test_frameworks import SERVING, flag_values, servers

sys.path.insert(0, str(REPO / "benchmarks"))
from inference_accuracy import trtllm_bench_run, trtllm_bench_settings, trtllm_bench_sizes  # noqa: E402

from parasol.model.inference import DEFAULT_PASS_TOKENS, budget_micro_batch, decode_passes, pass_tokens
from parasol.model.serving_step import evaluate_inference
from parasol.model.specs import InferenceWorkload, PoolMapping, ServingMapping
from parasol.solver.inference_validation import evaluate_oos, load_oos_runs
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem


def _workload(**kw) -> InferenceWorkload:
    return InferenceWorkload(**{"input_len": 871, "output_len": 128, "serving": "continuous", **kw})


def _data(budget=None, serving="continuous", batch=None, input_len=871, output_len=128) -> dict:
    wl = {
        "kind": "inference",
        "input_len": input_len,
        "output_len": output_len,
        "precision": "fp8",
        "kv_precision": "fp8",
        "weight_precision": "fp8",
        "serving": serving,
    }
    if budget is not None:
        wl["max_prefill_tokens"] = budget
    data = {"model": "llama3.1-8b", "system": {"name": "hgx-h200", "num_gpus": [1, 2]}, "workload": wl, "objective": "throughput"}
    if batch is not None:
        data["mapping"] = {"batch": batch}
    return data


@pytest.mark.parametrize("serving", ["static", "continuous", "disaggregated"])
@pytest.mark.parametrize("budget", [1536, 8192, 12000])
def test_the_budget_holds_the_largest_micro_batch_and_not_one_more(serving, budget):
    wl = _workload(serving=serving, max_prefill_tokens=budget)
    most = budget_micro_batch(wl)
    assert pass_tokens(wl, most) <= budget < pass_tokens(wl, most + 1)
    assert all(p.tokens <= budget for p in decode_passes(wl, most))
    assert budget_micro_batch(_workload(serving=serving)) is None


@pytest.mark.parametrize(("input_len", "output_len"), [(871, 128), (222, 292), (9429, 640), (128, 2048), (5000, 500)])
@pytest.mark.parametrize("batch", [64, 196, 1000, 2000])
def test_a_budget_trtllm_bench_sizes_for_a_batch_admits_that_batch(input_len, output_len, batch):
    """trtllm-bench sizes max_num_tokens as batch·(1 + input/output), rounded up (benchmarks/inference_accuracy.py
    ``trtllm_bench_sizes``, after NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py): the budget's semantics
    the model uses. Counting prompt tokens alone would admit ~(1 + output/input) times more."""
    _, budget = trtllm_bench_sizes(batch, input_len, output_len)
    most = budget_micro_batch(_workload(input_len=input_len, output_len=output_len, max_prefill_tokens=budget))
    assert batch <= most
    if budget > 2048:  # above trtllm-bench's floor its rounding adds at most 1,024 tokens
        assert most < batch + 1024 / (1 + input_len / output_len) + 1


def test_the_planner_keeps_within_the_budget_and_solve_equals_enumerate():
    free = enumerate_space(parse_problem(_data(), source="t")).plans[0]
    capped_problem = parse_problem(_data(budget=1536), source="t")
    enum, sol = enumerate_space(capped_problem), solved_as_enumerated(capped_problem, method="cpsat")
    most = budget_micro_batch(capped_problem.workload)
    for plan in (enum.plans[0], sol):
        assert plan.mapping.batch // plan.mapping.decode.pp <= most
        assert plan.evaluation.metrics["within_token_budget"]
    assert free.mapping.batch > most and "within_token_budget" not in free.evaluation.metrics
    assert enum.plans[0].evaluation.metrics["tokens_per_s"] < free.evaluation.metrics["tokens_per_s"]


@pytest.mark.parametrize(
    ("serving", "budget", "mapping"),
    [
        ("static", 8192, {"tp": 1, "pp": 1}),  # 8 prompts of 871 tokens a prefill pass
        ("continuous", 1536, {"tp": 1, "pp": 2}),  # the bound on each of two micro-batches
        ("disaggregated", 64, {}),  # a decode pool's pass: one token a sequence
    ],
)
def test_each_serving_mode_keeps_within_the_budget_on_cpsat_as_enumerated(serving, budget, mapping):
    data = _data(budget=budget, serving=serving)
    data["system"]["num_gpus"] = [2]
    if mapping:
        data["mapping"] = mapping
    problem = parse_problem(data, source="t")
    plan = solved_as_enumerated(problem, method="cpsat")
    assert plan.mapping.batch // plan.mapping.decode.pp <= budget_micro_batch(problem.workload)


def test_a_budget_below_one_sequences_pass_names_the_budget():
    """A 4,096-token prompt and 16 generated tokens: each sequence takes 257 tokens a pass; a 200-token budget
    holds none."""
    problem = parse_problem(_data(budget=200, input_len=4096, output_len=16), source="t")
    for result in (enumerate_space(problem), solve(problem, workers=1, time_limit=60, method="cpsat")):
        assert result.status == "INFEASIBLE"
        assert "token budget binds" in result.message and "max_prefill_tokens 200" in result.message
        assert "its decoded token and its prompt's share" in result.message
    static = parse_problem(_data(budget=512, serving="static"), source="t")  # an 871-token prompt a pass: none fit
    message = solve(static, workers=1, time_limit=60, method="cpsat").message
    assert "token budget binds" in message and "871 tokens each: its prompt, prefilled in one pass" in message


def test_a_loose_budget_is_not_blamed_and_a_tight_one_is_named_with_the_rate():
    """A request rate one H200 cannot sustain: a budget that holds more than any allowed batch is left out of the
    message; one that holds fewer sequences is named beside the GPUs."""

    def message(budget):
        data = _data(budget=budget)
        data["system"]["num_gpus"] = 1
        data["workload"].update(request_rate=400)
        problem = parse_problem(data, source="t")
        results = (enumerate_space(problem), solve(problem, workers=1, time_limit=60, method="cpsat"))
        assert {r.status for r in results} == {"INFEASIBLE"} and results[0].message == results[1].message
        return results[0].message

    plain, loose, tight = message(None), message(100_000), message(500)
    assert "request rate binds" in plain and loose == plain and "max_prefill_tokens" not in loose
    assert (
        "request rate binds" in tight and "raise workload.max_prefill_tokens (it holds 64 sequences" in tight
    )  # 500 / (1 + 871/128)


def test_evaluate_reports_a_batch_above_the_budget():
    problem = parse_problem(_data(budget=1536), source="t")
    mapping = ServingMapping(decode=PoolMapping(tp=1, pp=1, ep=1, dp=1), batch=256)
    met = evaluate_inference(problem.model, problem.system(1), problem.workload, mapping).metrics
    assert budget_micro_batch(problem.workload) < 256 and met["within_token_budget"] is False


@pytest.mark.parametrize("value", [0, -5, "many", 1.5])
def test_a_bad_budget_is_one_line(tmp_path, value):
    data = _data()
    data["workload"]["max_prefill_tokens"] = value
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "workload.max_prefill_tokens" in proc.stderr and "positive integer" in proc.stderr


BUDGET_FLAG = {"trtllm": "--max_num_tokens", "vllm": "--max-num-batched-tokens", "sglang": "--max-prefill-tokens"}


# a prompt-heavy 8B on one H200: its plan's passes carry more than the 8,192-token default
PROMPT_HEAVY = {
    "model": "llama3.1-8b",
    "system": {"name": "hgx-h200", "num_gpus": 1},
    "workload": {**SERVING["workload"], "input_len": 2048, "output_len": 128},
}


def _launch(tmp_path, name: str, budget=None, base=SERVING) -> tuple[dict, dict]:
    wl = {**base["workload"], "framework": name}
    if budget is not None:
        wl["max_prefill_tokens"] = budget
    path = write_yaml(tmp_path / "p.yaml", {**base, "workload": wl})
    proc = run_main(["solve", str(path), "--emit", "--json", "--time-limit", "30"])
    assert proc.returncode == 0, proc.stderr
    import json  # noqa: PLC0415

    doc = json.loads(proc.stdout)
    ((_, toks),) = servers(doc["launch"])
    return doc, flag_values(toks)


@pytest.mark.auto_method  # as the command runs: solve() takes its shortcuts
@pytest.mark.parametrize("name", ["trtllm", "vllm", "sglang"])
def test_the_launch_line_carries_the_budget_the_plan_needs(tmp_path, name):
    """No budget stated: the engine's budget holds the plan's pass (TensorRT-LLM and vLLM count every token,
    SGLang prompt tokens alone), at least the 8,192-token default; stated: the stated one."""
    for base in (SERVING, PROMPT_HEAVY):
        doc, flags = _launch(tmp_path, name, base=base)
        wl = parse_problem(base, source="t").workload
        micro = doc["mapping"]["batch"] / doc["mapping"]["pp"]
        emitted = int(flags[BUDGET_FLAG[name]][0])
        need = pass_tokens(wl, micro, prefill_only=name == "sglang")
        assert emitted == max(DEFAULT_PASS_TOKENS, math.ceil(need - 1e-9)), (base["model"], micro, need)
    assert need > DEFAULT_PASS_TOKENS  # the prompt-heavy plan's pass is above the default
    if name == "sglang":  # its chunk size bounds a pass's prompt tokens as well
        assert flags["--chunked-prefill-size"] == flags[BUDGET_FLAG[name]]
    _, flags = _launch(tmp_path, name, budget=4096)
    assert flags[BUDGET_FLAG[name]] == ["4096"]


def test_trtllm_bench_engine_sizes_move_only_the_runs_the_planners_default_cap_held():
    """benchmarks/inference_accuracy.py --oos-variant trtllm-bench: each out-of-sample TensorRT-LLM perf-overview run
    with the max_batch_size and max_num_tokens trtllm-bench's own rule builds its engine with (the DeepSeek-R1 blog runs
    keep the sizes they state, so they do not move). Its budgets hold every batch the
    planner chose (none binds); only the three 128/128 runs, held at 1,000 by the planner's default cap of 1,024, plan
    more (measured 2026-11-29: 3,750, 1,875 and 3,334 sequences; the family 10.0 % either way)."""
    runs = load_oos_runs()
    assert trtllm_bench_settings(next(e for e in runs if e["id"].endswith("h100-llama3.1-8b-tp1-128-128"))) == (4096, 8192)
    moved = {}
    for entry, default in zip(runs, evaluate_oos(runs)):
        sized = trtllm_bench_run(entry)
        if sized.evaluation.metrics["batch"] != default.evaluation.metrics["batch"]:
            moved[entry["id"]] = (default.evaluation.metrics["batch"], sized.evaluation.metrics["batch"])
        assert sized.evaluation.metrics["within_token_budget"]
    assert set(moved) == {e["id"] for e in runs if e["id"].endswith("-128-128")}
    assert all(before == 1000 < after for before, after in moved.values())


def test_the_reports_state_the_budget(tmp_path):
    """The DeepSeek-R1 example states MLPerf's 4,608 tokens: its text and HTML reports give what they hold."""
    example = REPO / "problems" / "examples" / "deepseek-r1-offline-b200.yaml"
    held = budget_micro_batch(parse_problem(yaml.safe_load(example.read_text()), source="t").workload)  # 4,608 / (1 + 804/3736)
    assert held == 3791
    text = run_main(["solve", str(example)]).stdout
    assert "token budget" in text and f"hold {held:,} sequences a micro-batch" in text
    proc = run_main(["report", str(example), "-o", str(tmp_path / "r.html")])
    assert proc.returncode == 0, proc.stderr
    assert f"the token budget of 4,608 a pass holds {held:,} sequences" in (tmp_path / "r.html").read_text()
