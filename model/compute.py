"""Compute time of one transformer layer, one micro-batch, on one GPU.

Every operation goes through a roofline (Williams et al., CACM 2009): time = max(FLOPs /
(peak x efficiency), bytes / (HBM bandwidth x efficiency)). GEMM efficiency depends on the
GEMM's size (a calibrated curve in the device file); flash attention has its own efficiency;
norms, activations, dropout and residual adds are memory-bound streams.
"""

from __future__ import annotations

from .precision import activation_precision, bytes_per_element
from .specs import DeviceSpec, ModelSpec

# Backward FLOPs of flash attention relative to forward: the backward pass recomputes the
# scores (QK^T) and runs four more matmuls, 2.5x the forward's (Dao, FlashAttention-2, 2023, Sec. 4.1).
FLASH_BACKWARD_FACTOR = 2.5


def gemm_time_s(device: DeviceSpec, m: float, n: float, k: float, precision: str) -> float:
    """Time of an (m x k) @ (k x n) GEMM, seconds: roofline of 2mnk FLOPs and the operand bytes."""
    flops = 2.0 * m * n * k
    if flops <= 0:
        return 0.0
    compute = flops / (device.peak(precision) * float(device.gemm_efficiency_at(flops, precision)))
    traffic = (m * k + k * n) * bytes_per_element(precision) + m * n * bytes_per_element(activation_precision(precision))
    memory = traffic / (device.hbm_bytes_per_s * device.memory_efficiency)
    return max(compute, memory)


def memory_bound_time_s(device: DeviceSpec, nbytes: float) -> float:
    """Time to stream ``nbytes`` through HBM, seconds."""
    return nbytes / (device.hbm_bytes_per_s * device.memory_efficiency)


def layer_gemm_shapes(model: ModelSpec, tokens: float, tp: int) -> dict:
    """(m, n, k) of each forward GEMM of one layer on one tensor-parallel rank.

    Megatron's split (Shoeybi et al. 2019, Sec. 3): QKV and FC1 column-parallel, the attention
    output projection and FC2 row-parallel. SwiGLU's gate and up projections are one fused GEMM.
    """
    h, f = model.hidden, model.ffn
    up = 2 * f if model.activation == "swiglu" else f
    return {
        "qkv": (tokens, (model.q_width + 2 * model.kv_width) / tp, h),
        "attn_out": (tokens, h, model.q_width / tp),
        "mlp_up": (tokens, up / tp, h),
        "mlp_down": (tokens, h, f / tp),
    }


def layer_gemm_forward_time_s(model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int) -> float:
    """Forward time of all GEMMs in one layer, seconds. Backward is twice this (dgrad + wgrad)."""
    return sum(gemm_time_s(device, m, n, k, precision) for m, n, k in layer_gemm_shapes(model, tokens, tp).values())


def attention_core_flops(model: ModelSpec, micro_batch: int, seq_len: int, cp: int, tp: int, causal_skip: bool) -> float:
    """Forward FLOPs of QK^T and AV for one layer on one rank: 4·b·s_q·s_kv·(a/t)·d.

    Each context-parallel rank holds s/cp queries against all s keys. Flash attention skips the
    masked half of a causal score matrix (``causal_skip``); a materialised score matrix does not.
    """
    flops = 4.0 * micro_batch * (seq_len / cp) * seq_len * (model.heads / tp) * model.head_dim
    return flops * (0.5 if causal_skip else 1.0)


# Bytes moved per element of the s x s score matrix by a materialised attention forward:
# write QK^T (2), fused scale-mask-softmax read+write (4), dropout read+write+mask (5),
# read by the AV matmul (2) (Korthikanti et al. 2022, Sec. 4.2 lists the stored tensors).
STANDARD_ATTENTION_SCORE_BYTES = 13.0


def attention_core_forward_time_s(
    model: ModelSpec, device: DeviceSpec, attention: str, micro_batch: int, seq_len: int, cp: int, tp: int
) -> float:
    """Forward time of the attention core (scores, softmax, weighted sum) for one layer, seconds.

    flash: one fused kernel at the device's attention efficiency (Dao et al. 2022).
    standard: two batched GEMMs plus the score matrix streamed through HBM several times.
    """
    half = "bf16" if device.peak_flops.get("bf16") else next(iter(device.peak_flops))
    if attention == "flash":
        flops = attention_core_flops(model, micro_batch, seq_len, cp, tp, causal_skip=True)
        return flops / (device.peak(half) * device.attention_efficiency)
    flops = attention_core_flops(model, micro_batch, seq_len, cp, tp, causal_skip=False)
    gemm = flops / (device.peak(half) * float(device.gemm_efficiency_at(flops / 2)))
    scores = micro_batch * (model.heads / tp) * (seq_len / cp) * seq_len
    return gemm + memory_bound_time_s(device, scores * STANDARD_ATTENTION_SCORE_BYTES)


def attention_core_backward_factor(attention: str) -> float:
    """Backward time of the attention core relative to its forward (2.5 flash, 2 standard)."""
    return FLASH_BACKWARD_FACTOR if attention == "flash" else 2.0


def elementwise_forward_bytes(model: ModelSpec, tokens: float, tp: int, sp: bool, precision: str) -> float:
    """Bytes streamed by the memory-bound operations of one layer's forward on one rank.

    Two norms (read + write h), two bias-dropout-residual adds (read 2h, write h, a 1-byte mask
    when the model trains with dropout),
    the activation function (GeLU: read f, write f; SwiGLU: read 2f, write f). Norms and residual
    adds run on s/t tokens with sequence parallelism, on all tokens without it (Korthikanti 2022).
    """
    e = bytes_per_element(activation_precision(precision))
    h, f = model.hidden, model.ffn
    seq_tokens = tokens / tp if sp else tokens
    norms = 2 * 2 * h * e
    residuals = 2 * (3 * h * e + (h if model.dropout else 0))
    act = (3 * f if model.activation == "swiglu" else 2 * f) * e / tp
    return seq_tokens * (norms + residuals) + tokens * act


def logits_forward_time_s(model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int) -> float:
    """Forward time of the output projection (vocab-parallel, h x V/t) and the fp32 cross-entropy."""
    gemm = gemm_time_s(device, tokens, model.vocab / tp, model.hidden, precision)
    cross_entropy = memory_bound_time_s(device, 3 * 4.0 * tokens * model.vocab / tp)
    return gemm + cross_entropy


def embedding_forward_time_s(model: ModelSpec, device: DeviceSpec, precision: str, tokens: float) -> float:
    """Token (and position) embedding lookup plus dropout: a gather of tokens x h elements."""
    e = bytes_per_element(activation_precision(precision))
    return memory_bound_time_s(device, 3 * tokens * model.hidden * e)


def optimizer_step_time_s(device: DeviceSpec, params_owned: float, grad_bytes: float) -> float:
    """Adam step over the parameters this rank owns: read/write fp32 master, m, v (24 B),
    read the gradient, write the half-precision weight (Kingma & Ba 2015; mixed precision per
    Micikevicius et al. 2018)."""
    return memory_bound_time_s(device, params_owned * (24.0 + grad_bytes + 2.0))


def low_precision_cast_bytes(model: ModelSpec, tokens: float, tp: int, precision: str) -> tuple[float, float]:
    """(forward, backward) bytes of casting GEMM operands to FP8/FP4 in one layer on one rank.

    Transformer Engine's FP8 recipe (Micikevicius et al., "FP8 Formats for Deep Learning", 2022;
    NVIDIA TE docs) quantises every GEMM input: forward reads each 16-bit activation and writes
    it in FP8 (3 bytes per element of the m x k input); backward casts the output gradient
    (3 bytes per m x n element) and writes transposed FP8 copies of both operands for the weight
    gradient (1 byte each). Zero for 16-bit training.
    """
    if precision not in ("fp8", "fp4"):
        return 0.0, 0.0
    forward = backward = 0.0
    for m, n, k in layer_gemm_shapes(model, tokens, tp).values():
        forward += 3.0 * m * k
        backward += 3.0 * m * n + m * k + m * n
    return forward, backward
