"""Memory per GPU: model states under ZeRO and activations under recomputation.

Activation terms generalise Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
Transformer Models", arXiv 2205.05198, Sec. 4 and Table 2) from MHA + 4h GeLU MLP to any head
count, GQA and SwiGLU; for MHA with f = 4h they reduce exactly to that table (tests check it).
All activation sizes assume 16-bit activations (2 bytes) and 1-byte dropout masks, as the paper.
"""

from __future__ import annotations

from typing import NamedTuple

from .choices import OffloadModule, Recompute, RecomputeModule, Zero3Gather
from .compute import (
    HOST_GRAD_BYTES,
    attention_activation_widths,
    ffn_intermediate_elements,
    routed_rows_per_gpu,
    unfused_norms,
)
from .ops import FloatOps
from .specs import FUSED_ATTENTION, AllocatorOverhead, ModelSpec

ACT_BYTES = 2.0  # 16-bit activations (Korthikanti Sec. 4.1)
MASK_BYTES = 1.0


def saved_gemm_input_bytes(precision: str) -> float:
    """Bytes per element of a GEMM input kept for the backward pass: 2 for 16-bit training; 1 for
    FP8/FP4, where Transformer Engine saves the FP8 cast it already made for the forward GEMM
    (TE docs, "Using FP8 with Transformer Engine"; Micikevicius et al. 2022)."""
    return 1.0 if precision in ("fp8", "fp4") else ACT_BYTES


def replicated_activation_bytes(model: ModelSpec, tokens: float, gemm_input_bytes: float = ACT_BYTES) -> float:
    """Per-layer activations that tensor parallelism does not split (Korthikanti's 10sbh).

    Inputs of the two norms (2 x 2sbh; one in a parallel block, whose norms both read the layer
    input), the QKV input and the FC1 input (2 x 2sbh, GEMM inputs) and the two dropout masks
    (2 x sbh; none for models trained without dropout, such as Llama). Sequence parallelism splits
    them by t.
    """
    masks = 2 * MASK_BYTES if model.dropout else 0.0
    norm_inputs = 1 if model.parallel_block else 2
    return tokens * model.hidden * (norm_inputs * ACT_BYTES + 2 * gemm_input_bytes + masks)


def sharded_activation_bytes(
    model: ModelSpec, tokens: float, gemm_input_bytes: float = ACT_BYTES, attention_input_bytes: float = ACT_BYTES
) -> float:
    """Per-layer attention activations split by tensor parallelism, without the s x s score terms
    (Korthikanti's 8sbh of the 24sbh for MHA): Q, K and V (the attention's inputs, ``attention_input_bytes``
    each: 1 under FP8 attention; MLA keeps them decompressed, a·d_qk, a·d_qk and a·d_v) and the
    output-projection input (a GEMM input)."""
    qkv, proj = attention_activation_widths(model)
    return tokens * (qkv * attention_input_bytes + proj * gemm_input_bytes)


def activation_input_bytes(model: ModelSpec) -> float:
    """Bytes the FFN's activation function keeps per intermediate element as its input: GeLU's one
    16-bit value, SwiGLU's two (gate and up)."""
    return (2 if model.activation == "swiglu" else 1) * ACT_BYTES


def routed_input_bytes(
    model: ModelSpec, tokens: float, tp: int, etp: int, gemm_input_bytes: float, permuted_bytes: float
) -> float:
    """An MoE layer's routed rows' expert inputs on one GPU: each row's GEMM input (the etp rows gathered from
    its expert tensor-parallel group) and its 16-bit permuted copy (``ffn_activation_bytes``)."""
    return routed_rows_per_gpu(model, tokens, tp) * model.hidden * (etp * gemm_input_bytes + permuted_bytes)


def ffn_activation_bytes(
    model: ModelSpec,
    tokens: float,
    tp: int,
    gemm_input_bytes: float = ACT_BYTES,
    moe_layer: bool = False,
    etp: int = 1,
    permuted_bytes: float = ACT_BYTES,
) -> float:
    """FFN activations of one layer on one GPU (already divided by tp; Korthikanti's 16sbh/t for
    f = 4h): the activation function's input (GeLU: 2 bytes per intermediate element; SwiGLU:
    gate and up, 4) and output (the FC2 GEMM input). An MoE layer keeps these for the shared
    experts and the routed rows, plus each routed row's expert input (a GEMM input; with expert
    tensor parallelism the etp rows gathered from its group, each at 1/etp of the expert width, so
    the intermediate elements stay the same) and its 16-bit permuted copy (Megatron-Core token dispatcher;
    ``permuted_bytes`` 0 where the dispatch arrives in FP8, its rows being the FP8 GEMM input itself:
    ``expert_parallel.fp8_dispatch``)."""
    act_in = activation_input_bytes(model)
    elements = ffn_intermediate_elements(model, tokens, tp, moe_layer)
    rows = routed_input_bytes(model, tokens, tp, etp, gemm_input_bytes, permuted_bytes) if moe_layer else 0.0
    return elements * (act_in + gemm_input_bytes) + rows


def score_activation_bytes(model: ModelSpec, micro_batch: int, seq_q: float, seq_kv: float) -> float:
    """Per-layer s x s attention tensors of a materialised softmax: 5·a·s²·b bytes (softmax output 2,
    dropout mask 1, dropout output 2; Korthikanti Sec. 4.1), 2·a·s²·b without attention dropout.
    Flash attention and selective recomputation keep none of them."""
    per_score = 5.0 if model.dropout else 2.0
    return per_score * model.heads * seq_q * seq_kv * micro_batch


def up_projections_kept(attention_input_bytes: float) -> bool:
    """Whether the attention keeps MLA's up-projection outputs themselves as its Q, K and V (16-bit attention), so
    that the up-projections' output-discarding checkpoint (recompute_modules mla_up_proj) frees them; FP8
    attention (``attention_input_bytes`` 1) keeps FP8 copies of its own, which stay."""
    return attention_input_bytes == ACT_BYTES


def selective_savings_bytes(
    model: ModelSpec,
    tokens: float,
    tp: int,
    sp: bool,
    gemm_input_bytes: float,
    moe_layer: bool,
    etp: int,
    modules: tuple,
    permuted_bytes: float = ACT_BYTES,
    attention_input_bytes: float = ACT_BYTES,
) -> float:
    """Per-layer activation bytes that Megatron-Core's selective recomputation of ``modules``
    (``choices.RecomputeModule``, --recompute-modules) does not keep; the attention core's score
    tensors are counted in ``activation_bytes_per_layer``.

    layernorm: the output of each norm not fused into a linear (an MoE layer's pre-MLP norm, MLA's
    input norm), 2 bytes per hidden element. moe_act: the routed experts' activation output (their
    FC2 input). mla_up_proj: Q, K and V decompressed, less the compressed latents MLA then keeps (nothing
    under FP8 attention, ``attention_input_bytes`` 1: the outputs the checkpoint frees are not what it keeps).
    mlp: a dense layer's FFN activations; moe: an MoE layer's (shared and routed, with the routed
    rows); shared_experts: the shared experts' (megatron/core/transformer, output-discarding
    checkpoints)."""
    saved, h = 0.0, model.hidden
    seq_tokens = tokens / (tp if sp else 1)
    if "layernorm" in modules:
        saved += unfused_norms(model, moe_layer) * seq_tokens * h * ACT_BYTES
    if "mla_up_proj" in modules and model.mla is not None:
        m = model.mla
        latents = tokens * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * ACT_BYTES
        qkv, _ = attention_activation_widths(model)
        freed = ACT_BYTES if up_projections_kept(attention_input_bytes) else 0.0
        saved += max(0.0, tokens * qkv * freed / tp - latents)
    if not moe_layer:
        if "mlp" in modules:
            saved += ffn_activation_bytes(model, tokens, tp, gemm_input_bytes)
        return saved
    if "moe" in modules:
        return saved + ffn_activation_bytes(model, tokens, tp, gemm_input_bytes, True, etp, permuted_bytes)
    moe = model.moe
    if "moe_act" in modules:
        saved += routed_rows_per_gpu(model, tokens, tp) * moe.expert_ffn * gemm_input_bytes
    if "shared_experts" in modules and moe.shared_experts:
        act_in = activation_input_bytes(model)
        saved += tokens * moe.shared_experts * moe.shared_expert_ffn / tp * (act_in + gemm_input_bytes)
    return saved


class OffloadedBytes(NamedTuple):
    """One layer's fine-grained offloading, bytes per micro-batch: what its copies move to host memory and
    back (``copied``) and what leaves device memory as the activation terms count it (``freed``: the copied
    inputs, and for expert_fc1 the routed rows' whole expert input with its permuted copy, which Megatron-Core
    releases, whatever FC1's own copy weighs)."""

    copied: float
    freed: float


class LayerTokens(NamedTuple):
    """One layer's tokens on one GPU for one micro-batch and how its activations are kept: ``tokens``, its
    data- and context-parallel share of the sequence, before tensor parallelism (``tp``, and ``sp`` splitting the
    replicated activations over the sequence too) divides what it divides; GEMM inputs saved at
    ``gemm_input_bytes`` per element, an MoE layer's routed rows over ``etp`` and their 16-bit permuted copy
    (``permuted_bytes``)."""

    tokens: float
    tp: int
    sp: bool
    gemm_input_bytes: float = ACT_BYTES
    moe_layer: bool = False
    etp: int = 1
    permuted_bytes: float = ACT_BYTES
    attention_input_bytes: float = ACT_BYTES  # Q, K and V as the attention keeps them (1: FP8 attention)


def offloaded_input_bytes(
    model: ModelSpec, layer: LayerTokens, modules: tuple, recomputed: tuple = (), fc1_saves_original: bool = False
) -> OffloadedBytes:
    """One layer's activation bytes that Megatron-Core's fine-grained activation offloading of ``modules``
    (``choices.OffloadModule``, --offload-modules) moves to host memory: each module's saved input
    (docs/user-guide/features/fine_grained_activation_offloading.md, "Each module offloads its input
    activation"), as the terms of ``activation_bytes_per_layer`` count them, less what selective
    recomputation of ``recomputed`` (``selective_savings_bytes``) already drops, for a ``layer`` of ``LayerTokens``.

    attn_norm / mlp_norm: the input of a norm that runs apart from a linear (MLA's input norm; an MoE
    layer's pre-MLP norm: ``unfused_norms``), 2 bytes per hidden element; a norm fused into
    LayerNormLinear is Megatron-Core's IdentityOp, which it skips. qkv_linear: the QKV projection's
    saved input, the GEMM input (MLA's: the input norm's output, none when layernorm is recomputed),
    with the norm input where the norm is fused into it. core_attn: Q, K and V, none when the attention
    core is recomputed (its checkpoint bypasses the offload, megatron/core/transformer/attention.py) or,
    for MLA, when mla_up_proj is and the attention keeps the up-projections' own outputs
    (``up_projections_kept``). attn_proj: the output projection's input. expert_fc1: the routed rows'
    expert input (a GEMM input, etp rows gathered per row; per-tensor FP8 makes FC1 save its 16-bit
    original instead, ``fc1_saves_original``), and it releases the 16-bit permuted rows
    (``permuted_bytes``; moe/experts.py forced_released_tensors). moe_act: the routed rows' activation
    input (SwiGLU: gate and up)."""
    if not modules:
        return OffloadedBytes(0.0, 0.0)
    tokens, tp, gemm_input_bytes, etp = layer.tokens, layer.tp, layer.gemm_input_bytes, layer.etp
    h = model.hidden
    seq_tokens = tokens / (tp if layer.sp else 1)
    qkv, proj = attention_activation_widths(model)
    mla = model.mla is not None
    copied = released = 0.0
    if OffloadModule.ATTN_NORM in modules and mla:
        copied += seq_tokens * h * ACT_BYTES
    if OffloadModule.QKV_LINEAR in modules:
        norm_output = 0.0 if mla and RecomputeModule.LAYERNORM in recomputed else gemm_input_bytes
        copied += seq_tokens * h * (norm_output + (0.0 if mla else ACT_BYTES))
    up_proj_frees = mla and RecomputeModule.MLA_UP_PROJ in recomputed and up_projections_kept(layer.attention_input_bytes)
    dropped_qkv = RecomputeModule.CORE_ATTN in recomputed or up_proj_frees
    if OffloadModule.CORE_ATTN in modules and not dropped_qkv:
        copied += tokens * qkv * layer.attention_input_bytes / tp
    if OffloadModule.ATTN_PROJ in modules:
        copied += tokens * proj * gemm_input_bytes / tp
    if layer.moe_layer:
        if OffloadModule.MLP_NORM in modules:
            copied += seq_tokens * h * ACT_BYTES
        rows = routed_rows_per_gpu(model, tokens, tp)
        if OffloadModule.EXPERT_FC1 in modules:
            fc1_copy = rows * h * etp * (ACT_BYTES if fc1_saves_original else gemm_input_bytes)
            # the device frees the rows' expert inputs as ``ffn_activation_bytes`` counts them, and no more
            kept = routed_input_bytes(model, tokens, tp, etp, gemm_input_bytes, layer.permuted_bytes)
            copied, released = copied + fc1_copy, released + kept - fc1_copy
        if OffloadModule.MOE_ACT in modules:
            copied += rows * model.moe.expert_ffn * activation_input_bytes(model)
    return OffloadedBytes(copied, copied + released)  # released < 0: FC1's 16-bit copy outweighs what was counted


def activation_bytes_per_layer(
    model: ModelSpec,
    micro_batch: int,
    seq_len: int,
    tp: int,
    cp: int,
    sp: bool,
    recompute: str,
    attention: str,
    gemm_input_bytes: float = ACT_BYTES,
    moe_layer: bool = False,
    etp: int = 1,
    modules: tuple = ("core_attn",),
    permuted_bytes: float = ACT_BYTES,
    attention_input_bytes: float = ACT_BYTES,
) -> float:
    """Activation bytes one layer keeps for one micro-batch on one GPU until its backward.

    full recompute: only the layer input, 2sbh (split by t under sp; Korthikanti Table 2).
    selective: what ``modules`` recompute is not kept (``selective_savings_bytes``); with the
    attention core among them (the default), no score tensors. none: score tensors unless flash
    attention is used (flash keeps the output and a logsumexp of 4 bytes per head and token; Dao et al. 2022).
    ``gemm_input_bytes`` (``saved_gemm_input_bytes``) is 1 for FP8 training, ``attention_input_bytes`` (Q, K
    and V) 1 under FP8 attention (``fp8_attention.qkv_bytes_per_element``), except where the attention core is
    recomputed: its checkpoint (Megatron-Core ``_checkpointed_attention_forward``) keeps the 16-bit Q, K and V.
    """
    tokens = micro_batch * seq_len / cp
    if recompute == "full":
        return tokens * model.hidden * ACT_BYTES / (tp if sp else 1)
    kept = modules if recompute == "selective" else ()
    if "core_attn" in kept:  # the attention core's checkpoint keeps its 16-bit inputs; FP8 copies live only inside it
        attention_input_bytes = ACT_BYTES
    replicated = replicated_activation_bytes(model, tokens, gemm_input_bytes) / (tp if sp else 1)
    sharded = sharded_activation_bytes(model, tokens, gemm_input_bytes, attention_input_bytes) / tp
    sharded += ffn_activation_bytes(model, tokens, tp, gemm_input_bytes, moe_layer, etp, permuted_bytes)
    if attention in FUSED_ATTENTION:  # the softmax's log-sum-exp per row, fp32
        scores = 4.0 * tokens * model.heads / tp
    elif "core_attn" in kept:
        scores = 0.0
    else:
        scores = score_activation_bytes(model, micro_batch, seq_len / cp, seq_len) / tp
    savings = (
        selective_savings_bytes(
            model, tokens, tp, sp, gemm_input_bytes, moe_layer, etp, kept, permuted_bytes, attention_input_bytes
        )
        if kept
        else 0.0
    )
    return replicated + sharded + scores - savings


def score_backward_bytes(
    model: ModelSpec, micro_batch: int, seq_q: float, seq_kv: float, recompute: str, modules: tuple = ("core_attn",)
) -> float:
    """Transient s x s tensors of a materialised attention's backward, bytes per layer (all heads; divide
    by tp): the gradient of the softmax output, 2·a·s²·b (Megatron's fused scale-mask-softmax writes the
    input gradient into it in place: megatron/fused_kernels, "backward pass is completely in-place"), and,
    where selective recomputation redoes the attention core, its recomputed score tensors
    (``score_activation_bytes``). Under full recomputation the recomputed layer's activations hold the
    scores already (``recompute_working_bytes``). Flash attention materialises none (0 then: the caller
    checks the kernel). Measured: an emulated BLOOM stage on an H200 held these beside its checkpoints
    (problems/measurements/h200-allocator-microbench.yaml)."""
    gradient = 2.0 * model.heads * seq_q * seq_kv * micro_batch
    if recompute == Recompute.SELECTIVE and "core_attn" in modules:
        return gradient + score_activation_bytes(model, micro_batch, seq_q, seq_kv)
    return gradient


def recompute_working_bytes(recompute: str, layer_bytes_without_recompute: float) -> float:
    """Transient memory while one layer is recomputed: under full recomputation its whole activations
    for one micro-batch (``activation_bytes_per_layer`` with recompute none); selective recomputation
    redoes a few tensors at a time, none counted."""
    return layer_bytes_without_recompute if recompute == "full" else 0.0


def in_flight_chunk_limit(stage: int, pp: int, vpp: int, a2a_overlap: bool = False) -> int:
    """Most model chunks stage ``stage`` can hold however many micro-batches run.

    1F1B: p - i micro-batches, one chunk each (Narayanan SC'21, Sec. 2.2). Interleaved: Megatron
    warms up (p - i - 1)·2 + (v - 1)·p chunks before the first backward, plus the one in flight
    (megatron/core/pipeline_parallel/schedules.py); on stage 0 that is Korthikanti's
    L·(1 + (p-1)/(p·v)) layer activations. With the expert all-to-all overlapped (``a2a_overlap``,
    --overlap-moe-expert-parallel-comm) the interleaved warm-up runs one chunk more, so that each
    merged forward-backward pair is independent (``get_pp_rank_microbatches``: "we schedule one extra
    micro-batch forward step before the 1f1b stages"). Without a pipeline the merged schedule
    (``combined_1f1b_schedule_for_no_pipelining``) frees the backward's layers as the next forward
    fills its own: one layer more at most, not counted.
    """
    if vpp == 1:
        return pp - stage
    return (pp - stage - 1) * 2 + (vpp - 1) * pp + 1 + int(bool(a2a_overlap))


def in_flight_chunks(stage: int, pp: int, vpp: int, microbatches: int, a2a_overlap: bool = False) -> int:
    """Model chunks (a micro-batch's 1/v of the stage's layers) held at the stage's peak:
    the schedule's limit, or every chunk of the step when there are fewer micro-batches."""
    return min(microbatches * vpp, in_flight_chunk_limit(stage, pp, vpp, a2a_overlap))


def in_flight_layer_activations(layers_on_stage: int, stage: int, pp: int, vpp: int, microbatches: int) -> float:
    """Micro-batch x layer activation sets a pipeline stage holds at its peak: in-flight chunks
    times the 1/v of the stage's layers each chunk holds."""
    return in_flight_chunks(stage, pp, vpp, microbatches) * layers_on_stage / vpp


def embedding_activation_bytes(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int, pp: int) -> float:
    """First stage: embedding dropout outputs of the p in-flight micro-batches, sbhp/t bytes
    (Korthikanti Sec. 4.3)."""
    return micro_batch * seq_len / cp * model.hidden * pp / tp


def logits_activation_bytes(model: ModelSpec, micro_batch: int, seq_len: int, tp: int, cp: int) -> float:
    """Last stage: fp32 logits of one micro-batch kept for the cross-entropy backward, 4sbV/t bytes."""
    return 4.0 * micro_batch * seq_len / cp * model.vocab / tp


def adam_state_bytes(moment_bytes: float = 4.0, master_bytes: float = 4.0) -> float:
    """Bytes of Adam's states per parameter: an fp32 master copy and the two moments, 12 B in fp32
    (Kingma & Ba 2015; mixed precision per Micikevicius et al. 2018), 8 B with bf16 moments
    (Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16, as
    the DeepSeek-V3 recipes run). ``master_bytes`` 2: the precision-aware optimizer with bf16 weights
    keeps only the low 16 bits of each fp32 master weight, the bf16 weight being its high half
    (Megatron-Core DistributedOptimizer, store_param_remainders, on by default)."""
    return master_bytes + 2.0 * moment_bytes


def host_optimizer_bytes_per_param() -> float:
    """Host memory per parameter whose optimizer state is offloaded, bytes: torch's CPU AdamW keeps
    an fp32 master copy and fp32 moments (``adam_state_bytes`` at 4 B each), and Megatron-Core's
    HybridDeviceOptimizer a pinned fp32 copy of the gradient (``compute.HOST_GRAD_BYTES``)."""
    return adam_state_bytes(4.0, 4.0) + HOST_GRAD_BYTES


def state_bytes_per_param(
    zero: int, dp: int, weight_bytes: float, grad_bytes: float, moment_bytes: float = 4.0, master_bytes: float = 4.0
) -> float:
    """Bytes per parameter for weights, gradients and Adam states (Rajbhandari et al., ZeRO, SC'20).

    Adam keeps an fp32 master copy, momentum and variance (``adam_state_bytes``). ZeRO-1 (=
    Megatron's distributed optimizer) shards those over dp, ZeRO-2 also the gradients, ZeRO-3 also
    the weights.
    """
    optimizer = adam_state_bytes(moment_bytes, master_bytes)
    if zero == 0:
        return weight_bytes + grad_bytes + optimizer
    if zero == 1:
        return weight_bytes + grad_bytes + optimizer / dp
    if zero == 2:
        return weight_bytes + (grad_bytes + optimizer) / dp
    return (weight_bytes + grad_bytes + optimizer) / dp


def zero3_gather_buffer_bytes(
    gather: str, layer_params_per_rank: float, module_params_per_rank: float, weight_bytes: float
) -> float:
    """Unsharded weights (and gradients) ZeRO-3 holds at once on a GPU, bytes (``choices.Zero3Gather``).

    ``block`` (FSDP, one unit per transformer block): the current and the prefetched block's weights,
    2 layers. ``module`` (DeepSpeed ZeRO-3, per-submodule fetch): the largest module's 16-bit weights
    and gradients, 4 B per parameter at 16-bit weights, as DeepSpeed's estimator counts them
    (deepspeed/runtime/zero/stage3.py, estimate_zero3_model_states_mem_needs: largest_layer_memory =
    4 * largest_layer_params).
    """
    if gather == Zero3Gather.MODULE:
        return 2.0 * module_params_per_rank * weight_bytes
    return 2.0 * layer_params_per_rank * weight_bytes


def memory_headroom_bytes(hbm_bytes: float, headroom_gib: float | None = None, headroom_fraction: float | None = None) -> float:
    """The margin per GPU a plan must leave free, bytes: ``headroom_gib`` GiB, or ``headroom_fraction``
    of the device's memory ``hbm_bytes`` (at most one is given; neither: 0). A planning margin against
    what the model does not count (allocator fragmentation beyond the reserve, NCCL buffers that grow
    with the communicators, memory spikes), as operators keep one below the device's capacity."""
    if headroom_gib is not None:
        return headroom_gib * 2**30
    if headroom_fraction is not None:
        return headroom_fraction * hbm_bytes
    return 0.0


def allocator_overhead_fraction(overhead: AllocatorOverhead | None, recompute: str, attention: str) -> float:
    """The allocator's reserve beyond the live tensors, as a share of a step's transient bytes, for a
    stage that recomputes as ``recompute`` does with ``attention`` (``Workload.attention``): full with
    materialised scores (``standard``): ``overhead.recompute_full_scores``; full under flash attention:
    ``recompute_full``; else ``otherwise``; no row: 0."""
    if overhead is None:
        return 0.0
    if recompute != Recompute.FULL:
        return overhead.otherwise
    return overhead.recompute_full_scores if attention == "standard" else overhead.recompute_full


def allocator_cache_bytes(transient_bytes, overhead_fraction, free_bytes, o=FloatOps):
    """Bytes PyTorch's caching allocator holds reserved, beyond the tensors live at the step's peak, on a
    GPU whose step allocates ``transient_bytes`` above what persists between steps (its peak less the
    model states): blocks freed by one tensor and not reusable by the next request, measured as
    (peak reserved - peak allocated) / (peak allocated - persistent) (``AllocatorOverhead``; PyTorch's
    ``torch.cuda.max_memory_reserved`` / ``max_memory_allocated``), at most the ``free_bytes`` the
    device has beside the live peak and the runtime's reserve. It shows in nvidia-smi but does not
    decide whether a plan fits: on a failed cudaMalloc the allocator frees its unused cached blocks and
    retries (c10/cuda/CUDACachingAllocator.cpp, release_cached_blocks), so the live peak is the limit. Written
    against ``o`` (``model.ops``: plain numbers by default, or a backend's arrays)."""
    return o.minimum(overhead_fraction * transient_bytes, o.maximum(free_bytes, 0.0))


def accumulate_copy_bytes(largest_module_params: float, bytes_per_element: float) -> float:
    """Bytes of the copy a framework makes of one parameter's gradient as it adds it to the accumulation
    buffer, the largest module's (``largest_module_params`` elements on the GPU): 4 per element where
    DeepSpeed's BF16_Optimizer casts each bf16 .grad to fp32 first (``update_hp_grads``: ``lp.grad.to(fp32)``,
    one parameter at a time; deepspeed/runtime/bf16_optimizer.py at 15293139f, the branch BLOOM ran). It is
    live at the end of each micro-batch's backward, once the working set is freed, beside the in-flight
    activations: the stage's peak takes the larger of the two (``training_step.stage_memory_parts``)."""
    return bytes_per_element * largest_module_params


def reduce_copy_bytes(group_params: float, bytes_per_param: float) -> float:
    """Bytes of the copy the data-parallel reduction makes of a flat gradient group of ``group_params``
    parameters: 2 per parameter where DeepSpeed's fallback all-reduce casts the BF16_Optimizer's fp32 group
    to its bf16 communication type (pipe/engine.py ``_bf16_reduce_grads`` -> engine.py
    ``buffered_allreduce_fallback`` -> ``allreduce_bucket``; ``communication_data_type`` bf16 at ZeRO stage 0
    and no ds_config override; at 15293139f). A group of 500M elements or more is its own bucket and is cast
    whole; smaller groups are concatenated first, a further fp32 copy this leaves out (BLOOM's stages hold
    billions). It is live once the step's activations are freed, beside the model states alone (the stage's
    peak takes the larger, ``training_step.stage_memory_parts``); larger than any block the activations free, it
    gets a segment of its own from PyTorch's caching allocator, which keeps it reserved: it shows in
    nvidia-smi beside the activations' cache (``allocator_cache_bytes``, ``training_step.stage_device_memory``)."""
    return bytes_per_param * group_params
