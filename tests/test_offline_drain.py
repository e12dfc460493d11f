"""A finite set of requests whose answers vary in length (workload.output_len_max): admission staggers them, the
batch stays full until the last is admitted, then the set drains over the longest answer (model/inference.drain_batch,
model/serving_step.drained_makespan). Checked against a step-by-step simulation of continuous batching."""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
from conftest import REPO, rel_close, run_main, solved_as_enumerated, write_yaml

from parasol.model.errors import ProblemError
from parasol.model.inference import drain_batch, mean_decode_context, mean_residual_output
from parasol.model.ops import FloatOps
from parasol.model.serving_step import drained_makespan, evaluate_inference
from parasol.model.specs import InferenceWorkload
from parasol.solver.planner import enumerate_space
from parasol.solver.problem import load_problem, parse_problem


def simulate(lengths, slots: int, step_s, prompts=None) -> float:
    """Seconds to serve requests of ``lengths`` answer tokens (and ``prompts`` prompt tokens, none by default), queued
    at once in this order, on ``slots`` slots: each step decodes one token of every busy slot against its cached
    context and takes ``step_s(busy, context)`` (context: the busy slots' cached tokens, summed); a slot whose answer
    is done takes the next request at the next step (iteration-level scheduling)."""
    lengths = np.asarray(lengths, float)
    prompts = np.zeros_like(lengths) if prompts is None else np.asarray(prompts, float)
    left, cached = lengths[:slots].copy(), prompts[:slots].copy()
    queue = list(zip(lengths[slots:][::-1], prompts[slots:][::-1]))
    total = 0.0
    while left.size:
        total += step_s(left.size, cached.sum())
        left -= 1
        cached += 1
        done = left <= 0
        refill = [queue.pop() for _ in range(min(int(done.sum()), len(queue)))]
        left = np.concatenate([left[~done], np.asarray([o for o, _ in refill], float)])
        cached = np.concatenate([cached[~done], np.asarray([p for _, p in refill], float)])
    return total


def _lengths(n: int, cap: int, seed: int = 7):
    """Answers with a long tail that reaches the cap: 90 % from 1 to 200 tokens, 10 % at the cap."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.9, rng.integers(1, 201, n), cap)


def _model_makespan(lengths, slots: int, cap: int, step_s, floor: int = 1, prompts=None) -> float:
    """The model's makespan of the same set from its moments: the staggered steps at the full batch, the drain's at
    its mean batch (``drain_batch``), both at the mean decode context (``mean_decode_context``)."""
    o = np.asarray(lengths, float)
    p = np.zeros_like(o) if prompts is None else np.asarray(prompts, float)
    mean, square = float(o.mean()), float(np.mean(o * o))
    workload = InferenceWorkload(
        input_len=max(float(p.mean()), 1e-9),
        output_len=mean,
        serving="continuous",
        requests=len(o),
        output_len_dispersion=square / mean**2,
        prompt_output_comoment=float(np.mean(p * o)) / (max(float(p.mean()), 1e-9) * mean),
        output_len_max=cap,
        cuda_graph_min_batch=floor,
    )
    ctx = SimpleNamespace(workload=workload)
    batch = drain_batch(workload, slots, set_share=len(o))
    full = step_s(slots, slots * mean_decode_context(workload))
    drain = step_s(batch, batch * mean_decode_context(workload))
    return drained_makespan(FloatOps(ctx, {}), ctx, 0.0, full, cap * drain, slots)


@pytest.mark.parametrize("slots", [64, 256])
def test_the_drained_makespan_matches_a_simulation_of_continuous_batching(slots):
    """Step time affine in the batch (weights streamed once a step, each sequence's KV cache and rows on top): ten
    waves of answers up to 1,000 tokens. The model is within 1 % of the simulated makespan (0.3 % measured), where
    the steady state's rate over the same tokens is 14-23 % short: the drain is the difference."""
    lengths, cap = _lengths(10 * slots, 1000), 1000

    def step_s(busy, context):
        return 1.0 + 0.005 * busy

    simulated = simulate(lengths, slots, step_s)
    assert rel_close(_model_makespan(lengths, slots, cap, step_s), simulated, 0.01)
    steady = len(lengths) * float(np.mean(lengths)) / slots * step_s(slots, 0)
    assert steady < 0.9 * simulated


def test_a_padded_drain_is_slower_and_the_model_follows():
    """A decode step of fewer than 256 sequences runs padded to 256 (CUDA graphs captured from 256 up): the
    simulated set takes 8 % longer, and the model's, its drain's mean batch (150) held at 256, stays within 1.5 % of
    it (0.7 % measured). Padded from 128, below that mean, only the simulation slows (1.8 %): the model pads the
    drain's mean step, not each step, and is 1.7 % short."""
    slots, cap = 512, 1000
    lengths = _lengths(10 * slots, cap)

    def affine(busy, context):
        return 1.0 + 0.005 * busy

    def padded(busy, context):
        return affine(max(busy, 256), context)

    plain, slow = simulate(lengths, slots, affine), simulate(lengths, slots, padded)
    assert slow > 1.05 * plain
    model = _model_makespan(lengths, slots, cap, padded, floor=256)
    assert rel_close(model, slow, 0.015) and model > 1.05 * _model_makespan(lengths, slots, cap, affine)


@pytest.mark.parametrize("per_token", [2e-5, 2e-4])
def test_the_drain_at_the_mean_context_is_exact_for_a_step_affine_in_the_context(per_token):
    """A step that also reads each sequence's cached context (attention). The drain's requests are the long ones, late
    in their answers, and read more than the mean context, but the set's first steps, all its answers just begun,
    read as much less: every request reads p·o + o²/2 cached tokens whenever it runs, so the set's total is fixed and
    the mean context in every step gives it (within 0.5 %; 0.1 % measured). The drain's own mean context, E[p·o²]/E[o²]
    + (2/3)·E[o³]/E[o²], half as much again, would count the long answers twice (5-7 % over, measured)."""
    slots, cap = 256, 1000
    lengths = _lengths(10 * slots, cap)
    prompts = np.random.default_rng(3).integers(100, 600, lengths.size)

    def step_s(busy, context):
        return 1.0 + 0.002 * busy + per_token * context

    simulated = simulate(lengths, slots, step_s, prompts)
    assert rel_close(_model_makespan(lengths, slots, cap, step_s, prompts=prompts), simulated, 0.005)
    o, p = lengths.astype(float), prompts.astype(float)
    drain_context = float(np.mean(p * o * o) / np.mean(o * o) + 2 / 3 * np.mean(o**3) / np.mean(o * o))
    mean_context = float((np.mean(p * o) + np.mean(o * o) / 2) / np.mean(o))
    assert drain_context > 1.4 * mean_context

    def long_drain(busy, context):  # the drain's steps (at most its mean batch) read the drain's own context
        return step_s(busy, context * drain_context / mean_context if busy < slots else context)

    assert _model_makespan(lengths, slots, cap, long_drain, prompts=prompts) > 1.03 * simulated


def _two_lengths(n: int):
    """Answers of 100 or 300 tokens, half each (E[o²]/E[o]² 1.25): a spread below 2, where a set's first wave holds
    more work than a staggered batch's residual."""
    return np.where(np.random.default_rng(11).random(n) < 0.5, 100, 300)


# (waves, tolerance) per spread of answers: each tolerance the measured error + about 1 point
FEW_WAVES = {
    "tail": ((0.25, 0.005), (1, 0.005), (1.5, 0.075), (2, 0.055), (3, 0.01), (5, 0.04)),
    "two": ((0.9, 0.005), (1.2, 0.045), (2, 0.035), (5, 0.02)),
}


@pytest.mark.parametrize(("spread", "waves", "within"), [(s, w, t) for s, cases in FEW_WAVES.items() for w, t in cases])
def test_sets_of_few_waves(spread, waves, within):
    """A set no larger than the slots is never staggered: each slot holds a whole answer, and the drain is the run
    (exact, 0.0 % measured, whatever the spread). From two waves on the slots hold a staggered batch's residual work;
    between, the model ramps from one to the other (``inference.drain_work``). Measured against the simulation:
    answers with a tail to 1,000 tokens (d 3.1) -6.3 % at 1.5 waves, -4.3 % at 2, -0.3 % at 3, +2.9 % at 5; answers
    of 100 or 300 tokens (d 1.25) -3.2 % at 1.2 waves, -2.3 % at 2, -1.1 % at 5."""
    slots = 256
    lengths, cap = (_lengths(int(waves * slots), 1000), 1000) if spread == "tail" else (_two_lengths(int(waves * slots)), 300)

    def step_s(busy, context):
        return 1.0 + 0.005 * busy

    assert rel_close(_model_makespan(lengths, slots, cap, step_s), simulate(lengths, slots, step_s), within)


def test_output_len_max_is_the_longest_answer_the_set_reaches():
    """Answers with a smooth tail (exponential, mean 150) that an engine would cut at 3,000 but none reaches: given
    the set's longest (1,180 here), the drain is within 5 % of the simulation (3.9 % measured); given the cut that
    nothing reaches, the drain lasts 3,000 steps for nothing and the set 47 % too long. output_len_max must be an
    answer length a share of the set reaches."""
    slots = 256
    lengths = np.maximum(np.minimum(np.ceil(np.random.default_rng(5).exponential(150, 10 * slots)), 3000), 1).astype(int)

    def step_s(busy, context):
        return 1.0 + 0.005 * busy

    simulated = simulate(lengths, slots, step_s)
    assert int(lengths.max()) < 3000
    assert rel_close(_model_makespan(lengths, slots, int(lengths.max()), step_s), simulated, 0.05)
    assert _model_makespan(lengths, slots, 3000, step_s) > 1.3 * simulated


def test_the_drain_batch_is_the_residual_work_over_the_longest_answer():
    """512 slots holding d·o/2 tokens still to generate each, spent over output_len_max steps; a set whose share of
    the batch is smaller holds whole answers instead; floored by the smallest captured CUDA graph, never above the
    batch."""
    wl = InferenceWorkload(input_len=804, output_len=3736, serving="continuous", requests=26328)
    spread = InferenceWorkload(**{**wl.__dict__, "output_len_dispersion": 2.2409, "output_len_max": 20000})
    assert rel_close(mean_residual_output(spread), 2.2409 * 3736 / 2, 1e-12)
    assert rel_close(drain_batch(spread, 512), 512 * 2.2409 * 3736 / 2 / 20000, 1e-6)  # E[R] to a whole token
    assert drain_batch(spread, 512, set_share=4000) == drain_batch(spread, 512)  # many waves: the residual work
    assert rel_close(drain_batch(spread, 512, set_share=100), 100 * 3736 / 20000, 1e-12)  # a fifth of a wave: whole answers
    padded = InferenceWorkload(**{**spread.__dict__, "cuda_graph_min_batch": 128})
    assert drain_batch(padded, 512) == 128 and drain_batch(padded, 64) == 64


def _data(requests=20000, output_len_max=4096, floor=None, batch=128):
    wl = {
        "kind": "inference",
        "input_len": 1024,
        "output_len": 1024,
        "precision": "fp8",
        "serving": "continuous",
        "requests": requests,
        "output_len_dispersion": 2.0,
        "output_len_max": output_len_max,
        **({} if floor is None else {"cuda_graph_min_batch": floor}),
    }
    return {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": 2},
        "workload": wl,
        "mapping": {"tp": 1, "pp": 1, "dp": 2, "batch": batch},
        "objective": "throughput",
    }


def _metrics(data):
    problem = parse_problem(data, source="t")
    return evaluate_inference(problem.model, problem.system(), problem.workload, problem.fixed_serving_mapping()).metrics


def _steady(data):
    data = copy.deepcopy(data)
    for key in ("requests", "output_len_max", "cuda_graph_min_batch"):
        data["workload"].pop(key, None)
    return _metrics(data)


def test_a_drained_set_is_slower_than_the_steady_state_and_reaches_it_with_many_requests():
    """The drain costs a set time the steady state does not pay; its share falls as the set grows: 500 requests on
    256 slots run at 62 % of the steady state's rate, a million within 1 % of it."""
    steady = _steady(_data())["tokens_per_s"]
    small, large = _metrics(_data(requests=500))["tokens_per_s"], _metrics(_data(requests=1_000_000))["tokens_per_s"]
    assert small < 0.7 * steady  # 0.62 measured
    assert small < large < steady and rel_close(large, steady, 0.01)


def test_a_longer_tail_or_a_padded_step_lengthens_the_drain():
    """The same set, answers up to 4,096 or 16,384 tokens: the longer drain serves it slower; a padding floor of
    64 sequences slows its drain further and leaves the steady step (TPOT) as it was."""
    base = _metrics(_data())
    longer = _metrics(_data(output_len_max=16384))
    padded = _metrics(_data(floor=64))
    assert longer["makespan_s"] > base["makespan_s"] and padded["makespan_s"] > base["makespan_s"]
    assert padded["tpot_s"] == base["tpot_s"]
    assert longer["drain_s"] > base["drain_s"] and padded["drain_s"] > base["drain_s"]
    assert padded["makespan_s"] - padded["drain_s"] == pytest.approx(base["makespan_s"] - base["drain_s"], rel=1e-9)


def test_cpsat_equals_the_enumerator_on_a_drained_set_with_the_batch_free():
    """The batch a decision (more slots: more steps staggered at full batch, a heavier drain step): CP-SAT, forced,
    agrees with the enumerator, and its plan re-evaluates to the objective."""
    data = _data(requests=5000, floor=16)
    data["mapping"]["batch"] = [8, 16, 32, 64, 128, 256, 512]
    problem = parse_problem(data, source="t")
    plan = solved_as_enumerated(problem, workers=1, method="cpsat")
    table = enumerate_space(problem, keep_all=True).table
    assert rel_close(table[table["fits"]]["tokens_per_s"].max(), plan.evaluation.metrics["tokens_per_s"], 1e-3)


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"requests": None}, "workload.output_len_max", "only a finite set"),
        ({"serving": "static"}, "workload.output_len_max", "only a finite set"),
        ({"output_len_max": 1024}, "workload.output_len_max", "above output_len 1,024"),
        ({"output_len_max": 1500}, "workload.output_len_max", "at least output_len x output_len_dispersion, 2,048"),
        ({"output_len_max": "long"}, "workload.output_len_max", "long"),
        ({"output_len_max": None, "cuda_graph_min_batch": 64}, "workload.cuda_graph_min_batch", "output_len_max"),
        ({"cuda_graph_min_batch": 0}, "workload.cuda_graph_min_batch", "0"),
        ({"serving": "disaggregated"}, "workload.output_len_max", "only a finite set"),
        ({"output_len_dispersion": None}, "workload.output_len_max", "requests of one length"),
        ({"max_batch_size": 256, "cuda_graph_min_batch": 512}, "workload.cuda_graph_min_batch", "at most 256"),
    ],
)
def test_bad_drain_fields_are_refused_in_one_line(change, field, message):
    data = _data()
    for key, value in change.items():
        if value is None:
            data["workload"].pop(key)
        else:
            data["workload"][key] = value
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t")
    assert err.value.field == field and message in str(err.value) and "\n" not in str(err.value)


def test_the_launch_line_makes_room_for_the_longest_answer(tmp_path):
    """trtllm-serve's --max_seq_len: the mean prompt and the longest answer (1,024 + 4,096), more than the
    length-biased mean request (1,024 + 2 x 1,024); the report says how long the set drains."""
    data = _data()
    data["workload"]["framework"] = "trtllm"
    data["mapping"]["ep"] = 1
    proc = run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", data)), "--emit"])
    assert proc.returncode == 0 and "--max_seq_len 5120" in proc.stdout, proc.stdout + proc.stderr
    report = run_main(["evaluate", str(tmp_path / "p.yaml")]).stdout
    assert "(20,000 requests queued at once; the last " in report and " s drain it)" in report, report


def test_a_bad_output_len_max_is_one_line_and_exit_2(tmp_path):
    data = _data(output_len_max=512)
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "workload.output_len_max" in proc.stderr and "p.yaml" in proc.stderr


def test_the_deepseek_r1_offline_example_is_proven_at_the_enumerators_optimum():
    """problems/examples/deepseek-r1-offline-b200.yaml (MLPerf v5.1's B200 run as a problem): CP-SAT, forced, proves
    the enumerator's best batch, and the set takes longer than its tokens at the steady state's rate would."""
    problem = load_problem(REPO / "problems" / "examples" / "deepseek-r1-offline-b200.yaml")
    plan = solved_as_enumerated(problem, workers=1, method="cpsat")
    met = plan.evaluation.metrics
    steady_s = problem.workload.requests * problem.workload.output_len / (met["batch"] * 8) * met["tpot_s"]
    assert met["makespan_s"] > 1.1 * steady_s


def _longest(num_gpus):
    data = _data(requests=2000, output_len_max=100_000)
    data["model"], data["system"] = "llama3.3-70b", {"name": "dgx-h100", "num_gpus": num_gpus}
    del data["mapping"]
    return data


def test_the_longest_answer_must_fit_alone(tmp_path):
    """Llama 3.3 70B in FP8 on one H100 leaves about 7 GiB beside its weights: the mean request of a set fits, its
    longest (1,024 + 100,000 tokens, 15 GiB of KV cache) does not, so no plan exists and the longest sequence is named;
    on up to two GPUs the plan takes tp 2, CP-SAT and the enumerator agree, and the longest fits."""
    proc = run_main(["solve", str(write_yaml(tmp_path / "one.yaml", _longest(1)))])
    assert proc.returncode == 1 and "the longest sequence binds" in proc.stdout + proc.stderr
    problem = parse_problem(_longest([1, 2]), source="t")
    plan = solved_as_enumerated(problem, workers=1, method="cpsat")
    met = plan.evaluation.metrics
    assert plan.num_gpus == 2 and met["fits"] and met["longest_sequence_gib"] <= met["usable_memory_gib"]


def test_evaluate_shows_the_longest_request_and_a_plan_it_rules_out(tmp_path):
    """At a fixed plan the report shows the longest request's memory beside the peak's, flags it alone, and counts no
    batch as fitting (the largest batch that fits: 0); with a TTFT SLO only larger batches meet, solve names the SLO
    against the plans that fit, the longest request among their limits."""
    data = _longest(1)
    data["mapping"] = {"tp": 1, "pp": 1, "dp": 1, "batch": 4}
    out = run_main(["evaluate", str(write_yaml(tmp_path / "fixed.yaml", data))]).stdout
    peak = next(line for line in out.splitlines() if "peak memory per GPU" in line)
    longest = next(line for line in out.splitlines() if "longest request" in line)
    assert "DOES NOT FIT" not in peak and "largest batch that fits: 0" in peak and "DOES NOT FIT" in longest
    slo = _longest(1)
    slo["workload"]["output_len_max"] = 57840
    slo["workload"]["slo"] = {"ttft_s": 5.0}
    proc = run_main(["solve", str(write_yaml(tmp_path / "slo.yaml", slo))])
    assert (
        proc.returncode == 1
        and "the TTFT SLO binds" in proc.stdout + proc.stderr
        and "plan that fits" in proc.stdout + proc.stderr
    )
