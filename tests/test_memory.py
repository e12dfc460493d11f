"""Memory terms against Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198), Table 2, and ZeRO (Rajbhandari et al., SC'20).

Table 2, activation bytes per transformer layer (s sequence, b micro-batch, h hidden, a heads,
t tensor-parallel size):
  no parallelism                  sbh(34 + 5as/h)
  tensor parallel (baseline)      sbh(10 + 24/t + 5as/(ht))
  tensor + sequence parallel      sbh(34/t + 5as/(ht))
  tensor parallel + selective     sbh(10 + 24/t)
  tensor + sequence + selective   sbh·34/t
  full recomputation              2sbh
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import rel_close

from parasol.model import memory
from parasol.solver import library

GPT3 = library.load_model("gpt3-175b")  # MHA, ffn = 4h, a = 96, h = 12288
S, B, T = 2048, 1, 8
H, A = GPT3.hidden, GPT3.heads
SBH = S * B * H


def act(model=GPT3, b=B, s=S, tp=T, cp=1, sp=False, recompute="none", attention="standard"):
    return memory.activation_bytes_per_layer(model, b, s, tp, cp, sp, recompute, attention)


def test_shape_is_the_papers():
    assert GPT3.ffn == 4 * GPT3.hidden and GPT3.kv_heads == GPT3.heads and GPT3.activation == "gelu"


@pytest.mark.parametrize("b", [1, 2])
def test_table2_no_parallelism(b):
    want = S * b * H * (34 + 5 * A * S / H)
    assert rel_close(act(b=b, tp=1), want, 1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_table2_tensor_parallel_baseline(t):
    want = SBH * (10 + 24 / t + 5 * A * S / (H * t))
    assert rel_close(act(tp=t, sp=False), want, 1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_table2_tensor_and_sequence_parallel(t):
    want = SBH * (34 / t + 5 * A * S / (H * t))
    assert rel_close(act(tp=t, sp=True), want, 1e-12)


@pytest.mark.parametrize("t", [1, 8])
def test_table2_tensor_parallel_selective(t):
    want = SBH * (10 + 24 / t)
    assert rel_close(act(tp=t, sp=False, recompute="selective"), want, 1e-12)


def test_table2_tensor_sequence_selective():
    assert rel_close(act(sp=True, recompute="selective"), SBH * 34 / T, 1e-12)


def test_table2_full_recompute():
    """Table 2: 2sbh, the layer input. With sequence parallelism Megatron stores the input split
    over t (Korthikanti Sec. 5), so the model returns 2sbh/t."""
    assert rel_close(act(sp=False, recompute="full"), 2 * SBH, 1e-12)
    assert rel_close(act(sp=True, recompute="full"), 2 * SBH / T, 1e-12)


def test_full_recompute_does_not_depend_on_attention_kernel():
    assert act(recompute="full", attention="flash") == act(recompute="full", attention="standard")


def test_selective_saves_exactly_the_score_term():
    """Sec. 5: selective recomputation removes 5as/h of sbh(34 + 5as/h) — 80 % at GPT-3's shape."""
    none, sel = act(tp=1), act(tp=1, recompute="selective")
    assert rel_close(none - sel, 5 * A * S * S * B, 1e-12)
    assert rel_close(1 - sel / none, (5 * A * S / H) / (34 + 5 * A * S / H), 1e-12)
    assert 1 - sel / none > 0.7  # the paper: "reduces activation memory by 70 % for GPT-3"


@pytest.mark.parametrize("sp", [False, True])
def test_flash_attention_drops_the_s_squared_term(sp):
    """Flash attention keeps no s×s tensors, only a 4-byte log-sum-exp per head and token
    (Dao et al. 2022)."""
    standard = act(sp=sp)
    flash = act(sp=sp, attention="flash")
    assert rel_close(standard - flash, (5 * A * S * S * B - 4 * S * B * A) / T, 1e-12)
    # and it no longer grows with s² : doubling s doubles the flash activations
    assert rel_close(act(s=2 * S, sp=sp, attention="flash"), 2 * flash, 1e-12)
    # while the materialised scores grow with s²: 5a(2s)²b/t - 2·5as²b/t = 10as²b/t beyond linear
    assert rel_close(act(s=2 * S, sp=sp) - 2 * standard, 10 * A * S * S * B / T, 1e-12)


def test_gqa_reduces_kv_terms():
    """K and V are 2·sb·kv·d bytes each: with kv heads g instead of a, the layer saves
    4·sb·(a - g)·d / t bytes."""
    for g in (1, 8, 48):
        gqa = dataclasses.replace(GPT3, kv_heads=g)
        saved = act() - act(model=gqa)
        assert rel_close(saved, 4 * S * B * (A - g) * GPT3.head_dim / T, 1e-12), g


def test_swiglu_activation_terms():
    """SwiGLU keeps gate and up outputs (2·2sbf) and their product (2sbf): 6sbf against GeLU's 4sbf."""
    swi = dataclasses.replace(GPT3, activation="swiglu")
    assert rel_close(act(model=swi) - act(), 2 * S * B * GPT3.ffn / T, 1e-12)


def test_context_parallel_splits_tokens():
    """cp ranks each hold s/cp tokens; with flash attention the per-layer bytes divide by cp."""
    one = act(attention="flash", sp=True)
    assert rel_close(act(attention="flash", sp=True, cp=2), one / 2, 1e-12)


def test_activations_linear_in_micro_batch():
    for rc in ("none", "selective", "full"):
        assert rel_close(act(b=4, recompute=rc), 4 * act(b=1, recompute=rc), 1e-12)


# ---------------------------------------------------------------- ZeRO model states


@pytest.mark.parametrize("d", [1, 2, 8, 64])
def test_state_bytes_mixed_precision_adam_fp32_grads(d):
    """bf16 weights (2 B), fp32 main gradients (4 B), fp32 master + m + v (12 B)."""
    f = memory.state_bytes_per_param
    assert f(0, d, 2.0, 4.0) == 18.0
    assert rel_close(f(1, d, 2.0, 4.0), 2 + 4 + 12 / d, 1e-12)
    assert rel_close(f(2, d, 2.0, 4.0), 2 + (4 + 12) / d, 1e-12)
    assert rel_close(f(3, d, 2.0, 4.0), 18 / d, 1e-12)


def test_state_bytes_zero_paper_figure1():
    """ZeRO paper Fig. 1 (K = 12, fp16 gradients, Nd = 64): 16Ψ, 4Ψ + KΨ/Nd, 2Ψ + (2+K)Ψ/Nd,
    (2+2+K)Ψ/Nd; for Ψ = 7.5 B: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB."""
    psi, nd = 7.5e9, 64
    got = [memory.state_bytes_per_param(z, nd, 2.0, 2.0) * psi / 1e9 for z in range(4)]
    assert got[0] == pytest.approx(120.0, rel=1e-12)
    assert got[1] == pytest.approx(31.4, abs=0.05)
    assert got[2] == pytest.approx(16.6, abs=0.05)
    assert got[3] == pytest.approx(1.875, rel=1e-12)


def test_state_bytes_monotone_in_zero_stage():
    for d in (2, 8):
        values = [memory.state_bytes_per_param(z, d, 2.0, 4.0) for z in range(4)]
        assert values == sorted(values, reverse=True) and len(set(values)) == 4


# ---------------------------------------------------------------- in-flight micro-batches


@pytest.mark.parametrize("p", [1, 2, 4, 8])
@pytest.mark.parametrize("m", [1, 3, 8, 64])
def test_1f1b_stage_holds_min_m_p_minus_i(p, m):
    """1F1B (PipeDream-Flush; Narayanan SC'21 Sec. 2.2.1): stage i starts p - i forwards before its
    first backward, fewer when the step has fewer micro-batches."""
    for i in range(p):
        assert memory.in_flight_chunks(i, p, 1, m) == min(m, p - i)
        assert memory.in_flight_layer_activations(10, i, p, 1, m) == min(m, p - i) * 10


@pytest.mark.parametrize("p,v", [(2, 2), (4, 2), (4, 3), (8, 4), (16, 3)])
def test_interleaved_stage0_korthikanti(p, v):
    """Korthikanti Sec. 4.2.3: with the interleaved schedule the first stage holds
    L·(1 + (p-1)/(p·v)) layers' activations (L the model's layers, L/p on the stage)."""
    L = p * v * 6
    m = 8 * p
    got = memory.in_flight_layer_activations(L // p, 0, p, v, m)
    assert rel_close(got, L * (1 + (p - 1) / (p * v)), 1e-12)


def test_1f1b_stage0_holds_L_layers():
    """Korthikanti Sec. 4.2.3: without interleaving the first stage holds L layers' activations
    (p micro-batches of L/p layers), independent of p."""
    for p in (2, 4, 8, 16):
        L = 96
        assert memory.in_flight_layer_activations(L // p, 0, p, 1, 64) == L


def test_interleaved_last_stage_holds_fewest():
    p, v, m = 8, 2, 64
    chunks = [memory.in_flight_chunks(i, p, v, m) for i in range(p)]
    assert chunks == sorted(chunks, reverse=True)
    assert chunks[-1] < chunks[0]


def test_edge_buffers():
    """Korthikanti Sec. 4.3: the embedding dropout output sbhp/t on the first stage; fp32 logits
    4sbV/t on the last."""
    assert rel_close(memory.embedding_activation_bytes(GPT3, B, S, T, 1, 16), S * B * H * 16 / T, 1e-12)
    assert rel_close(memory.logits_activation_bytes(GPT3, B, S, T, 1), 4 * S * B * GPT3.vocab / T, 1e-12)


def test_bf16_adam_moments_save_four_bytes_per_parameter_and_stream_fewer_bytes():
    """Megatron-Core's precision-aware optimizer with bf16 moments (DeepSeek-V3's recipes): Adam keeps
    an fp32 master copy and two bf16 moments, 8 B instead of 12; the step reads and writes them."""
    assert memory.adam_state_bytes(4.0) == 12.0 and memory.adam_state_bytes(2.0) == 8.0
    assert memory.state_bytes_per_param(0, 8, 2.0, 2.0, 2.0) == memory.state_bytes_per_param(0, 8, 2.0, 2.0) - 4.0
    assert memory.state_bytes_per_param(1, 8, 2.0, 2.0, 2.0) == pytest.approx(2.0 + 2.0 + 8.0 / 8)
    from parasol.model.compute import optimizer_step_time_s
    from parasol.solver import library

    device = library.load_device("h100-sxm-80gb")
    full, half = optimizer_step_time_s(device, 1e9, 4.0), optimizer_step_time_s(device, 1e9, 4.0, 2.0)
    assert half / full == pytest.approx((16 + 4 + 2) / (24 + 4 + 2))
