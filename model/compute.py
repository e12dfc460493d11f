"""Compute time of one transformer layer, one micro-batch, on one GPU.

Every operation goes through a roofline (Williams et al., CACM 2009): time = max(FLOPs /
(peak x efficiency), bytes / (HBM bandwidth x efficiency)). GEMM efficiency depends on the
GEMM's size (a calibrated curve in the device file); flash attention has its own efficiency;
norms, activations, dropout and residual adds are memory-bound streams.
"""

from __future__ import annotations

import functools

from .choices import AttentionKernel, LowPrecisionRecipe
from .choices import LayerGemm as G
from .errors import ProblemError
from .fused_grouped_mlp import EPILOGUE_QUANTISED
from .precision import activation_precision, bytes_per_element, quantised_bytes_per_element
from .specs import FUSED_ATTENTION, DeviceSpec, ModelSpec

# Backward FLOPs of flash attention relative to forward: the backward pass recomputes the
# scores (QK^T) and runs four more matmuls, 2.5x the forward's (Dao, FlashAttention-2, 2023, Sec. 4.1).
FLASH_BACKWARD_FACTOR = 2.5


def gemm_time_s(
    device: DeviceSpec,
    m: float,
    n: float,
    k: float,
    precision: str,
    weight_bytes: float | None = None,
    memory_efficiency: float | None = None,
    rate_share: float = 1.0,
) -> float:
    """Time of an (m x k) @ (k x n) GEMM, seconds: roofline of 2mnk FLOPs and the operand bytes.

    ``weight_bytes`` is the storage size of one element of the (k x n) weight when it differs from
    the compute precision (weight-only quantisation such as W4A16: the kernel reads int4 weights
    and computes in 16 bits; Lin et al., AWQ, MLSys 2024); ``memory_efficiency`` the achieved
    fraction of HBM bandwidth when not the device's layer-kernel figure (inference decode GEMMs
    stream their weights). Both default to the training behaviour. ``rate_share`` scales the compute
    rate alone, for a kernel measured to fall short of the dense curve where it is compute-bound (a
    grouped expert GEMM: ``DeviceSpec.grouped_fp8_efficiency``).
    """
    flops = 2.0 * m * n * k
    if flops <= 0:
        return 0.0
    compute = flops / (device.peak(precision) * float(device.gemm_efficiency_at(flops, precision)) * rate_share)
    if weight_bytes is None:
        operands = (m * k + k * n) * bytes_per_element(precision)
    else:
        operands = m * k * bytes_per_element(precision) + k * n * weight_bytes
    traffic = operands + m * n * bytes_per_element(activation_precision(precision))
    memory = traffic / (device.hbm_bytes_per_s * (device.memory_efficiency if memory_efficiency is None else memory_efficiency))
    return max(compute, memory)


def memory_bound_time_s(device: DeviceSpec, nbytes: float) -> float:
    """Time to stream ``nbytes`` through HBM, seconds."""
    return nbytes / (device.hbm_bytes_per_s * device.memory_efficiency)


def attention_head_dims(model: ModelSpec) -> tuple[int, int]:
    """(query/key head dim, value head dim): MLA uses d_nope + d_rope for QK and its own d_v."""
    if model.mla is not None:
        return model.mla.qk_head_dim, model.mla.v_head_dim
    return model.head_dim, model.head_dim


def attention_activation_widths(model: ModelSpec) -> tuple[float, float]:
    """(Q + K + V, output-projection input) elements per token across all heads, before tensor
    parallelism splits them: MLA keeps Q, K and V decompressed (a·d_qk, a·d_qk and a·d_v)."""
    d_qk, d_v = attention_head_dims(model)
    if model.mla is not None:
        return model.heads * (2 * d_qk + d_v), model.heads * d_v
    return model.q_width + 2 * model.kv_width, model.q_width


def attention_gemm_shapes(model: ModelSpec, tokens: float, tp: int) -> dict:
    """(m, n, k) of the attention projections of one layer on one tensor-parallel rank.

    MHA/GQA: fused QKV (column-parallel) and output projection (row-parallel; Shoeybi et al. 2019).
    MLA (DeepSeek-V2 Sec. 2.1, Megatron-Core MLA): the low-rank down-projections are replicated
    across tp, the up-projections column-parallel, the output projection row-parallel.
    """
    h, a = model.hidden, model.heads
    if model.mla is not None:
        m = model.mla
        shapes = {
            G.KV_DOWN: (tokens, m.kv_lora_rank + m.qk_rope_head_dim, h),
            G.KV_UP: (tokens, a * (m.qk_nope_head_dim + m.v_head_dim) / tp, m.kv_lora_rank),
            G.ATTN_OUT: (tokens, h, a * m.v_head_dim / tp),
        }
        if m.q_lora_rank:
            shapes[G.Q_DOWN] = (tokens, m.q_lora_rank, h)
            shapes[G.Q_UP] = (tokens, a * m.qk_head_dim / tp, m.q_lora_rank)
        else:
            shapes[G.Q] = (tokens, a * m.qk_head_dim / tp, h)
        return shapes
    return {G.QKV: (tokens, (model.q_width + 2 * model.kv_width) / tp, h), G.ATTN_OUT: (tokens, h, model.q_width / tp)}


def mlp_gemm_shapes(model: ModelSpec, tokens: float, width: float) -> dict:
    """(m, n, k) of an FFN of intermediate ``width`` (already divided by its tensor parallelism);
    SwiGLU's gate and up projections are one fused GEMM."""
    up = 2 * width if model.activation == "swiglu" else width
    return {G.MLP_UP: (tokens, up, model.hidden), G.MLP_DOWN: (tokens, model.hidden, width)}


def layer_gemm_shapes(model: ModelSpec, tokens: float, tp: int, moe_layer: bool = False) -> dict:
    """(m, n, k) of each forward GEMM of one layer on one tensor-parallel rank, routed experts
    excepted (``moe_routed_forward_time_s``): the attention projections, then the dense FFN, or
    in an MoE layer the shared experts' FFN (DeepSeekMoE) when there are any."""
    shapes = attention_gemm_shapes(model, tokens, tp)
    if not moe_layer:
        shapes.update(mlp_gemm_shapes(model, tokens, model.ffn / tp))
    elif model.moe.shared_experts:
        shapes.update(mlp_gemm_shapes(model, tokens, model.moe.shared_experts * model.moe.shared_expert_ffn / tp))
    return shapes


def dense_gemm_share(device: DeviceSpec, recipe: LowPrecisionRecipe | None) -> float:
    """The share of its precision's GEMM curve a training recipe's dense GEMMs (every linear but the grouped routed
    experts, ``routed_gemm_share``) compute at, against the FP8 curve that per-tensor-scaled GEMMs measured (MAMF's and
    our torch._scaled_mm): MXFP8's block-scaled GEMMs, whose E8M0 scales per 32 values the kernel applies along K,
    ``device.mxfp8_gemm_efficiency``; Float8BlockScaling's (fp32 scales per 1x128 of the input and per 128x128 of the
    weight in the forward and data-gradient GEMMs, per 1x128 of both in the weight-gradient GEMM),
    ``device.block_fp8_gemm_efficiency``, the three GEMMs' summed per-tensor time over their blockwise time, measured;
    every other recipe, and 16 bits, 1 (NVFP4's curve is its own block-scaled GEMMs')."""
    if recipe == LowPrecisionRecipe.MXFP8:
        return device.mxfp8_gemm_efficiency
    return device.block_fp8_gemm_efficiency if recipe == LowPrecisionRecipe.BLOCKWISE else 1.0


def routed_gemm_share(device: DeviceSpec, recipe: LowPrecisionRecipe | None) -> float:
    """The share of the grouped rate (``moe_routed_forward_time_s``: the FP8 curve times ``grouped_fp8_efficiency``,
    measured on row-wise scaled grouped GEMMs) a training recipe's routed-expert GEMMs compute at: Float8BlockScaling's,
    ``device.block_fp8_grouped_efficiency`` (the expert shapes' row-wise time over their blockwise time, measured);
    every other recipe 1 (an MXFP8 device's grouped_fp8 was measured on MXFP8's own grouped GEMM)."""
    return device.block_fp8_grouped_efficiency if recipe == LowPrecisionRecipe.BLOCKWISE else 1.0


@functools.lru_cache(maxsize=1 << 14)
def layer_gemm_forward_time_s(
    model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int, moe_layer: bool = False, rate_share: float = 1.0
) -> float:
    """Forward time of the layer's GEMMs (routed experts aside) at ``rate_share`` of the curve (``dense_gemm_share``),
    seconds. Backward is twice this (dgrad + wgrad)."""
    shapes = layer_gemm_shapes(model, tokens, tp, moe_layer).values()
    return sum(gemm_time_s(device, m, n, k, precision, rate_share=rate_share) for m, n, k in shapes)


@functools.lru_cache(maxsize=1 << 14)
def tp_block_gemm_times_s(
    model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int, moe_layer: bool = False, rate_share: float = 1.0
) -> tuple[tuple[float, float], ...]:
    """Forward seconds of the GEMMs beside which each tensor-parallel collective of a layer runs, per
    block (attention, then MLP): (the column-parallel GEMMs that read the block's gathered input, the
    row-parallel GEMM whose output is reduced) (Shoeybi et al. 2019, Sec. 3; Korthikanti et al. 2022,
    Sec. 4.2.2); a parallel block is one block of both. An MoE layer's MLP block holds its shared
    experts' FFN, (0, 0) without them. A GEMM's data-gradient and weight-gradient GEMMs each take as
    long as its forward."""
    shapes = layer_gemm_shapes(model, tokens, tp, moe_layer)

    def seconds(names) -> float:
        return sum(gemm_time_s(device, *shapes[name], precision, rate_share=rate_share) for name in names if name in shapes)

    attention = [name for name in attention_gemm_shapes(model, tokens, tp) if name != "attn_out"]
    if model.parallel_block:
        return ((seconds([*attention, "mlp_up"]), seconds(["attn_out", "mlp_down"])),)
    return (seconds(attention), seconds(["attn_out"])), (seconds(["mlp_up"]), seconds(["mlp_down"]))


def unfused_norms(model: ModelSpec, moe_layer: bool) -> int:
    """Norms of one layer that run apart from a linear (Transformer Engine fuses the others into
    LayerNormLinear): an MoE layer's pre-MLP norm, whose output the router and the dispatcher also
    read, and MLA's input norm (Megatron-Core's TENorm in both)."""
    return int(moe_layer) + int(model.mla is not None)


def routed_rows_per_gpu(model: ModelSpec, tokens: float, tp: int) -> float:
    """Token-expert pairs the busiest GPU computes when each GPU routes its sequence-parallel
    share, tokens/tp of its data-parallel shard's ``tokens``: tokens/tp·top_k, balanced over the
    EP group (each rank sends and receives the same share), times the load imbalance, which a
    capacity factor caps (Fedus et al. 2022, Sec. 2.2)."""
    moe = model.moe
    imbalance = moe.load_imbalance if moe.capacity_factor is None else min(moe.load_imbalance, moe.capacity_factor)
    return tokens / tp * moe.top_k * imbalance


def routed_gemm_shapes(model: ModelSpec, tokens: float, tp: int, etp: int = 1, experts: float = 1.0) -> dict:
    """Shapes (m, n, k) of the routed-expert GEMMs on one GPU, split over ``experts`` equal experts: the
    routed rows of its expert tensor-parallel group (etp x its own, gathered) at 1/etp of the expert
    width (Megatron-Core's expert tensor parallelism); ``experts`` 1 gives the whole grouped GEMM."""
    rows = routed_rows_per_gpu(model, tokens, tp) * etp / experts
    return mlp_gemm_shapes(model, rows, model.moe.expert_ffn / etp)


@functools.lru_cache(maxsize=1 << 14)
def moe_routed_forward_time_s(
    model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int, ep: int, etp: int = 1, rate_share: float = 1.0
) -> float:
    """Forward time of the router and the routed experts of one MoE layer on one GPU, seconds.

    Router: a (tokens/tp x h) @ (h x E) GEMM on the sequence-parallel share. Experts: E/ep local
    experts (a grouped GEMM), each receiving an equal share of the routed rows of the GPU's expert
    tensor-parallel group (etp x its own, gathered), at 1/etp of the expert width (Megatron-Core's
    expert tensor parallelism; etp 1, full width, as Megatron-Bridge's DeepSeek-V3 and Qwen3 recipes set it).
    Both run at the GEMM roofline divided by the device's ``moe_expert_efficiency``: what the
    block (router, token permutation, grouped GEMMs, the host sync of dropless dispatch) achieves
    of the dense GEMM rate, fitted on published MoE runs (benchmarks/calibrate.py --moe). The experts compute at
    ``rate_share`` of their grouped rate besides (``routed_gemm_share``: a recipe's scaling granularity).
    """
    moe = model.moe
    local = moe.experts / ep
    experts = local * sum(
        gemm_time_s(device, m, n, k, precision) for m, n, k in routed_gemm_shapes(model, tokens, tp, etp, local).values()
    )
    if precision in ("fp8", "fp4"):  # scaled grouped kernels fall short of the dense FP8 curve (measured on H100)
        experts /= device.grouped_fp8_efficiency * rate_share
    # the router is Megatron-Core's own linear (TopKRouter), outside Transformer Engine: a 16-bit GEMM
    router = gemm_time_s(device, tokens / tp, moe.experts, model.hidden, activation_precision(precision))
    return (experts + router) / device.moe_expert_efficiency


def attention_core_flops(model: ModelSpec, micro_batch: int, seq_len: int, cp: int, tp: int, causal_skip: bool) -> float:
    """Forward FLOPs of QK^T and AV for one layer on one rank: 2·b·s_q·s_kv·(a/t)·(d_qk + d_v)
    (= 4·b·s_q·s_kv·(a/t)·d when both head dims are d).

    Each context-parallel rank holds s/cp queries against all s keys. Flash attention skips the
    masked half of a causal score matrix (``causal_skip``) and, in local-attention layers, the blocks
    outside the window (``ModelSpec.attended_share``); a materialised score matrix does neither.
    """
    flops = attention_score_flops(model, micro_batch, seq_len / cp, seq_len, tp)
    return flops * 0.5 * model.attended_share(seq_len) if causal_skip else flops


def attention_score_flops(model: ModelSpec, sequences: float, q_len: float, kv_len: float, tp: int) -> float:
    """FLOPs of QK^T and AV for ``sequences`` sequences of ``q_len`` queries against ``kv_len``
    keys on one tensor-parallel rank, no causal discount: 2·b·s_q·s_kv·(a/t)·(d_qk + d_v)
    (Vaswani et al. 2017; two matmuls of 2·s_q·s_kv·d each per head)."""
    d_qk, d_v = attention_head_dims(model)
    return 2.0 * sequences * q_len * kv_len * (model.heads / tp) * (d_qk + d_v)


def attention_peak_flops(device: DeviceSpec) -> float:
    """Peak FLOP/s the attention core runs at: the 16-bit (bf16) tensor-core rate, FLOP/s; FP8
    and FP4 recipes keep attention in 16 bits (Transformer Engine; TensorRT-LLM's default FMHA)."""
    half = "bf16" if device.peak_flops.get("bf16") else next(iter(device.peak_flops))
    return device.peak(half)


# Bytes moved per element of the s x s score matrix by a materialised attention forward:
# write QK^T (2), fused scale-mask-softmax read+write (4), dropout read+write+mask (5),
# read by the AV matmul (2) (Korthikanti et al. 2022, Sec. 4.2 lists the stored tensors).
STANDARD_ATTENTION_SCORE_BYTES = 13.0


def attention_core_forward_time_s(
    model: ModelSpec, device: DeviceSpec, attention: str, micro_batch: int, seq_len: int, cp: int, tp: int
) -> float:
    """Forward time of the attention core (scores, softmax, weighted sum) for one layer, seconds.

    flash: one fused kernel at the device's attention efficiency for calls of seq/cp keys (Dao et al.
    2022; ``DeviceSpec.attention_efficiency_at``: longer calls run closer to the peak; seq/cp is ring
    attention's block, the whole sequence's share for the all-gather and all-to-all schemes).
    triton: the same fused computation in FlashAttention's Triton port, at ``triton_attention_efficiency`` for calls
    of seq/cp keys: the device file's efficiency.attention_triton(_by_tokens), which benchmarks/device_curves.py
    derives from the FlashAttention-2 and -3 papers and FlashAttention-2's measured rise with the length.
    The fused kernels' rates are of the forward and backward together; the forward takes 1 / (1 + r) of that time,
    r the kernel's measured backward time over its forward's (``attention_core_backward_factor``).
    standard: two batched GEMMs plus the score matrix streamed through HBM several times.
    """
    if attention in FUSED_ATTENTION:
        flops = attention_core_flops(model, micro_batch, seq_len, cp, tp, causal_skip=True)
        kv_tokens = seq_len / cp
        if attention == AttentionKernel.TRITON:
            efficiency = triton_attention_efficiency(device, kv_tokens)
        else:
            efficiency = device.attention_efficiency_at(kv_tokens)
        # the curves are forward + backward rates (FLOPs: 1 + FLASH_BACKWARD_FACTOR forwards); the forward's share of
        # that time is 1 / (1 + the kernel's measured backward-over-forward time)
        both_s = (1.0 + FLASH_BACKWARD_FACTOR) * flops / (attention_peak_flops(device) * efficiency)
        return both_s / (1.0 + attention_core_backward_factor(device, attention, kv_tokens))
    flops = attention_core_flops(model, micro_batch, seq_len, cp, tp, causal_skip=False)
    gemm = flops / (attention_peak_flops(device) * float(device.gemm_efficiency_at(flops / 2)))
    scores = micro_batch * (model.heads / tp) * (seq_len / cp) * seq_len
    return gemm + memory_bound_time_s(device, scores * STANDARD_ATTENTION_SCORE_BYTES)


def attention_core_backward_factor(device: DeviceSpec, attention: str, kv_tokens: float) -> float:
    """Backward time of the attention core over its forward's for calls attending ``kv_tokens`` keys, dimensionless.
    Fused kernels: what the device file measured (``DeviceSpec.attention_backward_at``; the Triton port's
    ``attention_triton_backward``), else FLASH_BACKWARD_FACTOR, the backward's FLOPs over the forward's at one
    efficiency (FlashAttention-2, Sec. 3.1). Standard attention: 2, its two batched GEMMs' gradients."""
    if attention not in FUSED_ATTENTION:
        return 2.0
    measured = (
        device.attention_triton_backward if attention == AttentionKernel.TRITON else device.attention_backward_at(kv_tokens)
    )
    return measured or FLASH_BACKWARD_FACTOR


def triton_attention_efficiency(device: DeviceSpec, kv_tokens: float) -> float:
    """The Triton FlashAttention kernel's forward + backward fraction of ``device``'s 16-bit peak for calls attending
    ``kv_tokens`` keys (``DeviceSpec.attention_triton_efficiency_at``); ProblemError where the device file gives none."""
    reason = triton_attention_problem(device)
    if reason is not None:
        raise ProblemError(reason, field="workload.attention")
    return device.attention_triton_efficiency_at(kv_tokens)


def triton_attention_problem(device: DeviceSpec) -> str | None:
    """Why the Triton FlashAttention kernel cannot be timed on ``device``, or None when it can."""
    if device.attention_triton_efficiency > 0:
        return None
    return (
        f"attention triton (FlashAttention's Triton port) has no rate on device {device.name}: its file gives no "
        "efficiency.attention_triton (benchmarks/device_curves.py derives it for Ampere and Hopper); use flash or standard"
    )


def ffn_intermediate_elements(model: ModelSpec, tokens: float, tp: int, moe_layer: bool = False) -> float:
    """Elements of the FFN's intermediate activation on one GPU: tokens x ffn / tp for a dense
    layer; for an MoE layer the shared experts' tokens x width / tp plus the GPU's routed rows x
    the expert width (expert tensor parallelism 1)."""
    if not moe_layer:
        return tokens * model.ffn / tp
    moe = model.moe
    return tokens * moe.shared_experts * moe.shared_expert_ffn / tp + routed_activation_elements(model, tokens, tp)


def routed_activation_elements(model: ModelSpec, tokens: float, tp: int) -> float:
    """Elements of the routed experts' intermediate activation on one GPU: its routed rows x the expert width."""
    return routed_rows_per_gpu(model, tokens, tp) * model.moe.expert_ffn


def elementwise_forward_bytes(
    model: ModelSpec,
    tokens: float,
    tp: int,
    sp: bool,
    precision: str,
    moe_layer: bool = False,
    fused_grouped_mlp: bool = False,
) -> float:
    """Bytes streamed by the memory-bound operations of one layer's forward on one rank.

    Two norms (read + write h), two bias-dropout-residual adds (read 2h, write h, a 1-byte mask
    when the model trains with dropout), the activation function (GeLU: read f, write f; SwiGLU:
    read 2f, write f) over the FFN's intermediate elements; an MoE layer also permutes its routed
    rows before and after the experts (read + write h each way). Norms and residual adds run on
    s/t tokens with sequence parallelism, on all tokens without it (Korthikanti 2022).
    ``fused_grouped_mlp``: the routed experts' activation runs in their first grouped GEMM's epilogue
    (``model/fused_grouped_mlp.py``), so it streams nothing of its own.
    """
    e = bytes_per_element(activation_precision(precision))
    h = model.hidden
    seq_tokens = tokens / tp if sp else tokens
    norms = 2 * 2 * h * e
    residuals = 2 * (3 * h * e + (h if model.dropout else 0))
    elements = ffn_intermediate_elements(model, tokens, tp, moe_layer)
    if moe_layer and fused_grouped_mlp:
        elements -= routed_activation_elements(model, tokens, tp)
    act = (3 if model.activation == "swiglu" else 2) * e * elements
    permute = row_permutation_bytes(model, routed_rows_per_gpu(model, tokens, tp), precision) if moe_layer else 0.0
    return seq_tokens * (norms + residuals) + act + permute


def row_permutation_bytes(model: ModelSpec, rows: float, precision: str) -> float:
    """Bytes of putting ``rows`` routed rows into expert order before the experts and back after them: read and
    write h per row each way, at the activation width."""
    return 2 * 2 * model.hidden * bytes_per_element(activation_precision(precision)) * rows


def logits_gemm_shape(model: ModelSpec, tokens: float, tp: int) -> tuple[float, float, float]:
    """(m, n, k) of the output projection on one rank: vocab-parallel, h x V/t."""
    return tokens, model.vocab / tp, model.hidden


def logits_forward_time_s(
    model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int, rate_share: float = 1.0
) -> float:
    """Forward time of the output projection (``logits_gemm_shape``, at ``rate_share`` of the curve) and the fp32
    cross-entropy."""
    gemm = gemm_time_s(device, *logits_gemm_shape(model, tokens, tp), precision, rate_share=rate_share)
    cross_entropy = memory_bound_time_s(device, 3 * 4.0 * tokens * model.vocab / tp)
    return gemm + cross_entropy


def logits_cast_bytes(model: ModelSpec, tokens: float, tp: int, recipe: LowPrecisionRecipe) -> tuple[float, float]:
    """(forward, backward) bytes of quantising the output layer's GEMM inputs on one rank when it runs in
    low precision (Megatron-Core ``fp8_output_proj``: Transformer Engine's linear under ``recipe``), as a
    layer's GEMMs quantise theirs (``gemm_input_cast_bytes``)."""
    return gemm_input_cast_bytes([logits_gemm_shape(model, tokens, tp)], recipe)


def embedding_forward_time_s(model: ModelSpec, device: DeviceSpec, precision: str, tokens: float) -> float:
    """Token (and position) embedding lookup plus dropout: a gather of tokens x h elements."""
    e = bytes_per_element(activation_precision(precision))
    return memory_bound_time_s(device, 3 * tokens * model.hidden * e)


def adam_step_bytes(grad_bytes: float, moment_bytes: float = 4.0, weight_bytes: float = 2.0) -> float:
    """Bytes one Adam step streams per parameter: read and write the fp32 master copy and the two
    moments (24 B in fp32, 16 B with bf16 moments), read the gradient, write the ``weight_bytes``
    weight the model computes with (Kingma & Ba 2015; mixed precision per Micikevicius et al. 2018)."""
    return 2.0 * (4.0 + 2.0 * moment_bytes) + grad_bytes + weight_bytes


# Megatron-Core's HybridDeviceOptimizer keeps a pinned fp32 copy of each offloaded gradient on the host.
HOST_GRAD_BYTES = 4.0


def host_optimizer_step_time_s(device: DeviceSpec, params: float, grad_bytes: float) -> float:
    """Seconds of the Adam step over ``params`` parameters kept on the host (Megatron-Core's
    HybridDeviceOptimizer, --optimizer-cpu-offload): their gradients cross the host link to the host
    (``grad_bytes`` each), the CPU steps them in fp32 at ``host_adam_efficiency`` of the GPU's share of
    host DRAM bandwidth, and the updated weights cross back (fp32, param_update_in_fp32). With
    --overlap-cpu-optimizer-d2h-h2d (its default) the copies and the CPU steps of successive parameter
    groups pipeline on their own streams, so the slowest of the three sets the time."""
    if params <= 0:
        return 0.0
    d2h = params * grad_bytes / device.host_bytes_per_s
    # in fp32 in place: the updated master itself crosses back, no separate weight is written on the host
    cpu = params * adam_step_bytes(HOST_GRAD_BYTES, 4.0, 0.0) / (device.host_memory_bytes_per_s * device.host_adam_efficiency)
    h2d = params * 4.0 / device.host_bytes_per_s
    return max(d2h, cpu, h2d)


def optimizer_step_time_s(
    device: DeviceSpec, params_owned: float, grad_bytes: float, moment_bytes: float = 4.0, host_share: float = 0.0
) -> float:
    """Adam step over the parameters this rank owns, seconds: streamed through HBM
    (``adam_step_bytes``), except a ``host_share`` of them, stepped on the host
    (``host_optimizer_step_time_s``) while the GPU steps the rest (HybridDeviceOptimizer launches the
    GPU sub-optimizer before it waits for the host's)."""
    gpu = memory_bound_time_s(device, (1.0 - host_share) * params_owned * adam_step_bytes(grad_bytes, moment_bytes))
    if not host_share:
        return gpu
    return max(gpu, host_optimizer_step_time_s(device, host_share * params_owned, grad_bytes))


def checkpoint_tail_forward_time_s(model: ModelSpec, device: DeviceSpec, precision: str, tokens: float, tp: int) -> float:
    """Forward seconds of the GEMM that closes a dense layer after the last tensor its backward keeps: the MLP's
    down projection. A GEMM's backward needs its input, not its output, and nothing after the down projection
    (its bias, the residual add) saves a tensor; so a checkpointed layer whose recomputation stops once it has
    rebuilt every tensor the backward needs (PyTorch's non-reentrant ``torch.utils.checkpoint`` since 2.1, which
    packs an op's inputs before the op runs and stops there: pytorch/pytorch#96866, ``set_checkpoint_early_stop``)
    never redoes it. An MoE layer has no such tail: its routing weights multiply the experts' outputs after
    the down projections, and their gradient needs those outputs. Under tensor parallelism the reduction after the
    down projection is skipped as well; the model still charges it [simplification: GEMM time only]."""
    return gemm_time_s(device, *layer_gemm_shapes(model, tokens, tp)[G.MLP_DOWN], precision)


def low_precision_cast_bytes(
    model: ModelSpec,
    tokens: float,
    tp: int,
    recipe: LowPrecisionRecipe | None,
    moe_layer: bool = False,
    etp: int = 1,
    transform: bool = True,
    fused_grouped_mlp: bool = False,
) -> tuple[float, float]:
    """(forward, backward) bytes of quantising the GEMM inputs of one layer on one rank, routed experts
    included, as the low-precision ``recipe`` does (``precision.quantised_bytes_per_element``; None: 16-bit
    training, nothing to quantise).

    Transformer Engine quantises every linear layer's input in the forward (the m x k activation, both
    copies) and its output gradient in the backward (m x n); a routed expert's grouped GEMMs quantise
    their rows the same way (TE GroupedLinear). The weights are quantised once per step (Megatron-Core
    marks the first micro-batch, TE caches the result): not counted per micro-batch. ``transform``: the
    recipe's transform pass runs (NVFP4's random Hadamard transform; ``Workload.nvfp4_hadamard``).
    ``fused_grouped_mlp`` under MXFP8: the second routed GEMM's input is quantised in the first one's forward
    epilogue and the first one's output gradient in the second one's backward epilogue (``model/fused_grouped_mlp.py``):
    neither is streamed on its own (under NVFP4 both still are).
    """
    if recipe is None:
        return 0.0, 0.0
    forward, backward = gemm_input_cast_bytes(list(layer_gemm_shapes(model, tokens, tp, moe_layer).values()), recipe, transform)
    if not moe_layer:
        return forward, backward
    routed = routed_gemm_shapes(model, tokens, tp, etp)
    up_fwd, up_bwd = gemm_input_cast_bytes([routed["mlp_up"]], recipe, transform)
    down_fwd, down_bwd = gemm_input_cast_bytes([routed["mlp_down"]], recipe, transform)
    if fused_grouped_mlp and recipe == EPILOGUE_QUANTISED:
        return forward + up_fwd, backward + down_bwd
    return forward + up_fwd + down_fwd, backward + up_bwd + down_bwd


def gemm_input_cast_bytes(shapes, recipe: LowPrecisionRecipe, transform: bool = True) -> tuple[float, float]:
    """(forward, backward) bytes of quantising the inputs of the (m, n, k) GEMMs ``shapes`` under ``recipe``
    (``precision.quantised_bytes_per_element``): Transformer Engine quantises each linear's m x k input in
    the forward and its m x n output gradient in the backward."""
    per_element = quantised_bytes_per_element(recipe, transform)
    return sum(m * k for m, _, k in shapes) * per_element, sum(m * n for m, n, _ in shapes) * per_element
