"""Unit tests per model term: communication, pipeline, GEMM roofline, breakdowns, MFU and the
direction of each knob (recompute, sequence parallelism, tensor parallelism)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml
from conftest import EXAMPLE, REPO, rel_close, training_problem

from parasol.model import comm, compute, params, pipeline
from parasol.model.errors import ProblemError
from parasol.model.specs import NetworkTier
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.problem import load_problem, parse_problem

TIER = NetworkTier(name="t", bandwidth_bytes_per_s=100e9, latency_s=2e-6, efficiency=0.8)


# ---------------------------------------------------------------- communication (alpha-beta)


@pytest.mark.parametrize("n", [2, 4, 8, 64])
@pytest.mark.parametrize("nbytes", [1e3, 1e6, 1e9])
def test_ring_allreduce(n, nbytes):
    """Ring all-reduce: 2(n-1)/n·S bytes per rank over the effective bandwidth, 2(n-1) latencies
    (Thakur et al. 2005; Patarasuk & Yuan 2009)."""
    bw = 100e9 * 0.8
    want = 2 * (n - 1) / n * nbytes / bw + 2 * (n - 1) * 2e-6
    assert rel_close(comm.ring_allreduce_time_s(nbytes, n, TIER), want, 1e-12)
    assert rel_close(comm.ring_reduce_scatter_time_s(nbytes, n, TIER), want / 2, 1e-12)


def test_ring_trivial_cases():
    assert comm.ring_allreduce_time_s(1e9, 1, TIER) == 0.0
    assert comm.ring_allreduce_time_s(0.0, 8, TIER) == 0.0


def test_ring_bandwidth_term_approaches_2S_over_bw():
    big = comm.ring_allreduce_time_s(1e12, 1024, TIER)
    assert rel_close(big, 2 * 1e12 / (100e9 * 0.8), 2e-3)


@pytest.fixture(scope="module")
def a100():
    return library.load_system("dgx-a100", 64)


def test_allreduce_inside_domain_uses_scale_up(a100):
    S = 1e8
    assert a100.scale_up_domain == 8
    want = comm.ring_allreduce_time_s(S, 8, a100.scale_up)
    assert rel_close(comm.allreduce_time_s(S, 8, 1, a100), want, 1e-12)
    assert comm.tier_name(8, 1, a100) == "scale_up"


def test_allreduce_hierarchical_when_group_leaves_domain(a100):
    """16 consecutive ranks = 2 domains of 8: reduce-scatter inside (8 ranks, S), all-reduce across
    (2 ranks, S/8), all-gather inside."""
    S = 1e8
    up, out = a100.scale_up, a100.scale_out
    inside = 7 * up.latency_s + 7 / 8 * S / up.effective_bytes_per_s
    across = 1 * out.latency_s + 1 / 2 * (S / 8) / out.effective_bytes_per_s
    assert rel_close(comm.allreduce_time_s(S, 16, 1, a100), 2 * (inside + across), 1e-12)
    assert comm.tier_name(16, 1, a100) == "scale_out"


def test_allreduce_strided_group_crosses_every_domain(a100):
    """A dp group of stride 8 (tp = 8) has one member per domain: a flat ring on scale-out."""
    S = 1e8
    want = comm.ring_allreduce_time_s(S, 8, a100.scale_out)
    assert rel_close(comm.allreduce_time_s(S, 8, 8, a100), want, 1e-12)
    # stride 2: 4 members share a domain
    assert comm.ranks_per_domain(8, 2, a100) == 4
    assert comm.tier_name(4, 2, a100) == "scale_up"


def test_hierarchical_beats_flat_scale_out(a100):
    S = 1e9
    assert comm.allreduce_time_s(S, 64, 1, a100) < comm.ring_allreduce_time_s(S, 64, a100.scale_out)


def test_p2p(a100):
    S = 3e7
    assert rel_close(comm.p2p_time_s(S, False, a100), a100.scale_up.latency_s + S / a100.scale_up.effective_bytes_per_s, 1e-12)
    assert rel_close(comm.p2p_time_s(S, True, a100), a100.scale_out.latency_s + S / a100.scale_out.effective_bytes_per_s, 1e-12)
    assert comm.p2p_time_s(0, True, a100) == 0.0


# ---------------------------------------------------------------- pipeline


def test_stage_layer_counts_llama405b_default():
    """Megatron-Bridge's Llama 3.1 405B split: 126 layers on 8 stages = 15, 16 x 6, 15."""
    assert pipeline.stage_layer_counts(126, 8) == [15] + [16] * 6 + [15]


@pytest.mark.parametrize("layers,pp", [(96, 8), (96, 16), (80, 4), (126, 8), (126, 4), (35, 5), (30, 7), (7, 3)])
def test_stage_layer_counts_cover_all_layers(layers, pp):
    counts = pipeline.stage_layer_counts(layers, pp)
    assert sum(counts) == layers and len(counts) == pp and min(counts) >= 1
    if layers % pp == 0:
        assert counts == [layers // pp] * pp


def test_stage_layer_counts_explicit_edges():
    assert pipeline.stage_layer_counts(32, 4, 7, 9) == [7, 8, 8, 9]
    assert pipeline.stage_layer_counts(32, 2, 15, 17) == [15, 17]
    assert pipeline.stage_layer_counts(32, 1) == [32]


@pytest.mark.parametrize(
    "layers,pp,first,last",
    [
        (32, 4, 7, 8),  # 17 middle layers for 2 stages
        (32, 2, 15, 15),  # pp 2 must use every layer
        (32, 4, 0, 8),  # only one edge given
        (32, 4, 8, 0),
        (32, 1, 16, 16),  # pp 1 holds all layers
        (32, 4, 16, 16),  # nothing left for the middle stages
        (32, 4, 31, 1),
    ],
)
def test_stage_layer_counts_bad_splits_raise(layers, pp, first, last):
    with pytest.raises(ProblemError):
        pipeline.stage_layer_counts(layers, pp, first, last)


@pytest.mark.parametrize("layers", [1, 2, 7, 32, 61, 96])
def test_last_stage_options_are_the_splits_split_stages_accepts(layers):
    """The planner lists a pipeline's edge layer counts from ``last_stage_options``; they are exactly
    the (first, last) pairs ``split_stages`` accepts, for every pp and first stage."""
    for pp in range(1, min(layers, 12) + 1):
        for first in range(0, layers + 2):
            want = sorted(last for last in range(0, layers + 2) if pipeline.split_stages(layers, pp, first, last)[0])
            assert sorted(pipeline.last_stage_options(layers, pp, first)) == want, (pp, first)


@pytest.mark.parametrize("m,p,v", [(1, 1, 1), (8, 4, 1), (16, 4, 2), (64, 8, 4), (3, 8, 1)])
def test_pipeline_time_equal_stages(m, p, v):
    """Narayanan SC'21 Sec. 2.2: (m + (p-1)/v)·t for p equal stages of t per micro-batch."""
    t = 0.37
    assert rel_close(pipeline.pipeline_time_s([t] * p, m, v), (m + (p - 1) / v) * t, 1e-12)


def test_pipeline_time_bubble_fraction():
    """Bubble fraction (p-1)/m (1F1B) and (p-1)/(v·m) (interleaved), Narayanan SC'21 eq. 1 and Sec. 2.2.2."""
    t, m, p = 1.0, 32, 8
    for v in (1, 2, 4):
        total = pipeline.pipeline_time_s([t] * p, m, v)
        assert rel_close((total - m * t) / (m * t), (p - 1) / (v * m), 1e-12)


def test_pipeline_time_slowest_stage_dominates():
    assert rel_close(pipeline.pipeline_time_s([1.0, 2.0, 1.0], 10, 1), 10 * 2.0 + 2.0, 1e-12)


# ---------------------------------------------------------------- GEMM roofline (independent of the code's curve)


def _device_yaml(name: str) -> dict:
    return yaml.safe_load((REPO / "problems" / "systems" / "devices" / f"{name}.yaml").read_text())


def _curve_eff(data: dict, flops: float, precision: str) -> float:
    eff = data["efficiency"]
    curve = eff.get(f"gemm_{precision}", eff["gemm"])
    xs = np.log([float(x) for x in curve["flops"]])
    ys = [float(y) for y in curve["efficiency"]]
    return float(np.interp(math.log(flops), xs, ys))


@pytest.mark.parametrize("dev", ["a100-sxm-80gb", "h100-sxm-80gb"])
def test_gemm_memory_bound_for_tiny_k(dev):
    """k = 1: 2mn FLOPs against m·n output bytes: the HBM side of the roofline binds."""
    device = library.load_device(dev)
    data = _device_yaml(dev)
    m, n, k = 8192, 8192, 1
    traffic = (m * k + k * n) * 2 + m * n * 2
    memory = traffic / (float(data["hbm_bytes_per_s"]) * float(data["efficiency"]["memory"]))
    compute_t = 2 * m * n * k / (float(data["peak_flops"]["bf16"]) * _curve_eff(data, 2 * m * n * k, "bf16"))
    assert memory > compute_t
    assert rel_close(compute.gemm_time_s(device, m, n, k, "bf16"), memory, 1e-9)


@pytest.mark.parametrize("dev", ["a100-sxm-80gb", "h100-sxm-80gb"])
def test_gemm_compute_bound_for_big_k(dev):
    device = library.load_device(dev)
    data = _device_yaml(dev)
    m = n = k = 8192
    flops = 2.0 * m * n * k
    want = flops / (float(data["peak_flops"]["bf16"]) * _curve_eff(data, flops, "bf16"))
    traffic = 3 * m * n * 2 / (float(data["hbm_bytes_per_s"]) * float(data["efficiency"]["memory"]))
    assert want > traffic
    assert rel_close(compute.gemm_time_s(device, m, n, k, "bf16"), want, 1e-9)


def test_gemm_efficiency_rises_with_size():
    device = library.load_device("a100-sxm-80gb")
    small = compute.gemm_time_s(device, 512, 512, 512, "bf16")
    big = compute.gemm_time_s(device, 8192, 8192, 8192, "bf16")
    achieved_small = 2 * 512**3 / small
    achieved_big = 2 * 8192**3 / big
    assert achieved_small < achieved_big <= device.peak("bf16")


def test_fp8_doubles_gemm_peak_on_h100():
    """H100 SXM datasheet: 1,979 dense FP8 TFLOP/s vs 989 BF16."""
    device = library.load_device("h100-sxm-80gb")
    assert rel_close(device.peak("fp8"), 2 * device.peak("bf16"), 1e-3)
    data = _device_yaml("h100-sxm-80gb")
    m = n = k = 16384
    flops = 2.0 * m * n * k
    t16 = compute.gemm_time_s(device, m, n, k, "bf16")
    t8 = compute.gemm_time_s(device, m, n, k, "fp8")
    want = t16 * (device.peak("bf16") / device.peak("fp8")) * (_curve_eff(data, flops, "bf16") / _curve_eff(data, flops, "fp8"))
    assert rel_close(t8, want, 1e-9)
    assert t8 < 0.8 * t16


def test_device_without_fp8_rejects_it():
    device = library.load_device("a100-sxm-80gb")
    with pytest.raises(ProblemError):
        device.peak("fp8")


# ---------------------------------------------------------------- evaluations


@pytest.fixture(scope="module")
def example():
    problem = load_problem(EXAMPLE)
    mapping = problem.fixed_mapping()
    return problem, mapping, evaluate_training(problem.model, problem.system(), problem.workload, mapping)


def _eval(problem, **changes):
    mapping = dataclasses.replace(problem.fixed_mapping(), **changes)
    return evaluate_training(problem.model, problem.system(), problem.workload, mapping)


def test_step_time_equals_breakdown_sum(example):
    _, _, ev = example
    parts = ev.breakdown["time_s"]
    assert rel_close(sum(parts.values()), ev.metrics["step_time_s"], 1e-9)
    assert all(v >= -1e-9 * ev.metrics["step_time_s"] for v in parts.values()), parts


def test_memory_breakdown_sums_to_peak(example):
    _, _, ev = example
    assert rel_close(sum(ev.breakdown["memory_gib"].values()), ev.metrics["peak_memory_gib"], 1e-9)


def test_mfu_consistency(example):
    """MFU (PaLM definition) = model FLOPs per token × tokens/s / (GPUs × peak); A100 bf16 dense peak
    312 TFLOP/s (datasheet)."""
    problem, _, ev = example
    met = ev.metrics
    tokens = problem.workload.global_batch * problem.workload.seq_len
    assert rel_close(met["tokens_per_s"], tokens / met["step_time_s"], 1e-12)
    fpt = params.model_flops_per_token(problem.model, problem.workload.seq_len)
    assert rel_close(met["mfu"], fpt * met["tokens_per_s"] / (1024 * 312e12), 1e-9)
    assert rel_close(met["tflops_per_gpu"], met["mfu"] * 312, 1e-9)
    assert 0.0 < met["mfu"] < 1.0


def test_megatron_sc21_gpt3_run_within_15_percent():
    """Narayanan SC'21 Table 2, PTD-P GPT-3 174.6B on 1,536 A100s (t 8, p 12): the model's step time
    is within 15 % of the measured one (validation set, problems/validation/training_runs.yaml)."""
    from parasol.solver import validation

    entry = next(e for e in validation.load_runs() if e["id"] == "megatron21-t2-ptd-p-174.6b-1536gpu")
    run = validation.evaluate_run(entry)
    assert abs(run.error) < 0.15, f"predicted {run.predicted_step_s:.2f} s vs measured {run.measured_step_s:.2f} s"


@pytest.mark.parametrize(
    "changes", [{}, {"recompute": "none", "vpp": 2}, {"pp": 1, "dp": 128, "zero": 3}, {"tp": 4, "dp": 16, "sp": False, "zero": 0}]
)
def test_breakdowns_on_variants(example, changes):
    problem, _, _ = example
    ev = _eval(problem, **changes)
    assert rel_close(sum(ev.breakdown["time_s"].values()), ev.metrics["step_time_s"], 1e-9)
    assert ev.breakdown["time_s"]["pipeline/bubble"] >= -1e-9 * ev.metrics["step_time_s"]
    assert rel_close(sum(ev.breakdown["memory_gib"].values()), ev.metrics["peak_memory_gib"], 1e-9)
    stage = ev.stages[ev.breakdown["peak_memory_stage"]]
    assert rel_close(stage["memory_bytes"] / 2**30, ev.metrics["peak_memory_gib"], 1e-12)


def test_no_bubble_without_pipeline():
    p = parse_problem(training_problem(num_gpus=8, mapping={"tp": 2, "pp": 1, "dp": 4, "micro_batch": 1}), source="t")
    ev = evaluate_training(p.model, p.system(), p.workload, p.fixed_mapping())
    assert abs(ev.breakdown["time_s"]["pipeline/bubble"]) <= 1e-9 * ev.metrics["step_time_s"]


def test_full_recompute_slower_and_smaller(example):
    problem, _, _ = example
    none, full = _eval(problem, recompute="none"), _eval(problem, recompute="full")
    assert full.metrics["step_time_s"] > none.metrics["step_time_s"]
    assert full.metrics["peak_memory_gib"] < none.metrics["peak_memory_gib"]
    sel = _eval(problem, recompute="selective")
    assert none.metrics["step_time_s"] <= sel.metrics["step_time_s"] < full.metrics["step_time_s"]


def test_full_recompute_adds_a_forward():
    """Full recomputation reruns each layer's forward once: the layer part of a step grows by
    about forward/(forward+backward) ≈ 1/3 (Korthikanti Sec. 5; Megatron eq. 3's 4/3)."""
    p = parse_problem(
        training_problem(
            model="gpt3-175b",
            system="dgx-a100",
            num_gpus=64,
            seq_len=2048,
            global_batch=64,
            mapping={"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1},
        ),
        source="t",
    )
    base = p.fixed_mapping()
    none = evaluate_training(p.model, p.system(), p.workload, dataclasses.replace(base, recompute="none"))
    full = evaluate_training(p.model, p.system(), p.workload, dataclasses.replace(base, recompute="full"))
    ratio = full.metrics["step_time_s"] / none.metrics["step_time_s"]
    assert 1.15 < ratio < 1.40


def test_sequence_parallel_reduces_memory(example):
    problem, _, _ = example
    for rc in ("none", "selective"):
        off, on = _eval(problem, sp=False, recompute=rc), _eval(problem, sp=True, recompute=rc)
        assert on.metrics["peak_memory_gib"] < off.metrics["peak_memory_gib"]
        assert on.breakdown["memory_gib"]["activations"] < off.breakdown["memory_gib"]["activations"]


def test_larger_tp_reduces_weights_per_gpu():
    p = parse_problem(
        training_problem(
            model="gpt3-175b",
            system="dgx-a100",
            num_gpus=64,
            seq_len=2048,
            global_batch=64,
            mapping={"tp": 2, "pp": 8, "dp": 4, "micro_batch": 1},
        ),
        source="t",
    )
    weights = []
    for tp, dp in ((2, 4), (4, 2), (8, 1)):
        m = dataclasses.replace(p.fixed_mapping(), tp=tp, dp=dp, sp=True)
        ev = evaluate_training(p.model, p.system(), p.workload, m)
        weights.append(ev.breakdown["memory_gib"]["weights"])
    assert weights[0] > weights[1] > weights[2]
    assert rel_close(weights[0] / weights[2], 4.0, 0.02)


def test_weights_per_gpu_hand_count():
    """pp 1, tp 8, zero 1: every GPU holds 1/8 of all parameters as 2-byte weights."""
    p = parse_problem(
        training_problem(model="llama2-7b", num_gpus=8, mapping={"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1}), source="t"
    )
    ev = evaluate_training(p.model, p.system(), p.workload, p.fixed_mapping())
    assert rel_close(ev.breakdown["memory_gib"]["weights"] * 2**30, params.total_params(p.model) / 8 * 2, 1e-9)


def test_zero_stages_reduce_state_memory(example):
    problem, _, _ = example
    mem = [_eval(problem, zero=z).metrics["peak_memory_gib"] for z in (0, 1, 2, 3)]
    assert mem[0] > mem[1] > mem[2] > mem[3]


def test_more_microbatches_amortise_bubble():
    p = parse_problem(
        training_problem(
            model="gpt3-175b",
            system="dgx-a100",
            num_gpus=64,
            seq_len=2048,
            global_batch=64,
            mapping={"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1},
        ),
        source="t",
    )
    small = dataclasses.replace(p, workload=dataclasses.replace(p.workload, global_batch=16))
    m = p.fixed_mapping()
    ev_big = evaluate_training(p.model, p.system(), p.workload, m)
    ev_small = evaluate_training(small.model, small.system(), small.workload, m)
    assert ev_big.metrics["mfu"] > ev_small.metrics["mfu"]
    frac = lambda ev: ev.breakdown["time_s"]["pipeline/bubble"] / ev.metrics["step_time_s"]  # noqa: E731
    assert frac(ev_big) < frac(ev_small)


def test_fits_flag_matches_usable_memory(example):
    problem, _, ev = example
    assert ev.metrics["fits"] == (ev.metrics["peak_memory_gib"] <= ev.metrics["usable_memory_gib"])
    assert rel_close(ev.metrics["usable_memory_gib"], problem.system().usable_memory_bytes / 2**30, 1e-12)


def test_the_scalar_gemm_efficiency_is_numpys_interpolation():
    """issue 16: one GEMM's efficiency is interpolated in Python (the factor tables' hot path); it must
    equal np.interp's on the measured curve for every device and precision of the library."""
    import numpy as np  # noqa: PLC0415

    from parasol.solver.library import load_device, names  # noqa: PLC0415

    rng = np.random.default_rng(0)
    for name in names("systems/devices"):
        device = load_device(name)
        for precision in device.peak_flops:
            for flops in 10 ** rng.uniform(0, 17, 200):
                assert (
                    device.gemm_efficiency_at(float(flops), precision)
                    == device.gemm_efficiency_at(np.array([flops]), precision)[0]
                )
