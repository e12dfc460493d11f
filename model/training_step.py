"""The training step, composed once: step time, memory peak and the planner's objectives.

``compose(o, ctx)`` writes how the terms of ``training.py`` and ``memory.py`` combine into one
step of 1F1B (or interleaved 1F1B) pipelined, data-parallel training (Narayanan et al. SC'21),
against the operations of ``ops`` - so that the same function gives ``evaluate`` its numbers
(``FloatOps``), enumerates a space (numpy) and is the CP-SAT model of ``solve`` (integers).

The pipeline has three kinds of stage: the first (the embedding, the model's leading dense layers
and ``first_stage_layers`` - k of them dense), the middle ones (``middle_stage_layers`` each, equal),
and the last (``last_stage_layers`` and the output layer); one stage holds everything when pp = 1.

- stage time per micro-batch = its layers x per-layer forward+backward + its edge extras
  (embedding, output layer and loss) + vpp boundary sends (pp > 1);
- pipeline = m x slowest stage + (sum of the stages - slowest) / vpp (``pipeline.pipeline_parts``);
- data-parallel traffic of stage 0, which runs the step's last backward, is exposed beyond the
  compute it overlaps with (Megatron's --overlap-grad-reduce / --overlap-param-gather, chunk by chunk
  under interleaving: ``pipeline.exposed_dp_traffic``; ZeRO-3's gathers per micro-batch,
  ``pipeline.zero3_microbatch_exposure``), slowing the compute
  it overlaps (``pipeline.contended_exposure``), and stage 0's optimizer step ends it;
- memory of a stage = its model states + in-flight chunks x its layers' activations / vpp + the
  recomputation working set + the embedding (first) or logits (last) buffers; the peak is the
  largest stage, a middle stage at its first position (it holds the most chunks).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple

from . import compute, memory, params
from .choices import BackwardPrefetch, CpComm, Recompute, TrainingObjective
from .decisions import GROUP_KEYS
from .decisions import TrainingDecision as D
from .evaluation import GIB, Evaluation
from .goodput import BASIS_POINTS, basis_points
from .offload import offloaded_activation_bytes, offloads
from .ops import Factor, FloatOps, ImpliedBound, Limit, Output, Rounding, Unit
from .pipeline import (
    contended_exposure,
    dualpipe_bubble_share,
    dualpipe_parts,
    exposed_dp_traffic,
    pipeline_parts,
    stage_layer_counts,
    zero3_microbatch_exposure,
)
from .placement import group_layouts
from .specs import Mapping, ModelSpec, SystemSpec, Workload
from .training import (
    activation_offload_exposed_s,
    check_mapping,
    cp_allgather_buffer_bytes,
    dp_comm_times_s,
    edge_stage_times,
    layer_times,
    layer_tokens,
    optimizer_owned_params,
    pipeline_p2p_time_s,
    stage_expert_params,
    stage_host_bytes,
    stage_params,
    stage_state_bytes,
    straggler_stretch,
    weight_offload_copy_time_s,
)


@dataclass(frozen=True)
class TrainingContext:
    """What the factors of a training problem read besides the decisions: the model, the system
    (its device and network; one device count's, every count shares them), the workload, the
    hourly price of each device count per hour of training (its price over the run's goodput) when a
    cost is asked, the step time ``max_run_hours`` allows if the run trained all the time, and the
    wall-clock seconds per 10^4 s of training on each device count (``goodput.stretch_basis_points``)."""

    model: ModelSpec
    system: SystemSpec
    workload: Workload
    hourly_usd: dict | None = field(default=None, compare=False)
    max_step_s: float | None = None
    run_stretch: dict | None = field(default=None, compare=False)
    # host memory each GPU may fill with what it offloads (``SystemSpec.host_memory_per_gpu_bytes``) where the plans
    # may offload and the system file gives it; None: no host limit composed
    host_limit_bytes: float | None = None


def lead_layers(model: ModelSpec) -> int:
    """Dense layers before the first MoE layer, all on the first stage (0 for a dense model)."""
    return model.moe.first_dense_layers if model.moe is not None else 0


# ---------------------------------------------------------------- factors

TIME, MEMORY, COUNT = Unit.TIME, Unit.MEMORY, Unit.COUNT
LAYER_OUTPUTS = (
    Output("total", TIME, reference=True),
    Output("fwd", TIME),
    Output("bwd", TIME),
    Output("activation", MEMORY),
    Output("working", MEMORY),
    Output("offload", TIME),
    Output("offloaded", MEMORY),
)


def _layer(
    ctx, moe_layer, tp, cp, micro_batch, sp, recompute, ep, layouts, cp_comm, tp_comm_overlap, etp=1, module_offload=False
):
    """One layer per micro-batch: forward+backward, forward and backward seconds (``layer_times``),
    the activation bytes it keeps, the recomputation working set (``memory``), the seconds
    offloading its activations leaves exposed (``training.activation_offload_exposed_s``), and the bytes
    fine-grained offloading keeps in host memory (``offload.offloaded_activation_bytes``)."""
    model, system, wl = ctx.model, ctx.system, ctx.workload
    lt = layer_times(
        model,
        system,
        wl,
        tp,
        cp,
        micro_batch,
        sp,
        recompute,
        ep,
        moe_layer,
        layouts,
        cp_comm,
        etp,
        tp_comm_overlap,
        module_offload,
    )
    tokens = layer_tokens(wl, tp, cp, micro_batch, sp, moe_layer, etp)
    layer = dict(
        model=model,
        micro_batch=micro_batch,
        seq_len=wl.seq_len,
        tp=tp,
        cp=cp,
        sp=sp,
        attention=wl.attention,
        gemm_input_bytes=tokens.gemm_input_bytes,
        moe_layer=moe_layer,
        etp=etp,
        modules=wl.recompute_modules,
        permuted_bytes=tokens.permuted_bytes,
        attention_input_bytes=tokens.attention_input_bytes,
    )
    act = memory.activation_bytes_per_layer(recompute=recompute, **layer)
    working = memory.recompute_working_bytes(recompute, memory.activation_bytes_per_layer(recompute=Recompute.NONE, **layer))
    if wl.attention == "standard":  # the backward's s x s tensors of a materialised softmax
        working += (
            memory.score_backward_bytes(model, micro_batch, wl.seq_len / cp, wl.seq_len, recompute, wl.recompute_modules) / tp
        )
    if cp_comm == CpComm.ALLGATHER:  # the backward's gathered K and V and the full dK and dV of the layer in flight
        working += sum(cp_allgather_buffer_bytes(model, wl, tp, cp, micro_batch))
    # fine-grained offloading: the offloaded inputs wait in host memory, but the layer in flight holds its own
    moved = offloaded_activation_bytes(model, wl, tokens, recompute, bool(module_offload))
    act, working = act - min(act, moved.freed), working + moved.copied  # the layer in flight reloads what was copied
    offload = activation_offload_exposed_s(ctx.system.device, act, lt.forward, lt.backward)
    return lt.total, lt.forward, lt.backward, act, working, offload, moved.copied


def _lead_layer(ctx, tp, cp, micro_batch, sp, recompute, tp_group, cp_group, cp_comm, tp_comm_overlap, module_offload):
    """A dense layer (``_layer``) with its groups where they sit."""
    layouts = {"tp": tp_group, "cp": cp_group}
    return _layer(ctx, False, tp, cp, micro_batch, sp, recompute, 1, layouts, cp_comm, tp_comm_overlap, 1, module_offload)


def _moe_layer(
    ctx, tp, cp, micro_batch, sp, recompute, ep, tp_group, cp_group, ep_group, cp_comm, etp, etp_group, tp_overlap, module_offload
):
    """An MoE layer (``_layer``) with its groups where they sit."""
    layouts = {"tp": tp_group, "cp": cp_group, "ep": ep_group, "etp": etp_group}
    return _layer(ctx, True, tp, cp, micro_batch, sp, recompute, ep, layouts, cp_comm, tp_overlap, etp, module_offload)


def _lead_layer_as_chosen(ctx, *keys):
    """``_lead_layer`` at LEAD_LAYER's keys, the last of them the modules selective recomputation redoes."""
    return _lead_layer(with_choices(ctx, recompute_modules=keys[-1]), *keys[:-1])


def _moe_layer_as_chosen(ctx, *keys):
    """``_moe_layer`` at MOE_LAYER's keys, the last three of them the dispatcher its tokens are sent by, whether
    their all-to-all is overlapped and the modules selective recomputation redoes."""
    return _moe_layer(with_choices(ctx, *keys[-3:]), *keys[:-3])


def with_choices(ctx: TrainingContext, dispatcher=None, a2a_overlap=None, recompute_modules=None) -> TrainingContext:
    """``ctx`` with the mapping's choices of what the workload states in its workload (``Workload.with_choices``)."""
    workload = ctx.workload.with_choices(dispatcher, a2a_overlap, recompute_modules)
    return ctx if workload is ctx.workload else dataclasses.replace(ctx, workload=workload)


LAYER_KEYS = (D.TP, D.CP, D.MICRO_BATCH, D.SP, D.RECOMPUTE)  # what every layer's time and memory depend on
LEAD_LAYER = Factor(
    "lead_layer",
    (*LAYER_KEYS, D.TP_GROUP, D.CP_GROUP, D.CP_COMM, D.TP_COMM_OVERLAP, D.MODULE_OFFLOAD, D.RECOMPUTE_MODULES),
    LAYER_OUTPUTS,
    _lead_layer_as_chosen,
)
MOE_LAYER = Factor(
    "moe_layer",
    (
        *LAYER_KEYS,
        D.EP,
        D.TP_GROUP,
        D.CP_GROUP,
        D.EP_GROUP,
        D.CP_COMM,
        D.ETP,
        D.ETP_GROUP,
        D.TP_COMM_OVERLAP,
        D.MODULE_OFFLOAD,
        D.MOE_DISPATCHER,
        D.MOE_A2A_OVERLAP,
        D.RECOMPUTE_MODULES,
    ),
    LAYER_OUTPUTS,
    _moe_layer_as_chosen,
)


def _edges(ctx: TrainingContext, tp, cp, micro_batch) -> tuple:
    e = edge_stage_times(ctx.model, ctx.system, ctx.workload, tp, cp, micro_batch)
    logits = memory.logits_activation_bytes(ctx.model, micro_batch, ctx.workload.seq_len, tp, cp)
    return e.first_fwd, e.first_bwd, e.last_fwd, e.last_bwd, logits


EDGES = Factor(
    "edges",
    (D.TP, D.CP, D.MICRO_BATCH),
    (
        Output("first_fwd", TIME),
        Output("first_bwd", TIME),
        Output("last_fwd", TIME),
        Output("last_bwd", TIME),
        Output("logits_activation", MEMORY),
    ),
    _edges,
)
EMBEDDING_ACTIVATION = Factor(
    "embedding_activation",
    (D.TP, D.CP, D.MICRO_BATCH, D.PP),
    (Output("bytes", MEMORY),),
    lambda ctx, tp, cp, micro_batch, pp: memory.embedding_activation_bytes(
        ctx.model, micro_batch, ctx.workload.seq_len, tp, cp, pp
    ),
)
P2P = Factor(
    "p2p",
    (D.TP, D.CP, D.MICRO_BATCH, D.PP_GROUP),
    (Output("time", TIME),),
    lambda ctx, tp, cp, micro_batch, pp_group: pipeline_p2p_time_s(
        ctx.model, ctx.system, ctx.workload, tp, cp, micro_batch, pp_group
    ),
)


def _state_mapping(tp, zero, dp, cp, ep, etp, optimizer_offload, weight_offload) -> Mapping:
    """The mapping the model states of one pipeline stage's parts depend on (the other degrees set to 1)."""
    return Mapping(
        tp=tp,
        pp=1,
        dp=dp,
        cp=cp,
        ep=ep,
        micro_batch=1,
        zero=zero,
        etp=etp,
        optimizer_offload=optimizer_offload,
        weight_offload=weight_offload,
    )


def _states(ctx: TrainingContext, tp, zero, dp, cp, ep, etp, optimizer_offload=0.0, weight_offload=False) -> tuple:
    """Model states per GPU (weights, gradients, optimizer; ``training.stage_state_bytes``) of one lead
    layer, one body layer (routed experts included), the embedding, the output layer when it shares the
    first stage (pp = 1) or sits on the last (with the tables that stage keeps, ``state_part_params``), and ZeRO-3's
    gather buffers, bytes (what ``optimizer_offload`` and ``weight_offload`` keep on the host aside). States are
    linear in the parameters they hold."""
    model, wl = ctx.model, ctx.workload
    m = _state_mapping(tp, zero, dp, cp, ep, etp, optimizer_offload, weight_offload)

    def state(p, pe=0.0):
        return sum(v for k, v in stage_state_bytes(model, wl, m, p, pe).items() if k != "zero3_buffers")

    moe = 1 if model.moe is not None else 0
    lead, body, embedding, output_first, output_last = state_part_params(model, tp, wl.mtp_layers)
    zero3 = stage_state_bytes(model, wl, m, lead).get("zero3_buffers", 0.0)
    return (
        state(lead),
        state(body, stage_expert_params(model, moe, ep, etp)),
        state(embedding),
        state(output_first),
        state(output_last),
        zero3,
    )


STATES = Factor(
    "states",
    (D.TP, D.ZERO, D.DP, D.CP, D.EP, D.ETP, D.OPTIMIZER_OFFLOAD, D.WEIGHT_OFFLOAD),
    tuple(Output(n, MEMORY) for n in ("lead", "body", "embedding", "output_first", "output_last", "zero3")),
    _states,
)


def _host_states(ctx: TrainingContext, tp, zero, dp, cp, ep, etp, optimizer_offload, weight_offload) -> tuple:
    """What the parts ``_states`` counts keep in host memory per GPU (``training.stage_host_bytes``: the
    offloaded share of the optimizer state a rank owns, ZeRO-3's host weight shard), bytes; linear in the
    parameters, as the states are."""
    model, wl = ctx.model, ctx.workload
    m = _state_mapping(tp, zero, dp, cp, ep, etp, optimizer_offload, weight_offload)
    moe = 1 if model.moe is not None else 0
    lead, body, embedding, output_first, output_last = state_part_params(model, tp, wl.mtp_layers)
    return (
        stage_host_bytes(wl, m, lead),
        stage_host_bytes(wl, m, body, stage_expert_params(model, moe, ep, etp)),
        stage_host_bytes(wl, m, embedding),
        stage_host_bytes(wl, m, output_first),
        stage_host_bytes(wl, m, output_last),
    )


HOST_STATES = Factor(
    "host_states",
    STATES.keys,
    tuple(Output(n, MEMORY) for n in ("lead", "body", "embedding", "output_first", "output_last")),
    _host_states,
)


def state_part_params(model: ModelSpec, tp, mtp_layers: int = 0) -> tuple:
    """Parameters besides routed experts, per GPU, of the parts the model states are counted by: one lead
    layer, one body layer, the embedding, the output layer when it shares the first stage (pp = 1) and on the
    last, with the embedding that stage keeps for tied embeddings or MTP modules (``training.stage_params``)."""
    moe = 1 if model.moe is not None else 0
    embedding = stage_params(model, 0, True, False, tp)
    return (
        stage_params(model, 1, False, False, tp),
        stage_params(model, 1, False, False, tp, moe),
        embedding,
        stage_params(model, 0, True, True, tp) - embedding,
        stage_params(model, 0, False, True, tp, 0, mtp_layers),
    )


def _gradient_copies(ctx: TrainingContext, tp, etp) -> tuple:
    """The gradients' conversion copies a framework makes on the optimizer's path, bytes per GPU: the
    data-parallel reduction's copy (``memory.reduce_copy_bytes`` at ``workload.grad_reduce_copy_bytes``) of each of
    the parts ``state_part_params`` counts (a stage's flat group holds its parts), and the accumulation's copy
    (``memory.accumulate_copy_bytes`` at ``workload.grad_accumulate_copy_bytes``) of the largest module of a stage
    that holds the embedding or the output layer, and of one that holds layers only."""
    model, wl = ctx.model, ctx.workload
    reduced = tuple(memory.reduce_copy_bytes(p, wl.grad_reduce_copy_bytes) for p in state_part_params(model, tp, wl.mtp_layers))
    accumulated = tuple(
        memory.accumulate_copy_bytes(params.largest_module_params_per_gpu(model, tables, tp, etp), wl.grad_accumulate_copy_bytes)
        for tables in (True, False)
    )
    return reduced + accumulated


GRADIENT_COPIES = Factor(
    "gradient_copies",
    (D.TP, D.ETP),
    tuple(
        Output(n, MEMORY)
        for n in ("lead", "body", "embedding", "output_first", "output_last", "accumulate_edge", "accumulate_layers")
    ),
    _gradient_copies,
)


class StageCopy(NamedTuple):
    """A stage's gradient copies (``GRADIENT_COPIES``): the reduction's, bytes per lead layer, per body layer and
    of its edges (embedding, output layer, MTP modules), and the accumulation's of its largest module; None for
    a copy the workload does not make."""

    lead: object
    body: object
    extra: object
    accumulate: object


def _dp_group_step(
    ctx: TrainingContext, zero, params_on_gpu: float, group, optimizer_offload=0.0, weight_offload=False, ctas=None
) -> tuple:
    """(gradient reduction, parameter gather, optimizer step) seconds of one data-parallel group's
    share of the step (``training.dp_comm_times_s``, ``compute.optimizer_step_time_s`` on the
    parameters this rank owns). The optimizer streams each owned parameter's bytes once, so the
    step over a stage's dense and expert parameters is the sum of the two; ``optimizer_offload`` of
    them step on the host; with ``weight_offload`` each ZeRO-3 pass also copies the rank's weight shard
    up from the host before its gathers (``training.weight_offload_copy_time_s``), in series with them. The
    traffic runs on at most ``ctas`` NCCL channels: the workload's cap on the data-parallel communicator for the
    dp·cp group, none for the expert data-parallel group, which has its own communicator."""
    grads, gather = dp_comm_times_s(ctx.system, ctx.workload, zero, params_on_gpu, group, ctas)
    owned = optimizer_owned_params(zero, params_on_gpu, group.n)
    wl = ctx.workload
    step = compute.optimizer_step_time_s(ctx.system.device, owned, wl.grad_bytes, wl.adam_moment_bytes, optimizer_offload)
    if weight_offload:
        gather = gather + weight_offload_copy_time_s(ctx.system.device, owned)
    return grads, gather, step


def _first_stage_dp(
    ctx: TrainingContext, tp, zero, single_stage, first_stage_layers, dp_group, optimizer_offload=0.0, weight_offload=False
) -> tuple:
    """Stage 0's data-parallel traffic and optimizer step over the dp·cp group, seconds, for the
    parameters it holds besides routed experts (``stage_held_params``: the output layer and the MTP
    modules too when it is the only stage)."""
    p, _ = stage_held_params(ctx, first_stage_layers, lead_layers(ctx.model), True, bool(single_stage), tp)
    out = _dp_group_step(ctx, zero, p, dp_group, optimizer_offload, weight_offload, ctx.workload.nccl_max_ctas.dp)
    # the input embedding's share of it, which the first model chunk alone reduces and gathers (exposed_dp_traffic)
    embedding = params.input_embedding_params(ctx.model) / tp
    edge = dp_comm_times_s(ctx.system, ctx.workload, zero, embedding, dp_group, ctx.workload.nccl_max_ctas.dp)
    return (*out, *edge)


def _first_stage_expert_dp(
    ctx: TrainingContext, zero, ep, etp, single_stage, first_stage_layers, edp_group, optimizer_offload=0.0, weight_offload=False
) -> tuple:
    """The same for stage 0's routed experts, over the expert data-parallel group (tp·dp·cp/(ep·etp)), seconds."""
    _, pe = stage_held_params(ctx, first_stage_layers, lead_layers(ctx.model), True, bool(single_stage), 1, ep, etp)
    return _dp_group_step(ctx, zero, pe, edp_group, optimizer_offload, weight_offload)


def stage_held_params(ctx: TrainingContext, layers: int, lead_count: int, first: bool, last: bool, tp, ep=1, etp=1) -> tuple:
    """(parameters besides routed experts, routed-expert parameters) one GPU of a stage holds: its
    ``layers`` (``lead_count`` of them dense lead layers), the embedding on the first stage, the output
    layer and the MTP modules, with their embedding copy, on the last (``stage_params``,
    ``stage_expert_params``)."""
    mtp = ctx.workload.mtp_layers if last else 0
    moe_layers = layers - lead_count + mtp if ctx.model.moe is not None else 0
    p = stage_params(ctx.model, layers + mtp, first, last, tp, moe_layers, mtp)
    return p, stage_expert_params(ctx.model, moe_layers, ep, etp)


def _last_stage_dp(ctx: TrainingContext, tp, zero, last_stage_layers, dp_group, optimizer_offload=0.0, weight_offload=False):
    """The last stage's data-parallel traffic and optimizer step over the dp·cp group, seconds, for what
    it holds besides routed experts (``stage_held_params``): under DualPipe, ranks 0 and pp-1 hold it
    beside the first stage (``_first_stage_dp``)."""
    p, _ = stage_held_params(ctx, last_stage_layers, 0, False, True, tp)
    return _dp_group_step(ctx, zero, p, dp_group, optimizer_offload, weight_offload, ctx.workload.nccl_max_ctas.dp)


def _last_stage_expert_dp(
    ctx: TrainingContext, zero, ep, etp, last_stage_layers, edp_group, optimizer_offload=0.0, weight_offload=False
) -> tuple:
    """The same for the last stage's routed experts, over the expert data-parallel group, seconds."""
    _, pe = stage_held_params(ctx, last_stage_layers, 0, False, True, 1, ep, etp)
    return _dp_group_step(ctx, zero, pe, edp_group, optimizer_offload, weight_offload)


# Each factor on the decisions its term reads: the dense traffic does not see ep, the experts' not tp.
DP_STEP_OUTPUTS = (Output("grads", TIME), Output("gather", TIME), Output("optimizer", TIME))
FIRST_STAGE_DP = Factor(
    "first_stage_dp",
    (D.TP, D.ZERO, D.SINGLE_STAGE, D.FIRST_STAGE_LAYERS, D.DP_GROUP, D.OPTIMIZER_OFFLOAD, D.WEIGHT_OFFLOAD),
    DP_STEP_OUTPUTS + (Output("embedding_grads", TIME), Output("embedding_gather", TIME)),
    _first_stage_dp,
)
FIRST_STAGE_EXPERT_DP = Factor(
    "first_stage_expert_dp",
    (D.ZERO, D.EP, D.ETP, D.SINGLE_STAGE, D.FIRST_STAGE_LAYERS, D.EDP_GROUP, D.OPTIMIZER_OFFLOAD, D.WEIGHT_OFFLOAD),
    DP_STEP_OUTPUTS,
    _first_stage_expert_dp,
)
LAST_STAGE_DP = Factor(
    "last_stage_dp",
    (D.TP, D.ZERO, D.LAST_STAGE_LAYERS, D.DP_GROUP, D.OPTIMIZER_OFFLOAD, D.WEIGHT_OFFLOAD),
    DP_STEP_OUTPUTS,
    _last_stage_dp,
)
LAST_STAGE_EXPERT_DP = Factor(
    "last_stage_expert_dp",
    (D.ZERO, D.EP, D.ETP, D.LAST_STAGE_LAYERS, D.EDP_GROUP, D.OPTIMIZER_OFFLOAD, D.WEIGHT_OFFLOAD),
    DP_STEP_OUTPUTS,
    _last_stage_expert_dp,
)
CHUNK_LIMITS = Factor(
    "chunk_limits",
    (D.PP, D.VPP, D.MOE_A2A_OVERLAP),
    (Output("first", COUNT), Output("middle", COUNT), Output("last", COUNT)),
    lambda ctx, pp, vpp, overlap: (
        memory.in_flight_chunk_limit(0, pp, vpp, overlap),
        memory.in_flight_chunk_limit(min(1, pp - 1), pp, vpp, overlap),
        memory.in_flight_chunk_limit(pp - 1, pp, vpp, overlap),
    ),
)
RUN_STRETCH = Factor(
    "run_stretch", (D.NUM_GPUS,), (Output("basis_points", COUNT),), lambda ctx, num_gpus: ctx.run_stretch[num_gpus]
)
STRAGGLE = Factor(
    "straggle",
    (D.NUM_GPUS,),
    (Output("basis_points", COUNT),),
    lambda ctx, num_gpus: basis_points(straggler_stretch(num_gpus, ctx.system.straggler)),
)
DUALPIPE_BUBBLE = Factor(
    "dualpipe_bubble",
    (D.RECOMPUTE,),
    (Output("share_bp", COUNT),),
    lambda ctx, recompute: basis_points(dualpipe_bubble_share(recompute)),
)
HOURLY_PRICE = Factor(
    "hourly_price", (D.NUM_GPUS,), (Output("usd_per_hour", Unit.PRICE),), lambda ctx, num_gpus: ctx.hourly_usd[num_gpus]
)


def layer_factors(model: ModelSpec) -> tuple[Factor, Factor]:
    """(lead, body) layer factors: the leading dense layers and the MoE layers; a dense model's
    layers are all 'body' layers of the dense kind."""
    return LEAD_LAYER, (MOE_LAYER if model.moe is not None else LEAD_LAYER)


# ---------------------------------------------------------------- the composition


@dataclass
class TrainingStep:
    """The quantities of one step (each in the backend's representation)."""

    step: object  # seconds
    peak_memory: object  # bytes per GPU
    busy: object  # m x slowest stage
    bubble: object
    dp_exposed: object
    optimizer: object
    stragglers: object  # what waiting for the slowest GPU adds to the step
    stage_time: dict  # first / middle / last: seconds per micro-batch
    stage_memory: dict  # first / middle / last: bytes per GPU
    minimised: dict  # TrainingObjective -> what is minimised for it
    limits: list  # ops.Limit
    memory_parts: MemoryParts  # the stages' memory by moment, what ``device_memory`` reads
    host_memory: object = None  # host bytes per GPU of the fullest stage (or DualPipe rank); None: not composed


class MemoryParts(NamedTuple):
    """The stages' memory by moment (``StageMemory``) as ``compose`` builds them, for ``device_memory``: the first,
    a middle stage at its first position and the last; under DualPipe the middle stage at 2 chunks in flight
    (``middle_pair``, else None); and the conditions: a single stage, middle stages, DualPipe (or False)."""

    first: StageMemory
    middle: StageMemory
    last: StageMemory
    middle_pair: StageMemory | None
    single: object
    has_middle: object
    dual: object


class MtpTerms(NamedTuple):
    """What the last stage's multi-token-prediction modules add (``mtp_terms``)."""

    fwd: object  # seconds per micro-batch
    bwd: object
    activation: object  # bytes: one micro-batch of their activations and logits


def mtp_terms(mtp: int, edge, body) -> MtpTerms:
    """``mtp`` multi-token-prediction modules on the last stage (DeepSeek-V3 Sec. 2.2), written against
    ``ops``: each is one more layer of the body's kind with its own pass through the (shared) output
    layer and loss, forward and backward (its layer's recomputation too, as in ``body.total``), and one
    micro-batch of their activations and logits (their states: ``edge_parts``). Zeros without MTP."""
    if not mtp:
        return MtpTerms(0, 0, 0)
    return MtpTerms(
        fwd=mtp * (edge.last_fwd + body.fwd),
        bwd=mtp * (edge.last_bwd + body.total - body.fwd),
        activation=mtp * (edge.logits_activation + body.activation),
    )


def edge_parts(o, row, ctx: TrainingContext, first: bool, last):
    """What a stage's edges add to a quantity counted by parts (``row``: a factor row with ``embedding``,
    ``output_first``, ``output_last`` and ``body``; the model states, the reduction's gradient copy): on the first
    stage the embedding and, where it is the only one (``last``, a bool or a backend condition), the output layer
    and the workload's multi-token-prediction modules, each a body layer; on the last the output layer with the
    embedding that stage keeps (``output_last``: ``training.last_stage_embedding_params``) and the MTP modules;
    nothing on a middle stage."""
    mtp = ctx.workload.mtp_layers
    modules = mtp * row.body if mtp else 0
    if first:
        return row.embedding + o.where(last, row.output_first + modules, 0)
    if last:
        return row.output_last + modules
    return 0


def stage_time(o, lead_count: int, body_count, lead, body, extra, sends):
    """Seconds per micro-batch of a stage holding ``lead_count`` lead layers and ``body_count`` body
    layers, ``extra`` (its embedding and output layer) and ``sends`` (its boundary p2p)."""
    t = o.product(body_count, body.total) + extra + sends
    return t + lead_count * lead.total if lead_count else t


def least_peak_memory(body):
    """A floor on the peak memory per GPU of every mapping whose body layers have these per-layer
    terms (``body``: a ``LAYER_OUTPUTS`` row of floats or of arrays), bytes: some stage holds a body
    layer, keeps its activations for at least one in-flight chunk (a chunk holds at least one layer)
    and needs its recomputation working set (``stage_memory_parts``). The planner drops the layer shapes
    this floor already puts over the device's memory."""
    return body.activation + body.working


def dualpipe_rank_memory(own, mirrored):
    """Bytes per GPU of a DualPipe rank holding two stages: the two stages' peaks (``stage_memory_parts``) at the chunks
    each keeps in flight, pp - i of stage i and i + 1 of stage pp-1-i, each stage's 1F1B count (DeepSeek-V3
    Table 2: pp + 1 in all; DualPipe.step's warm-up), with both working sets, since DualPipe runs a forward
    chunk of one direction beside a backward chunk of the other (its F&B), so a recomputation and ZeRO-3's
    gathers can be live for both at once. So a rank holds what its two stages hold under 1F1B."""
    return own + mirrored


class StageMemory(NamedTuple):
    """A stage's (or a DualPipe rank's) memory by moment, bytes per GPU: its model states, its backward's peak
    (the states, in-flight activations, working set and buffers), the reduction's gradient copy (None without
    one) and its peak (``stage_memory_parts``; a DualPipe rank's: its two stages' together, ``stage_pair``)."""

    held: object
    backward: object
    copy: object
    total: object


def stage_memory_parts(
    o,
    lead_count: int,
    body_count,
    lead,
    body,
    states,
    extra_states,
    chunk_limit,
    microbatch_chunks,
    vpp,
    extra_activations,
    offload=0,
    copy: StageCopy | None = None,
) -> StageMemory:
    """A stage's memory per GPU, bytes (``StageMemory``). Its backward's peak: model states of its layers and
    edges, the activations of its in-flight chunks (each 1/vpp of its layers; ``memory.in_flight_chunks``),
    the recomputation working set of the widest layer kind it holds, ZeRO-3's gather buffers and edge
    buffers (``extra_activations``); the activations of ``offload`` body layers wait in host memory, one
    layer's stay as the copy buffer. The gradients' ``copy`` (``stage_copies``): the accumulation's, live once a
    micro-batch's backward has freed its working set, counts where it is the larger of the two [assumption: the
    finished micro-batch's own stored activations are not subtracted]; the reduction's, made once the step's
    activations are freed, sits beside the states alone: the stage's peak is the larger of that and the
    backward's."""
    layers_act = o.product(body_count, body.activation)
    if not (isinstance(offload, int) and offload == 0):
        layers_act = layers_act - o.product(offload, body.activation)
        extra_activations = extra_activations + o.where(o.at_least(offload, 1), body.activation, 0)
    layers_state = o.product(body_count, states.body)
    if lead_count:
        layers_act = layers_act + lead_count * lead.activation
        layers_state = layers_state + lead_count * states.lead
        working = o.maximum(lead.working, o.where(o.at_least(body_count, 1), body.working, 0))
    else:
        working = body.working
    if copy is not None and copy.accumulate is not None:
        working = o.maximum(working, copy.accumulate)
    chunks = o.minimum(microbatch_chunks, chunk_limit)
    activations = o.quotient(o.product(chunks, layers_act), vpp, Rounding.UP)
    held = layers_state + extra_states + states.zero3
    backward = held + activations + working + extra_activations
    if copy is None or copy.body is None:
        return StageMemory(held, backward, None, backward)
    copied = reduction_copy(o, lead_count, body_count, copy)
    return StageMemory(held, backward, copied, o.maximum(backward, held + copied))


def stage_host_memory(o, lead_count: int, body_count, lead, body, host_states, extra_states, chunks, vpp, offload=0):
    """Host memory one GPU of a stage fills, bytes: what it offloads of its layers' and edges' model states
    (``host_states``: the ``HOST_STATES`` row; ``extra_states``: its edges', ``edge_parts``) and, for each of its
    ``chunks`` in-flight chunks (each 1/vpp of its layers, as ``stage_memory_parts`` counts them), the inputs
    fine-grained offloading moved (``offloaded`` per layer) and the activations of the ``offload`` body layers
    whole-layer offloading moved."""
    held = o.product(body_count, host_states.body) + extra_states
    layers = o.product(body_count, body.offloaded)
    if lead_count:
        held, layers = held + lead_count * host_states.lead, layers + lead_count * lead.offloaded
    if not (isinstance(offload, int) and offload == 0):
        layers = layers + o.product(offload, body.activation)
    return held + o.quotient(o.product(chunks, layers), vpp, Rounding.UP)


def host_peak(o, ctx: TrainingContext, lead, body, body_counts: tuple, chunks, vpp, offload, conditions: tuple):
    """The host memory of the fullest stage, bytes per GPU (``stage_host_memory`` of the first, the last and a
    middle stage holding ``body_counts`` body layers, at their in-flight chunk limits; a DualPipe rank holds its
    two stages'), or None where ``ctx`` sets no host limit. ``conditions``: a single stage, middle stages and
    DualPipe, as ``compose`` holds them."""
    if ctx.host_limit_bytes is None:
        return None
    single, has_middle, dual = conditions
    first_body, last_body, middle_body = body_counts
    limits, row = o.lookup(CHUNK_LIMITS), o.lookup(HOST_STATES)

    def stage(lead_count, count, extra, limit):
        return stage_host_memory(o, lead_count, count, lead, body, row, extra, o.minimum(chunks, limit), vpp, offload)

    first = stage(lead_layers(ctx.model), first_body, edge_parts(o, row, ctx, True, single), limits.first)
    last = o.where(single, first, stage(0, last_body, edge_parts(o, row, ctx, False, True), limits.last))
    middle = o.where(has_middle, stage(0, middle_body, 0, limits.middle), 0)
    peak = o.maximum(first, last, middle)
    if dual is not False:  # DualPipe's ranks: the first and the last stage, or a middle stage and its pair at 2 chunks
        pair = o.where(has_middle, dualpipe_rank_memory(middle, stage(0, middle_body, 0, 2)), 0)
        peak = o.where(dual, o.maximum(dualpipe_rank_memory(first, last), pair), peak)
    return peak


def reduction_copy(o, lead_count: int, body_count, copy: StageCopy):
    """Bytes of the reduction's gradient copy of a stage holding ``lead_count`` lead and ``body_count`` body
    layers and the edges ``copy`` counts (``stage_copies``)."""
    copied = o.product(body_count, copy.body) + copy.extra
    return copied + lead_count * copy.lead if lead_count else copied


def stage_copies(o, ctx: TrainingContext, first: bool, last) -> StageCopy | None:
    """The gradients' copies (``GRADIENT_COPIES``) of the first stage (``first``; ``last`` then says whether it is
    the only one, a bool or a backend condition), the last (its output layer, MTP modules and their embedding
    copy, as ``compose`` counts their states) or a middle stage; None where the workload makes neither
    (``grad_accumulate_copy_bytes`` and ``grad_reduce_copy_bytes`` 0)."""
    wl = ctx.workload
    if not (wl.grad_accumulate_copy_bytes or wl.grad_reduce_copy_bytes):
        return None
    c = o.lookup(GRADIENT_COPIES)
    accumulate = None
    if wl.grad_accumulate_copy_bytes:
        accumulate = c.accumulate_edge if first or last else c.accumulate_layers
    if not wl.grad_reduce_copy_bytes:
        return StageCopy(lead=None, body=None, extra=None, accumulate=accumulate)
    return StageCopy(lead=c.lead, body=c.body, extra=edge_parts(o, c, ctx, first, last), accumulate=accumulate)


def pipeline_work(ctx: TrainingContext) -> ImpliedBound:
    """A lower bound on m x the slowest stage: the micro-batches per stage, m/pp = global_batch·tp·cp /
    (num_gpus·micro_batch), times the time of every stage together (the slowest stage is at least the
    mean stage): every layer, the embedding and the output layer with its loss, and the MTP modules
    (``mtp_terms``), boundary sends aside. Linear in the layer and edge times: it holds on the integer
    backend's rounded values too, and gives the LP (and the interval bounds of ``bounded_search``) a
    direct handle on the dominant term."""
    model, wl = ctx.model, ctx.workload
    gb, k, L, mtp = wl.global_batch, lead_layers(model), model.layers, wl.mtp_layers

    def work(values, lead, body, edge):
        per_stage = gb * values[D.TP] * values[D.CP] / (values[D.NUM_GPUS] * values[D.MICRO_BATCH])
        edges = edge.first_fwd + edge.first_bwd + (1 + mtp) * (edge.last_fwd + edge.last_bwd)
        return per_stage * (k * lead.total + (L - k + mtp) * body.total + edges)

    return ImpliedBound("pipeline_work", (D.NUM_GPUS, D.TP, D.CP, D.MICRO_BATCH), (*layer_factors(model), EDGES), work)


def pipeline_time(ctx: TrainingContext) -> ImpliedBound:
    """A lower bound on the pipeline's busy time and bubble together, S·(m/p + (p-1)/(p·v)), with S the
    time of every stage together as ``pipeline_work`` counts it: Megatron's (m + (p-1)/v)·t for p equal
    stages of time t = S/p (Narayanan et al. SC'21, Sec. 2.2), and a floor for unequal ones. From
    ``pipeline_parts``, busy + bubble = m·x + (S' - x)/v with x the slowest stage and S' ≥ S the stages'
    sum (x ≤ S'); its coefficient of x, m - 1/v, is not negative, and x ≥ S'/p. It bounds the 1F1B
    schedules' time, which ``compose`` forms for every plan (a DualPipe plan takes its own, bounded by
    ``pipeline_work`` alone, without a key that would split the bounded search's blocks). The integer
    backend rounds the bubble's quotient down, so this holds on exact numbers only (``ImpliedBound.integer``)."""
    model, wl = ctx.model, ctx.workload
    gb, k, L, mtp = wl.global_batch, lead_layers(model), model.layers, wl.mtp_layers

    def time(values, lead, body, edge):
        per_stage = gb * values[D.TP] * values[D.CP] / (values[D.NUM_GPUS] * values[D.MICRO_BATCH])
        pp, vpp = values[D.PP], values[D.VPP]
        edges = edge.first_fwd + edge.first_bwd + (1 + mtp) * (edge.last_fwd + edge.last_bwd)
        stages = k * lead.total + (L - k + mtp) * body.total + edges
        return stages * per_stage + stages * ((pp - 1) / (pp * vpp))

    keys = (D.NUM_GPUS, D.TP, D.CP, D.MICRO_BATCH, D.PP, D.VPP)
    return ImpliedBound("pipeline_time", keys, (*layer_factors(model), EDGES), time, integer=False)


def mean_stage_states(ctx: TrainingContext) -> ImpliedBound:
    """A lower bound on the peak memory per GPU: the mean stage's model states, (k lead layers + the
    L - k body layers and the MTP modules' + the embedding) / pp, and ZeRO-3's gather buffers, which
    every stage holds (``stage_memory_parts``; the output layer, activations and working sets add more).
    Linear in the states: it holds on the integer backend's values, rounded up, too."""
    model, mtp = ctx.model, ctx.workload.mtp_layers
    k, L = lead_layers(model), model.layers

    def states(values, row):
        return (k * row.lead + (L - k + mtp) * row.body + row.embedding) / values[D.PP] + row.zero3

    return ImpliedBound("mean_stage_states", (D.PP,), (STATES,), states)


def compose(o, ctx: TrainingContext) -> TrainingStep:
    """The step of the mapping ``o``'s decisions describe (see the module docstring)."""
    model, wl = ctx.model, ctx.workload
    k = lead_layers(model)
    pp, vpp, m = o.decision(D.PP), o.decision(D.VPP), o.decision(D.MICROBATCHES)
    n1, n_last, n_mid = o.decision(D.FIRST_STAGE_LAYERS), o.decision(D.LAST_STAGE_LAYERS), o.decision(D.MIDDLE_STAGE_LAYERS)
    single, has_middle = o.equals(pp, 1), o.at_least(pp, 3)
    lead_f, body_f = layer_factors(model)
    lead, body = o.lookup(lead_f), o.lookup(body_f)
    edge = o.lookup(EDGES)
    b1 = n1 - k  # body layers of the first stage
    sends = o.product(vpp, o.lookup(P2P).time)
    states = o.lookup(STATES)
    mtp = mtp_terms(wl.mtp_layers, edge, body)
    last_extra = edge.last_fwd + edge.last_bwd + mtp.fwd + mtp.bwd  # the output layer and loss, the MTP modules

    off = o.decision(D.OFFLOAD_LAYERS)
    offload_t = o.product(off, body.offload)  # every stage offloads as many layers
    s_first = stage_time(o, k, b1, lead, body, edge.first_fwd + edge.first_bwd + offload_t, o.where(single, last_extra, sends))
    s_last = o.where(single, s_first, stage_time(o, 0, n_last, lead, body, last_extra + offload_t, sends))
    s_mid = o.where(has_middle, stage_time(o, 0, n_mid, lead, body, offload_t, sends), 0)
    slowest = o.maximum(s_first, s_last, s_mid)
    stages_sum = o.where(single, s_first, s_first + s_last + o.product(pp - 2, s_mid))
    busy, bubble = pipeline_parts(o, m, slowest, stages_sum, vpp)
    o.implied_at_least(busy, pipeline_work(ctx))
    pipeline = busy + bubble
    o.implied_at_least(pipeline, pipeline_time(ctx))
    dual = o.equals(o.decision(D.DUALPIPE), 1)  # a constant False where the space holds no DualPipe plan
    if dual is not False:
        # the two ranks holding the first and the last stage; rounded up, so that m x it stays at least the
        # stages' mean on the integer backend too (``pipeline_work``)
        edge_pair = o.quotient(s_first + s_last, 2, Rounding.UP)
        dual_busy, dual_bubble = dualpipe_parts(o, m, edge_pair, s_mid, stages_sum, pp, o.lookup(DUALPIPE_BUBBLE).share_bp)
        o.implied_at_least(dual_busy, pipeline_work(ctx))
        pipeline = o.where(dual, dual_busy + dual_bubble, pipeline)  # keeps the 1F1B bound on the other branch
        busy, bubble = o.where(dual, dual_busy, busy), o.where(dual, dual_bubble, bubble)

    # stage 0's data-parallel traffic and optimizer step end the step
    fwd0 = o.product(b1, body.fwd) + edge.first_fwd + o.where(single, edge.last_fwd, 0)
    bwd0 = o.product(b1, body.bwd) + edge.first_bwd + o.where(single, edge.last_bwd, 0)
    if k:
        fwd0, bwd0 = fwd0 + k * lead.fwd, bwd0 + k * lead.bwd
    dp = o.lookup(FIRST_STAGE_DP)
    grads, gather, optimizer = dp.grads, dp.gather, dp.optimizer
    if model.moe is not None:  # routed experts reduce (and step) over the expert data-parallel group as well
        edp = o.lookup(FIRST_STAGE_EXPERT_DP)
        grads, gather, optimizer = grads + edp.grads, gather + edp.gather, optimizer + edp.optimizer
    if dual is not False:  # a DualPipe rank 0 holds the last stage too: its traffic and optimizer step as well
        for factor in (LAST_STAGE_DP, LAST_STAGE_EXPERT_DP) if model.moe is not None else (LAST_STAGE_DP,):
            last = o.lookup(factor)
            grads, gather = grads + o.where(dual, last.grads, 0), gather + o.where(dual, last.gather, 0)
            optimizer = optimizer + o.where(dual, last.optimizer, 0)
    # overlapped traffic slows the computation beside it (``contended_exposure``)
    if wl.overlap_dp:
        per_step = contended_exposure(
            o, exposed_dp_traffic(o, gather, fwd0, vpp, pp, dp.embedding_gather), gather
        ) + contended_exposure(o, exposed_dp_traffic(o, grads, bwd0, vpp, pp, dp.embedding_grads), grads)
    else:
        per_step = grads + gather
    after = wl.zero3_backward_prefetch == BackwardPrefetch.POST
    per_microbatch_zero3 = zero3_microbatch_exposure(o, gather, grads, fwd0, bwd0, after)
    # ZeRO-3 gathers and reduces per micro-batch; a DualPipe rank passes half of them through each of its stages
    zero3_passes = m if dual is False else o.where(dual, o.quotient(m, 2, Rounding.DOWN), m)
    exposed = o.where(o.equals(o.decision(D.ZERO), 3), o.product(zero3_passes, per_microbatch_zero3), per_step)
    synchronous = pipeline + exposed + optimizer
    # every GPU waits for the slowest (``training.straggler_stretch``, to a basis point)
    step = o.quotient(o.product(synchronous, o.lookup(STRAGGLE).basis_points), BASIS_POINTS, Rounding.DOWN)

    limits = o.lookup(CHUNK_LIMITS)
    embedding_act = o.lookup(EMBEDDING_ACTIVATION).bytes
    chunks = o.product(m, vpp)
    last_act = edge.logits_activation + mtp.activation
    first_states = edge_parts(o, states, ctx, True, single)
    first_act = embedding_act + o.where(single, last_act, 0)
    first = stage_memory_parts(
        o, k, b1, lead, body, states, first_states, limits.first, chunks, vpp, first_act, off, stage_copies(o, ctx, True, single)
    )
    last_states = edge_parts(o, states, ctx, False, True)
    last = stage_memory_parts(
        o, 0, n_last, lead, body, states, last_states, limits.last, chunks, vpp, last_act, off, stage_copies(o, ctx, False, True)
    )

    def middle_memory(limit):
        return stage_memory_parts(
            o, 0, n_mid, lead, body, states, 0, limit, chunks, vpp, 0, off, stage_copies(o, ctx, False, False)
        )

    mem_first = first.total
    mem_last = o.where(single, mem_first, last.total)
    middle = middle_memory(limits.middle)  # built after the last stage's, as the solver's model always was
    mem_mid = o.where(has_middle, middle.total, 0)
    peak = o.maximum(mem_first, mem_last, mem_mid)
    middle_pair = None
    if dual is not False:
        # DualPipe (``dualpipe_rank_memory``): ranks 0 and pp-1 hold the first and the last stage at their 1F1B
        # counts, a middle rank as many chunks of its two equal stages as rank 1: pp - 1 of stage 1, 2 of stage pp-2
        middle_pair = middle_memory(2)
        edge_rank = dualpipe_rank_memory(mem_first, mem_last)
        middle_rank = o.where(has_middle, dualpipe_rank_memory(mem_mid, middle_pair.total), 0)
        peak = o.where(dual, o.maximum(edge_rank, middle_rank), peak)
    o.implied_at_least(peak, mean_stage_states(ctx))
    host = host_peak(o, ctx, lead, body, (b1, n_last, n_mid), chunks, vpp, off, (single, has_middle, dual))

    minimised = {
        TrainingObjective.THROUGHPUT: step,
        TrainingObjective.STEP_TIME: step,
        TrainingObjective.MEMORY: peak,
        TrainingObjective.TOKENS_PER_GPU: o.product(step, o.decision(D.NUM_GPUS)),
    }
    if ctx.hourly_usd is not None:  # $ per token is proportional to step x $/hour (tokens per step are fixed)
        cost = o.product(step, o.lookup(HOURLY_PRICE).usd_per_hour)
        minimised[TrainingObjective.COST] = minimised[TrainingObjective.TOKENS_PER_USD] = cost
    out_limits = [Limit("memory", peak, ctx.system.usable_memory_bytes, MEMORY)]
    if host is not None:
        out_limits.append(Limit("host_memory", host, ctx.host_limit_bytes, MEMORY))
    if ctx.max_step_s is not None:  # the step stretched by the run's goodput: wall-clock per step, x 10^4
        wall = o.product(step, o.lookup(RUN_STRETCH).basis_points)
        out_limits.append(Limit("run_length", wall, ctx.max_step_s * BASIS_POINTS, TIME))
    return TrainingStep(
        step=step,
        peak_memory=peak,
        busy=busy,
        bubble=bubble,
        dp_exposed=exposed,
        optimizer=optimizer,
        stragglers=step - synchronous,
        stage_time={"first": s_first, "middle": s_mid, "last": s_last},
        stage_memory={"first": mem_first, "middle": mem_mid, "last": mem_last},
        minimised=minimised,
        limits=out_limits,
        memory_parts=MemoryParts(first, middle, last, middle_pair, single, has_middle, dual),
        host_memory=host,
    )


# ---------------------------------------------------------------- one mapping, on floats


def mapping_decisions(ctx: TrainingContext, mapping: Mapping) -> dict:
    """Every decision ``compose`` reads, for one (valid) mapping on ``ctx.system``."""
    m = mapping
    layers = stage_layer_counts(ctx.model.layers, m.pp, m.first_stage_layers, m.last_stage_layers)
    values = {
        D.NUM_GPUS: ctx.system.num_gpus,
        D.TP: m.tp,
        D.PP: m.pp,
        D.DP: m.dp,
        D.CP: m.cp,
        D.EP: m.ep,
        D.ETP: m.etp,
        D.MICRO_BATCH: m.micro_batch,
        D.VPP: m.vpp,
        D.SP: m.sp,
        D.RECOMPUTE: m.recompute,
        D.ZERO: m.zero,
        D.FIRST_STAGE_LAYERS: layers[0],
        D.LAST_STAGE_LAYERS: layers[-1],
        D.PLACEMENT: m.placement,
        D.OFFLOAD_LAYERS: m.offload_layers,
        D.CP_COMM: m.cp_comm,
        D.TP_COMM_OVERLAP: m.tp_comm_overlap,
        D.OPTIMIZER_OFFLOAD: m.optimizer_offload,
        D.WEIGHT_OFFLOAD: m.weight_offload,
        D.MODULE_OFFLOAD: m.module_offload,
        D.DUALPIPE: m.dualpipe,
        D.MOE_DISPATCHER: m.chosen_workload(ctx.workload).moe_dispatcher,
        D.MOE_A2A_OVERLAP: m.a2a_overlapped(ctx.workload),
        D.RECOMPUTE_MODULES: m.recompute_modules,
        D.MICROBATCHES: ctx.workload.global_batch // (m.dp * m.micro_batch),
        D.MIDDLE_STAGE_LAYERS: layers[1] if m.pp >= 3 else 0,
        D.INTERLEAVED: m.vpp > 1,
        D.SINGLE_STAGE: m.pp == 1,
    }
    values.update({GROUP_KEYS[kind]: where for kind, where in group_layouts(ctx.system, m).items()})
    return values


def evaluate_training(model: ModelSpec, system: SystemSpec, workload: Workload, mapping: Mapping) -> Evaluation:
    """Step time, throughput, MFU and peak memory of ``mapping`` (ProblemError if it cannot run)."""
    return evaluate_step(TrainingContext(model, system, workload), mapping)


def evaluate_step(ctx: TrainingContext, mapping: Mapping) -> Evaluation:
    """Step time, throughput, MFU and peak memory of ``mapping`` (``compose`` on floats), with the
    time breakdown of the slowest stage and each stage's time and memory."""
    model, system, wl = ctx.model, ctx.system, ctx.workload
    check_mapping(model, system, wl, mapping)
    decisions = mapping_decisions(ctx, mapping)
    o = FloatOps(ctx, decisions)
    q = compose(o, ctx)
    stages = _stages(o, ctx, mapping, decisions)
    m = decisions[D.MICROBATCHES]
    critical = max(range(mapping.pp), key=lambda i: stages[i]["time_per_microbatch_s"])
    peak_stage = max(range(mapping.pp), key=lambda i: stages[i]["memory_bytes"])
    # the host memory tier: what the fullest stage keeps there, where the mapping offloads anything
    host = max(s["host_bytes"] for s in stages) if offloads(mapping) else None
    metrics = training_metrics(ctx, q.step, q.peak_memory, system.num_gpus, host)
    metrics["fits"], metrics["device_fits"] = bool(metrics["fits"]), bool(metrics["device_fits"])
    metrics.update(
        microbatches=m,
        num_gpus=system.num_gpus,
        params_b=params.total_params(model) / 1e9,
        active_params_b=params.total_params(model, active=True) / 1e9,
    )
    metrics["device_memory_gib"] = device_memory(o, ctx, q) / GIB
    breakdown = {
        "time_s": _time_breakdown(ctx, mapping, decisions, stages[critical], q),
        "memory_gib": stages[peak_stage]["memory_gib"],
        "critical_stage": critical,
        "peak_memory_stage": peak_stage,
    }
    for s in stages:
        del s["memory_gib"]
    return Evaluation(metrics=metrics, breakdown=breakdown, stages=stages)


def device_memory(o, ctx: TrainingContext, q: TrainingStep):
    """Device memory in use (what nvidia-smi shows) on the fullest GPU, bytes (``stage_device_memory`` of each
    stage ``compose`` builds, and of DualPipe's ranks), written against ``ops`` for the float and numpy backends
    (``evaluate``; ``enumerate --all``'s table); the solver's model leaves it out: whether a plan fits is
    decided on the live peak."""
    p = q.memory_parts
    wl = ctx.workload
    full, other = (
        memory.allocator_overhead_fraction(wl.allocator_overhead, recompute, wl.attention)
        for recompute in (Recompute.FULL, Recompute.NONE)
    )
    fraction = o.where(o.equals(o.decision(D.RECOMPUTE), Recompute.FULL), full, other)

    def in_use(mem: StageMemory):
        return stage_device_memory(o, ctx.system, mem, fraction)

    first = in_use(p.first)
    out = o.maximum(first, o.where(p.single, first, in_use(p.last)), o.where(p.has_middle, in_use(p.middle), 0))
    if p.dual is False:
        return out
    edge_rank = in_use(stage_pair(p.first, p.last))
    middle_rank = o.where(p.has_middle, in_use(stage_pair(p.middle, p.middle_pair)), 0)
    return o.where(p.dual, o.maximum(edge_rank, middle_rank), out)


def stage_pair(a: StageMemory, b: StageMemory) -> StageMemory:
    """A DualPipe rank's memory: its two stages' (``dualpipe_rank_memory``), each part summed."""
    copy = None if a.copy is None else a.copy + b.copy
    return StageMemory(a.held + b.held, a.backward + b.backward, copy, dualpipe_rank_memory(a.total, b.total))


def stage_device_memory(o, system: SystemSpec, mem: StageMemory, fraction):
    """Device memory in use on a GPU of a stage, bytes: its backward's peak with the caching allocator's reserve
    on the bytes above the states (``memory.allocator_cache_bytes`` at the measured ``fraction``) and the segment it
    keeps for the reduction's gradient copy (``memory.reduce_copy_bytes``), together at most what the device has free
    beside the peak and none where another runtime than PyTorch's allocator holds the memory, or its peak where
    that is more (the reduction's moment); and the runtime's reserve (the system's ``memory_reserve_bytes``: CUDA
    context, NCCL buffers); at most the device's memory."""
    reserve, hbm = system.memory_reserve_bytes, system.device.hbm_bytes
    if not system.device.pytorch_allocator:
        return o.minimum(mem.total + reserve, hbm)
    free = o.maximum(hbm - reserve - mem.total, 0.0)
    cache = memory.allocator_cache_bytes(mem.backward - mem.held, fraction, free, o)
    kept = o.minimum(cache + (0.0 if mem.copy is None else mem.copy), free)
    return o.minimum(o.maximum(mem.total, mem.backward + kept) + reserve, hbm)


def training_metrics(ctx: TrainingContext, step, peak_memory, num_gpus, host_memory=None) -> dict:
    """Throughput, MFU (PaLM's model FLOPs, ``params.model_flops_per_token``) and memory of a step of
    ``step`` seconds peaking at ``peak_memory`` bytes on ``num_gpus`` GPUs (``device_fits``: within the usable
    device memory), and, with ``host_memory`` (the bytes the fullest stage keeps in host memory; None: nothing
    offloaded), the host tier's (``host_metrics``); ``fits`` holds both; plain arithmetic, so numbers and numpy
    arrays alike."""
    model, system, wl = ctx.model, ctx.system, ctx.workload
    tokens = wl.global_batch * wl.seq_len
    model_flops = params.model_flops_per_token(model, wl.seq_len) * tokens
    out = {
        "step_time_s": step,
        "tokens_per_s": tokens / step,
        "tokens_per_s_per_gpu": tokens / step / num_gpus,
        "mfu": model_flops / step / num_gpus / system.device.peak(wl.precision),
        "tflops_per_gpu": model_flops / step / num_gpus / 1e12,
        "peak_memory_gib": peak_memory / GIB,
        "usable_memory_gib": system.usable_memory_bytes / GIB,
        "device_fits": peak_memory <= system.usable_memory_bytes,
        "num_gpus": num_gpus,
    }
    out["fits"] = out["device_fits"]
    if host_memory is not None:
        out.update(host_metrics(system, host_memory))
        if "host_fits" in out:
            out["fits"] = out["fits"] & out["host_fits"]
    return out


def host_metrics(system: SystemSpec, host) -> dict:
    """The host memory a plan fills per GPU (``host`` bytes, its fullest stage's) and, where the system file
    gives its host DRAM, each GPU's share of it and whether the plan fits there; numbers or numpy arrays."""
    out = {"host_memory_gib": host / GIB}
    if system.host_memory_bytes:
        out["usable_host_memory_gib"] = system.host_memory_per_gpu_bytes / GIB
        out["host_fits"] = host <= system.host_memory_per_gpu_bytes
    return out


def _stages(o: FloatOps, ctx: TrainingContext, mapping: Mapping, decisions: dict) -> list[dict]:
    """Each stage's layers, parameters, time per micro-batch (``stage_time``) and memory
    (``stage_memory_parts`` at its own in-flight chunk limit), with the memory by component."""
    model, wl, m = ctx.model, ctx.workload, mapping
    k = lead_layers(model)
    layers = stage_layer_counts(model.layers, m.pp, m.first_stage_layers, m.last_stage_layers)
    lead_f, body_f = layer_factors(model)
    lead, body, edge, states = o.lookup(lead_f), o.lookup(body_f), o.lookup(EDGES), o.lookup(STATES)
    host_states = o.lookup(HOST_STATES)
    sends = m.vpp * o.lookup(P2P).time if m.pp > 1 else 0.0
    microbatches, overlap = decisions[D.MICROBATCHES], decisions[D.MOE_A2A_OVERLAP]
    out = []
    for i, n in enumerate(layers):
        first, last = i == 0, i == m.pp - 1
        lead_count = k if first else 0
        mtp_here = wl.mtp_layers if last else 0
        mtp = mtp_terms(mtp_here, edge, body)  # as in ``compose``
        extra_fwd = (edge.first_fwd if first else 0.0) + (edge.last_fwd if last else 0.0)
        extra_bwd = (edge.first_bwd if first else 0.0) + (edge.last_bwd if last else 0.0)
        edge_states = edge_parts(o, states, ctx, first, last)
        edge_act = (o.lookup(EMBEDDING_ACTIVATION).bytes if first else 0.0) + (
            edge.logits_activation + mtp.activation if last else 0.0
        )
        offload_s = m.offload_layers * body.offload  # the copies' exposed seconds, as in ``compose``
        args = (
            o,
            lead_count,
            n - lead_count,
            lead,
            body,
            states,
            edge_states,
            memory.in_flight_chunk_limit(i, m.pp, m.vpp, overlap),
            microbatches * m.vpp,
            m.vpp,
            edge_act,
            m.offload_layers,
        )
        mem = stage_memory_parts(*args, stage_copies(o, ctx, first, last))
        total, backward = mem.total, mem.backward  # the peak: the backward's, or the states beside the reduction's copy
        p, pe = stage_held_params(ctx, n, lead_count, first, last, m.tp, m.ep, m.etp)
        state = stage_state_bytes(model, wl, m, p, pe)
        in_flight = memory.in_flight_chunks(i, m.pp, m.vpp, microbatches, overlap)
        host_extra = edge_parts(o, host_states, ctx, first, last)
        host = stage_host_memory(
            o, lead_count, n - lead_count, lead, body, host_states, host_extra, in_flight, m.vpp, m.offload_layers
        )
        activations = backward - sum(state.values())
        # at its peak, by component: the reduction's moment holds the states and the copy, the activations freed
        at_peak = (
            {"activations": 0.0, "reduction_copy": mem.copy / GIB} if total > backward else {"activations": activations / GIB}
        )
        out.append(
            {
                "stage": i,
                "layers": n,
                "moe_layers": n - lead_count if model.moe is not None else 0,
                "time_per_microbatch_s": stage_time(
                    o, lead_count, n - lead_count, lead, body, extra_fwd + extra_bwd + mtp.fwd + mtp.bwd + offload_s, sends
                ),
                "params": p,
                "expert_params": pe,
                "time_fwd_s": (n - lead_count) * body.fwd + lead_count * lead.fwd + extra_fwd + mtp.fwd,
                "time_bwd_s": (n - lead_count) * body.bwd + lead_count * lead.bwd + extra_bwd + mtp.bwd + offload_s,
                "memory_bytes": total,
                "state": state,
                "host_bytes": host,
                "activations_bytes": activations,
                "extra_s": extra_fwd + extra_bwd,
                "offload_s": offload_s,
                "mtp_s": mtp.fwd + mtp.bwd,
                "sends_s": sends,  # its boundary sends per micro-batch, vpp each way (``P2P``)
                "memory_gib": {**{key: v / GIB for key, v in state.items()}, **at_peak},
            }
        )
    if m.dualpipe:
        return [_dualpipe_rank(out[i], out[m.pp - 1 - i]) for i in range(m.pp)]
    return out


def _dualpipe_rank(own: dict, mirrored: dict) -> dict:
    """DualPipe's rank ``own["stage"]``: its stage and the mirrored one (``dualpipe_parts``), half the
    micro-batches through each, so per-micro-batch times are the two stages' mean; layers, parameters
    and states are the two stages' together, and the memory ``dualpipe_rank_memory`` of the two 1F1B
    stages' (each evaluated at its own 1F1B in-flight count), by component each stage's at its own peak."""
    total = dualpipe_rank_memory(own["memory_bytes"], mirrored["memory_bytes"])
    state = {key: own["state"][key] + mirrored["state"].get(key, 0.0) for key in own["state"]}
    activations = own["activations_bytes"] + mirrored["activations_bytes"]  # each stage's backward's
    parts = dict.fromkeys([*own["memory_gib"], *mirrored["memory_gib"]], 0.0)
    summed = ("layers", "moe_layers", "params", "expert_params", "host_bytes")
    mean = ("time_per_microbatch_s", "time_fwd_s", "time_bwd_s", "extra_s", "offload_s", "mtp_s", "sends_s")
    return {
        "stage": own["stage"],
        "stages": [own["stage"], mirrored["stage"]],
        **{key: own[key] + mirrored[key] for key in summed},
        **{key: (own[key] + mirrored[key]) / 2 for key in mean},
        "memory_bytes": total,
        "state": state,
        "activations_bytes": activations,
        "memory_gib": {key: own["memory_gib"].get(key, 0.0) + mirrored["memory_gib"].get(key, 0.0) for key in parts},
    }


def _time_breakdown(ctx: TrainingContext, mapping: Mapping, decisions: dict, critical: dict, q: TrainingStep) -> dict:
    """The slowest stage's per-micro-batch components (``training.layer_times``) times the micro-batch
    count, the exposed data-parallel traffic, the optimizer, and the bubble as what remains of the step."""
    model, wl, m = ctx.model, mapping.chosen_workload(ctx.workload), mapping
    layouts = {kind: decisions[key] for kind, key in GROUP_KEYS.items()}

    def times(moe_layer: bool):
        ep, etp = (m.ep, m.etp) if moe_layer else (1, 1)
        return layer_times(
            model,
            ctx.system,
            wl,
            m.tp,
            m.cp,
            m.micro_batch,
            m.sp,
            m.recompute,
            ep,
            moe_layer,
            layouts,
            m.cp_comm,
            etp,
            m.tp_comm_overlap,
            m.module_offload,
        )

    lt = times(False)
    lt_moe = times(True) if model.moe else lt
    mb = decisions[D.MICROBATCHES]
    # a DualPipe rank runs half the micro-batches through each of its two stages, whose layers it sums
    share = mb / 2 if m.dualpipe else mb
    n_moe, n_dense = critical["moe_layers"] * share, (critical["layers"] - critical["moe_layers"]) * share

    def layers_sum(*names):
        return sum(n_dense * getattr(lt, f) + n_moe * getattr(lt_moe, f) for f in names)

    out = {
        "compute/gemm": layers_sum("gemm_fwd", "gemm_bwd"),
        "compute/attention": layers_sum("attention_fwd", "attention_bwd"),
        "compute/elementwise": layers_sum("elementwise_fwd", "elementwise_bwd"),
        "compute/recompute": layers_sum("recompute"),
        "compute/embedding_logits": critical["extra_s"] * mb,
        "memory/offload": critical["offload_s"] * mb + layers_sum("offload_fwd", "offload_bwd"),
        "compute/mtp": critical["mtp_s"] * mb,
        "comm/tp": layers_sum("tp_comm_fwd", "tp_comm_bwd"),
        "comm/cp": layers_sum("cp_comm_fwd", "cp_comm_bwd"),
        "comm/ep": layers_sum("ep_comm_fwd", "ep_comm_bwd"),
        "comm/pp": critical["sends_s"] * mb,
        "comm/dp_exposed": q.dp_exposed,
        "optimizer": q.optimizer,
        "scale/stragglers": q.stragglers,
    }
    out["pipeline/bubble"] = q.step - sum(out.values())
    return out
