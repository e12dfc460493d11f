"""Serving, composed once: time to first token, time per output token, throughput and memory of a
serving plan (static, continuous or disaggregated batching), and the planner's objectives.

``compose(o, ctx)`` writes how the terms of ``inference.py`` and ``kv_cache.py`` combine, against the
operations of ``ops``, so that the same function gives ``evaluate`` its numbers (``FloatOps``),
enumerates a space (numpy) and is the CP-SAT model of ``solve`` and ``pareto`` (integers).

A replica of the decode (or only) pool is tp·pp GPUs, its batch split into pp micro-batches of
``micro_batch`` sequences, one per stage in flight (``inference.Pass``):

- a pass's cycle is its slowest stage (layers x per-layer time + the embedding on the first stage,
  the output layer on the last) plus the runtime's per-pass overhead plus the send to the next stage;
  its latency pp cycles;
- static batching (TensorRT-LLM gptSessionBenchmark): TTFT = (2pp - 1) prefill cycles, then output_len - 1
  decode rounds of pp cycles; throughput dp·batch·output_len / end-to-end latency;
- continuous batching in steady state (Orca; vLLM; Sarathi-Serve): every iteration (pp cycles)
  decodes the batch and prefills batch·input/output prompt tokens; TTFT = max(1, output/batch)
  iterations; throughput dp·batch / iteration;
- disaggregated prefill and decode (DistServe, Zhong et al. OSDI 2024; Splitwise, Patel et al. ISCA
  2024): TTFT = the prefill replica's latency + the KV transfer; the system serves the slower
  pool's request rate;
- memory per stage = weights + resident sequences x their KV cache (in its pool, with the headroom
  the engine leaves) + the largest pass's activations;
- the engine's token budget (``workload.max_prefill_tokens``, where stated): each pass of a micro-batch carries
  at most that many tokens, decoding and prompt ones alike (``inference.budget_micro_batch``);
- a load target (``workload.request_rate``, requests/s): the plan sustains the requests per second
  its slots turn over in steady state (``seconds_per_request``; Little's law), with TTFT and TPOT
  those of the plan at its batch (no queueing tail);
- a finite set (``workload.requests``, queued at once): served in waves of the dp·batch slots
  (``inference.request_waves``), each one end-to-end latency (static, continuous); disaggregated, the
  first request's latency plus the first wave's prefill passes and the later decode waves, or the
  set's later prefill passes, whichever take longer; under continuous batching a set whose lengths vary
  (``workload.output_len_max``) is staggered at the full batch, then drained (``drained_makespan``).
  Its makespan sets tokens/s and requests/s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from . import kv_cache, params
from .choices import ServingMode
from .decisions import ServingDecision as S
from .evaluation import GIB, Evaluation
from .inference import (
    Pass,
    activation_bytes,
    budget_micro_batch,
    check_serving,
    decode_pass,
    decode_passes,
    drain_batch,
    drain_work,
    edge_times,
    held_sequence_tokens,
    kv_link_layout,
    kv_transfer_time_s,
    layer_time,
    longest_sequence_tokens,
    mixed_pass,
    p2p_time_s,
    prefill_pass,
    prefill_prompts_per_pass,
    request_waves,
    serving_layouts,
    stage_layouts,
    stage_weight_bytes,
    step_overhead_s,
)
from .ops import Factor, FloatOps, Limit, Output, Rounding, Unit
from .specs import InferenceWorkload, ModelSpec, PoolMapping, ServingMapping, SystemSpec

TIME, MEMORY, COUNT = Unit.TIME, Unit.MEMORY, Unit.COUNT
PASS_KINDS = {
    ServingMode.STATIC: ("prefill", "decode"),
    ServingMode.CONTINUOUS: ("mixed",),
    ServingMode.DISAGGREGATED: ("decode",),
}
PASS_MAKERS = {"prefill": prefill_pass, "decode": decode_pass, "mixed": mixed_pass}
# metric (``METRIC_SENSE``) -> +1 smaller is better, -1 larger is better
METRIC_SENSE = {
    "tokens_per_s": -1,
    "requests_per_s": -1,
    "num_gpus": 1,
    "tokens_per_s_per_gpu": -1,
    "tokens_per_s_per_user": -1,
    "ttft_s": 1,
    "tpot_s": 1,
    "e2e_latency_s": 1,
    "peak_memory_gib": 1,
}


@dataclass(frozen=True)
class ServingContext:
    """What a serving plan's factors read besides the decisions: the model, the system (all the
    plan's GPUs), the workload."""

    model: ModelSpec
    system: SystemSpec
    workload: InferenceWorkload
    # {num_gpus: $ per hour of the system with that many GPUs} when a plan is priced (objective cost)
    hourly_usd: dict | None = field(default=None, compare=False)


# ---------------------------------------------------------------- factors


def _pass_layers(ctx: ServingContext, kind: str, tp, ep, micro_batch, tp_group, ep_group, p: Pass | None = None) -> tuple:
    """(dense layer, MoE layer, first-stage extra, last-stage extra, runtime overhead) seconds of a pass of
    ``micro_batch`` sequences (``inference.layer_time``, ``inference.edge_times``, ``inference.step_overhead_s``), or
    of the pass ``p`` when given."""
    model, system, wl = ctx.model, ctx.system, ctx.workload
    p = PASS_MAKERS[kind](wl, micro_batch) if p is None else p
    layouts = {"tp": tp_group, "ep": ep_group}
    dense = layer_time(model, system, wl, tp, ep, p, False, layouts).total
    moe = layer_time(model, system, wl, tp, ep, p, True, layouts).total if model.moe is not None else 0.0
    first, last = edge_times(model, system, wl, tp, p, ep)
    return dense, moe, first, last, step_overhead_s(system)


LAYER_OUTPUTS = (
    Output("dense", TIME, reference=True),
    Output("moe", TIME, reference=True),
    Output("first", TIME),
    Output("last", TIME),
    Output("overhead", TIME),
)


def _layers_factor(kind: str, prefix: str = "") -> Factor:
    keys = tuple(S(prefix + k) for k in ("tp", "ep")) + (S.MICRO_BATCH,) + tuple(S(prefix + k) for k in ("tp_group", "ep_group"))
    return Factor(f"{kind}_layers", keys, LAYER_OUTPUTS, lambda ctx, *v: _pass_layers(ctx, kind, *v))


PASS_LAYERS = {kind: _layers_factor(kind) for kind in PASS_MAKERS}
SENDS = {
    kind: Factor(
        f"{kind}_send",
        (S.MICRO_BATCH, S.PP_GROUP),
        (Output("time", TIME),),
        lambda ctx, micro_batch, pp_group, kind=kind: p2p_time_s(
            ctx.model, ctx.system, ctx.workload, PASS_MAKERS[kind](ctx.workload, micro_batch).tokens, pp_group
        ),
    )
    for kind in PASS_MAKERS
}


def _drain_seqs(ctx: ServingContext, micro_batch, dp, pp) -> float:
    """Sequences of a drain step of one micro-batch (``inference.drain_batch``), the set's share of it,
    requests / (dp·pp), setting its work."""
    return drain_batch(ctx.workload, micro_batch, ctx.workload.requests / (dp * pp))


@functools.lru_cache(maxsize=1 << 14)
def _drain_step_layers(ctx: ServingContext, tp, ep, seqs, tp_group, ep_group) -> tuple:
    """``_pass_layers`` of a drain step of ``seqs`` sequences: many (dp, pp) rows share one drain batch."""
    return _pass_layers(ctx, "drain", tp, ep, seqs, tp_group, ep_group, decode_pass(ctx.workload, seqs))


# a finite set's drain step (``drained_makespan``): its batch depends on the set's share of each replica, so on dp and pp
DRAIN_LAYERS = Factor(
    "drain_layers",
    (S.TP, S.EP, S.MICRO_BATCH, S.TP_GROUP, S.EP_GROUP, S.DP, S.PP),
    LAYER_OUTPUTS,
    lambda ctx, tp, ep, micro_batch, tp_group, ep_group, dp, pp: _drain_step_layers(
        ctx, tp, ep, _drain_seqs(ctx, micro_batch, dp, pp), tp_group, ep_group
    ),
)
DRAIN_SEND = Factor(
    "drain_send",
    (S.MICRO_BATCH, S.PP_GROUP, S.DP, S.PP),
    (Output("time", TIME),),
    lambda ctx, micro_batch, pp_group, dp, pp: p2p_time_s(
        ctx.model, ctx.system, ctx.workload, _drain_seqs(ctx, micro_batch, dp, pp), pp_group
    ),
)


def _stage_counts(ctx: ServingContext, pp) -> tuple:
    """(first dense, first MoE, middle dense, middle MoE, last dense, last MoE) layers of a pp-deep
    replica (``inference.stage_layouts``); a stage kind the replica lacks holds none."""
    s = stage_layouts(ctx.model, pp)
    mid = s[1] if pp >= 3 else None
    last = s[-1] if pp >= 2 else None
    return (
        s[0].dense,
        s[0].moe,
        mid.dense if mid else 0,
        mid.moe if mid else 0,
        last.dense if last else 0,
        last.moe if last else 0,
    )


STAGE_COUNTS = Factor(
    "stage_counts",
    (S.PP,),
    tuple(Output(n, COUNT) for n in ("first_dense", "first_moe", "middle_dense", "middle_moe", "last_dense", "last_moe")),
    _stage_counts,
)


def _stage_kinds(ctx: ServingContext, pp) -> list:
    s = stage_layouts(ctx.model, pp)
    return [s[0], s[1] if pp >= 3 else None, s[-1] if pp >= 2 else None]


def _weights(ctx: ServingContext, tp, pp, ep) -> tuple:
    """Weights per GPU of the first, middle and last stage kind (``inference.stage_weight_bytes``)."""
    return tuple(stage_weight_bytes(ctx.model, ctx.workload, s, tp, ep) if s else 0.0 for s in _stage_kinds(ctx, pp))


def _kv(ctx: ServingContext, tp, pp, cached_tokens: float) -> tuple:
    """Free memory one resident sequence of ``cached_tokens`` takes on a GPU of each stage kind: its paged
    KV cache (``kv_cache.kv_bytes_per_sequence``) in the engine's pool (``kv_cache.kv_pool_bytes``)."""
    wl = ctx.workload
    return tuple(
        kv_cache.kv_pool_bytes(
            kv_cache.kv_bytes_per_sequence(ctx.model, wl.kv_precision, tp, s.layers, cached_tokens, wl.kv_block_tokens),
            wl.kv_cache_memory_fraction,
        )
        if s
        else 0.0
        for s in _stage_kinds(ctx, pp)
    )


WEIGHTS = Factor("weights", (S.TP, S.PP, S.EP), tuple(Output(n, MEMORY) for n in ("first", "middle", "last")), _weights)
KV = Factor(
    "kv_per_sequence",
    (S.TP, S.PP),
    tuple(Output(n, MEMORY) for n in ("first", "middle", "last")),
    lambda ctx, tp, pp: _kv(ctx, tp, pp, held_sequence_tokens(ctx.workload)),
)

# one sequence of the longest a drained set holds (``inference.longest_sequence_tokens``): the ``longest_sequence`` limit
LONGEST_KV = Factor(
    "kv_longest_sequence",
    (S.TP, S.PP),
    tuple(Output(n, MEMORY) for n in ("first", "middle", "last")),
    lambda ctx, tp, pp: _kv(ctx, tp, pp, longest_sequence_tokens(ctx.workload)),
)


def _activations(ctx: ServingContext, tp, micro_batch) -> tuple:
    """The largest activation working set (``inference.activation_bytes``) of the passes a replica runs,
    on an inner stage and on the last (which adds the logits)."""
    passes = decode_passes(ctx.workload, micro_batch)
    return tuple(max(activation_bytes(ctx.model, ctx.workload, tp, p, last) for p in passes) for last in (False, True))


ACTIVATIONS = Factor("activations", (S.TP, S.MICRO_BATCH), (Output("inner", MEMORY), Output("last", MEMORY)), _activations)


def _prefill_pool(ctx: ServingContext, tp, pp, ep, tp_group, ep_group, pp_group) -> tuple:
    """A disaggregated prefill replica: latency and cycle of one pass of ``prefill_prompts_per_pass``
    prompts (``pass_cycle``), and its peak memory holding the prompts of its pp passes in flight
    (``replica_memory``)."""
    wl = ctx.workload
    n = prefill_prompts_per_pass(wl)
    o = FloatOps(ctx, {})
    counts = STAGE_COUNTS.row(*_stage_counts(ctx, pp))
    layers = PASS_LAYERS["prefill"].row(*_pass_layers(ctx, "prefill", tp, ep, n, tp_group, ep_group))
    send = p2p_time_s(ctx.model, ctx.system, wl, prefill_pass(wl, n).tokens, pp_group)
    cycle = pass_cycle(o, counts, layers, send, pp == 1)
    act = ACTIVATIONS.row(*(activation_bytes(ctx.model, wl, tp, prefill_pass(wl, n), last) for last in (False, True)))
    memory = replica_memory(
        o, WEIGHTS.row(*_weights(ctx, tp, pp, ep)), KV.row(*_kv(ctx, tp, pp, wl.input_len)), pp * n, act, pp == 1
    )
    return pp * cycle, cycle, memory


PREFILL_POOL = Factor(
    "prefill_pool",
    (S.PREFILL_TP, S.PREFILL_PP, S.PREFILL_EP, S.PREFILL_TP_GROUP, S.PREFILL_EP_GROUP, S.PREFILL_PP_GROUP),
    (Output("latency", TIME), Output("cycle", TIME, reference=True), Output("memory", MEMORY)),
    _prefill_pool,
)
KV_TRANSFER = Factor(
    "kv_transfer",
    (S.PREFILL_TP, S.PREFILL_PP, S.KV_LINK),
    (Output("time", TIME),),
    lambda ctx, tp, pp, link: kv_transfer_time_s(ctx.model, ctx.system, ctx.workload, tp, pp, link),
)


# a finite set (``workload.requests``): the waves of the pool's dp·batch slots (``inference.request_waves``)
WAVES = Factor(
    "waves", (S.DP, S.BATCH), (Output("waves", COUNT),), lambda ctx, dp, batch: request_waves(ctx.workload.requests, dp * batch)
)


def _prefill_passes(ctx: ServingContext, prefill_dp, dp, batch) -> tuple:
    """A disaggregated set's prefill passes (prefill_dp x ``prefill_prompts_per_pass`` prompts a cycle):
    for the whole set, and for its first decode wave (the slots, or the set if smaller)."""
    per_cycle = prefill_dp * prefill_prompts_per_pass(ctx.workload)
    first = min(ctx.workload.requests, dp * batch)
    return request_waves(ctx.workload.requests, per_cycle), request_waves(first, per_cycle)


PREFILL_PASSES = Factor(
    "prefill_passes", (S.PREFILL_DP, S.DP, S.BATCH), (Output("set", COUNT), Output("first_wave", COUNT)), _prefill_passes
)


def set_makespan(o, ctx: ServingContext, e2e, tpot, prefill):
    """Seconds to serve ``workload.requests`` queued at once, in waves (``inference.request_waves``): each
    wave of static or continuous serving is one request's end-to-end latency. Disaggregated (``prefill``,
    the prefill pool's row), the pools pipeline: after the first request's latency, the first wave's later
    prefill passes and the later decode waves (output_len - 1 TPOTs each), or the set's later prefill
    passes (a cycle each), whichever take longer. Counts are clamped to at least one, their tables' least,
    for the integer backend's bounds."""
    waves = o.maximum(o.lookup(WAVES).waves, 1)
    if prefill is None:
        return o.product(waves, e2e)
    passes = o.lookup(PREFILL_PASSES)
    first_wave, whole_set = o.maximum(passes.first_wave, 1) - 1, o.maximum(passes.set, 1) - 1
    decode_bound = o.product(waves - 1, (ctx.workload.output_len - 1) * tpot) + o.product(first_wave, prefill.cycle)
    return e2e + o.maximum(decode_bound, o.product(whole_set, prefill.cycle))


HOURLY_PRICE = Factor(
    "hourly_price", (S.NUM_GPUS,), (Output("usd_per_hour", Unit.PRICE),), lambda ctx, num_gpus: ctx.hourly_usd[num_gpus]
)


def drains(workload: InferenceWorkload) -> bool:
    """Whether the plan serves a finite set whose lengths vary, staggered and then drained (``drained_makespan``):
    continuous batching only (the parser refuses ``output_len_max`` elsewhere)."""
    return workload.requests is not None and workload.output_len_max is not None and workload.serving == ServingMode.CONTINUOUS


def drained_makespan(o, ctx: ServingContext, ttft, tpot, drain, slots):
    """Seconds to serve ``workload.requests`` queued at once whose answers vary in length, up to ``output_len_max``
    (continuous batching). Admission staggers them, a request taking a slot when another ends (iteration-level
    scheduling: Orca, Yu et al., OSDI 2022), so the batch stays full until the last is admitted: the set's
    requests·output_len tokens at ``slots`` a step, less those left then (``inference.drain_work``: slots·E[R] over many
    waves, the whole set within one), take that many steps of ``tpot``. The drain then
    lasts until the longest answer is done: ``drain`` seconds, ``output_len_max`` steps at the drain's mean batch
    (``inference.drain_batch``: exact for a step time affine in the batch). After the first token's wait ``ttft``.
    Written over ``slots`` so that the integer backend divides once."""
    wl = ctx.workload
    staggered = wl.requests * wl.output_len - drain_work(wl, slots, wl.requests, o)
    total = o.product(slots, ttft + drain) + o.product(tpot, staggered)
    return o.quotient(total, slots, Rounding.DOWN)


def time_reference(model: ModelSpec, workload: InferenceWorkload) -> tuple:
    """The factors whose per-layer times set the integer time unit."""
    factors = tuple(PASS_LAYERS[k] for k in PASS_KINDS[ServingMode(workload.serving)])
    factors += (DRAIN_LAYERS,) if drains(workload) else ()
    return factors + ((PREFILL_POOL,) if workload.serving == ServingMode.DISAGGREGATED else ())


# ---------------------------------------------------------------- the composition


def pass_cycle(o, counts, layers, send, single):
    """A pass's cycle through a replica: its slowest stage (layers x per-layer time, the embedding on
    the first stage, the output layer on the last; one stage holds both when pp = 1) plus the runtime's
    per-pass overhead, which every stage's rank pays (``inference.step_overhead_s``), plus the send of
    its output to the next stage (not overlapped: an upper bound)."""
    first = o.product(counts.first_dense, layers.dense) + o.product(counts.first_moe, layers.moe) + layers.first
    first = first + o.where(single, layers.last, 0)
    middle = o.product(counts.middle_dense, layers.dense) + o.product(counts.middle_moe, layers.moe)
    last = o.product(counts.last_dense, layers.dense) + o.product(counts.last_moe, layers.moe) + layers.last
    slowest = o.maximum(first, middle, last) + layers.overhead
    return o.where(single, slowest, slowest + send)


def replica_memory(o, weights, kv, resident, activations, single):
    """Peak memory per GPU of a replica: per stage kind its weights, ``resident`` sequences' KV cache
    and the activations (the last stage's, with the logits, where one stage is also the last).
    A stage kind the replica lacks weighs nothing and never exceeds the first stage."""
    first = weights.first + o.product(resident, kv.first) + o.where(single, activations.last, activations.inner)
    middle = weights.middle + o.product(resident, kv.middle) + activations.inner
    last = weights.last + o.product(resident, kv.last) + activations.last
    return o.maximum(first, middle, last)


@dataclass
class ServingStep:
    """The quantities of a serving plan (each in the backend's representation)."""

    ttft: object
    tpot: object
    e2e: object
    seconds_per_token: object  # wall seconds per output token of the whole plan (1 / tokens/s)
    seconds_per_request: object  # wall seconds per request in steady state, or of a finite set (1 / requests/s)
    gpu_seconds_per_token: object  # GPU-seconds per output token (1 / tokens/s per GPU)
    peak_memory: object  # bytes per GPU
    minimised: dict  # metric name -> what is minimised for it
    limits: list
    makespan: object = None  # seconds to serve ``workload.requests`` queued at once; None in steady state
    drain: object = None  # seconds of the makespan a set of varied lengths spends draining (``drained_makespan``)
    longest: object = None  # bytes per GPU of one longest sequence of such a set beside the weights (its limit)


def compose(o, ctx: ServingContext) -> ServingStep:
    """The serving plan ``o``'s decisions describe (see the module docstring)."""
    wl = ctx.workload
    mode, out = ServingMode(wl.serving), wl.output_len
    pp, dp, tp = o.decision(S.PP), o.decision(S.DP), o.decision(S.TP)
    batch, micro = o.decision(S.BATCH), o.decision(S.MICRO_BATCH)
    single = o.equals(pp, 1)
    counts = o.lookup(STAGE_COUNTS)
    cycles = {
        kind: pass_cycle(o, counts, o.lookup(PASS_LAYERS[kind]), o.lookup(SENDS[kind]).time, single) for kind in PASS_KINDS[mode]
    }
    peak = replica_memory(o, o.lookup(WEIGHTS), o.lookup(KV), batch, o.lookup(ACTIVATIONS), single)
    slots = o.product(dp, batch)  # sequences decoded at once by the (decode) pool
    if mode is ServingMode.STATIC:
        ttft = o.product(2 * pp - 1, cycles["prefill"])
        tpot = o.product(pp, cycles["decode"])
    elif mode is ServingMode.CONTINUOUS:
        tpot = o.product(pp, cycles["mixed"])
        ttft = o.quotient(o.product(tpot, o.maximum(batch, out)), batch, Rounding.DOWN)
    else:
        prefill = o.lookup(PREFILL_POOL)
        ttft = prefill.latency + o.lookup(KV_TRANSFER).time
        tpot = o.product(pp, cycles["decode"])
        peak = o.maximum(peak, prefill.memory)
    e2e = ttft + (out - 1) * tpot
    makespan = drain = None
    if drains(wl):
        # a finite set of varied lengths: staggered, then drained; its makespan sets the rates
        step = pass_cycle(o, counts, o.lookup(DRAIN_LAYERS), o.lookup(DRAIN_SEND).time, single)
        drain = o.product(o.product(pp, step), wl.output_len_max)
        makespan = drained_makespan(o, ctx, ttft, tpot, drain, slots)
    elif wl.requests is not None:
        # a finite set of identical requests: its makespan sets the rates
        makespan = set_makespan(o, ctx, e2e, tpot, prefill if mode is ServingMode.DISAGGREGATED else None)
    if makespan is not None:
        n_tokens = wl.requests * out
        seconds_per_token = o.quotient(makespan, n_tokens, Rounding.DOWN, fine=True)
        gpu_seconds_per_token = o.product(seconds_per_token, o.decision(S.NUM_GPUS))
        seconds_per_request = o.quotient(makespan, wl.requests, Rounding.DOWN, fine=True)
    elif mode is ServingMode.DISAGGREGATED:
        # the slower pool's seconds per request: max(prefill cycle / (prefill dp x prompts per pass),
        # (output_len - 1) x tpot / (dp x batch)), over one denominator; per output token: / output_len
        prompts = o.decision(S.PREFILL_DP) * prefill_prompts_per_pass(wl)
        slower = o.maximum(o.product(prefill.cycle, slots), o.product((out - 1) * tpot, prompts))
        seconds_per_token = o.quotient(slower, o.product(prompts, slots) * out, Rounding.DOWN, fine=True)
        gpu_seconds_per_token = o.product(seconds_per_token, o.decision(S.NUM_GPUS))
        # each pool is its own Little's law: prefill holds pp passes of prompts for pp cycles, decode
        # dp·batch sequences for (output_len - 1) TPOTs; the slower pool sets the rate
        seconds_per_request = o.quotient(slower, o.product(prompts, slots), Rounding.DOWN, fine=True)
    else:
        # static: dp·batch·output_len tokens per end-to-end latency; continuous: dp·batch per iteration.
        # Per GPU: x num_gpus = tp·pp·dp GPUs, and dp·batch = num_gpus·micro_batch / tp
        busy, tokens = (e2e, out) if mode is ServingMode.STATIC else (tpot, 1)
        seconds_per_token = o.quotient(busy, slots * tokens, Rounding.DOWN, fine=True)
        gpu_seconds_per_token = o.quotient(o.product(busy, tp), micro * tokens, Rounding.DOWN, fine=True)
        # Little's law (Little 1961; the steady state of a closed batch): each of the dp·batch slots
        # (a sequence of the batch and its KV cache) holds one request from admission to its last
        # token, e2e seconds, so the plan completes dp·batch requests per e2e latency. Static: the
        # same as its token throughput / output_len; continuous: the TTFT wait (its prompt prefilled
        # in chunks, its KV cache filling) holds the slot too, so this is at most tokens/s / output_len
        seconds_per_request = o.quotient(e2e, slots, Rounding.DOWN, fine=True)
    limits = [Limit("memory", peak, ctx.system.usable_memory_bytes, MEMORY)]
    longest = None
    if drains(wl):
        # the set's longest request must fit alone beside the weights, whatever the mean holds
        longest = replica_memory(o, o.lookup(WEIGHTS), o.lookup(LONGEST_KV), 1, o.lookup(ACTIVATIONS), single)
        limits.append(Limit("longest_sequence", longest, ctx.system.usable_memory_bytes, MEMORY))
    if wl.max_prefill_tokens is not None:
        # the engine's token budget of a pass holds each micro-batch's decoding and prompt tokens
        limits.append(Limit("token_budget", micro, budget_micro_batch(wl), COUNT))
    if wl.request_rate is not None:
        # the load is sustained when requests/s = 1 / seconds_per_request >= request_rate
        limits.append(Limit("request_rate", seconds_per_request, 1.0 / wl.request_rate, TIME))
    if wl.ttft_slo_s is not None:
        limits.append(Limit("ttft_slo", ttft, wl.ttft_slo_s, TIME))
    if wl.tpot_slo_s is not None:
        limits.append(Limit("tpot_slo", tpot, wl.tpot_slo_s, TIME))
    minimised = {
        "tokens_per_s": seconds_per_token,
        "requests_per_s": seconds_per_request,
        "num_gpus": o.decision(S.NUM_GPUS),
        "tokens_per_s_per_gpu": gpu_seconds_per_token,
        "tokens_per_s_per_user": tpot,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "e2e_latency_s": e2e,
        "peak_memory_gib": peak,
    }
    if ctx.hourly_usd is not None:  # the system's $ per hour: the deployment's cost, whatever its load
        minimised["cost_per_hour_usd"] = o.lookup(HOURLY_PRICE).usd_per_hour
    return ServingStep(
        ttft=ttft,
        tpot=tpot,
        e2e=e2e,
        seconds_per_token=seconds_per_token,
        seconds_per_request=seconds_per_request,
        gpu_seconds_per_token=gpu_seconds_per_token,
        peak_memory=peak,
        minimised=minimised,
        limits=limits,
        makespan=makespan,
        drain=drain,
        longest=longest,
    )


# ---------------------------------------------------------------- one plan, on floats


def plan_decisions(ctx: ServingContext, mapping: ServingMapping) -> dict:
    """Every decision ``compose`` reads, for one (valid) serving plan on ``ctx.system``."""
    pool, system = mapping.decode, ctx.system
    where = serving_layouts(system, pool.tp, pool.pp, pool.ep)
    values = {
        S.NUM_GPUS: system.num_gpus,
        S.POOL_GPUS: pool.num_gpus,
        S.TP: pool.tp,
        S.PP: pool.pp,
        S.EP: pool.ep,
        S.DP: pool.dp,
        S.BATCH: mapping.batch,
        S.MICRO_BATCH: mapping.batch // pool.pp,
        S.TP_GROUP: where["tp"],
        S.EP_GROUP: where["ep"],
        S.PP_GROUP: where["pp"],
    }
    if mapping.prefill is not None:
        p = mapping.prefill
        pre = serving_layouts(system, p.tp, p.pp, p.ep)
        values.update(
            {
                S.PREFILL_GPUS: p.num_gpus,
                S.PREFILL_TP: p.tp,
                S.PREFILL_PP: p.pp,
                S.PREFILL_EP: p.ep,
                S.PREFILL_DP: p.dp,
                S.PREFILL_TP_GROUP: pre["tp"],
                S.PREFILL_EP_GROUP: pre["ep"],
                S.PREFILL_PP_GROUP: pre["pp"],
                S.KV_LINK: kv_link_layout(system),
            }
        )
    return values


def serving_metrics(ctx: ServingContext, q: ServingStep, num_gpus) -> dict:
    """The reported metrics of a serving step; plain arithmetic, numbers and numpy arrays alike."""
    wl, usable = ctx.workload, ctx.system.usable_memory_bytes
    fits = q.peak_memory <= usable
    meets = True
    if wl.ttft_slo_s is not None:
        meets = meets & (q.ttft <= wl.ttft_slo_s)
    if wl.tpot_slo_s is not None:
        meets = meets & (q.tpot <= wl.tpot_slo_s)
    extra = {}
    if wl.request_rate is not None:
        extra["sustains_rate"] = q.seconds_per_request <= 1.0 / wl.request_rate
    budget = next((lim for lim in q.limits if lim.name == "token_budget"), None)
    if budget is not None:
        extra["within_token_budget"] = budget.quantity <= budget.bound
    if wl.requests is not None:
        extra["makespan_s"] = q.makespan
    if q.drain is not None:
        extra["drain_s"] = q.drain
        extra["longest_sequence_gib"] = q.longest / GIB
        fits = fits & (q.longest <= usable)
    return {
        "ttft_s": q.ttft,
        "tpot_s": q.tpot,
        "e2e_latency_s": q.e2e,
        "tokens_per_s": 1.0 / q.seconds_per_token,
        "tokens_per_s_per_gpu": 1.0 / q.gpu_seconds_per_token,
        "tokens_per_s_per_user": 1.0 / q.tpot,
        "requests_per_s": 1.0 / q.seconds_per_request,
        "peak_memory_gib": q.peak_memory / GIB,
        "usable_memory_gib": usable / GIB,
        "fits": fits,
        "meets_slo": meets,
        "num_gpus": num_gpus,
        **extra,
    }


def evaluate_inference(
    model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, mapping: ServingMapping, with_max_batch: bool = True
) -> Evaluation:
    """TTFT, TPOT, end-to-end latency, throughput and peak memory of a serving plan (``compose`` on
    floats), with breakdowns; ``with_max_batch`` adds the largest batch that fits (``max_batch``)."""
    check_serving(model, system, workload, mapping)
    ctx = ServingContext(model, system, workload)
    q = compose(FloatOps(ctx, plan_decisions(ctx, mapping)), ctx)
    pool, batch = mapping.decode, mapping.batch
    metrics = serving_metrics(ctx, q, system.num_gpus)
    metrics["fits"], metrics["meets_slo"] = bool(metrics["fits"]), bool(metrics["meets_slo"])
    for flag in ("sustains_rate", "within_token_budget"):
        if flag in metrics:
            metrics[flag] = bool(metrics[flag])
    metrics.update(batch=batch, concurrent_requests=batch * pool.dp, params_b=params.total_params(model) / 1e9)
    if with_max_batch:
        metrics["max_batch"] = max_batch(model, system, workload, pool)
    return Evaluation(metrics=metrics, breakdown=_breakdown(ctx, mapping, q), stages=[])


def _pool_memory(ctx: ServingContext, pool: PoolMapping, batch: int, kv: Factor, resident: int) -> float:
    """``replica_memory`` of ``pool`` at ``batch`` on floats, ``resident`` sequences of the ``kv`` factor's size."""
    o = FloatOps(ctx, {S.TP: pool.tp, S.PP: pool.pp, S.EP: pool.ep, S.MICRO_BATCH: batch / pool.pp})
    return replica_memory(o, o.lookup(WEIGHTS), o.lookup(kv), resident, o.lookup(ACTIVATIONS), pool.pp == 1)


def pool_peak_memory(ctx: ServingContext, pool: PoolMapping, batch: int) -> float:
    """Peak memory per GPU of a decode (or colocated) pool serving ``batch`` per replica (``replica_memory``)."""
    return _pool_memory(ctx, pool, batch, KV, batch)


def pool_longest_memory(ctx: ServingContext, pool: PoolMapping, batch: int) -> float:
    """Memory per GPU of one longest request of a drained set beside the weights and a ``batch``'s activations
    (the ``longest_sequence`` limit); 0 where the set does not drain."""
    return _pool_memory(ctx, pool, batch, LONGEST_KV, 1) if drains(ctx.workload) else 0.0


def max_batch(model: ModelSpec, system: SystemSpec, workload: InferenceWorkload, pool: PoolMapping, limit: int = 1 << 16) -> int:
    """The largest batch (a multiple of pp) whose KV cache and activations fit next to the weights on
    every stage of ``pool`` (``pool_peak_memory``), and beside which a drained set's longest request fits
    (``pool_longest_memory``), at most ``limit``; 0 when not even pp do."""
    ctx = ServingContext(model, system, workload)

    def fits(batch):
        usable = system.usable_memory_bytes
        return pool_peak_memory(ctx, pool, batch) <= usable and pool_longest_memory(ctx, pool, batch) <= usable

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


# ---------------------------------------------------------------- breakdowns (reporting)


def _pass_breakdown(ctx: ServingContext, pool: PoolMapping, p: Pass) -> dict:
    """A pass's latency (pp cycles) by component, seconds: the slowest stage's layers, edges and send."""
    model, system, wl = ctx.model, ctx.system, ctx.workload
    layouts = serving_layouts(system, pool.tp, pool.pp, pool.ep)
    dense = layer_time(model, system, wl, pool.tp, pool.ep, p, False, layouts)
    moe = layer_time(model, system, wl, pool.tp, pool.ep, p, True, layouts) if model.moe is not None else None
    edges = edge_times(model, system, wl, pool.tp, p, pool.ep)

    def stage_s(s):
        return (
            s.dense * dense.total
            + (s.moe * moe.total if s.moe else 0.0)
            + (edges[0] if s.first else 0.0)
            + (edges[1] if s.last else 0.0)
        )

    slowest = max(stage_layouts(model, pool.pp), key=stage_s)
    out = {}
    for name in ("gemm", "attention", "elementwise", "tp_comm", "ep_comm"):
        value = slowest.dense * getattr(dense, name) + (slowest.moe * getattr(moe, name) if slowest.moe else 0.0)
        out[{"tp_comm": "comm/tp", "ep_comm": "comm/ep"}.get(name, f"compute/{name}")] = value * pool.pp
    out["compute/embedding_logits"] = pool.pp * ((edges[0] if slowest.first else 0.0) + (edges[1] if slowest.last else 0.0))
    out["runtime/step_overhead"] = pool.pp * step_overhead_s(system)
    out["comm/pp"] = pool.pp * p2p_time_s(model, system, wl, p.tokens, layouts["pp"]) if pool.pp > 1 else 0.0
    return out


def _memory_breakdown(ctx: ServingContext, pool: PoolMapping, resident: int, cached: int, passes: list) -> tuple:
    """(total, stage index, components) of a pool's peak stage: weights, KV cache, the headroom the
    engine leaves outside its KV pool, activations."""
    model, wl = ctx.model, ctx.workload
    best = None
    for i, s in enumerate(stage_layouts(model, pool.pp)):
        kv = resident * kv_cache.kv_bytes_per_sequence(model, wl.kv_precision, pool.tp, s.layers, cached, wl.kv_block_tokens)
        act = max(activation_bytes(model, wl, pool.tp, p, s.last) for p in passes)
        parts = {
            "weights": stage_weight_bytes(model, wl, s, pool.tp, pool.ep),
            "kv_cache": kv,
            "kv_headroom": kv_cache.kv_pool_bytes(kv, wl.kv_cache_memory_fraction) - kv,
            "activations": act,
        }
        if best is None or sum(parts.values()) > best[0]:
            best = (sum(parts.values()), i, parts)
    return best


def _breakdown(ctx: ServingContext, mapping: ServingMapping, q: ServingStep) -> dict:
    wl, pool = ctx.workload, mapping.decode
    micro = mapping.batch / pool.pp
    mode = ServingMode(wl.serving)
    if mode is ServingMode.STATIC:
        tpot = _pass_breakdown(ctx, pool, decode_pass(wl, micro))
        ttft = {k: v * (2 * pool.pp - 1) / pool.pp for k, v in _pass_breakdown(ctx, pool, prefill_pass(wl, micro)).items()}
    elif mode is ServingMode.CONTINUOUS:
        tpot = _pass_breakdown(ctx, pool, mixed_pass(wl, micro))
        ttft = {k: v * q.ttft / q.tpot for k, v in tpot.items()}
    else:
        tpot = _pass_breakdown(ctx, pool, decode_pass(wl, micro))
        n = prefill_prompts_per_pass(wl)
        ttft = _pass_breakdown(ctx, mapping.prefill, prefill_pass(wl, n))
        ttft["comm/kv_transfer"] = q.ttft - sum(ttft.values())
    total, stage, parts = _memory_breakdown(ctx, pool, mapping.batch, held_sequence_tokens(wl), decode_passes(wl, micro))
    where = "decode"
    if mapping.prefill is not None:
        n = prefill_prompts_per_pass(wl)
        pre = _memory_breakdown(ctx, mapping.prefill, mapping.prefill.pp * n, wl.input_len, [prefill_pass(wl, n)])
        if pre[0] > total:
            total, stage, parts = pre
            where = "prefill"
    return {
        "tpot_s": tpot,
        "ttft_s": ttft,
        "memory_gib": {k: v / GIB for k, v in parts.items()},
        "peak_memory_pool": where,
        "peak_memory_stage": stage,
    }
