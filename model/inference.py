"""Serving: prefill and decode time, memory, and the serving modes (static, continuous, disaggregated).

One forward pass of a replica carries some decoding sequences (one new token each, attending to
their KV cache) and some prompt tokens (prefill). Every operation goes through the roofline of
``model.compute`` (Williams et al. 2009): GEMMs are compute-bound on long prompts and large
batches and weight-streaming-bound at small batch, decode attention reads the KV cache, so the
memory/compute crossover falls out of the operation shapes (Pope et al., MLSys 2023, Sec. 2-3;
Yuan et al., "LLM Inference Unveiled: Survey and Roofline Model Insights", 2024).

These are the terms of a serving plan, each a function of the few decisions it depends on:
``layer_time`` on (tp, ep, tokens of one pass, where the TP and EP groups sit), ``edge_times`` on
(tp, tokens), ``p2p_time_s`` on (tokens, where the pipeline group sits), ``stage_layouts`` on pp,
``stage_weight_bytes`` on (tp, pp, ep), ``kv_cache.kv_bytes_per_sequence`` on (tp, layers),
``activation_bytes`` on (tp, tokens). Collectives are timed where the groups sit
(``serving_layouts``, ``placement.collective_time_s``), on a topology the model follows as in
training. ``serving_step.compose`` composes them; it is the single source of every number.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from . import compute, expert_parallel, kv_cache, memory
from .choices import LayerGemm, MoeDispatcher
from .errors import ProblemError
from .pipeline import stage_layer_counts
from .placement import Group, Layout, collective_time_s, layout, topology_decides
from .precision import activation_precision, bytes_per_element, stored_bytes_per_element
from .specs import InferenceWorkload, ModelSpec, PoolMapping, ServingMapping, SystemSpec
from .training import stage_expert_params, stage_params

LOGIT_BYTES = 4.0  # fp32 logits for sampling (TensorRT-LLM and vLLM keep logits in fp32)
# tokens a pass takes where the workload states no budget: TensorRT-LLM's max_num_tokens default (the LLM API's
# BuildConfig)
DEFAULT_PASS_TOKENS = 8192


# ---------------------------------------------------------------- passes and precisions


@dataclass(frozen=True)
class Pass:
    """What one forward pass of one replica (one pipeline micro-batch) carries.

    ``decode_seqs`` sequences generate one token each against ``context_len`` cached tokens (their
    mean); ``prefill_tokens`` prompt tokens of prompts ``prompt_len`` long are prefilled (a whole
    prompt, or a chunk: Sarathi-Serve, Agrawal et al., OSDI 2024)."""

    decode_seqs: float = 0.0
    context_len: float = 0.0
    prefill_tokens: float = 0.0
    prompt_len: float = 1.0

    @property
    def tokens(self) -> float:
        """Tokens through the GEMMs, tokens."""
        return self.decode_seqs + self.prefill_tokens

    @property
    def rows(self) -> float:
        """Sequences that sample a token in this pass (decoding ones and prompts that end), rows."""
        return self.decode_seqs + self.prefill_tokens / self.prompt_len


def mean_decode_context(workload: InferenceWorkload) -> float:
    """Mean cached context of a decode step, tokens. A request of p prompt and o generated tokens
    decodes o tokens against p + i cached ones (i = 0 … o-1), p·o + o²/2 in all; over requests whose
    lengths vary, per generated token that is E[p·o]/E[o] + E[o²]/(2·E[o]) (a slot holds a request
    for as many steps as it generates, so long requests fill more of the batch: the length-biased
    mean, Feller 1971, Vol. II, Sec. I.4). With E[p·o] = c·E[p]·E[o] (c: ``prompt_output_comoment``)
    and E[o²] = d·E[o]² (d: ``output_len_dispersion``, 1 + the squared coefficient of variation),
    c·input_len + d·output_len/2; identical requests (c = d = 1): input_len + output_len/2. Decode
    time is affine in the context (the attention's bytes and FLOPs both grow with it, in a fixed
    ratio, so its roofline regime does not change), so the mean step times the step count is the
    exact total; not quite for a sliding-window layer, which reads min(window, context) and so less,
    over a spread of lengths, than at the mean (Jensen)."""
    return _length_biased_tokens(workload, 0.5)


def held_sequence_tokens(workload: InferenceWorkload) -> float:
    """Tokens of KV cache the model holds per sequence slot: a request's whole length, prompt and answer, as the
    engine needs it by its last token. Over requests whose lengths vary, a slot holds request p + o for as long as it
    generates (the length-biased mean, as in ``mean_decode_context``): E[o·(p + o)]/E[o] = c·input_len +
    d·output_len, input_len + output_len for identical requests. It is also the least the longest request can be
    (a mean is at most the maximum), so engine launch lines size the longest sequence with it."""
    return _length_biased_tokens(workload, 1.0)


def _length_biased_tokens(workload: InferenceWorkload, answer_share: float) -> float:
    """c·input_len + d·output_len·``answer_share``, tokens: a request's prompt and that share of its answer, averaged
    over the steps its slot holds it (``mean_decode_context``: half; ``held_sequence_tokens``: all of it)."""
    return (
        workload.prompt_output_comoment * workload.input_len + workload.output_len_dispersion * workload.output_len * answer_share
    )


def decode_pass(workload: InferenceWorkload, seqs: float) -> Pass:
    """A decode step of ``seqs`` sequences at the mean context."""
    return Pass(decode_seqs=seqs, context_len=mean_decode_context(workload))


def prefill_pass(workload: InferenceWorkload, prompts: float) -> Pass:
    """The prefill of ``prompts`` whole prompts."""
    return Pass(prefill_tokens=prompts * workload.input_len, prompt_len=workload.input_len)


def mixed_pass(workload: InferenceWorkload, seqs: float) -> Pass:
    """A continuous-batching iteration in steady state (Orca, Yu et al., OSDI 2022; Sarathi-Serve):
    ``seqs`` decoding sequences plus the prompt tokens that keep the batch full. A request lives
    output_len iterations, so seqs/output_len requests start per iteration: seqs·input_len/
    output_len prompt tokens, chunked over iterations."""
    return Pass(
        decode_seqs=seqs,
        context_len=mean_decode_context(workload),
        prefill_tokens=seqs * workload.input_len / workload.output_len,
        prompt_len=workload.input_len,
    )


def request_waves(requests: int, slots: int) -> int:
    """Waves in which a pool of ``slots`` sequence slots (dp·batch) serves a finite set of ``requests``
    identical requests queued at once (an offline run: trtllm-bench throughput, vLLM
    benchmark_throughput): ceil(requests / slots), waves.

    Requests of the same input and output length admitted together finish together, so the slots
    free, and the next requests are admitted, in waves rather than in a staggered steady state: the
    first wave's prompts are prefilled before any token is decoded (ramp-up), and the last wave runs
    as long as a full one while it holds only the remainder (drain; exact where a step's time does not
    depend on the batch, as when it streams the weights, an upper bound otherwise: a partial wave reads
    less KV cache and computes fewer rows). Chunked prefill staggers a wave by at most
    slots·input_len/``pass_token_budget`` iterations, which leaves it a wave while that is short beside
    output_len (iteration-level scheduling admits a request when a finished one frees its slot: Orca,
    Yu et al., OSDI 2022)."""
    return -(-requests // slots)


def wave_batches(requests: int, largest: int) -> tuple:
    """The slot counts up to ``largest`` that split ``requests`` into waves as evenly as any can:
    ceil(requests / k) for k = 1, 2, ... (k waves, the last as full as k waves allow), ascending."""
    first = max(1, -(-requests // max(largest, 1)))  # the fewest waves the largest batch allows
    return tuple(sorted({-(-requests // k) for k in range(first, requests + 1)}))


def mean_residual_output(workload: InferenceWorkload) -> float:
    """Mean tokens a request still has to generate, seen at a random decode step of a continuous batch in steady
    state, tokens: the equilibrium residual life of a renewal process, E[o²]/(2·E[o]) = d·output_len/2 (the paradox
    of residual life: Kleinrock, Queueing Systems Vol. 1, 1975, Sec. 5.2; d: ``output_len_dispersion``). When a
    finite set's last request is admitted the slots hold requests this far from done, on average: the work its drain
    still has."""
    return workload.output_len_dispersion * workload.output_len / 2


def drain_work(workload: InferenceWorkload, slots, requests, o=None):
    """Tokens a finite set still has to generate when its last request is admitted, on ``slots`` slots: none of a
    set within one wave is staggered, so all of it, requests·output_len; from two waves on the slots hold the
    residual work of a staggered batch, slots·E[R] (``mean_residual_output``, to a whole token); between, a linear
    ramp from one to the other [assumption]: min(requests·o, max(slots·E[R], (2·slots - requests)·o)). ``o``: the
    backend's operations when ``slots`` is one of its quantities (``serving_step.drained_makespan``), plain
    arithmetic otherwise."""
    out = workload.output_len
    least, most = (min, max) if o is None else (o.minimum, o.maximum)
    return least(requests * out, most(slots * round(mean_residual_output(workload)), slots * (2 * out) - requests * out))


def drain_batch(workload: InferenceWorkload, seqs: float, set_share: float | None = None) -> float:
    """The batch a finite set's drain decodes, averaged over its iterations, sequences: the work ``seqs`` slots hold
    when the set's last request is admitted (``drain_work``: seqs·E[R] for a set of many waves, ``set_share``
    requests' whole answers for one that fits them at once; ``set_share`` None: many waves), spent over the
    ``output_len_max`` steps until the longest is done. At least ``cuda_graph_min_batch``, which a padded CUDA graph
    runs whatever fewer sequences it holds (TensorRT-LLM cuda_graph_padding_enabled), and at most ``seqs``."""
    work = seqs * round(mean_residual_output(workload)) if set_share is None else drain_work(workload, seqs, set_share)
    return min(seqs, max(work / workload.output_len_max, workload.cuda_graph_min_batch))


def longest_sequence_tokens(workload: InferenceWorkload) -> float:
    """The longest sequence an engine must hold, tokens, as far as the workload says: input_len + output_len for
    identical requests; where lengths spread, the length-biased mean request (``held_sequence_tokens``), which the
    longest is at least, or the mean prompt and the longest answer (``output_len_max``) where that is more (a prompt
    longer than the mean with the longest answer needs more: raise it to the longest prompt + output_len_max)."""
    held = held_sequence_tokens(workload)
    return held if workload.output_len_max is None else max(held, workload.input_len + workload.output_len_max)


def pass_token_budget(workload: InferenceWorkload, micro: float = 0.0, prefill_only: bool = False) -> int:
    """The token budget an engine runs a plan's passes with, tokens: the workload's ``max_prefill_tokens`` where it
    states one (the plan keeps within it: ``budget_micro_batch``), else what the largest pass of ``micro`` sequences a
    micro-batch carries (``pass_tokens``; ``prefill_only``: its prompt tokens, for an engine whose budget counts those
    alone), at least the engines' default ``DEFAULT_PASS_TOKENS`` (``micro`` 0: the default)."""
    if workload.max_prefill_tokens is not None:
        return workload.max_prefill_tokens
    return max(DEFAULT_PASS_TOKENS, math.ceil(pass_tokens(workload, micro, prefill_only) - 1e-9))


def prefill_prompts_per_pass(workload: InferenceWorkload) -> int:
    """Prompts one prefill pass of a disaggregated prefill pool takes: as many whole prompts as
    the token budget (``pass_token_budget``) holds, at least one, prompts."""
    return max(1, pass_token_budget(workload) // workload.input_len)


def pass_tokens(workload: InferenceWorkload, micro: float, prefill_only: bool = False) -> float:
    """Tokens of the largest pass a decode (or colocated) replica runs with ``micro`` sequences per pipeline
    micro-batch (``decode_passes``), tokens; ``prefill_only``: its prompt tokens alone."""
    return max(p.prefill_tokens if prefill_only else p.tokens for p in decode_passes(workload, micro))


def budget_micro_batch(workload: InferenceWorkload) -> int | None:
    """The most sequences per pipeline micro-batch whose passes keep within the engine's token budget
    (``max_prefill_tokens``), sequences; None where the workload states no budget.

    TensorRT-LLM's scheduler fills a pass up to max_num_tokens counting every request it schedules: a decoding
    sequence's one token as well as a prompt's (chunk of) tokens, so a continuous batch of b sequences in steady
    state carries b·(1 + input_len/output_len) tokens a pass (``mixed_pass``). trtllm-bench sizes the budget by that
    rule: max_num_tokens = max_batch_size/pp·(1 + input_len/output_len) (NVIDIA/TensorRT-LLM
    tensorrt_llm/bench/build/tuning.py, ``finetune_setting``); vLLM's max_num_batched_tokens counts the same way
    (its scheduler's token budget takes one token per running request). Pass tokens grow linearly with the
    sequences, so the bound is floor(budget / the tokens of a one-sequence pass): floor(B / (1 + input/output))
    continuous, floor(B / input_len) static (its prefill pass), B for a disaggregated decode pool. SGLang's
    --max-prefill-tokens counts prompt tokens only: a stated budget passed to it as is limits the engine less than
    the plan assumes, never more (``solver.launch``)."""
    if workload.max_prefill_tokens is None:
        return None
    return math.floor(workload.max_prefill_tokens / pass_tokens(workload, 1) + 1e-9)


@functools.cache
def serving_model(model: ModelSpec) -> ModelSpec:
    """The model as served: no dropout (inference runs the network in eval mode)."""
    return dataclasses.replace(model, dropout=False) if model.dropout else model


# ---------------------------------------------------------------- one layer


@dataclass(frozen=True)
class LayerTime:
    """Time of one transformer layer for one pass on one GPU, seconds, by component."""

    gemm: float
    attention: float
    elementwise: float
    tp_comm: float
    ep_comm: float

    @property
    def total(self) -> float:
        return self.gemm + self.attention + self.elementwise + self.tp_comm + self.ep_comm


def gemm_kernel_time_s(device, m: float, n: float, k: float, workload: InferenceWorkload, grouped: bool = False) -> float:
    """One weight GEMM of a serving pass: computed at the workload's precision, weights read at
    their stored width (``weight_precision``, block scales included) at the device's streaming
    efficiency for kernels of that precision (``DeviceSpec.weight_streaming_efficiency_for``), seconds
    (``compute.gemm_time_s``). A ``grouped`` (routed-expert) GEMM in FP8 or FP4 computes at the share of
    the dense curve the device's scaled grouped kernels were measured to reach (``grouped_fp8_efficiency``,
    as ``compute.moe_routed_forward_time_s`` charges training's), its weight streaming unchanged."""
    scaled = grouped and workload.precision in ("fp8", "fp4")
    return compute.gemm_time_s(
        device,
        m,
        n,
        k,
        workload.precision,
        stored_bytes_per_element(workload.weight_precision),
        device.weight_streaming_efficiency_for(workload.precision),
        device.grouped_fp8_efficiency if scaled else 1.0,
    )


@functools.cache
def gemm_workload(workload: InferenceWorkload, name: str) -> InferenceWorkload:
    """The workload layer GEMM ``name`` (``choices.LayerGemm``) runs under: at 16 bits, its weights stored and computed
    so, where the checkpoint leaves it unquantised (``workload.unquantised_gemms``; ModelOpt's NVFP4 DeepSeek-R1
    excludes MLA's fused_a, q_b_proj and kv_b_proj: closed/NVIDIA/code/deepseek-r1/tensorrt/hf_quant_config.json
    of MLPerf Inference v5.1), else the workload itself."""
    if name not in workload.unquantised_gemms:
        return workload
    wide = activation_precision(workload.precision)
    return dataclasses.replace(workload, precision=wide, weight_precision=wide)


def unquantised_gemm_params(model: ModelSpec, workload: InferenceWorkload, tp: int, moe_layer: bool) -> float:
    """Weights of one layer's GEMMs that ``workload.unquantised_gemms`` leaves at 16 bits, on one tensor-parallel rank:
    n·k of each GEMM's per-rank shape (``compute.layer_gemm_shapes``; MLA's down-projections replicated), parameters."""
    shapes = compute.layer_gemm_shapes(model, 1, tp, moe_layer)
    return sum(n * k for name, (_, n, k) in shapes.items() if name in workload.unquantised_gemms)


def active_experts(local_experts: float, rows: float) -> float:
    """Expected experts of ``local_experts`` that receive at least one of ``rows`` routed rows
    spread uniformly: E·(1 - (1 - 1/E)^rows) (occupancy of rows balls in E bins), experts. At
    small decode batches only these experts' weights are read."""
    if rows <= 0:
        return 0.0
    return local_experts * (1.0 - (1.0 - 1.0 / local_experts) ** rows)


def routed_experts_time_s(model: ModelSpec, device, workload: InferenceWorkload, tokens: float, tp: int, ep: int) -> float:
    """Router and routed experts of one MoE layer on one GPU, seconds.

    Each tensor-parallel rank routes tokens/tp of the pass (``compute.routed_rows_per_gpu``,
    load imbalance included) to its E/ep local experts (expert tensor parallelism 1, as in
    training); only the experts that receive rows are computed and read (``active_experts``).
    In FP8 and FP4 the experts' grouped GEMMs compute at the device's measured grouped-kernel share of the
    dense curve (``gemm_kernel_time_s``), as training's do. The training block efficiency
    (``moe_expert_efficiency``, fitted on Megatron runs with dropless permutation and host syncs) is not
    applied: serving engines run fused grouped GEMMs [assumption]."""
    moe = model.moe
    local = moe.experts / ep
    rows = compute.routed_rows_per_gpu(model, tokens, tp)
    busy = active_experts(local, rows)
    experts = (
        busy
        * sum(
            gemm_kernel_time_s(device, m, n, k, workload, grouped=True)
            for m, n, k in compute.mlp_gemm_shapes(model, rows / busy, moe.expert_ffn).values()
        )
        if busy
        else 0.0
    )
    router = compute.gemm_time_s(device, tokens / tp, moe.experts, model.hidden, activation_precision(workload.precision))
    return experts + router


def kv_reads_per_step(model: ModelSpec, workload: InferenceWorkload, tp: int) -> float:
    """How many times a decode step reads each cached K/V head, dimensionless. A grouped kernel
    (FlashDecoding, FlashInfer, TensorRT-LLM's XQA) computes every query head that shares a KV
    head from one read: 1. A kernel with one thread block per query head (TensorRT-LLM's masked
    MHA before XQA arrived in v0.8: "New XQA-kernel provides 2.4x more Llama-70B throughput",
    TensorRT-LLM docs/source/blogs/XQA-kernel.md) reads its KV head once per query head that uses
    it: heads/kv_heads for GQA and MQA [upper bound: re-reads served by L2 are not credited]."""
    if workload.decode_attention == "grouped" or model.mla is not None:
        return 1.0
    return (model.heads / tp) / kv_cache.kv_heads_per_gpu(model, tp)


def mla_decode_flops(model: ModelSpec, seqs: float, context_len: float, tp: int) -> float:
    """FLOPs of absorbed MLA decode (DeepSeek-V2 Sec. 2.1.2) for ``seqs`` sequences, one query each, over
    ``context_len`` cached tokens on one of ``tp`` ranks: every head scores the latent and RoPE key (r + d_rope) and
    sums the latent (r), 2·ctx·(a/t)·(2r + d_rope) a sequence."""
    r, d_rope = model.mla.kv_lora_rank, model.mla.qk_rope_head_dim
    return 2.0 * seqs * context_len * (model.heads / tp) * (2 * r + d_rope)


def decode_attention_time_s(
    model: ModelSpec, device, kv_precision: str, seqs: float, context_len: float, tp: int, reads: float = 1.0
) -> float:
    """Attention of ``seqs`` decoding sequences, one query each against ``context_len`` cached
    tokens, on one GPU, seconds: roofline of the score FLOPs and the KV-cache bytes read.

    MHA/GQA/MQA: 2·ctx·(a/t)·(d_qk + d_v) FLOPs per sequence (``compute.attention_score_flops``)
    against ctx × the rank's KV bytes per token (FlashDecoding, Dao et al. 2023; TensorRT-LLM's
    masked MHA). MLA decodes with the up-projections absorbed (``mla_decode_flops``), reading only the
    latent cache. ``reads`` multiplies the cache bytes (``kv_reads_per_step``)."""
    if seqs <= 0:
        return 0.0
    context_len = model.attended_context(context_len)  # local layers read at most their window
    if model.mla is not None:
        flops = mla_decode_flops(model, seqs, context_len, tp)
    else:
        flops = compute.attention_score_flops(model, seqs, 1.0, context_len, tp)
    nbytes = reads * seqs * context_len * kv_cache.kv_bytes_per_token(model, kv_precision, tp)
    return max(
        flops / (compute.attention_peak_flops(device) * device.attention_efficiency),
        nbytes / (device.hbm_bytes_per_s * device.kv_streaming_efficiency),
    )


def prefill_attention_time_s(model: ModelSpec, device, prefill_tokens: float, prompt_len: float, tp: int) -> float:
    """Causal flash attention of ``prefill_tokens`` prompt tokens, seconds: the forward of
    ``compute.attention_core_forward_time_s`` for prefill_tokens/prompt_len whole prompts (a chunk
    of a prompt attends to its prefix: over a whole prompt the chunks add up to the causal half)."""
    if prefill_tokens <= 0:
        return 0.0
    return compute.attention_core_forward_time_s(model, device, "flash", prefill_tokens / prompt_len, prompt_len, 1, tp)


def serving_layouts(system: SystemSpec, tp: int, pp: int, ep: int) -> dict:
    """{'tp', 'pp', 'ep': placement.Layout} of one serving pool's groups: a replica's tp ranks
    consecutive, its pp stages tp ranks apart (tp fastest, as TensorRT-LLM and vLLM number ranks),
    the ep ranks consecutive; each pool laid from the first rank of the job."""
    return {
        "tp": layout(system, Group.of((tp, 1))),
        "pp": layout(system, Group.of((pp, tp))),
        "ep": layout(system, Group.of((ep, 1))),
    }


def kv_link_layout(system: SystemSpec) -> Layout:
    """Where a request's KV cache crosses from the prefill pool to the decode pool: between the
    job's first and last GPU, over the scale-up links when the whole job is one scale-up domain,
    else through the NICs (on a topology the model follows, the two ranks' placement there)."""
    n = system.num_gpus
    if n < 2:
        return Layout(2, 2)
    if topology_decides(system.topology):
        return layout(system, Group.of((2, n - 1)))
    return Layout(2, 2 if n <= system.scale_up_domain else 1)


def tp_allreduce_time_s(
    model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, tp_layout: Layout
) -> float:
    """The two all-reduces of a layer's tensor-parallel outputs (attention and MLP; Shoeybi et al.
    2019, Sec. 3; one in a parallel block, ``ModelSpec.tp_reductions_per_layer``) on ``tokens`` rows
    of the hidden state, at the activation width, over the TP group at ``tp_layout``, seconds
    (``placement.collective_time_s``)."""
    if tp_layout.n == 1 or tokens <= 0:
        return 0.0
    nbytes = tokens * model.hidden * bytes_per_element(activation_precision(workload.precision))
    return model.tp_reductions_per_layer * collective_time_s("allreduce", nbytes, tp_layout, system)


def ep_alltoall_time_s(
    model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, tp: int, ep_layout: Layout
) -> float:
    """Dispatch and combine of one MoE layer, seconds: each tensor-parallel rank sends its tokens/tp
    rows, top_k copies spread over the ep ranks of the group at ``ep_layout``
    (``expert_parallel.dispatch_copies_per_token``, Megatron-Core's all-to-all dispatcher), at the
    activation width, both ways (``expert_parallel.alltoall_time_s``)."""
    ep = ep_layout.n
    if ep == 1 or model.moe is None or tokens <= 0:
        return 0.0
    inside, across = expert_parallel.dispatch_copies_per_token(model, ep, ep_layout.local, MoeDispatcher.ALLTOALL)
    row = tokens / tp * model.hidden * bytes_per_element(activation_precision(workload.precision))
    return 2.0 * expert_parallel.alltoall_time_s(row, inside, across, ep_layout, system)


def layer_time(
    model: ModelSpec,
    system: SystemSpec,
    workload: InferenceWorkload,
    tp: int,
    ep: int,
    p: Pass,
    moe_layer: bool = False,
    layouts: dict | None = None,
) -> LayerTime:
    """One layer (dense, or MoE with ``moe_layer``) of pass ``p`` on one GPU of a tp-way replica,
    its groups where ``layouts`` ({'tp', 'ep': Layout}, ``serving_layouts``) put them.

    GEMMs on all the pass's tokens (``compute.layer_gemm_shapes``; weights at their stored width, those the
    checkpoint leaves unquantised at 16 bits: ``gemm_workload``; all but the routed experts' paced by the busiest
    replica where the experts span replicas: ``replica_wait``),
    decode attention on the cache plus prefill attention on the prompt tokens, the memory-bound
    norms, activations and residual adds (``compute.elementwise_forward_bytes``, no dropout) plus
    writing the new tokens' K and V to the cache, the tp all-reduces and the ep all-to-all.
    Quantisation casts are fused into the preceding kernels (TensorRT-LLM) and cost nothing."""
    model = serving_model(model)
    device = system.device
    tokens = p.tokens
    layouts = layouts or serving_layouts(system, tp, 1, ep)
    wait = replica_wait(workload, tp, ep)
    gemm = sum(
        gemm_kernel_time_s(device, m, n, k, gemm_workload(workload, name))
        for name, (m, n, k) in compute.layer_gemm_shapes(model, tokens, tp, moe_layer).items()
    )
    gemm *= wait
    if moe_layer:
        gemm += routed_experts_time_s(model, device, workload, tokens, tp, ep)
    attention = decode_attention_time_s(
        model, device, workload.kv_precision, p.decode_seqs, p.context_len, tp, kv_reads_per_step(model, workload, tp)
    ) + prefill_attention_time_s(model, device, p.prefill_tokens, p.prompt_len, tp)
    nbytes = compute.elementwise_forward_bytes(model, tokens, tp, False, workload.precision, moe_layer)
    nbytes += tokens * kv_cache.kv_bytes_per_token(model, workload.kv_precision, tp)
    return LayerTime(
        gemm=gemm,
        attention=attention * wait,
        elementwise=compute.memory_bound_time_s(device, nbytes) * wait,
        tp_comm=tp_allreduce_time_s(model, system, workload, tokens, layouts["tp"]) * wait,
        ep_comm=ep_alltoall_time_s(model, system, workload, tokens, tp, layouts["ep"]) if moe_layer else 0.0,
    )


def attention_dp_ranks(tp: int, ep: int) -> int:
    """Replicas of tp GPUs that share one expert-parallel group of ep: ep/tp where ep > tp (TensorRT-LLM's and SGLang's
    attention data parallelism, each replica a rank with its own sequences), else 1."""
    return ep // tp if ep > tp else 1


def replica_wait(workload: InferenceWorkload, tp: int, ep: int) -> float:
    """How much longer a replica's own work between two expert exchanges takes for waiting on the busiest replica of
    its expert-parallel group, dimensionless: 1/``workload.attention_dp_balance`` where the experts span ep/tp > 1
    replicas (TensorRT-LLM's and SGLang's attention data parallelism: every MoE layer's exchange synchronises them),
    else 1. The balance is the mean over the maximum of the tokens the replicas bring to a step (TensorRT-LLM's
    balance ratio, tech blog 10, "ADP Balance Strategy"); a replica's attention, projections, norms and tensor-parallel
    all-reduces scale with its tokens, so the busiest replica's take the mean's time over the balance. The routed
    experts and the exchange are the group's shared work, balanced by the routing, and do not wait."""
    return 1.0 / workload.attention_dp_balance if attention_dp_ranks(tp, ep) > 1 else 1.0


# ---------------------------------------------------------------- edges, pipeline


def step_overhead_s(system: SystemSpec) -> float:
    """Seconds the serving engine's runtime adds to every pass beside its kernels: scheduling the
    batch, sampling and launching the step (TensorRT-LLM's executor loop; vLLM's scheduler and input
    preparation), the device file's ``serving_step_overhead_s``. Fitted, one value for the engines the
    device files describe, on TensorRT-LLM 0.6.1's throughput tables (``python benchmarks/calibrate.py
    --step-overhead``). Every stage's rank runs the loop for every pass, so a pass's cycle through a
    pipeline is its slowest stage plus this (``serving_step.pass_cycle``)."""
    return system.device.serving_step_overhead_s


def edge_times(
    model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tp: int, p: Pass, ep: int = 1
) -> tuple[float, float]:
    """(first stage, last stage) extra seconds of a pass: the embedding gather of its tokens
    (``compute.embedding_forward_time_s``); the output projection of the rows that sample (only
    the last position of a prompt: TensorRT-LLM's gather_last_token_logits, vLLM) kept at 16 bits
    as quantisation recipes leave lm_head unquantised (NVIDIA ModelOpt defaults), plus reading its
    fp32 logits to sample. Each replica's own, paced by the busiest where the experts span replicas
    (``replica_wait``)."""
    wait = replica_wait(workload, tp, ep)
    device = system.device
    act = activation_precision(workload.precision)
    first = compute.embedding_forward_time_s(model, device, workload.precision, p.tokens)
    logits = compute.gemm_time_s(
        device, p.rows, model.vocab / tp, model.hidden, act, None, device.weight_streaming_efficiency_for(act)
    )
    sample = compute.memory_bound_time_s(device, p.rows * model.vocab / tp * LOGIT_BYTES)
    return first * wait, (logits + sample) * wait


def p2p_time_s(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, pp_layout: Layout) -> float:
    """Sending one pass's hidden states to the next stage of the pipeline group at ``pp_layout``,
    seconds (``placement.collective_time_s``; 0 with one stage)."""
    nbytes = tokens * model.hidden * bytes_per_element(activation_precision(workload.precision))
    return collective_time_s("p2p", nbytes, pp_layout, system)


@dataclass(frozen=True)
class StageLayout:
    """Layers of one pipeline stage: ``dense`` and ``moe`` layers, and whether it holds the
    embedding (``first``) and the output layer (``last``)."""

    dense: int
    moe: int
    first: bool
    last: bool

    @property
    def layers(self) -> int:
        return self.dense + self.moe


def stage_layouts(model: ModelSpec, pp: int) -> list[StageLayout]:
    """The stages of a pp-deep replica, first to last: the default split of
    ``pipeline.stage_layer_counts``; an MoE model's leading dense layers sit on the first stage
    (ProblemError when it is too short to hold them, the planner's rule in training too)."""
    if pp > model.layers:
        raise ProblemError(f"pp {pp} exceeds the {model.layers} layers", field="mapping.pp")
    counts = stage_layer_counts(model.layers, pp)
    lead = model.moe.first_dense_layers if model.moe is not None else model.layers
    if model.moe is not None and counts[0] < lead:
        raise ProblemError(
            f"pp {pp} leaves {counts[0]} layers on the first stage, fewer than the {lead} dense layers it must hold",
            field="mapping.pp",
        )
    out = []
    for i, n in enumerate(counts):
        dense = min(n, lead) if i == 0 else (n if model.moe is None else 0)
        out.append(StageLayout(dense=dense, moe=n - dense, first=i == 0, last=i == pp - 1))
    return out


# ---------------------------------------------------------------- memory


def stage_weight_bytes(model: ModelSpec, workload: InferenceWorkload, stage: StageLayout, tp: int, ep: int) -> float:
    """Weights on one GPU of a stage, bytes: its layers split by tp at the stored weight width
    (``training.stage_params``), the routed experts split by ep (``training.stage_expert_params``),
    the GEMMs the checkpoint leaves unquantised (``unquantised_gemm_params``) and the embedding (first)
    and output layer (last) at 16 bits."""
    w = stored_bytes_per_element(workload.weight_precision)
    edge = bytes_per_element(activation_precision(workload.precision))
    layers = stage_params(model, stage.layers, False, False, tp, stage.moe) + stage_expert_params(model, stage.moe, ep)
    wide = stage.dense * unquantised_gemm_params(model, workload, tp, False) + (
        stage.moe * unquantised_gemm_params(model, workload, tp, True) if stage.moe else 0.0
    )
    return layers * w + wide * (edge - w) + stage_params(model, 0, stage.first, stage.last, tp) * edge


def activation_bytes(model: ModelSpec, workload: InferenceWorkload, tp: int, p: Pass, last: bool) -> float:
    """Activation working set of one pass on one GPU, bytes. Without a backward pass nothing is
    kept across layers; the engine reuses one layer's buffers (TensorRT-LLM sizes its activation
    memory for max_num_tokens this way): the residual stream and the normed input (2h per token)
    plus the wider of the attention block's live tensors (Q, K, V and the output projection's
    input, ``memory.sharded_activation_bytes``) and the FFN block's (``memory.ffn_activation_bytes``,
    routed rows for MoE). The last stage adds the fp32 logits of the sampling rows."""
    model = serving_model(model)
    e = bytes_per_element(activation_precision(workload.precision))
    tokens = p.tokens
    blocks = [memory.sharded_activation_bytes(model, tokens, e) / tp, memory.ffn_activation_bytes(model, tokens, tp, e)]
    if model.moe is not None:
        blocks.append(memory.ffn_activation_bytes(model, tokens, tp, e, moe_layer=True))
    total = 2.0 * tokens * model.hidden * e + max(blocks)
    if last:
        total += p.rows * model.vocab / tp * LOGIT_BYTES
    return total


# ---------------------------------------------------------------- checks


def check_pool(model: ModelSpec, system: SystemSpec, pool: PoolMapping, prefix: str = "mapping") -> None:
    """The parallel rules of one serving pool: ProblemError naming the field when broken."""
    for name in ("tp", "pp", "ep", "dp"):
        value = getattr(pool, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", field=f"{prefix}.{name}")
    if model.heads % pool.tp or (model.kv_heads % pool.tp and pool.tp % model.kv_heads):
        raise ProblemError(
            f"tp {pool.tp} must divide the {model.heads} heads, and divide or be a multiple of the "
            f"{model.kv_heads} kv_heads (KV heads are replicated beyond that)",
            field=f"{prefix}.tp",
        )
    if pool.ep != 1 and model.moe is None:
        raise ProblemError(
            "expert parallelism needs a mixture-of-experts model; this model is dense: use ep 1", field=f"{prefix}.ep"
        )
    if model.moe is not None and (model.moe.experts % pool.ep or (pool.tp * pool.dp) % pool.ep):
        raise ProblemError(
            f"ep {pool.ep} must divide the {model.moe.experts} experts and tp·dp = {pool.tp * pool.dp} "
            "(expert tensor parallelism 1)",
            field=f"{prefix}.ep",
        )
    try:
        stage_layouts(model, pool.pp)
    except ProblemError as exc:
        raise exc.located(field=f"{prefix}.pp") from None


def check_unquantised_gemms(model: ModelSpec, workload: InferenceWorkload) -> None:
    """Raise ProblemError when ``workload.unquantised_gemms`` names a GEMM the model's layers do not have."""
    layer_gemms = set(compute.layer_gemm_shapes(model, 1, 1))
    if model.moe is not None:
        layer_gemms |= set(compute.layer_gemm_shapes(model, 1, 1, True))
    for name in workload.unquantised_gemms:
        if name not in layer_gemms:
            raise ProblemError(
                f"{name} is not a GEMM of {model.name}; allowed: {', '.join(g for g in LayerGemm if g in layer_gemms)}",
                field="workload.unquantised_gemms",
            )


def check_serving(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, mapping: ServingMapping) -> None:
    """Raise ProblemError naming the mapping field when ``mapping`` cannot serve ``workload``."""
    disaggregated = workload.serving == "disaggregated"
    if disaggregated != (mapping.prefill is not None):
        raise ProblemError(
            "disaggregated serving needs mapping.prefill and mapping.decode pools; static and continuous "
            "serving take tp, pp, ep, dp",
            field="mapping",
        )
    if mapping.num_gpus != system.num_gpus:
        what = "prefill + decode GPUs" if disaggregated else "tp·pp·dp"
        raise ProblemError(f"{what} = {mapping.num_gpus} must equal system.num_gpus = {system.num_gpus}", field="mapping")
    pools = (
        (("mapping.prefill", mapping.prefill), ("mapping.decode", mapping.decode))
        if disaggregated
        else (("mapping", mapping.decode),)
    )
    for prefix, pool in pools:
        check_pool(model, system, pool, prefix)
    if isinstance(mapping.batch, bool) or not isinstance(mapping.batch, int) or mapping.batch < 1:
        raise ProblemError(f"must be a positive integer, got {mapping.batch!r}", field="workload.batch")
    if mapping.batch % mapping.decode.pp:
        raise ProblemError(
            f"batch {mapping.batch} must split into pp = {mapping.decode.pp} equal micro-batches "
            "(one in flight per pipeline stage)",
            field="workload.batch",
        )
    check_unquantised_gemms(model, workload)
    if disaggregated and workload.output_len < 2:
        raise ProblemError(
            "disaggregated serving needs output_len >= 2 (the decode pool makes tokens 2 …)", field="workload.output_len"
        )


# ---------------------------------------------------------------- passes of a replica, KV transfer


def kv_transfer_time_s(
    model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tp: int, pp: int, link: Layout
) -> float:
    """Moving one request's KV cache from a tp·pp prefill replica to the decode pool, seconds: every
    prefill GPU sends its share (``kv_cache.kv_transfer_bytes_per_gpu``) at once over ``link``
    (``kv_link_layout``; NIXL/RDMA in Dynamo, DistServe)."""
    nbytes = kv_cache.kv_transfer_bytes_per_gpu(model, workload.kv_precision, tp, pp, workload.input_len)
    return collective_time_s("p2p", nbytes, link, system)


def decode_passes(workload: InferenceWorkload, micro: float) -> list[Pass]:
    """The passes a decode (or colocated) replica runs with ``micro`` sequences per pipeline
    micro-batch: static serving prefills micro prompts and decodes micro sequences; continuous
    serving runs the mixed iteration; a disaggregated decode pool only decodes."""
    if workload.serving == "static":
        return [prefill_pass(workload, micro), decode_pass(workload, micro)]
    if workload.serving == "continuous":
        return [mixed_pass(workload, micro)]
    return [decode_pass(workload, micro)]
