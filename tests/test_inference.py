"""Serving (issue 6): model terms, the published TensorRT-LLM runs, the planner against the
enumerator, the Pareto front against the enumerator's non-dominated points, and the CLI contract."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest
import yaml
from conftest import rel_close, write_yaml

from parasol.model import compute, inference, kv_cache
from parasol.model.errors import ProblemError
from parasol.model.serving_step import METRIC_SENSE, evaluate_inference
from parasol.model.specs import InferenceWorkload, PoolMapping, ServingMapping
from parasol.solver import library, pareto, serving_space
from parasol.solver.inference_validation import (
    STEP_OVERHEAD_STEP_S,
    evaluate_all,
    evaluate_oos,
    fit_engine_profile,
    fit_step_overhead,
    load_engine_runs,
    load_latency_oos_runs,
    load_oos_runs,
    load_runs,
    step_overhead_runs,
)
from parasol.solver.library import library_root, load_device, load_engine, load_model, load_system
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem
from parasol.solver.validation import problem_from_entry

WORKERS, TIME_LIMIT = 2, 30


def _wl(**kw) -> InferenceWorkload:
    base = dict(input_len=512, output_len=128, batch=32, precision="fp8", kv_precision="fp8", weight_precision="fp8")
    return InferenceWorkload(**{**base, **kw})


def _eval(model="llama3.1-8b", system="dgx-h100", n=1, tp=1, pp=1, ep=1, batch=32, **kw):
    wl = _wl(batch=batch, **kw)
    dp = n // (tp * pp)
    return evaluate_inference(load_model(model), load_system(system, n), wl, ServingMapping(batch, PoolMapping(tp, pp, ep, dp)))


# ---------------------------------------------------------------- KV cache


def test_kv_bytes_per_token_for_mha_gqa_mqa_and_mla():
    gptj, llama, deepseek = load_model("gpt-j-6b"), load_model("llama3.1-8b"), load_model("deepseek-v3")
    assert kv_cache.kv_bytes_per_token(gptj, "bf16") == 2 * 16 * 256 * 2  # MHA: K and V of 16 heads of 256
    assert kv_cache.kv_bytes_per_token(llama, "fp8") == 2 * 8 * 128  # GQA: 8 KV heads
    assert kv_cache.kv_bytes_per_token(llama, "fp8", tp=2) == 8 * 128  # split by tp
    assert kv_cache.kv_bytes_per_token(llama, "fp8", tp=16) == 2 * 128  # tp > kv_heads: one head replicated
    mqa = dataclasses.replace(llama, kv_heads=1, name="mqa")
    assert kv_cache.kv_bytes_per_token(mqa, "bf16", tp=8) == 2 * 128 * 2
    # MLA caches the 512-wide latent and the 64-wide RoPE key, whole on every rank (DeepSeek-V2 Table 1)
    assert kv_cache.kv_bytes_per_token(deepseek, "fp8") == kv_cache.kv_bytes_per_token(deepseek, "fp8", tp=8) == 576
    assert kv_cache.kv_bytes_per_token(deepseek, "fp4") == pytest.approx(576 * (0.5 + 1 / 16))


def test_paged_allocation_rounds_each_sequence_up_to_whole_blocks():
    assert kv_cache.paged_tokens(2049, 16) == 2064 and kv_cache.paged_tokens(2048, 16) == 2048
    m = load_model("llama3.1-8b")
    one = kv_cache.kv_bytes_per_sequence(m, "bf16", 1, m.layers, 2049, 64)
    assert one == 2112 * m.layers * kv_cache.kv_bytes_per_token(m, "bf16")


# ---------------------------------------------------------------- rooflines and precisions


def test_decode_is_memory_bound_at_small_batch_and_compute_bound_at_large():
    """The crossover falls out of the per-operation rooflines: a decode step costs the same at
    batch 1 and 8 (weights streamed once), and twice as much at 4096 as at 2048."""
    m, system = load_model("llama3.1-8b"), load_system("dgx-h100", 1)
    wl = _wl(input_len=128, output_len=2)

    def step(b):
        return inference.layer_time(m, system, wl, 1, 1, inference.Pass(decode_seqs=b, context_len=129)).gemm

    assert step(8) / step(1) < 1.1
    assert step(4096) / step(2048) > 1.8
    device = system.device
    weights = sum(k * n for _, n, k in compute.layer_gemm_shapes(m, 1, 1).values())
    streaming = device.weight_streaming_efficiency_for(wl.precision)
    assert step(1) == pytest.approx(weights / (device.hbm_bytes_per_s * streaming), rel=0.01)


def test_decode_gemm_roofline_against_the_h100_microbenchmark():
    """The roofline with the measured streaming efficiency of each precision reproduces the 78 decode-shaped
    GEMMs of problems/measurements/decode-microbench.yaml (H100) within 10 % on average (7.3 %; 7.7 % with
    one median of both precisions)."""
    data = yaml.safe_load((library_root() / "measurements" / "decode-microbench.yaml").read_text())["h100"]["gemm"]
    device = load_system("dgx-h100", 1).device
    errors = [
        abs(
            compute.gemm_time_s(
                device, r["m"], r["n"], r["k"], r["precision"], None, device.weight_streaming_efficiency_for(r["precision"])
            )
            / r["seconds"]
            - 1
        )
        for r in data
    ]
    assert len(errors) == 78 and statistics.fmean(errors) <= 0.10


def test_weight_precision_is_separate_from_the_gemm_precision():
    """int4 weights with bf16 GEMMs (W4A16): a quarter of the bf16 layer weight bytes plus group scales,
    faster memory-bound decode, the bf16 tensor-core rate for compute-bound prefill."""
    base = dict(precision="bf16", kv_precision="bf16", batch=1, input_len=4096, output_len=64)
    bf16 = _eval(weight_precision="bf16", **base)
    int4 = _eval(weight_precision="int4", **base)
    assert int4.breakdown["memory_gib"]["weights"] < 0.4 * bf16.breakdown["memory_gib"]["weights"]  # embeddings stay 16-bit
    assert int4.metrics["tpot_s"] < 0.5 * bf16.metrics["tpot_s"]
    assert int4.breakdown["ttft_s"]["compute/gemm"] == pytest.approx(bf16.breakdown["ttft_s"]["compute/gemm"], rel=0.05)
    with pytest.raises(ProblemError):
        _eval(precision="fp4", system="dgx-h100")  # no FP4 tensor cores on H100


def test_grouped_and_per_query_head_decode_attention():
    """A GQA model's cache is read once per KV head by a grouped kernel, once per query head by
    TensorRT-LLM's pre-XQA masked MHA (4 query heads share a KV head in Llama 3.1 8B)."""
    m, system = load_model("llama3.1-8b"), load_system("dgx-h100", 1)
    p = inference.Pass(decode_seqs=64, context_len=4096)
    grouped = inference.layer_time(m, system, _wl(), 1, 1, p).attention
    per_head = inference.layer_time(m, system, _wl(decode_attention="per_query_head"), 1, 1, p).attention
    assert per_head == pytest.approx(4 * grouped, rel=1e-9)


def test_tensor_parallelism_splits_weights_and_adds_all_reduces():
    one, two = _eval(n=2, tp=1), _eval(n=2, tp=2)
    assert two.breakdown["memory_gib"]["weights"] < 0.55 * one.breakdown["memory_gib"]["weights"]
    assert one.breakdown["tpot_s"]["comm/tp"] == 0 < two.breakdown["tpot_s"]["comm/tp"]
    assert two.metrics["tpot_s"] < one.metrics["tpot_s"]


def test_pipeline_needs_the_batch_in_pp_micro_batches():
    with pytest.raises(ProblemError, match="micro-batches"):
        _eval(n=2, pp=2, batch=33)
    two = _eval(n=2, pp=2, batch=32)
    assert two.breakdown["tpot_s"]["comm/pp"] > 0


# ---------------------------------------------------------------- serving modes


def test_static_serving_identities():
    met = _eval(n=4, tp=2, batch=48).metrics
    assert met["e2e_latency_s"] == pytest.approx(met["ttft_s"] + 127 * met["tpot_s"], rel=1e-12)
    assert met["tokens_per_s"] == pytest.approx(2 * 48 * 128 / met["e2e_latency_s"], rel=1e-12)
    assert met["tokens_per_s_per_gpu"] == pytest.approx(met["tokens_per_s"] / 4, rel=1e-12)
    assert met["tokens_per_s_per_user"] == pytest.approx(1 / met["tpot_s"], rel=1e-12)
    for key in (
        "ttft_s",
        "tpot_s",
        "e2e_latency_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_user",
        "batch",
        "peak_memory_gib",
        "fits",
    ):
        assert key in met


def test_continuous_batching_steady_state():
    """Each iteration decodes the batch and prefills batch·input/output prompt tokens; a prompt is
    in after output/batch iterations."""
    small, big = _eval(batch=16, serving="continuous"), _eval(batch=256, serving="continuous")
    assert small.metrics["ttft_s"] == pytest.approx(128 / 16 * small.metrics["tpot_s"], rel=1e-12)
    assert big.metrics["ttft_s"] == pytest.approx(big.metrics["tpot_s"], rel=1e-12)
    assert big.metrics["tokens_per_s"] == pytest.approx(256 / big.metrics["tpot_s"], rel=1e-12)


def test_disaggregated_serving_pools_and_kv_transfer():
    m, system, wl = load_model("llama3.1-8b"), load_system("dgx-h100", 16), _wl(serving="disaggregated", batch=64)
    plans = {pre: ServingMapping(64, PoolMapping(1, 1, 1, 16 - pre), PoolMapping(1, 1, 1, pre)) for pre in (1, 4, 8)}
    evs = {pre: evaluate_inference(m, system, wl, plan) for pre, plan in plans.items()}
    assert all(ev.breakdown["ttft_s"]["comm/kv_transfer"] > 0 for ev in evs.values())  # 16 GPUs: two nodes, NIC transfer
    # the decode pool's TPOT does not depend on the prefill pool; throughput is the slower pool's rate
    assert evs[1].metrics["tpot_s"] == evs[8].metrics["tpot_s"]
    decode_rate = 8 * 64 / (127 * evs[8].metrics["tpot_s"]) * 128
    assert evs[8].metrics["tokens_per_s"] <= decode_rate * (1 + 1e-12)
    with pytest.raises(ProblemError):
        evaluate_inference(m, system, wl, ServingMapping(64, PoolMapping(1, 1, 1, 16)))  # no prefill pool


def test_largest_batch_that_fits():
    ev = _eval(model="llama3.3-70b", n=2, tp=2, batch=8, input_len=2048, output_len=2048)
    b = ev.metrics["max_batch"]
    assert b > 8
    assert _eval(model="llama3.3-70b", n=2, tp=2, batch=b, input_len=2048, output_len=2048).metrics["fits"]
    assert not _eval(model="llama3.3-70b", n=2, tp=2, batch=b + 1, input_len=2048, output_len=2048).metrics["fits"]


def test_kv_pool_takes_its_share_of_free_memory():
    """The engine's KV pool takes kv_cache_memory_fraction of the memory free after weights and
    activations (TensorRT-LLM free_gpu_memory_fraction, default 0.9): the largest batch is the one
    whose KV cache fits in that share, and a smaller share admits a smaller batch."""
    assert kv_cache.kv_pool_bytes(9.0, 0.9) == pytest.approx(10.0)
    ev = _eval(model="llama3.3-70b", n=2, tp=2, batch=8, input_len=2048, output_len=2048)
    mem = ev.breakdown["memory_gib"]
    assert mem["kv_headroom"] == pytest.approx(mem["kv_cache"] * (1 / 0.9 - 1))
    assert ev.metrics["peak_memory_gib"] == pytest.approx(sum(v for v in mem.values()))
    b = ev.metrics["max_batch"]
    full = _eval(model="llama3.3-70b", n=2, tp=2, batch=b, input_len=2048, output_len=2048)
    kv_share = full.breakdown["memory_gib"]["kv_cache"]
    free = (
        full.metrics["usable_memory_gib"] - full.breakdown["memory_gib"]["weights"] - full.breakdown["memory_gib"]["activations"]
    )
    assert kv_share <= 0.9 * free
    whole = _eval(model="llama3.3-70b", n=2, tp=2, batch=8, input_len=2048, output_len=2048, kv_cache_memory_fraction=1.0)
    assert whole.metrics["max_batch"] > b
    data = _problem(batch=8)
    data["workload"]["kv_cache_memory_fraction"] = 1.5
    with pytest.raises(ProblemError, match="kv_cache_memory_fraction"):
        parse_problem(data, source="test")


@pytest.mark.parametrize(
    "model,n,tp,ep", [("mixtral-8x7b", 2, 2, 2), ("qwen3-30b-a3b", 1, 1, 1), ("gpt-oss-120b", 2, 1, 2), ("deepseek-v3", 8, 8, 8)]
)
def test_moe_models_are_servable(model, n, tp, ep):
    ev = _eval(model=model, system="hgx-h200", n=n, tp=tp, ep=ep, batch=16)
    assert ev.metrics["fits"] and ev.metrics["tokens_per_s"] > 0
    assert ev.breakdown["tpot_s"]["comm/ep"] > 0 if ep > 1 else ev.breakdown["tpot_s"]["comm/ep"] == 0


# ---------------------------------------------------------------- accuracy against published runs


@pytest.fixture(scope="module")
def runs():
    return evaluate_all()


def test_every_published_inference_run_evaluates(runs):
    assert len(runs) == 45 and all(r.predicted > 0 for r in runs)


def test_throughput_error_within_fifteen_percent(runs):
    """Issue 6's target on the 29 TensorRT-LLM 0.6.1 throughput runs (9.6 % when measured; H100
    8.5 %, A100 10.9 %); nothing was fitted to them until the runtime's per-pass overhead, the one number
    fitted on them (benchmarks/calibrate.py --step-overhead): 7.2 % (H100 6.6 %, A100 8.1 %); bound 8.2 %."""
    for family in {r.family for r in runs if r.metric == "tokens_per_s_per_gpu"}:
        errors = [abs(r.error) for r in runs if r.family == family]
        assert statistics.fmean(errors) <= 0.15, family
    assert statistics.fmean(abs(r.error) for r in runs if r.metric == "tokens_per_s_per_gpu") <= 0.082


def test_first_token_latency_error_within_its_measured_bound(runs):
    """Issue 6's target (15 %) on the 16 TensorRT-LLM 0.5 first-token latencies, evaluated with that
    release's engine profile (fitted on its throughput tables, not on these): 13.5 % measured;
    A100 6.6 %, H100 FP8 20.3 % (7 of 8 still predicted faster, see README). Since the A100's GEMM,
    memory and attention figures come from non-reserved sources (benchmarks/device_curves.py; the Azure
    AI benchmarking guide is reserved by issue 13): 15.2 %, A100 10.8 %, H100 19.6 %; since the profile
    carries the engine's GEMM share on H100 too (fitted with stream on the throughput tables): 14.0 %, A100
    10.8 %, H100 17.2 %; since every pass carries the runtime's per-pass overhead (the device files'
    serving_step_overhead_s, the profile refitted with it): 12.9 %, A100 12.4 %, H100 13.3 %. Each bound is
    the measurement + about one point, so a change that loses accuracy fails."""
    ftl = [r for r in runs if r.metric == "ttft_s"]
    assert len(ftl) == 16 and all(r.problem.workload.engine == "trtllm-0.5" for r in ftl)
    assert statistics.fmean(abs(r.error) for r in ftl) <= 0.14
    assert statistics.fmean(abs(r.error) for r in ftl if "A100" in r.family) <= 0.135
    assert statistics.fmean(abs(r.error) for r in ftl if "H100" in r.family) <= 0.145


def test_first_token_latency_without_the_engine_profile_misses(runs):
    """The profile is what closes the gap: with the device files' efficiencies (today's kernels)
    the H100 FP8 first-token latencies are all too fast, 22.7 % on average (34 % before the runtime's
    per-pass overhead), against 13.3 % with the profile."""
    entries = [
        {**e, "workload": {k: v for k, v in e["workload"].items() if k != "engine"}}
        for e in load_runs()
        if e["id"].startswith("trtllm05-ftl-h100")
    ]
    plain = evaluate_all(entries)
    profiled = [r for r in runs if r.run_id.startswith("trtllm05-ftl-h100")]
    assert all(r.error < 0 for r in plain) and statistics.fmean(abs(r.error) for r in plain) > 0.2
    assert statistics.fmean(abs(r.error) for r in plain) > statistics.fmean(abs(r.error) for r in profiled) + 0.05


# ---------------------------------------------------------------- serving-engine profiles


def test_engine_profile_values_are_the_fit_on_its_throughput_runs():
    """problems/engines/trtllm-0.5.yaml holds, for each device, the values that minimise together the
    mean |error| on TensorRT-LLM 0.5.0's throughput tables (benchmarks/calibrate.py --engine: exhaustive
    search of the keys' grids, 40 s in the suite); measured: H100 stream 0.55, gemm 0.86 (6.9 %; 7.3 % since the
    networks were refitted on chunk-wise data-parallel overlap, 2026-11-28), A100 stream 0.65 (3.5 %), with the
    device files' per-pass runtime overhead (0.42, 0.90, 0.55 without it). Here each
    stored point must be the best of the grid points within 0.03 of it in every key, searched together: a
    change to the model that moves the fit moves it away from the stored values and fails this."""
    runs = load_engine_runs()
    assert len(runs) == 23 and all(e["workload"]["engine"] == "trtllm-0.5" for e in runs)
    assert not {e["id"] for e in runs} & {e["id"] for e in load_runs()}
    for device, stored in load_engine("trtllm-0.5").items():
        fitted, error = fit_engine_profile(runs, device, stored, near=stored)
        assert fitted == pytest.approx(stored, abs=0.005), device
        assert error <= 0.083, device


def test_an_engines_gemm_share_scales_the_device_curves_rates():
    """The profile's gemm multiplies every GEMM efficiency of the device (so a compute-bound GEMM takes
    1/gemm as long); the device file itself carries 1."""
    from parasol.model.compute import gemm_time_s  # noqa: PLC0415

    h100 = load_device("h100-sxm-80gb")
    engine = library.device_under_engine(h100, "trtllm-0.5")
    assert h100.gemm_scale == 1.0 and engine.gemm_scale == load_engine("trtllm-0.5")["h100-sxm-80gb"]["gemm"] < 1
    for precision in ("bf16", "fp8"):
        plain, slower = (gemm_time_s(d, 8192, 8192, 8192, precision) for d in (h100, engine))
        assert slower == pytest.approx(plain / engine.gemm_scale)


def test_engine_replaces_the_device_efficiency_and_slows_decode():
    """workload.engine swaps in the profile's efficiencies when the problem builds its system (so
    evaluate, solve and the round trip see the same device); a step that streams weights slows by
    the ratio of the streaming efficiencies."""
    data = _problem("static", "throughput", num_gpus=1, mapping={"tp": 1, "pp": 1, "ep": 1, "dp": 1}, batch=1)
    plain = parse_problem(data)
    data["workload"]["engine"] = "trtllm-0.5"
    old = parse_problem(data)
    assert old.workload.engine == "trtllm-0.5" and plain.workload.engine is None
    assert old.system().device.stream_efficiency == old.system().device.stream_fp8_efficiency == 0.55
    plain_device = plain.system().device
    assert plain_device.weight_streaming_efficiency_for(plain.workload.precision) == 0.716  # FP8, measured on H100
    assert plain_device.stream_efficiency == load_system("dgx-h100", 1).device.stream_efficiency == 0.776
    tpot = [
        evaluate_inference(p.model, p.system(), p.workload, p.fixed_serving_mapping()).metrics["tpot_s"] for p in (plain, old)
    ]
    assert 1.1 < tpot[1] / tpot[0] <= 0.776 / 0.55  # FP8 weights 0.716 -> 0.55, the 16-bit output head 0.776 -> 0.55


# ---------------------------------------------------------------- the runtime's per-pass overhead


@pytest.mark.parametrize(("serving", "pp"), [("static", 1), ("continuous", 1), ("static", 2), ("continuous", 2)])
def test_runtime_overhead_is_added_once_to_every_pass(serving, pp):
    """Each pass (the prefill and every decode step) carries the device file's serving_step_overhead_s
    once per cycle, whatever stage is slowest (every stage's rank runs the runtime's loop): on one stage
    TPOT grows by it exactly (and a static batch's TTFT); on two, each decode step's pp cycles grow by pp of it, even though
    the last stage, one layer lighter here, is not the slowest. The breakdown names it."""
    model = "llama3.1-8b"  # 32 layers: pp 2 splits them evenly; pp 3 below does not
    data = _problem(serving, "throughput", model=model, num_gpus=2, mapping={"tp": 1, "pp": pp, "ep": 1, "dp": 2 // pp}, batch=pp)
    problem = parse_problem(data)
    system = problem.system()
    assert system.device.serving_step_overhead_s == pytest.approx(1.66e-3)
    bare = dataclasses.replace(system, device=dataclasses.replace(system.device, serving_step_overhead_s=0.0))
    with_, without = (
        evaluate_inference(problem.model, s, problem.workload, problem.fixed_serving_mapping()) for s in (system, bare)
    )
    # continuous batching's TTFT is output/batch iterations, each carrying it once
    for metric in ("tpot_s", "ttft_s") if (serving, pp) == ("static", 1) else ("tpot_s",):
        assert with_.metrics[metric] - without.metrics[metric] == pytest.approx(1.66e-3 * pp, rel=1e-9), metric
    assert with_.breakdown["tpot_s"]["runtime/step_overhead"] == pytest.approx(1.66e-3 * pp)
    assert without.breakdown["tpot_s"]["runtime/step_overhead"] == 0.0


def test_runtime_overhead_is_not_hidden_by_a_slower_stage():
    """pp 3 over 32 layers puts 10 on the last stage, which also samples: the overhead still adds pp of
    it to TPOT (it is not absorbed by the heavier first stages)."""
    data = _problem("static", "throughput", num_gpus=3, mapping={"tp": 1, "pp": 3, "ep": 1, "dp": 1}, batch=3)
    problem = parse_problem(data)
    system = problem.system()
    bare = dataclasses.replace(system, device=dataclasses.replace(system.device, serving_step_overhead_s=0.0))
    with_, without = (
        evaluate_inference(problem.model, s, problem.workload, problem.fixed_serving_mapping()).metrics["tpot_s"]
        for s in (system, bare)
    )
    assert with_ - without == pytest.approx(3 * system.device.serving_step_overhead_s, rel=1e-9)


def test_runtime_overhead_is_the_fit_on_the_trtllm_061_tables():
    """Every device file holds the per-pass overhead that minimises the mean |error| of TensorRT-LLM 0.6.1's
    29 throughput rows (benchmarks/calibrate.py --step-overhead, over the whole 0-5 ms grid): 1.66 ms, 7.2 %
    against 8.9 % without it. Here: the best of the grid within 0.2 ms of the H100's stored value, which every
    device file holds."""
    runs = step_overhead_runs()
    assert len(runs) == 29
    seconds, error = fit_step_overhead(runs, near=load_device("h100-sxm-80gb").serving_step_overhead_s)
    assert seconds == pytest.approx(1.66e-3, abs=STEP_OVERHEAD_STEP_S / 2) and error < 0.075
    for name in library.names("systems/devices"):
        assert load_device(name).serving_step_overhead_s == pytest.approx(seconds, abs=STEP_OVERHEAD_STEP_S / 2), name


def test_a_negative_runtime_overhead_is_refused(tmp_path):
    device = yaml.safe_load((library_root() / "systems" / "devices" / "h100-sxm-80gb.yaml").read_text())
    device["serving_step_overhead_s"] = -1e-3
    path = write_yaml(tmp_path / "dev.yaml", device)
    with pytest.raises(ProblemError, match="serving_step_overhead_s"):
        load_device(str(path))


def test_solver_matches_the_enumerator_under_an_engine_profile():
    """The planner compiles the engine's device: with an SLO on TPOT the profile's slower weight
    stream moves the optimum, and CP-SAT still equals the enumerator and the round trip holds."""
    data = _problem("static", "throughput", num_gpus=4, slo={"tpot_s": 0.004})
    data["workload"]["engine"] = "trtllm-0.5"
    _, enum, sol = _check_against_oracle(data)
    data["workload"].pop("engine")
    _, plain, _ = _check_against_oracle(data)
    assert enum.plans[0].mapping != plain.plans[0].mapping


def test_engine_file_errors_name_the_file_and_field(tmp_path, monkeypatch):
    """A malformed profile is a one-line ProblemError naming its file and field."""
    from parasol.solver import library

    (tmp_path / "engines").mkdir()
    (tmp_path / "systems").symlink_to(library_root() / "systems")
    monkeypatch.setattr(library, "library_root", lambda: tmp_path)
    for name, body, field in (
        ("unknown-device", {"devices": {"h900": {"stream": 0.5}}}, "devices.h900"),
        ("bad-key", {"devices": {"h100-sxm-80gb": {"tensor_cores": 0.5}}}, "devices.h100-sxm-80gb.tensor_cores"),
        ("over-one", {"devices": {"h100-sxm-80gb": {"stream": 1.5}}}, "devices.h100-sxm-80gb.stream"),
        ("no-devices", {"name": "x"}, "devices"),
    ):
        write_yaml(tmp_path / "engines" / f"{name}.yaml", body)
        library.load_engine.cache_clear()
        with pytest.raises(ProblemError, match=field.replace(".", r"\.")) as err:
            library.load_engine(name)
        assert str(tmp_path / "engines" / f"{name}.yaml") in str(err.value) and "\n" not in str(err.value)
    library.load_engine.cache_clear()


def test_published_peak_throughput_batches_fit(runs):
    """The published batches were the largest each engine ran; the model's memory lets them run."""
    assert all(r.evaluation.metrics["fits"] for r in runs)


@pytest.fixture(scope="module")
def oos():
    return evaluate_oos()


def _perf_overview(results):
    """The 20 perf-overview runs of the out-of-sample set (dense models, the engine's batch unknown)."""
    return [r for r in results if r.run_id.startswith("trtllm-perf-")]


def _deepseek_blog(results):
    """The 3 DeepSeek-R1 runs of TensorRT-LLM's best-practice blog (their engine sizes stated)."""
    return [r for r in results if r.run_id.startswith("trtllm-blog-")]


@pytest.mark.slow
def test_out_of_sample_max_throughput_runs_are_apart_and_batch_free(oos):
    """The newer TensorRT-LLM max-throughput runs (problems/validation/inference_runs_oos.yaml) are their own
    families and get the planner's best plan, which fits: the 20 perf-overview runs give no batch and no engine size
    (the engine chose them); the 3 DeepSeek-R1 blog runs state their max_batch_size, which the planner fills (every
    slot of the blog's concurrency busy)."""
    entries = load_oos_runs()
    assert len(oos) == len(entries) == 23 and len(_perf_overview(oos)) == 20 and len(_deepseek_blog(oos)) == 3
    assert all("batch" not in e["workload"] and "batch" not in e["mapping"] for e in entries)
    assert all("out of sample" in r.family and r.metric == "tokens_per_s_per_gpu" for r in oos)
    assert all(r.evaluation.metrics["fits"] and r.evaluation.metrics["batch"] >= 1 for r in oos)
    assert not {r.run_id for r in oos} & {e["id"] for e in load_runs()}
    for r in _deepseek_blog(oos):
        assert r.evaluation.metrics["batch"] == r.problem.workload.max_batch_size, r.run_id


def test_out_of_sample_error_as_measured(oos):
    """Out of sample, never fitted: the planner's best plan against TensorRT-LLM's published max
    throughput, the KV pool at TensorRT-LLM's default 0.9 of free memory, each run's published set of
    requests queued at once (workload.requests). Measured: 13.4 % mean |error| over the 20 runs (H100
    12.0 %, 18 runs), max 38.0 %, 16 of 20 predicted faster - the long-output runs whose batch is set by
    memory (docs/serving.md); 13.5 % in the steady state. Since FP8 weights stream at their own measured
    rate: 12.7 % (H100 11.6 %), max 32.7 %, 15 of 20 faster. Since every pass carries the runtime's
    per-pass overhead (fitted on TensorRT-LLM 0.6.1's tables, not on these): 9.5 % (H100 8.7 %), max 27.1 %,
    14 of 20 faster. The bounds are these measurements + about one point (10.5 %, H100 9.7 %), so a change
    that loses accuracy fails here."""
    dense = _perf_overview(oos)
    assert statistics.fmean(abs(r.error) for r in dense) <= 0.105
    assert statistics.fmean(abs(r.error) for r in dense if "H100" in r.family) <= 0.097
    assert all(r.problem.workload.requests in (1500, 3000, 30000) for r in dense)


def test_deepseek_r1_blog_runs_error_as_measured(oos):
    """TensorRT-LLM's own DeepSeek-R1 max-throughput runs (its best-practice blog; never fitted), at the blog's engine
    sizes, are predicted too fast as MLPerf's DeepSeek-R1 runs are, further: measured 2026-11-29 +50.8 % (B200, FP8 KV
    cache, 896 a GPU), +52.4 % (B200, 16-bit KV cache, 384) and +30.3 % (H200, 128); since the NVFP4 checkpoint's MLA
    projections are charged at 16 bits (workload.unquantised_gemms; measured 2026-11-29) +42.9 and +45.4 % on B200,
    the H200's FP8 checkpoint unchanged; since the Blackwell GEMM curves carry XLA's size penalty (the share refitted,
    0.71; measured 2026-11-29) +38.7 and +37.0 % on B200. docs/serving.md: kernel timings put the missing time outside
    MLA decode and the experts. Bounds: the measurements + about one point."""
    errors = {r.run_id: r.error for r in _deepseek_blog(oos)}
    assert 0.375 <= errors["trtllm-blog-b200-deepseek-r1-0528-fp4-fp8kv-1k-2k"] <= 0.395
    assert 0.36 <= errors["trtllm-blog-b200-deepseek-r1-fp4-bf16kv-1k-2k"] <= 0.38
    assert 0.29 <= errors["trtllm-blog-h200-deepseek-r1-fp8-1k-2k"] <= 0.32


def test_single_request_latency_out_of_sample_as_measured():
    """NVIDIA NIM 1.8.0, Llama 3.3 70B on 2 H100 FP8, one request at a time (never fitted; device
    files' efficiencies): measured TTFT 5.0 % and 24.8 % too fast (the client-side TTFT holds
    tokenisation and HTTP, which the model lacks), TPOT 15.0 % and 17.0 % too fast since FP8 weights
    stream at their own measured rate (18.0 % and 20.0 % before); since every pass carries the runtime's
    per-pass overhead (fitted on TensorRT-LLM 0.6.1's tables): TTFT 5.1 % and 20.8 %, TPOT 6.1 % and 8.2 %;
    since the networks were refitted on chunk-wise data-parallel overlap (2026-11-28; H100 0.706 -> 0.853, a
    faster tensor-parallel all-reduce): TTFT 6.5 % and 22.0 %, TPOT unchanged.
    Bounds: these measurements + 1 point, and every prediction below the measurement."""
    results = evaluate_all(load_latency_oos_runs())
    assert len(results) == 4 and all(r.error < 0 for r in results)
    assert not {r.run_id for r in results} & {e["id"] for e in load_runs() + load_oos_runs()}
    for metric, bound in (("ttft_s", 0.153), ("tpot_s", 0.081)):
        assert statistics.fmean(abs(r.error) for r in results if r.metric == metric) <= bound, metric


def test_out_of_sample_batch_is_the_solvers_choice_too():
    """CP-SAT's best plan on an out-of-sample run matches the enumerator's (the batch is a decision)."""
    entry = next(e for e in load_oos_runs() if e["id"] == "trtllm-perf-h100-llama3.3-70b-tp2-1000-1000")
    problem = problem_from_entry(entry)
    best = enumerate_space(problem, "throughput").plans[0].evaluation.metrics["tokens_per_s_per_gpu"]
    planned = solve(problem, "throughput", time_limit=30).plans[0].evaluation.metrics["tokens_per_s_per_gpu"]
    assert rel_close(planned, best, 1e-3)


# ---------------------------------------------------------------- planner against the oracle


def _problem(
    serving="static",
    objective="throughput",
    model="llama3.1-8b",
    system="dgx-h100",
    num_gpus=4,
    batch=None,
    slo=None,
    mapping=None,
    precision="fp8",
    input_len=512,
    output_len=64,
):
    wl = {"kind": "inference", "input_len": input_len, "output_len": output_len, "precision": precision, "serving": serving}
    if slo:
        wl["slo"] = slo
    mp = dict(mapping or {})
    mp.setdefault("batch", batch or [1, 4, 8, 16, 32, 64])
    return {
        "model": model,
        "system": {"name": system, "num_gpus": num_gpus},
        "workload": wl,
        "mapping": mp,
        "objective": objective,
    }


DIFF_CASES = [
    ("static", "throughput", {}),
    ("static", "ttft", {}),
    ("static", "latency", {"model": "mixtral-8x7b"}),
    ("continuous", "throughput", {"slo": {"tpot_s": 0.004}}),
    ("continuous", "tpot", {"num_gpus": [2, 4]}),
    ("continuous", "ttft", {"model": "qwen3-30b-a3b"}),
    ("disaggregated", "throughput", {}),
    ("disaggregated", "latency", {"system": "dgx-a100", "precision": "bf16", "model": "llama2-7b"}),
    (
        "static",
        "throughput",
        {
            "model": "llama3.3-70b",
            "system": "dgx-a100",
            "precision": "bf16",
            "num_gpus": 8,
            "slo": {"ttft_s": 2.0},
            "input_len": 1024,
            "output_len": 256,
        },
    ),
]


def _check_against_oracle(data):
    problem = parse_problem(data, source="t")
    enum = enumerate_space(problem, keep_all=True)
    sol = solve(problem, workers=WORKERS, time_limit=TIME_LIMIT)
    assert enum.points_evaluated == enum.space_size == sol.space_size > 1
    assert sol.status == enum.status
    if enum.status == "INFEASIBLE":
        assert sol.message
        return problem, enum, sol
    assert sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-3), (
        sol.plans[0].mapping,
        enum.plans[0].mapping,
    )
    plan = sol.plans[0]
    met = plan.evaluation.metrics
    assert met["fits"]  # the SLOs are checked on the floats by the solver's round trip (within its resolution)
    # round trip: the plan written back as the problem's mapping evaluates to the same metrics
    again = evaluate_inference(problem.model, problem.system(plan.num_gpus), problem.workload, plan.mapping)
    assert again.metrics == met
    return problem, enum, sol


@pytest.mark.parametrize("serving,objective,extra", DIFF_CASES, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in enumerate(DIFF_CASES)])
@pytest.mark.slow
def test_solver_matches_the_enumerator(serving, objective, extra):
    _check_against_oracle(_problem(serving, objective, **extra))


def test_slo_binds_and_infeasible_slo_is_explained():
    problem, enum, sol = _check_against_oracle(_problem("static", "throughput", slo={"tpot_s": 0.004}))
    free = enumerate_space(parse_problem(_problem("static", "throughput"), source="t"))
    assert sol.objective_value < free.objective_value  # the SLO costs throughput
    _, _, sol = _check_against_oracle(_problem("static", "throughput", slo={"tpot_s": 1e-4}))
    assert sol.status == "INFEASIBLE" and "TPOT SLO binds" in sol.message


def test_memory_infeasible_is_explained():
    data = _problem("static", "throughput", model="llama3.1-405b", num_gpus=1, batch=[1, 2])
    _, _, sol = _check_against_oracle(data)
    assert sol.status == "INFEASIBLE" and "memory binds" in sol.message and "GiB" in sol.message


def test_free_batch_domain_is_the_engine_batch_sizes_up_to_what_fits():
    data = _problem("continuous", "throughput")
    data["mapping"] = {"tp": 1}
    batch = serving_space.build_space(parse_problem(data, source="t")).relation("batch")
    micro = sorted(set(batch["micro_batch"]))
    assert tuple(micro[:5]) == (1, 2, 4, 8, 16) and all(m % 8 == 0 for m in micro[3:])
    assert all(b == pp * m for pp, m, b in batch[["pp", "micro_batch", "batch"]].itertuples(index=False))
    assert batch["batch"].max() <= serving_space.MAX_DEFAULT_BATCH


# ---------------------------------------------------------------- Pareto front

PARETO_CASES = [
    (_problem("continuous", "throughput", num_gpus=4), ("tokens_per_s_per_gpu", "tokens_per_s_per_user")),
    (_problem("static", "throughput", num_gpus=4), ("ttft_s", "tokens_per_s")),
    (_problem("disaggregated", "throughput", num_gpus=4), ("e2e_latency_s", "tokens_per_s_per_gpu")),
]


@pytest.mark.parametrize("data,objectives", PARETO_CASES, ids=["continuous", "static", "disaggregated"])
@pytest.mark.slow
def test_pareto_front_equals_the_enumerators_non_dominated_points(data, objectives):
    problem = parse_problem(data, source="t")
    result = pareto.pareto_front(problem, objectives, time_limit=60, workers=WORKERS)
    assert result.status == "COMPLETE" and len(result.plans) >= 2
    table = enumerate_space(problem, keep_all=True).table
    points = table[table["fits"] & table["meets_slo"]]
    truth = pareto.non_dominated(points, objectives, METRIC_SENSE)
    got = sorted(tuple(p.evaluation.metrics[o] for o in objectives) for p in result.plans)
    want = sorted(set(truth[list(objectives)].itertuples(index=False, name=None)))
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        assert all(rel_close(a, b, 1e-6) for a, b in zip(g, w)), (g, w)


def test_pareto_reports_partial_when_time_runs_out(monkeypatch):
    real = pareto.cp_solver

    def starved(time_limit, workers, seed, presolve=True):
        s = real(time_limit, workers, seed, presolve)
        s.parameters.max_deterministic_time = 0.0
        return s

    monkeypatch.setattr(pareto, "cp_solver", starved)
    problem = parse_problem(PARETO_CASES[0][0], source="t")
    result = pareto.pareto_front(problem, PARETO_CASES[0][1], time_limit=5)
    assert result.status == "PARTIAL" and result.gap is not None and result.message


def test_pareto_rejects_unknown_metrics():
    problem = parse_problem(PARETO_CASES[0][0], source="t")
    with pytest.raises(ProblemError, match="allowed"):
        pareto.pareto_front(problem, ("tokens_per_s", "happiness"))


# ---------------------------------------------------------------- CLI contract


def _cli(args, capsys):
    from parasol.solver.cli import main

    code = main(args)
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def test_cli_evaluate_solve_and_pareto(tmp_path, capsys):
    data = _problem("static", "throughput", num_gpus=2, mapping={"tp": 2, "pp": 1, "ep": 1, "dp": 1}, batch=32)
    data["workload"]["batch"] = 32
    data["mapping"].pop("batch")
    path = write_yaml(tmp_path / "serve.yaml", data)
    doc = json.loads(_cli(["evaluate", str(path), "--json"], capsys))
    for key in (
        "ttft_s",
        "tpot_s",
        "e2e_latency_s",
        "tokens_per_s",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_user",
        "batch",
        "peak_memory_gib",
        "fits",
    ):
        assert key in doc["metrics"], key
    assert doc["mapping"] == {"tp": 2, "pp": 1, "ep": 1, "dp": 1, "batch": 32, "num_gpus": 2}
    assert "time to first token" in _cli(["evaluate", str(path)], capsys)
    free = write_yaml(tmp_path / "free.yaml", _problem("continuous", "throughput", num_gpus=2))
    solved = json.loads(_cli(["solve", str(free), "--json", "--workers", "2"], capsys))
    assert solved["status"] == "OPTIMAL" and rel_close(solved["objective"], solved["metrics"]["tokens_per_s"], 1e-12)
    # the returned mapping pasted back into the problem evaluates to the same metrics
    pasted = {**_problem("continuous", "throughput", num_gpus=2), "mapping": solved["mapping"]}
    again = json.loads(_cli(["evaluate", str(write_yaml(tmp_path / "pasted.yaml", pasted)), "--json"], capsys))
    assert again["metrics"]["tokens_per_s"] == pytest.approx(solved["metrics"]["tokens_per_s"], rel=1e-12)
    front = json.loads(
        _cli(["pareto", str(free), "--objectives", "tokens_per_s_per_gpu,tokens_per_s_per_user", "--json"], capsys)
    )
    assert front["status"] == "COMPLETE" and front["front"]
    assert set(front["front"][0]) == {"mapping", "metrics"}
    enumerated = json.loads(_cli(["enumerate", str(free), "--json"], capsys))
    assert rel_close(enumerated["objective"], solved["objective"], 1e-3)
