"""Serving: prefill and decode time, memory, and the serving modes (static, continuous, disaggregated).

One forward pass of a replica carries some decoding sequences (one new token each, attending to
their KV cache) and some prompt tokens (prefill). Every operation goes through the roofline of
``model.compute`` (Williams et al. 2009): GEMMs are compute-bound on long prompts and large
batches and weight-streaming-bound at small batch, decode attention reads the KV cache, so the
memory/compute crossover falls out of the operation shapes (Pope et al., MLSys 2023, Sec. 2-3;
Yuan et al., "LLM Inference Unveiled: Survey and Roofline Model Insights", 2024).

The evaluation is factored for the planner: ``layer_time`` on (tp, ep, tokens of one pass),
``edge_times`` and ``p2p_time_s`` on (tp, tokens), ``stage_layouts`` on pp, ``stage_weight_bytes``
on (tp, pp, ep), ``kv_cache.kv_bytes_per_sequence`` on (tp, layers), ``activation_bytes`` on
(tp, tokens). ``evaluate_inference`` composes them and is the single source of every number.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from . import comm, compute, expert_parallel, kv_cache, memory, params
from .errors import ProblemError
from .pipeline import stage_layer_counts
from .precision import activation_precision, bytes_per_element, stored_bytes_per_element
from .specs import InferenceWorkload, ModelSpec, PoolMapping, ServingMapping, SystemSpec
from .evaluation import Evaluation
from .training import stage_expert_params, stage_params

GIB = 2.0**30
LOGIT_BYTES = 4.0  # fp32 logits for sampling (TensorRT-LLM and vLLM keep logits in fp32)


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
    """Mean cached context of a decode step, tokens: steps 1 … output_len-1 attend to input_len + i
    tokens, mean input_len + output_len/2. Decode time is affine in the context (the attention's
    bytes and FLOPs both grow with it, in a fixed ratio, so its roofline regime does not change),
    so the mean step times the step count is the exact total."""
    return workload.input_len + workload.output_len / 2.0


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
    return Pass(decode_seqs=seqs, context_len=mean_decode_context(workload),
                prefill_tokens=seqs * workload.input_len / workload.output_len, prompt_len=workload.input_len)


def prefill_prompts_per_pass(workload: InferenceWorkload) -> int:
    """Prompts one prefill pass of a disaggregated prefill pool takes: as many whole prompts as
    ``max_prefill_tokens`` holds, at least one, prompts."""
    return max(1, workload.max_prefill_tokens // workload.input_len)


@functools.lru_cache(maxsize=None)
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


def gemm_kernel_time_s(device, m: float, n: float, k: float, workload: InferenceWorkload) -> float:
    """One weight GEMM of a serving pass: computed at the workload's precision, weights read at
    their stored width (``weight_precision``, block scales included) at the device's streaming
    efficiency, seconds (``compute.gemm_time_s``)."""
    return compute.gemm_time_s(device, m, n, k, workload.precision, stored_bytes_per_element(workload.weight_precision),
                               device.weight_streaming_efficiency)


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
    The training block efficiency (``moe_expert_efficiency``, fitted on Megatron runs with dropless
    permutation and host syncs) is not applied: serving engines run fused grouped GEMMs
    [assumption: no MoE serving measurement is at hand]."""
    moe = model.moe
    local = moe.experts / ep
    rows = compute.routed_rows_per_gpu(model, tokens, tp)
    busy = active_experts(local, rows)
    experts = busy * sum(gemm_kernel_time_s(device, m, n, k, workload)
                         for m, n, k in compute.mlp_gemm_shapes(model, rows / busy, moe.expert_ffn).values()) if busy else 0.0
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


def decode_attention_time_s(model: ModelSpec, device, kv_precision: str, seqs: float, context_len: float, tp: int,
                            reads: float = 1.0) -> float:
    """Attention of ``seqs`` decoding sequences, one query each against ``context_len`` cached
    tokens, on one GPU, seconds: roofline of the score FLOPs and the KV-cache bytes read.

    MHA/GQA/MQA: 2·ctx·(a/t)·(d_qk + d_v) FLOPs per sequence (``compute.attention_score_flops``)
    against ctx × the rank's KV bytes per token (FlashDecoding, Dao et al. 2023; TensorRT-LLM's
    masked MHA). MLA decodes with the up-projections absorbed (DeepSeek-V2 Sec. 2.1.2): every head
    scores the latent and RoPE key (r + d_rope) and sums the latent (r), 2·ctx·(a/t)·(2r + d_rope)
    FLOPs, reading only the latent cache. ``reads`` multiplies the cache bytes (``kv_reads_per_step``)."""
    if seqs <= 0:
        return 0.0
    if model.mla is not None:
        r, d_rope = model.mla.kv_lora_rank, model.mla.qk_rope_head_dim
        flops = 2.0 * seqs * context_len * (model.heads / tp) * (2 * r + d_rope)
    else:
        flops = compute.attention_score_flops(model, seqs, 1.0, context_len, tp)
    nbytes = reads * seqs * context_len * kv_cache.kv_bytes_per_token(model, kv_precision, tp)
    return max(flops / (compute.attention_peak_flops(device) * device.attention_efficiency),
               nbytes / (device.hbm_bytes_per_s * device.kv_streaming_efficiency))


def prefill_attention_time_s(model: ModelSpec, device, prefill_tokens: float, prompt_len: float, tp: int) -> float:
    """Causal flash attention of ``prefill_tokens`` prompt tokens, seconds: the forward of
    ``compute.attention_core_forward_time_s`` for prefill_tokens/prompt_len whole prompts (a chunk
    of a prompt attends to its prefix: over a whole prompt the chunks add up to the causal half)."""
    if prefill_tokens <= 0:
        return 0.0
    return compute.attention_core_forward_time_s(model, device, "flash", prefill_tokens / prompt_len, prompt_len, 1, tp)


def tp_allreduce_time_s(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, tp: int) -> float:
    """The two all-reduces of a layer's tensor-parallel outputs (attention and MLP; Shoeybi et al.
    2019, Sec. 3) on ``tokens`` rows of the hidden state, at the activation width, seconds
    (``comm.allreduce_time_s`` on the tiers the tp group spans)."""
    if tp == 1 or tokens <= 0:
        return 0.0
    nbytes = tokens * model.hidden * bytes_per_element(activation_precision(workload.precision))
    return 2.0 * comm.allreduce_time_s(nbytes, tp, 1, system)


def ep_alltoall_time_s(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, tp: int, ep: int) -> float:
    """Dispatch and combine of one MoE layer, seconds: each tensor-parallel rank sends its tokens/tp
    rows, top_k copies spread over the ep ranks (``expert_parallel.dispatch_copies_per_token``,
    Megatron-Core's all-to-all dispatcher), at the activation width, both ways
    (``comm.alltoall_split_time_s``)."""
    if ep == 1 or model.moe is None or tokens <= 0:
        return 0.0
    local = comm.ranks_per_domain(ep, 1, system)
    inside, across = expert_parallel.dispatch_copies_per_token(model, ep, local, "alltoall")
    row = tokens / tp * model.hidden * bytes_per_element(activation_precision(workload.precision))
    return 2.0 * comm.alltoall_split_time_s(row * inside, row * across, ep, local, system)


def layer_time(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tp: int, ep: int, p: Pass,
               moe_layer: bool = False) -> LayerTime:
    """One layer (dense, or MoE with ``moe_layer``) of pass ``p`` on one GPU of a tp-way replica.

    GEMMs on all the pass's tokens (``compute.layer_gemm_shapes``; weights at their stored width),
    decode attention on the cache plus prefill attention on the prompt tokens, the memory-bound
    norms, activations and residual adds (``compute.elementwise_forward_bytes``, no dropout) plus
    writing the new tokens' K and V to the cache, the tp all-reduces and the ep all-to-all.
    Quantisation casts are fused into the preceding kernels (TensorRT-LLM) and cost nothing."""
    model = serving_model(model)
    device = system.device
    tokens = p.tokens
    gemm = sum(gemm_kernel_time_s(device, m, n, k, workload)
               for m, n, k in compute.layer_gemm_shapes(model, tokens, tp, moe_layer).values())
    if moe_layer:
        gemm += routed_experts_time_s(model, device, workload, tokens, tp, ep)
    attention = (decode_attention_time_s(model, device, workload.kv_precision, p.decode_seqs, p.context_len, tp,
                                         kv_reads_per_step(model, workload, tp))
                 + prefill_attention_time_s(model, device, p.prefill_tokens, p.prompt_len, tp))
    nbytes = compute.elementwise_forward_bytes(model, tokens, tp, False, workload.precision, moe_layer)
    nbytes += tokens * kv_cache.kv_bytes_per_token(model, workload.kv_precision, tp)
    return LayerTime(gemm=gemm, attention=attention, elementwise=compute.memory_bound_time_s(device, nbytes),
                     tp_comm=tp_allreduce_time_s(model, system, workload, tokens, tp),
                     ep_comm=ep_alltoall_time_s(model, system, workload, tokens, tp, ep) if moe_layer else 0.0)


# ---------------------------------------------------------------- edges, pipeline

def edge_times(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tp: int, p: Pass) -> tuple[float, float]:
    """(first stage, last stage) extra seconds of a pass: the embedding gather of its tokens
    (``compute.embedding_forward_time_s``); the output projection of the rows that sample (only
    the last position of a prompt: TensorRT-LLM's gather_last_token_logits, vLLM) kept at 16 bits
    as quantisation recipes leave lm_head unquantised (NVIDIA ModelOpt defaults), plus reading its
    fp32 logits to sample."""
    device = system.device
    act = activation_precision(workload.precision)
    first = compute.embedding_forward_time_s(model, device, workload.precision, p.tokens)
    logits = compute.gemm_time_s(device, p.rows, model.vocab / tp, model.hidden, act, None, device.weight_streaming_efficiency)
    sample = compute.memory_bound_time_s(device, p.rows * model.vocab / tp * LOGIT_BYTES)
    return first, logits + sample


def pipeline_crosses_domain(system: SystemSpec, tp: int, pp: int) -> bool:
    """Whether neighbouring pipeline stages of a replica (tp ranks apart, tp fastest) sit in
    different scale-up domains."""
    return pp > 1 and comm.ranks_per_domain(pp, tp, system) < pp


def p2p_time_s(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, tokens: float, crosses: bool) -> float:
    """Sending one pass's hidden states to the next stage, seconds (``comm.p2p_time_s``)."""
    return comm.p2p_time_s(tokens * model.hidden * bytes_per_element(activation_precision(workload.precision)), crosses, system)


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
        raise ProblemError(f"pp {pp} leaves {counts[0]} layers on the first stage, fewer than the {lead} dense layers "
                           "it must hold", field="mapping.pp")
    out = []
    for i, n in enumerate(counts):
        dense = min(n, lead) if i == 0 else (n if model.moe is None else 0)
        out.append(StageLayout(dense=dense, moe=n - dense, first=i == 0, last=i == pp - 1))
    return out


def stage_pass_time_s(stage: StageLayout, dense: LayerTime, moe: LayerTime | None, edges: tuple[float, float]) -> float:
    """One stage's share of a pass: its layers plus the embedding (first) and output layer (last), seconds."""
    t = stage.dense * dense.total + (stage.moe * moe.total if stage.moe else 0.0)
    return t + (edges[0] if stage.first else 0.0) + (edges[1] if stage.last else 0.0)


@dataclass(frozen=True)
class PassTime:
    """A pass through a pp-deep replica: ``cycle`` is the slowest stage plus its send, the time
    between two micro-batches leaving the pipeline in steady state; ``latency`` = pp·cycle, a
    micro-batch's way through every stage (equal to the sum of the stages when they are balanced,
    an upper bound otherwise). ``dense``/``moe`` are the layer times for the breakdowns."""

    cycle: float
    pp: int
    dense: LayerTime
    moe: LayerTime | None
    edges: tuple
    p2p: float

    @property
    def latency(self) -> float:
        return self.pp * self.cycle


def pass_time(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, pool: PoolMapping, p: Pass) -> PassTime:
    """Time of pass ``p`` through one replica of ``pool``: the slowest stage plus, with pp > 1, the
    send of its output to the next stage (not overlapped: an upper bound)."""
    dense = layer_time(model, system, workload, pool.tp, pool.ep, p, False)
    moe = layer_time(model, system, workload, pool.tp, pool.ep, p, True) if model.moe is not None else None
    edges = edge_times(model, system, workload, pool.tp, p)
    slowest = max(stage_pass_time_s(s, dense, moe, edges) for s in stage_layouts(model, pool.pp))
    crosses = pipeline_crosses_domain(system, pool.tp, pool.pp)
    p2p = p2p_time_s(model, system, workload, p.tokens, crosses) if pool.pp > 1 else 0.0
    return PassTime(cycle=slowest + p2p, pp=pool.pp, dense=dense, moe=moe, edges=edges, p2p=p2p)


# ---------------------------------------------------------------- memory

def stage_weight_bytes(model: ModelSpec, workload: InferenceWorkload, stage: StageLayout, tp: int, ep: int) -> float:
    """Weights on one GPU of a stage, bytes: its layers split by tp at the stored weight width
    (``training.stage_params``), the routed experts split by ep (``training.stage_expert_params``),
    the embedding (first) and output layer (last) at 16 bits (left unquantised)."""
    w = stored_bytes_per_element(workload.weight_precision)
    edge = bytes_per_element(activation_precision(workload.precision))
    layers = stage_params(model, stage.layers, False, False, tp, stage.moe) + stage_expert_params(model, stage.moe, ep)
    return layers * w + stage_params(model, 0, stage.first, stage.last, tp) * edge


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


def stage_memory_bytes(model: ModelSpec, workload: InferenceWorkload, stage: StageLayout, pool: PoolMapping,
                       resident_seqs: float, cached_tokens: float, passes: list[Pass]) -> dict:
    """Memory of one GPU of a stage, bytes by component: weights, the KV cache of
    ``resident_seqs`` sequences of ``cached_tokens`` each (paged), the free memory the engine leaves
    outside its KV pool (``kv_headroom``: the pool takes ``workload.kv_cache_memory_fraction`` of the
    memory free after weights and activations, ``kv_cache.kv_pool_bytes``), and the largest
    activation working set among ``passes``. Their sum fitting the usable memory is exactly "the KV
    cache fits in its pool"."""
    kv = resident_seqs * kv_cache.kv_bytes_per_sequence(model, workload.kv_precision, pool.tp, stage.layers, cached_tokens,
                                                        workload.kv_block_tokens)
    act = max(activation_bytes(model, workload, pool.tp, p, stage.last) for p in passes)
    return {"weights": stage_weight_bytes(model, workload, stage, pool.tp, pool.ep), "kv_cache": kv,
            "kv_headroom": kv_cache.kv_pool_bytes(kv, workload.kv_cache_memory_fraction) - kv, "activations": act}


def pool_memory(model: ModelSpec, workload: InferenceWorkload, pool: PoolMapping, resident_seqs: float,
                cached_tokens: float, passes: list[Pass]) -> dict:
    """The peak stage of a pool: its total bytes and components (``stage_memory_bytes``)."""
    stages = [stage_memory_bytes(model, workload, s, pool, resident_seqs, cached_tokens, passes)
              for s in stage_layouts(model, pool.pp)]
    peak = max(range(len(stages)), key=lambda i: sum(stages[i].values()))
    return {"bytes": sum(stages[peak].values()), "stage": peak, "components": stages[peak]}


# ---------------------------------------------------------------- checks

def check_pool(model: ModelSpec, system: SystemSpec, pool: PoolMapping, prefix: str = "mapping") -> None:
    """The parallel rules of one serving pool: ProblemError naming the field when broken."""
    for name in ("tp", "pp", "ep", "dp"):
        value = getattr(pool, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", field=f"{prefix}.{name}")
    if model.heads % pool.tp or (model.kv_heads % pool.tp and pool.tp % model.kv_heads):
        raise ProblemError(f"tp {pool.tp} must divide the {model.heads} heads, and divide or be a multiple of the "
                           f"{model.kv_heads} kv_heads (KV heads are replicated beyond that)", field=f"{prefix}.tp")
    if pool.ep != 1 and model.moe is None:
        raise ProblemError("expert parallelism needs a mixture-of-experts model; this model is dense: use ep 1",
                           field=f"{prefix}.ep")
    if model.moe is not None and (model.moe.experts % pool.ep or (pool.tp * pool.dp) % pool.ep):
        raise ProblemError(f"ep {pool.ep} must divide the {model.moe.experts} experts and tp·dp = {pool.tp * pool.dp} "
                           "(expert tensor parallelism 1)", field=f"{prefix}.ep")
    try:
        stage_layouts(model, pool.pp)
    except ProblemError as exc:
        raise exc.located(field=f"{prefix}.pp") from None


def check_serving(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, mapping: ServingMapping) -> None:
    """Raise ProblemError naming the mapping field when ``mapping`` cannot serve ``workload``."""
    disaggregated = workload.serving == "disaggregated"
    if disaggregated != (mapping.prefill is not None):
        raise ProblemError("disaggregated serving needs mapping.prefill and mapping.decode pools; static and continuous "
                           "serving take tp, pp, ep, dp", field="mapping")
    if mapping.num_gpus != system.num_gpus:
        what = "prefill + decode GPUs" if disaggregated else "tp·pp·dp"
        raise ProblemError(f"{what} = {mapping.num_gpus} must equal system.num_gpus = {system.num_gpus}", field="mapping")
    pools = (("mapping.prefill", mapping.prefill), ("mapping.decode", mapping.decode)) if disaggregated else (("mapping", mapping.decode),)
    for prefix, pool in pools:
        check_pool(model, system, pool, prefix)
    if isinstance(mapping.batch, bool) or not isinstance(mapping.batch, int) or mapping.batch < 1:
        raise ProblemError(f"must be a positive integer, got {mapping.batch!r}", field="workload.batch")
    if mapping.batch % mapping.decode.pp:
        raise ProblemError(f"batch {mapping.batch} must split into pp = {mapping.decode.pp} equal micro-batches "
                           "(one in flight per pipeline stage)", field="workload.batch")
    if disaggregated and workload.output_len < 2:
        raise ProblemError("disaggregated serving needs output_len >= 2 (the decode pool makes tokens 2 …)",
                           field="workload.output_len")


# ---------------------------------------------------------------- the serving modes

@dataclass(frozen=True)
class ServingTimes:
    """The latencies and rates of a serving plan: time to first token, time per output token
    after it, a request's end-to-end latency, and output tokens per second in total."""

    ttft: float
    tpot: float
    e2e: float
    tokens_per_s: float


def static_times(workload: InferenceWorkload, pool: PoolMapping, batch: int, prefill: PassTime, decode: PassTime) -> ServingTimes:
    """Static batching (all requests start together; TensorRT-LLM gptSessionBenchmark, FasterTransformer):
    the whole batch is prefilled in pp micro-batches, (2pp-1) cycles of the pipeline, and gives
    every request its first token; then output_len-1 decode steps, one pipeline round (pp cycles)
    each. Throughput = dp·batch·output_len / end-to-end latency, as the benchmark reports it."""
    ttft = (2 * pool.pp - 1) * prefill.cycle
    tpot = decode.latency
    e2e = ttft + (workload.output_len - 1) * tpot
    return ServingTimes(ttft, tpot, e2e, pool.dp * batch * workload.output_len / e2e)


def continuous_times(workload: InferenceWorkload, pool: PoolMapping, batch: int, mixed: PassTime) -> ServingTimes:
    """Continuous batching in steady state (Orca; vLLM; chunked prefill as Sarathi-Serve): every
    iteration advances the batch's decoding sequences by a token and prefills batch·input/output
    prompt tokens, one pipeline round (pp cycles). A prompt's tokens are all prefilled after
    output_len/batch iterations (at least one), which is its time to first token; output tokens/s
    = dp·batch / iteration."""
    tpot = mixed.latency
    ttft = max(1.0, workload.output_len / batch) * tpot
    e2e = ttft + (workload.output_len - 1) * tpot
    return ServingTimes(ttft, tpot, e2e, pool.dp * batch / tpot)


def kv_transfer_time_s(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, prefill: PoolMapping) -> float:
    """Moving one request's KV cache from the prefill to the decode pool, seconds: every prefill GPU
    sends its share (``kv_cache.kv_transfer_bytes_per_gpu``) at once, over the scale-up links when
    the whole system is one scale-up domain, else through its NIC (NIXL/RDMA in Dynamo, DistServe)."""
    nbytes = kv_cache.kv_transfer_bytes_per_gpu(model, workload.kv_precision, prefill.tp, prefill.pp, workload.input_len)
    return comm.p2p_time_s(nbytes, system.num_gpus > system.scale_up_domain, system)


def disaggregated_times(workload: InferenceWorkload, mapping: ServingMapping, prefill: PassTime, decode: PassTime,
                        transfer_s: float) -> ServingTimes:
    """Disaggregated prefill and decode (DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al.
    ISCA 2024): a prefill replica takes prompts_per_pass prompts per pass, its time to first token
    is one pass through its pipeline plus the KV transfer; the decode pool runs batch sequences per
    replica, one round per token. The system serves the slower pool's request rate: prefill
    dp_p·prompts/cycle, decode dp_d·batch/((output_len-1)·round); tokens/s = output_len × that."""
    n = prefill_prompts_per_pass(workload)
    ttft = prefill.latency + transfer_s
    tpot = decode.latency
    e2e = ttft + (workload.output_len - 1) * tpot
    rate = min(mapping.prefill.dp * n / prefill.cycle, mapping.decode.dp * mapping.batch / ((workload.output_len - 1) * tpot))
    return ServingTimes(ttft, tpot, e2e, workload.output_len * rate)


def max_batch(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, pool: PoolMapping,
              limit: int = 1 << 16) -> int:
    """The largest batch (a multiple of pp) whose KV cache and activations fit next to the weights
    on every stage of ``pool`` (``serving_memory``), at most ``limit``; 0 when not even pp do."""
    def fits(batch):
        return serving_memory(model, workload, pool, batch, None)["bytes"] <= system.usable_memory_bytes
    step = pool.pp
    if not fits(step):
        return 0
    lo, hi = 1, 2
    while hi * step <= limit and fits(hi * step):
        lo, hi = hi, hi * 2
    hi = min(hi, limit // step + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid * step) else (lo, mid)
    return lo * step


def decode_passes(workload: InferenceWorkload, micro: float) -> list[Pass]:
    """The passes a decode (or colocated) replica runs with ``micro`` sequences per pipeline
    micro-batch: static serving prefills micro prompts and decodes micro sequences; continuous
    serving runs the mixed iteration; a disaggregated decode pool only decodes."""
    if workload.serving == "static":
        return [prefill_pass(workload, micro), decode_pass(workload, micro)]
    if workload.serving == "continuous":
        return [mixed_pass(workload, micro)]
    return [decode_pass(workload, micro)]


def serving_memory(model: ModelSpec, workload: InferenceWorkload, pool: PoolMapping, batch: int,
                   prefill: PoolMapping | None) -> dict:
    """Peak memory per GPU of a serving plan, bytes (``pool_memory``): the decode (or colocated)
    pool holds the KV cache of its batch at full length, input_len + output_len (no eviction:
    TensorRT-LLM's guaranteed-no-evict scheduling); a prefill pool that of the prompts in its
    pipeline, pp·prompts_per_pass of input_len."""
    out = pool_memory(model, workload, pool, batch, workload.input_len + workload.output_len,
                      decode_passes(workload, batch / pool.pp))
    out["pool"] = "decode"
    if prefill is not None:
        n = prefill_prompts_per_pass(workload)
        pre = pool_memory(model, workload, prefill, prefill.pp * n, workload.input_len, [prefill_pass(workload, n)])
        if pre["bytes"] > out["bytes"]:
            out = {**pre, "pool": "prefill"}
    return out


def evaluate_inference(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, mapping: ServingMapping,
                       with_max_batch: bool = True) -> Evaluation:
    """TTFT, TPOT, end-to-end latency, throughput and peak memory of a serving plan, with breakdowns;
    ``with_max_batch`` adds the largest batch that fits (``max_batch``, a search: the enumerator
    leaves it out of its inner loop)."""
    check_serving(model, system, workload, mapping)
    pool, batch = mapping.decode, mapping.batch
    micro = batch / pool.pp
    if workload.serving == "static":
        pre = pass_time(model, system, workload, pool, prefill_pass(workload, micro))
        dec = pass_time(model, system, workload, pool, decode_pass(workload, micro))
        times = static_times(workload, pool, batch, pre, dec)
    elif workload.serving == "continuous":
        dec = pass_time(model, system, workload, pool, mixed_pass(workload, micro))
        pre = dec
        times = continuous_times(workload, pool, batch, dec)
    else:
        pre = pass_time(model, system, workload, mapping.prefill, prefill_pass(workload, prefill_prompts_per_pass(workload)))
        dec = pass_time(model, system, workload, pool, decode_pass(workload, micro))
        times = disaggregated_times(workload, mapping, pre, dec, kv_transfer_time_s(model, system, workload, mapping.prefill))
    mem = serving_memory(model, workload, pool, batch, mapping.prefill)
    usable = system.usable_memory_bytes
    slo_ok = ((workload.ttft_slo_s is None or times.ttft <= workload.ttft_slo_s)
              and (workload.tpot_slo_s is None or times.tpot <= workload.tpot_slo_s))
    metrics = {
        "ttft_s": times.ttft,
        "tpot_s": times.tpot,
        "e2e_latency_s": times.e2e,
        "tokens_per_s": times.tokens_per_s,
        "tokens_per_s_per_gpu": times.tokens_per_s / system.num_gpus,
        "tokens_per_s_per_user": 1.0 / times.tpot,
        "batch": batch,
        "concurrent_requests": batch * pool.dp,
        "peak_memory_gib": mem["bytes"] / GIB,
        "usable_memory_gib": usable / GIB,
        "fits": bool(mem["bytes"] <= usable),
        "meets_slo": bool(slo_ok),
        "num_gpus": system.num_gpus,
        "params_b": params.total_params(model) / 1e9,
    }
    if with_max_batch:
        metrics["max_batch"] = max_batch(model, system, workload, pool)
    breakdown = {"tpot_s": _pass_breakdown(dec, model), "ttft_s": _pass_breakdown(pre, model),
                 "memory_gib": {k: v / GIB for k, v in mem["components"].items()},
                 "peak_memory_pool": mem["pool"], "peak_memory_stage": mem["stage"]}
    if workload.serving == "static":
        breakdown["ttft_s"] = {k: v * (2 * pool.pp - 1) / pool.pp for k, v in breakdown["ttft_s"].items()}
    elif workload.serving == "continuous":
        breakdown["ttft_s"] = {k: v * times.ttft / times.tpot for k, v in breakdown["ttft_s"].items()}
    else:
        breakdown["ttft_s"]["comm/kv_transfer"] = times.ttft - pre.latency
    return Evaluation(metrics=metrics, breakdown=breakdown, stages=[])


def _pass_breakdown(t: PassTime, model: ModelSpec) -> dict:
    """A pass's latency (pp cycles) by component, seconds: the slowest stage's layers, edges and sends."""
    stages = stage_layouts(model, t.pp)
    slowest = max(stages, key=lambda s: stage_pass_time_s(s, t.dense, t.moe, t.edges))
    out = {}
    for name in ("gemm", "attention", "elementwise", "tp_comm", "ep_comm"):
        value = slowest.dense * getattr(t.dense, name) + (slowest.moe * getattr(t.moe, name) if slowest.moe else 0.0)
        out[{"tp_comm": "comm/tp", "ep_comm": "comm/ep"}.get(name, f"compute/{name}")] = value * t.pp
    out["compute/embedding_logits"] = t.pp * ((t.edges[0] if slowest.first else 0.0) + (t.edges[1] if slowest.last else 0.0))
    out["comm/pp"] = t.pp * t.p2p
    return out
