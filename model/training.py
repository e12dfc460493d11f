"""The terms of a training step: one layer's times, the edge stages, pipeline sends, model states
and data-parallel traffic, each a function of the few decisions it depends on, and the rules a
mapping must meet (``check_mapping``).

``layer_times`` (tp, cp, micro-batch, sp, recompute, where the TP/CP/EP groups sit),
``edge_stage_times`` (tp, cp, micro-batch), ``pipeline_p2p_time_s`` (tp, cp, micro-batch, where the
pipeline group sits), ``stage_state_bytes`` (tp, zero, dp, cp, parameters on the stage),
``dp_comm_times_s`` (the stage's parameters, where a DP group sits). Where a group sits (its
``placement.Layout``) follows from the mapping's placement (``model/placement.py``); every
collective is timed on it by ``placement.collective_time_s``. ``training_step.compose`` composes
them into a step; it is the single source of every number.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from . import checks, compute, expert_parallel, fp8_attention, memory, params
from .choices import CpComm, Recompute, RecomputeModule, ZeroStage, allowed
from .errors import ProblemError
from .fused_grouped_mlp import fused_grouped_mlp_etp_problem, unfused_recompute_problem
from .offload import module_offload_problem, offload_copy_exposed_s, offloaded_activation_bytes
from .pipeline import a2a_overlap_problem, dualpipe_problem, stage_layer_counts, vpp_divides_stages
from .placement import Group, Layout, check_placement, check_system, collective_time_s, group_layouts, layout
from .precision import activation_precision, bytes_per_element, gathered_bytes_per_element, training_recipe
from .specs import DeviceSpec, Mapping, ModelSpec, SystemSpec, Workload

WEIGHT_BYTES = 2.0  # bf16/fp16 weights; FP8 training keeps 16-bit weights (NVIDIA Transformer Engine)


@dataclass(frozen=True)
class LayerTimes:
    """Per-layer, per-micro-batch times on one GPU, seconds."""

    gemm_fwd: float
    attention_fwd: float
    elementwise_fwd: float
    tp_comm_fwd: float
    cp_comm_fwd: float
    gemm_bwd: float
    attention_bwd: float
    elementwise_bwd: float
    tp_comm_bwd: float
    cp_comm_bwd: float
    recompute: float
    ep_comm_fwd: float = 0.0  # MoE all-to-all dispatch + combine
    ep_comm_bwd: float = 0.0
    offload_fwd: float = 0.0  # fine-grained activation offloading's copies left exposed (``offload_copy_exposed_s``)
    offload_bwd: float = 0.0

    @property
    def forward(self) -> float:
        return (
            self.gemm_fwd
            + self.attention_fwd
            + self.elementwise_fwd
            + self.tp_comm_fwd
            + self.cp_comm_fwd
            + self.ep_comm_fwd
            + self.offload_fwd
        )

    @property
    def backward(self) -> float:
        return (
            self.gemm_bwd
            + self.attention_bwd
            + self.elementwise_bwd
            + self.tp_comm_bwd
            + self.cp_comm_bwd
            + self.ep_comm_bwd
            + self.recompute
            + self.offload_bwd
        )

    @property
    def total(self) -> float:
        return self.forward + self.backward


def tp_comm_forward_times_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    tp_layout: Layout | None = None,
    ctas: int | None = None,
) -> tuple[float, float]:
    """TP communication in one layer's forward, (all-gathers, reductions) seconds: two all-reduces of the b·s·h
    activation (Shoeybi et al. 2019, Sec. 3), or with sequence parallelism two all-gathers and two reduce-scatters
    of the same elements (Korthikanti 2022, Sec. 4.2.2); one of each in a parallel block
    (``ModelSpec.tp_reductions_per_layer``). The reductions carry the GEMMs' 16-bit outputs; the all-gathers the
    GEMMs' inputs, quantised first under a low-precision recipe (``precision.gathered_bytes_per_element``). Over
    the TP group at ``tp_layout`` (default: tp consecutive ranks), on at most ``ctas`` NCCL channels
    (``nccl_channels``; None: uncapped). Without sp the all-gathers are 0."""
    if tp == 1:
        return 0.0, 0.0
    where = tp_layout or layout(system, Group.of((tp, 1)))
    elements = micro_batch * workload.seq_len / cp * model.hidden
    e = bytes_per_element(activation_precision(workload.precision))
    blocks = model.tp_reductions_per_layer
    if sp:
        gathered = gathered_bytes_per_element(training_recipe(workload.precision, workload.low_precision_recipe), e)
        return (
            blocks * collective_time_s("allgather", elements * gathered, where, system, ctas),
            blocks * collective_time_s("reducescatter", elements * e, where, system, ctas),
        )
    return 0.0, blocks * collective_time_s("allreduce", elements * e, where, system, ctas)  # the same ring cost as with sp


def tp_comm_exposed_times_s(
    model: ModelSpec,
    device: DeviceSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    tp_comm_overlap: bool,
    moe_layer: bool,
    collectives: tuple[float, float],
) -> tuple[float, float]:
    """(forward, backward) seconds of one layer's tensor-parallel communication left exposed, given
    ``collectives``, its forward all-gathers' and reductions' times (``tp_comm_forward_times_s``), an equal share
    of each per block (attention, MLP; a parallel block is one): one all-reduce, or with sequence parallelism an
    all-gather before the column-parallel GEMMs and a reduce-scatter after the row-parallel one. The GEMMs
    they may hide behind are ``compute.tp_block_gemm_times_s``. The backward's all-gathers (the row-parallel GEMM's
    output gradient, the column-parallel GEMMs' re-gathered input) take the forward's all-gather time, its
    reduce-scatter (the column-parallel input gradient) the forward's reduce-scatter time.

    Forward without ``tp_comm_overlap``: all exposed. Backward, with ``workload.overlap_tp_grad``
    (Megatron-LM's asynchronous input-gradient collective, on since 2021; Korthikanti et al. 2022,
    Sec. 4.2.2): the column-parallel GEMMs' input-gradient all-reduce (reduce-scatter with sp) runs
    under their weight-gradient GEMMs, and with sp the re-gather of their saved input under their
    data-gradient GEMMs; the row-parallel GEMM's output-gradient all-gather (sp) stays exposed.
    Without it every backward collective is exposed (the re-gather too).

    ``tp_comm_overlap`` (Transformer Engine's userbuffers, Megatron ``--tp-comm-overlap``; needs sp):
    each all-gather streams in tp chunks by ring exchange under its GEMM, which starts on the local
    chunk (exposed: what exceeds (tp-1)/tp of the GEMM); each reduce-scatter is pipelined behind
    the GEMM's chunks, its last chunk exposed (1/tp of it, plus what exceeds the GEMM); the backward's
    re-gather and input-gradient reduce-scatter overlap the data- and weight-gradient GEMMs in bulk.
    A GEMM hides a collective for only ``device.tp_overlap_efficiency`` of its time (the collective's
    kernels take SMs and memory bandwidth from it; the chunked GEMMs run smaller): fitted with the
    network efficiency on the published runs (benchmarks/calibrate.py). Userbuffers need sp (``check_mapping``).
    """
    gathers, reductions = collectives
    if gathers + reductions <= 0:
        return 0.0, 0.0
    tokens = micro_batch * workload.seq_len / cp
    blocks = compute.tp_block_gemm_times_s(
        model, device, workload.precision, tokens, tp, moe_layer, dense_share(device, workload)
    )
    ag, rs = gathers / len(blocks), reductions / len(blocks)  # one block's all-gather and reduction
    split = (tp - 1) / tp
    fwd = bwd = 0.0
    for gemms in blocks:
        column, row = (device.tp_overlap_efficiency * seconds for seconds in gemms)
        if tp_comm_overlap:
            fwd += max(0.0, ag - split * column) + rs / tp + split * max(0.0, rs - row)
            bwd += max(0.0, ag - split * row) + max(0.0, ag - column) + max(0.0, rs - column)
            continue
        fwd += ag + rs
        if workload.overlap_tp_grad:
            bwd += ag + max(0.0, ag - column) + max(0.0, rs - column)
        else:  # with sp the output-gradient gather and the re-gather exposed too (ag is 0 without sp)
            bwd += 2.0 * ag + rs
    return fwd, bwd


def cp_exposed_forward_time_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    attention_fwd_s: float,
    cp_layout: Layout | None = None,
) -> float:
    """Exposed ring-attention K/V exchange in one layer's forward (Liu et al., Ring Attention, 2023).

    cp-1 steps, each passing this rank's K and V block (2·b·(s/cp)·kv·d elements, kv heads split
    by tp; FP8 under FP8 attention, ``fp8_attention.qkv_bytes_per_element``) to the next rank of the
    CP group at ``cp_layout`` (default: stride tp) while the current block's attention is computed; what
    exceeds the attention compute is exposed.
    """
    if cp == 1:
        return 0.0
    block = cp_ring_block_bytes(model, workload, tp, cp, micro_batch)
    where = cp_layout or layout(system, Group.of((cp, tp)))
    transfer = (cp - 1) * collective_time_s("p2p", block, where, system, workload.nccl_max_ctas.cp)
    return max(0.0, transfer - attention_fwd_s)


def cp_ring_block_bytes(model: ModelSpec, workload: Workload, tp: int, cp: int, micro_batch: int) -> float:
    """One rank's K and V block that ring attention passes on, bytes: 2·b·(s/cp)·kv·d elements (kv heads split by
    tp), 16-bit or FP8 under FP8 attention (``fp8_attention.qkv_bytes_per_element``); its dK and dV the same."""
    e = fp8_attention.qkv_bytes_per_element(workload, bytes_per_element(activation_precision(workload.precision)))
    return 2.0 * micro_batch * workload.seq_len / cp * model.kv_width / tp * e


def cp_ring_backward_time_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    attention_bwd_s: float,
    cp_layout: Layout | None = None,
) -> float:
    """Exposed ring-attention exchange in one layer's backward, seconds (Transformer Engine's
    AttnFuncWithCPAndKVP2P.backward). 16-bit: each of the cp-1 steps passes K and V and the dK and dV gathered so
    far, twice the forward's bytes, behind the step's 2.5x-forward compute. FP8 attention: the steps pass only the
    FP8 K and V (the forward's exchange against the backward's compute), and the dK and dV blocks go to their
    owners in one all-to-all of cp blocks at the last step, behind that step's compute alone (1/cp of it)."""
    if cp == 1:
        return 0.0
    if not workload.fp8_attention:
        return 2.0 * cp_exposed_forward_time_s(model, system, workload, tp, cp, micro_batch, attention_bwd_s / 2.0, cp_layout)
    where = cp_layout or layout(system, Group.of((cp, tp)))
    ring = cp_exposed_forward_time_s(model, system, workload, tp, cp, micro_batch, attention_bwd_s * (cp - 1) / cp, where)
    block = cp_ring_block_bytes(model, workload, tp, cp, micro_batch)
    gradients = collective_time_s("alltoall", cp * block, where, system, workload.nccl_max_ctas.cp)
    return ring + max(0.0, gradients - attention_bwd_s / cp)


def cp_a2a_times_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    cp_layout: Layout | None = None,
) -> tuple[float, float]:
    """All-to-all (Ulysses) context parallelism in one layer, (forward, backward) seconds (Jacobs et al.,
    DeepSpeed-Ulysses, 2023; Megatron-Core --cp-comm-type a2a). Before the attention each rank trades
    its s/cp tokens of all its heads for all s tokens of 1/cp of them: Q, K and V, (q + 2·kv)/tp wide;
    after it the output, q/tp wide, goes back. Each all-to-all sends (cp-1)/cp of the rank's buffer
    over the CP group at ``cp_layout``; the attention waits for it, so none is hidden. The backward
    sends the gradients of the same tensors back the same way. 16-bit, or FP8 under FP8 attention
    (``fp8_attention.qkv_bytes_per_element``; the forward's output:
    ``exchanged_output_bytes_per_element``)."""
    if cp == 1:
        return 0.0, 0.0
    e = bytes_per_element(activation_precision(workload.precision))
    exchanged = fp8_attention.qkv_bytes_per_element(workload, e)
    output = fp8_attention.exchanged_output_bytes_per_element(
        workload, training_recipe(workload.precision, workload.low_precision_recipe), e
    )
    tokens = micro_batch * workload.seq_len / cp
    where = cp_layout or layout(system, Group.of((cp, tp)))
    ctas = workload.nccl_max_ctas.cp
    qkv = collective_time_s("alltoall", tokens * (model.q_width + 2 * model.kv_width) / tp * exchanged, where, system, ctas)
    out = tokens * model.q_width / tp
    return (
        qkv + collective_time_s("alltoall", out * output, where, system, ctas),
        qkv + collective_time_s("alltoall", out * exchanged, where, system, ctas),
    )


def cp_allgather_times_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    cp_layout: Layout | None = None,
) -> tuple[float, float]:
    """All-gather context parallelism in one layer, (forward, backward) seconds (Megatron-Core
    --cp-comm-type allgather; the Llama 3 report, Sec. 3.3.2). The forward all-gathers the whole
    sequence's K and V over the CP group (``cp_allgather_buffer_bytes``, small with GQA) before the
    attention, which waits for it; the backward, keeping no gathered K and V (Transformer Engine's
    AttnFuncWithCPAndKVAllGather.backward), gathers them again and reduce-scatters dK and dV, 16-bit
    (``cp_allgather_buffer_bytes``: the gathered K and V in FP8 under FP8 attention). None is hidden."""
    if cp == 1:
        return 0.0, 0.0
    gathered, gradients = cp_allgather_buffer_bytes(model, workload, tp, cp, micro_batch)
    where = cp_layout or layout(system, Group.of((cp, tp)))
    forward = collective_time_s("allgather", gathered, where, system, workload.nccl_max_ctas.cp)
    return forward, forward + collective_time_s("reducescatter", gradients, where, system, workload.nccl_max_ctas.cp)


def cp_allgather_buffer_bytes(model: ModelSpec, workload: Workload, tp: int, cp: int, micro_batch: int) -> tuple[float, float]:
    """(K and V, dK and dV) of the whole sequence that all-gather context parallelism gathers and
    reduce-scatters for a layer's attention, bytes: the forward gathers K and V (FP8 under FP8 attention,
    ``fp8_attention.qkv_bytes_per_element``), the backward holds them again beside 16-bit dK and dV."""
    if cp == 1:
        return 0.0, 0.0
    e = bytes_per_element(activation_precision(workload.precision))
    elements = 2.0 * micro_batch * workload.seq_len * model.kv_width / tp
    return elements * fp8_attention.qkv_bytes_per_element(workload, e), elements * e


def hierarchical_cp_sizes(cp_layout: Layout) -> tuple[int, int]:
    """(all-to-all size, ring size) of hierarchical context parallelism (``CpComm.A2A_P2P``) over the CP group at
    ``cp_layout``: the all-to-all among consecutive CP ranks in one scale-up domain, as many as divide both the
    group and its members per domain, the ring across them (Megatron-Core's create_hierarchical_groups: level 1
    consecutive ranks, level 2 strided by level 1's size; --hierarchical-context-parallel-sizes a r)."""
    a = math.gcd(cp_layout.n, cp_layout.local)
    return a, cp_layout.n // a


def mapping_cp_hierarchy(system: SystemSpec, mapping: Mapping) -> tuple[int, int] | None:
    """``hierarchical_cp_sizes`` of ``mapping``'s CP group on ``system`` where it exchanges a2a+p2p over cp > 1
    (what the report names and Megatron's --hierarchical-context-parallel-sizes states); None otherwise."""
    if mapping.cp_comm != CpComm.A2A_P2P or mapping.cp == 1:
        return None
    return hierarchical_cp_sizes(group_layouts(system, mapping)["cp"])


def cp_hierarchical_times_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    attention_fwd_s: float,
    attention_bwd_s: float,
    cp_layout: Layout | None = None,
) -> tuple[float, float]:
    """Hierarchical context parallelism in one layer, (forward, backward) seconds (Transformer Engine's
    cp_comm_type a2a+p2p). The all-to-all level (a ranks, ``hierarchical_cp_sizes``) trades each rank's s/cp tokens
    of its heads for s·a/cp tokens of 1/a of them, as ``cp_a2a_times_s`` over a group of a, exposed; the ring
    level (r = cp/a ranks, one per domain) then passes K and V blocks of the same bytes as a flat ring's (s/r tokens
    of kv/(tp·a) heads) in r - 1 steps behind the attention, as ``cp_exposed_forward_time_s`` and
    ``cp_ring_backward_time_s`` with tp·a for tp and r for cp; the output and the gradients go back the same way.
    Both levels are communicators of their own (Megatron-Core's "hcp" process groups), which a cap on the cp
    communicator's thread blocks (``workload.nccl_max_ctas.cp``) leaves alone."""
    if cp == 1:
        return 0.0, 0.0
    workload = dataclasses.replace(workload, nccl_max_ctas=dataclasses.replace(workload.nccl_max_ctas, cp=None))
    where = cp_layout or layout(system, Group.of((cp, tp)))
    a, r = hierarchical_cp_sizes(where)
    inner, outer = Layout(a, a), Layout(r, max(1, where.local // a))
    a2a = cp_a2a_times_s(model, system, workload, tp, cp, micro_batch, inner) if a > 1 else (0.0, 0.0)
    ring_fwd = cp_exposed_forward_time_s(model, system, workload, tp * a, r, micro_batch, attention_fwd_s, outer)
    ring_bwd = cp_ring_backward_time_s(model, system, workload, tp * a, r, micro_batch, attention_bwd_s, outer)
    return a2a[0] + ring_fwd, a2a[1] + ring_bwd


def ep_comm_time_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    ep: int,
    direction: str,
    ep_layout: Layout | None = None,
) -> float:
    """MoE all-to-all in one layer of one micro-batch, seconds: the token dispatch and the combine
    of the forward (``direction`` forward), or of the backward, which sends the gradients back the
    same way (``backward``). Each GPU routes its sequence-parallel share, tokens/tp, over the EP
    group at ``ep_layout`` (default: ep consecutive ranks, as the default placement lays the expert
    grid over tp·cp·dp); the copies per token and bytes per element come from ``expert_parallel``,
    with the members per scale-up domain the placement gives. On a topology the model follows, the
    copies leaving each rank are timed as an all-to-all spread evenly over the group
    (``collectives``; DeepEP's node deduplication counts in the volume, not in its split)."""
    if ep == 1 or model.moe is None:
        return 0.0
    tokens = micro_batch * workload.seq_len / cp / tp
    where = ep_layout or layout(system, Group.of((ep, 1)))
    local = where.local
    inside, across = expert_parallel.dispatch_copies_per_token(model, ep, local, workload.moe_dispatcher)
    total = 0.0
    for leg in ("dispatch", "combine"):
        e = expert_parallel.dispatch_bytes_per_element(workload, leg if direction == "forward" else "combine")
        total += expert_parallel.alltoall_time_s(
            tokens * model.hidden * e, inside, across, where, system, workload.moe_dispatcher
        )
    return total


def etp_comm_time_s(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    etp: int,
    etp_layout: Layout | None = None,
) -> float:
    """Expert tensor parallelism's collectives in one MoE layer for one micro-batch, one direction,
    seconds: the routed rows an expert tensor-parallel group received are all-gathered over it before
    the experts (each rank computes 1/etp of every local expert's width for all of them) and reduce-
    scattered after (Megatron-Core's token dispatchers, gather_from_sequence_parallel_region and
    reduce_scatter_to_sequence_parallel_region over the expert tensor-parallel group); the backward
    runs the pair the other way round, with the same volume. Both carry etp x the GPU's routed rows
    at the activation width (the all-gather's output, the reduce-scatter's input, as nccl-tests counts)."""
    if etp == 1 or model.moe is None:
        return 0.0
    rows = compute.routed_rows_per_gpu(model, micro_batch * workload.seq_len / cp, tp)
    nbytes = etp * rows * model.hidden * bytes_per_element(activation_precision(workload.precision))
    where = etp_layout or layout(system, Group.of((etp, 1)))
    return collective_time_s("allgather", nbytes, where, system) + collective_time_s("reducescatter", nbytes, where, system)


def ep_comm_forward_time_s(
    model: ModelSpec, system: SystemSpec, workload: Workload, tp: int, cp: int, micro_batch: int, ep: int
) -> float:
    """Dispatch and combine of one layer's forward, seconds (``ep_comm_time_s``)."""
    return ep_comm_time_s(model, system, workload, tp, cp, micro_batch, ep, "forward")


def ep_exposed_times_s(
    device: DeviceSpec, workload: Workload, ep_fwd: float, ep_bwd: float, layer_compute_s: float
) -> tuple[float, float]:
    """(forward, backward) all-to-all seconds left exposed. Without overlap, all of it. With
    ``moe_a2a_overlap`` the forward of one micro-batch and the backward of another run merged, each
    one's all-to-all hidden behind the other's compute (DualPipe, DeepSeek-V3 Sec. 3.2.1; Megatron-
    Core --overlap-moe-expert-parallel-comm, built after it) on SMs its kernels take from that
    compute, the layer's fwd+bwd (``overlap_exposed_s``, the device's ``sms``). A device without an SM
    count hides what its ``moe_overlap_efficiency`` share of the layer's compute can."""
    total = ep_fwd + ep_bwd
    if not workload.moe_a2a_overlap or total <= 0:
        return ep_fwd, ep_bwd
    if device.sms > expert_parallel.A2A_COMM_SMS:
        exposed = overlap_exposed_s(total, layer_compute_s, expert_parallel.A2A_COMM_SMS, device.sms)
    else:
        exposed = max(0.0, total - device.moe_overlap_efficiency * layer_compute_s)
    return ep_fwd * exposed / total, ep_bwd * exposed / total


def overlap_exposed_s(comm_s: float, compute_s: float, comm_sms: int, sms: int) -> float:
    """Seconds that communication of ``comm_s`` (A) overlapped with ``compute_s`` (C) of computation adds
    when the two split the SMs: the communication kernels hold ``comm_sms`` (s) of the device's ``sms``
    (S) for the overlapped pair (DeepSeek-V3 Sec. 3.2.1: "we manually adjust the ratio of GPU SMs
    dedicated to communication versus computation"; Sec. 3.2.2: 20 SMs), so the computation runs at
    (S - s)/S of its rate and the pair lasts max(C·S/(S - s), A): max(C·s/(S - s), A - C) more than
    the computation alone, and never more than A (with too little to hide, the run keeps its SMs:
    DeepEP's Buffer.set_num_sms). Memory-bound kernels are slowed as much: sparing them (assuming
    S - s SMs saturate the HBM) moved four of the five overlapped published runs further from their
    measurements and none closer (benchmarks/accuracy.py)."""
    slowed = compute_s * comm_sms / (sms - comm_sms)
    return min(comm_s, max(slowed, comm_s - compute_s))


def activation_offload_exposed_s(device: DeviceSpec, activation_bytes: float, layer_fwd_s: float, layer_bwd_s: float) -> float:
    """Seconds per micro-batch that offloading one layer's saved activations to host memory leaves
    exposed: they leave during the forward and return for the backward, each way at the device's
    host link (``host_bytes_per_s``), on a copy stream behind the next layer's compute (Rhu et al.,
    vDNN, MICRO 2016; Megatron-Core's --cpu-offloading). Zero for a device without a host link,
    which cannot offload (``check_mapping`` says so)."""
    return offload_copy_exposed_s(device, activation_bytes, layer_fwd_s) + offload_copy_exposed_s(
        device, activation_bytes, layer_bwd_s
    )


def layer_tokens(
    workload: Workload, tp: int, cp: int, micro_batch: int, sp: bool, moe_layer: bool, etp: int
) -> memory.LayerTokens:
    """One layer's tokens on one GPU for one micro-batch (its context-parallel share) and how the workload keeps
    their activations: GEMM inputs at the precision's saved bytes, the permuted rows in 16 bits unless the
    dispatch arrives in FP8 (``expert_parallel.fp8_dispatch``), Q, K and V in FP8 under FP8 attention."""
    return memory.LayerTokens(
        micro_batch * workload.seq_len / cp,
        tp,
        sp,
        memory.saved_gemm_input_bytes(workload.precision),
        moe_layer,
        etp,
        0.0 if expert_parallel.fp8_dispatch(workload) else memory.ACT_BYTES,
        fp8_attention.qkv_bytes_per_element(workload, memory.ACT_BYTES),
    )


def dense_share(device: DeviceSpec, workload: Workload) -> float:
    """``compute.dense_gemm_share`` under the workload's training recipe: the share of the GEMM curve its dense
    GEMMs (the routed experts aside) compute at."""
    return compute.dense_gemm_share(device, training_recipe(workload.precision, workload.low_precision_recipe))


def routed_share(device: DeviceSpec, workload: Workload) -> float:
    """``compute.routed_gemm_share`` under the workload's training recipe: the share of their grouped rate the routed
    experts' GEMMs compute at."""
    return compute.routed_gemm_share(device, training_recipe(workload.precision, workload.low_precision_recipe))


@functools.lru_cache(maxsize=1 << 14)
def layer_compute_times_s(
    model: ModelSpec,
    device: DeviceSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    ep: int = 1,
    moe_layer: bool = False,
    etp: int = 1,
) -> tuple[float, float, float, float]:
    """(GEMM forward, attention core forward, elementwise forward, elementwise backward) seconds of one
    layer for one micro-batch on one GPU: its compute, the same wherever its groups sit (cached, as
    many placements share it)."""
    tokens = micro_batch * workload.seq_len / cp
    share = dense_share(device, workload)
    gemm_fwd = compute.layer_gemm_forward_time_s(model, device, workload.precision, tokens, tp, moe_layer, share)
    if moe_layer:
        gemm_fwd += compute.moe_routed_forward_time_s(
            model, device, workload.precision, tokens, tp, ep, etp, routed_share(device, workload)
        )
    attn_fwd = compute.attention_core_forward_time_s(model, device, workload.attention, micro_batch, workload.seq_len, cp, tp)
    fused = workload.fused_grouped_mlp
    elem_bytes = compute.elementwise_forward_bytes(model, tokens, tp, sp, workload.precision, moe_layer, fused)
    recipe = training_recipe(workload.precision, workload.low_precision_recipe)
    cast_fwd, cast_bwd = compute.low_precision_cast_bytes(
        model, tokens, tp, recipe, moe_layer, etp, workload.nvfp4_hadamard, fused
    )
    attn_cast_fwd, attn_cast_bwd = fp8_attention.cast_bytes(model, workload, tokens, tp, recipe)
    cast_fwd, cast_bwd = cast_fwd + attn_cast_fwd, cast_bwd + attn_cast_bwd
    # the alltoall dispatcher's second sort of the rows it receives, by local expert and back (both passes)
    sort = (
        expert_parallel.local_sort_bytes(model, workload, compute.routed_rows_per_gpu(model, tokens, tp) * etp, ep)
        if moe_layer
        else 0.0
    )
    elem_fwd = compute.memory_bound_time_s(device, elem_bytes + cast_fwd + sort)
    elem_bwd = compute.memory_bound_time_s(device, 2.0 * elem_bytes + cast_bwd + sort)
    return float(gemm_fwd), float(attn_fwd), float(elem_fwd), float(elem_bwd)


def selective_recompute_time_s(
    model: ModelSpec,
    device: DeviceSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    ep: int,
    etp: int,
    moe_layer: bool,
    attention_fwd_s: float,
    ep_fwd_s: float,
    cp_fwd_s: float = 0.0,
) -> float:
    """Seconds per micro-batch the backward spends redoing the forward of what ``recompute selective``
    recomputes (``workload.recompute_modules``; the savings are in ``memory.selective_savings_bytes``):
    the attention core (``attention_fwd_s``) with its context-parallel exchange (``cp_fwd_s``, what of it
    is exposed: Transformer Engine's DotProductAttention holds the exchange, so its checkpoint redoes
    it); a norm not fused into a linear (read and write h per
    token, memory-bound); the routed experts' activation function (SwiGLU reads 2f and writes f per
    row); MLA's up-projection GEMMs; a dense layer's MLP (its GEMMs and activation); an MoE layer's
    whole block (the routed experts, shared experts and the dispatch and combine, ``ep_fwd_s``); the
    shared experts' GEMMs."""
    modules, precision = workload.recompute_modules, workload.precision
    tokens = micro_batch * workload.seq_len / cp
    e = bytes_per_element(activation_precision(precision))
    act_passes = 3 if model.activation == "swiglu" else 2  # elements read and written per intermediate element

    share = dense_share(device, workload)

    def gemms(shapes: dict, names=None) -> float:
        return sum(
            compute.gemm_time_s(device, m, n, k, precision, rate_share=share)
            for name, (m, n, k) in shapes.items()
            if names is None or name in names
        )

    redo = 0.0
    if "core_attn" in modules:  # with FP8 attention, its Q, K and V quantised again
        cast_fwd, _ = fp8_attention.cast_bytes(
            model, workload, tokens, tp, training_recipe(precision, workload.low_precision_recipe)
        )
        redo = attention_fwd_s + cp_fwd_s + compute.memory_bound_time_s(device, cast_fwd)
    if "layernorm" in modules:
        norms = compute.unfused_norms(model, moe_layer)
        redo += compute.memory_bound_time_s(device, norms * 2.0 * tokens / (tp if sp else 1) * model.hidden * e)
    if "mla_up_proj" in modules and model.mla is not None:
        redo += gemms(compute.attention_gemm_shapes(model, tokens, tp), ("q_up", "kv_up"))
    if not moe_layer:
        if "mlp" in modules:
            redo += gemms(compute.mlp_gemm_shapes(model, tokens, model.ffn / tp))
            redo += compute.memory_bound_time_s(device, act_passes * tokens * model.ffn / tp * e)
        return redo
    moe = model.moe
    shared = compute.mlp_gemm_shapes(model, tokens, moe.shared_experts * moe.shared_expert_ffn / tp) if moe.shared_experts else {}
    if "moe" in modules:
        routed = compute.moe_routed_forward_time_s(model, device, precision, tokens, tp, ep, etp, routed_share(device, workload))
        redo += routed + gemms(shared) + ep_fwd_s
        return redo
    if "moe_act" in modules:
        rows = compute.routed_rows_per_gpu(model, tokens, tp)
        redo += compute.memory_bound_time_s(device, act_passes * rows * moe.expert_ffn * e)
    if "shared_experts" in modules:
        redo += gemms(shared)
    return redo


def layer_times(
    model: ModelSpec,
    system: SystemSpec,
    workload: Workload,
    tp: int,
    cp: int,
    micro_batch: int,
    sp: bool,
    recompute: str,
    ep: int = 1,
    moe_layer: bool = False,
    layouts: dict | None = None,
    cp_comm: str = CpComm.RING,
    etp: int = 1,
    tp_comm_overlap: bool = False,
    module_offload: bool = False,
) -> LayerTimes:
    """Forward and backward time of one transformer layer (dense, or MoE with ``moe_layer``) for
    one micro-batch on one GPU; ``layouts`` ({'tp', 'cp', 'ep', 'etp': Layout}, ``placement.group_layouts``)
    say where the groups sit (default: the default placement). Expert tensor parallelism's gathers
    count with the expert-parallel all-to-alls (``etp_comm_time_s``); the tensor-parallel
    collectives count what their GEMMs leave exposed (``tp_comm_exposed_times_s``)."""
    layouts = layouts or {}
    device = system.device
    gemm_fwd, attn_fwd, elem_fwd, elem_bwd = layer_compute_times_s(
        model, device, workload, tp, cp, micro_batch, sp, ep, moe_layer, etp
    )
    ep_fwd = ep_bwd = 0.0
    if moe_layer:
        etp_s = etp_comm_time_s(model, system, workload, tp, cp, micro_batch, etp, layouts.get("etp"))
        ep_fwd = ep_comm_time_s(model, system, workload, tp, cp, micro_batch, ep, "forward", layouts.get("ep")) + etp_s
        ep_bwd = ep_comm_time_s(model, system, workload, tp, cp, micro_batch, ep, "backward", layouts.get("ep")) + etp_s
    tp_fwd, tp_bwd = tp_comm_exposed_times_s(
        model,
        device,
        workload,
        tp,
        cp,
        micro_batch,
        sp,
        tp_comm_overlap,
        moe_layer,
        # Transformer Engine's userbuffers, not NCCL, carry an overlapped layer's collectives: no channel cap on them
        tp_comm_forward_times_s(
            model,
            system,
            workload,
            tp,
            cp,
            micro_batch,
            sp,
            layouts.get("tp"),
            None if tp_comm_overlap else workload.nccl_max_ctas.tp,
        ),
    )
    # the 16-bit kernel's times, as FP8 attention runs them where the workload sets it
    fp8_fwd, fp8_bwd = fp8_attention.pass_factors(model, device, workload, workload.seq_len / cp)  # keys per call
    backward_factor = compute.attention_core_backward_factor(device, workload.attention, workload.seq_len / cp)
    attn_fwd, attn_bwd = attn_fwd * fp8_fwd, attn_fwd * backward_factor * fp8_bwd
    if cp_comm == CpComm.A2A:
        cp_fwd, cp_bwd = cp_a2a_times_s(model, system, workload, tp, cp, micro_batch, layouts.get("cp"))
    elif cp_comm == CpComm.ALLGATHER:
        cp_fwd, cp_bwd = cp_allgather_times_s(model, system, workload, tp, cp, micro_batch, layouts.get("cp"))
    elif cp_comm == CpComm.A2A_P2P:
        cp_fwd, cp_bwd = cp_hierarchical_times_s(
            model, system, workload, tp, cp, micro_batch, attn_fwd, attn_bwd, layouts.get("cp")
        )
    else:
        cp_fwd = cp_exposed_forward_time_s(model, system, workload, tp, cp, micro_batch, attn_fwd, layouts.get("cp"))
        cp_bwd = cp_ring_backward_time_s(model, system, workload, tp, cp, micro_batch, attn_bwd, layouts.get("cp"))
    ep_fwd_shown, ep_bwd_shown = ep_exposed_times_s(
        device, workload, ep_fwd, ep_bwd, 3.0 * gemm_fwd + attn_fwd + attn_bwd + elem_fwd + elem_bwd
    )
    if recompute == "full":
        redo = gemm_fwd + attn_fwd + elem_fwd + tp_fwd + cp_fwd + ep_fwd
        if workload.checkpoint_early_stop and not moe_layer:  # the down projection is not redone
            seq_tokens = micro_batch * workload.seq_len / cp
            redo -= compute.checkpoint_tail_forward_time_s(model, device, workload.precision, seq_tokens, tp)
    elif recompute == "selective":
        redo = selective_recompute_time_s(
            model, device, workload, tp, cp, micro_batch, sp, ep, etp, moe_layer, attn_fwd, ep_fwd, cp_fwd
        )
    else:
        redo = 0.0
    # fine-grained offloading: each layer's offloaded inputs leave beside its forward and return beside its backward
    tokens = layer_tokens(workload, tp, cp, micro_batch, sp, moe_layer, etp)
    offloaded = offloaded_activation_bytes(model, workload, tokens, recompute, module_offload).copied
    gemm_bwd = 2.0 * gemm_fwd  # the input and the weight gradients
    compute_fwd, compute_bwd = gemm_fwd + attn_fwd + elem_fwd, gemm_bwd + attn_bwd + elem_bwd
    return LayerTimes(
        gemm_fwd=gemm_fwd,
        attention_fwd=attn_fwd,
        elementwise_fwd=elem_fwd,
        tp_comm_fwd=tp_fwd,
        cp_comm_fwd=cp_fwd,
        gemm_bwd=gemm_bwd,
        attention_bwd=attn_bwd,
        elementwise_bwd=elem_bwd,
        tp_comm_bwd=tp_bwd,
        cp_comm_bwd=cp_bwd,
        recompute=redo,
        ep_comm_fwd=ep_fwd_shown,
        ep_comm_bwd=ep_bwd_shown,
        offload_fwd=offload_copy_exposed_s(device, offloaded, compute_fwd) if offloaded else 0.0,
        offload_bwd=offload_copy_exposed_s(device, offloaded, compute_bwd + redo) if offloaded else 0.0,
    )


@dataclass(frozen=True)
class EdgeTimes:
    """Extra per-micro-batch seconds of the edge stages: the embedding on the first stage,
    the output layer and loss on the last. A backward is twice its forward (dgrad + wgrad), and the
    output layer's adds quantising its logit gradient when it runs in low precision (``edge_stage_times``)."""

    first_fwd: float
    last_fwd: float
    last_bwd: float

    @property
    def first_bwd(self) -> float:
        return 2.0 * self.first_fwd


def edge_stage_times(model: ModelSpec, system: SystemSpec, workload: Workload, tp: int, cp: int, micro_batch: int) -> EdgeTimes:
    """Forward times of the embedding (first stage) and of the output layer and loss (last stage), and
    the output layer's backward.

    The output layer is Megatron-Core's own ColumnParallelLinear, not a Transformer Engine module: 16-bit
    GEMMs; with ``workload.fp8_output_proj`` (MXFP8 only, as Megatron-Core allows) it is Transformer Engine's
    linear under the run's recipe: GEMMs at the run's precision plus quantising their inputs
    (``compute.logits_cast_bytes``); the fp32 cross-entropy is unchanged."""
    device = system.device
    tokens = micro_batch * workload.seq_len / cp
    gemm_precision = workload.precision if workload.fp8_output_proj else activation_precision(workload.precision)
    share = dense_share(device, workload) if workload.fp8_output_proj else 1.0
    logits = compute.logits_forward_time_s(model, device, gemm_precision, tokens, tp, share)
    cast_fwd = cast_bwd = 0.0
    if workload.fp8_output_proj:
        recipe = training_recipe(workload.precision, workload.low_precision_recipe)
        fwd_bytes, bwd_bytes = compute.logits_cast_bytes(model, tokens, tp, recipe)
        cast_fwd, cast_bwd = compute.memory_bound_time_s(device, fwd_bytes), compute.memory_bound_time_s(device, bwd_bytes)
    return EdgeTimes(
        first_fwd=compute.embedding_forward_time_s(model, device, workload.precision, tokens),
        last_fwd=logits + cast_fwd,
        last_bwd=2.0 * logits + cast_bwd,
    )


def pipeline_p2p_time_s(
    model: ModelSpec, system: SystemSpec, workload: Workload, tp: int, cp: int, micro_batch: int, pp_layout: Layout
) -> float:
    """Forward send + backward send of one micro-batch's boundary activation, seconds (pp > 1),
    between neighbouring stages of the pipeline group at ``pp_layout`` (the slowest hop sets the
    pace: across the scale-up domain if any pair of stages is).

    With tp > 1 each rank sends 1/t of the b·s·h tensor and the receivers all-gather it over
    the scale-up links (scatter/gather optimisation, Narayanan SC'21 Sec. 4.1).
    """
    e = bytes_per_element(activation_precision(workload.precision))
    nbytes = micro_batch * workload.seq_len / cp * model.hidden * e / tp
    return 2.0 * collective_time_s("p2p", nbytes, pp_layout, system, workload.nccl_max_ctas.pp)


def last_stage_embedding_params(model: ModelSpec, mtp_layers: int) -> float:
    """The embedding tables a last pipeline stage that is not also the first keeps beside its output layer's own,
    parameters (Megatron-Core, megatron/core/models/gpt/gpt_model.py): the input embedding for the
    multi-token-prediction modules (``mtp_process``: word and any position table) and, for tied embeddings, the
    output layer's weight (V x h), whose allocation only a first stage skips (``skip_weight_param_allocation =
    pre_process and share_embeddings_and_output_weights``): with both, both, each a trained parameter kept in step
    with the first stage's table."""
    tables = params.input_embedding_params(model) if mtp_layers else 0.0
    return tables + (model.vocab * model.hidden if model.tied_embeddings else 0.0)


@functools.lru_cache(maxsize=1 << 14)
def stage_params(
    model: ModelSpec, layers_on_stage: int, is_first: bool, is_last: bool, tp: int, moe_layers: int = 0, mtp_layers: int = 0
) -> float:
    """Parameters held by one GPU of a stage, routed experts aside (``stage_expert_params``): its
    layers split by tp, plus the embedding on the first stage and the output layer on the last
    (vocab-parallel over tp), with the embedding a last stage keeps besides for tied embeddings or
    ``mtp_layers`` MTP modules (``last_stage_embedding_params``)."""
    dense = layers_on_stage - moe_layers
    n = dense * params.layer_params(model) / tp
    if moe_layers:
        n += moe_layers * (params.layer_params(model, moe_layer=True) - params.expert_params_per_layer(model)) / tp
    if is_first:
        n += params.input_embedding_params(model) / tp
    if is_last:
        n += params.output_layer_params(model) / tp
        if not is_first:
            n += last_stage_embedding_params(model, mtp_layers) / tp
    return n


def stage_expert_params(model: ModelSpec, moe_layers: int, ep: int, etp: int = 1) -> float:
    """Routed-expert parameters on one GPU of a stage: E/ep experts per MoE layer, each split over
    the etp ranks of its expert tensor-parallel group (1/etp of every expert's FFN width)."""
    return moe_layers * params.expert_params_per_layer(model) / (ep * etp)


def expert_dp_group_size(mapping: Mapping) -> int:
    """Ranks that share (and reduce) the same expert weights: tp·dp·cp/(ep·etp) (Megatron-Core's
    expert data-parallel size)."""
    return mapping.tp * mapping.dp * mapping.cp // (mapping.ep * mapping.etp)


def optimizer_owned_params(zero: int, params_on_gpu: float, group_size: int) -> float:
    """Parameters whose Adam step this GPU runs, of ``params_on_gpu`` it holds that a data-parallel
    group of ``group_size`` ranks shares (dp·cp; tp·dp·cp/ep for routed experts): all of them with
    ZeRO-0, its 1/group_size shard with ZeRO-1 and above (Rajbhandari et al. SC'20)."""
    return params_on_gpu if zero == 0 else params_on_gpu / group_size


def grad_bytes(workload: Workload) -> float:
    """Bytes of one accumulated gradient element (``workload.grad_bytes``)."""
    return workload.grad_bytes


def dp_group_size(mapping: Mapping) -> int:
    """Ranks that share (and reduce) the same gradients: dp x cp (Megatron-Core)."""
    return mapping.dp * mapping.cp


def param_gather_bytes(workload: Workload) -> float:
    """Bytes per parameter the data-parallel all-gather moves: the 16-bit weights, or 1 when the run keeps
    its compute parameters in FP8 and gathers them so (Megatron-LM --fp8-param-gather: "Keep the compute param
    in fp8 (do not use any other intermediate dtype) and perform the param all-gather in fp8"; Transformer
    Engine's FP8 primary weights). [assumption: every gathered parameter is an FP8 GEMM weight; the norms and
    the embedding, a small share, travel in 16 bits in the real run]"""
    return 1.0 if workload.fp8_param_gather else WEIGHT_BYTES


def dp_comm_times_s(
    system: SystemSpec, workload: Workload, zero: int, params_on_gpu: float, group: Layout, ctas: int | None = None
) -> tuple[float, float]:
    """(gradient reduction, parameter gather) seconds of one step's data-parallel traffic for
    ``params_on_gpu`` parameters over one data-parallel group at ``group`` (the dp·cp group, or the
    expert data-parallel group for routed experts, whose traffic adds to it).

    ZeRO-0: one all-reduce of the gradients (counted as reduction, gather 0). ZeRO-1/2 and
    Megatron's distributed optimizer: reduce-scatter of gradients, all-gather of updated
    weights. ZeRO-3: per micro-batch an all-gather for forward and for backward plus a
    reduce-scatter (Rajbhandari et al. SC'20, Sec. 7), returned per micro-batch. How much of it
    the step exposes is composed in ``training_step.compose``: Megatron overlaps the reduce-scatter
    with the last micro-batch's backward and the all-gather with the next step's first forward
    (--overlap-grad-reduce, --overlap-param-gather), chunk by chunk over the cooldown and the warm-up
    with interleaving (``pipeline.exposed_dp_traffic``); ZeRO-3 prefetches each micro-batch's gathers
    behind that micro-batch's compute (DeepSpeed). On at most ``ctas`` NCCL channels (``nccl_channels``; None:
    uncapped).
    """
    if zero == 0:
        return collective_time_s("allreduce", params_on_gpu * grad_bytes(workload), group, system, ctas), 0.0
    return (
        collective_time_s("reducescatter", params_on_gpu * grad_bytes(workload), group, system, ctas),
        collective_time_s("allgather", params_on_gpu * param_gather_bytes(workload), group, system, ctas),
    )


def stage_state_bytes(
    model: ModelSpec, workload: Workload, mapping: Mapping, params_on_gpu: float, expert_params_on_gpu: float = 0.0
) -> dict:
    """Weights, gradients and optimizer states on one GPU of a stage, bytes, by component; expert
    weights shard their states over the expert data-parallel group tp·dp·cp/ep. Gradients count the
    accumulation buffer (``workload.grad_bytes``) and any 16-bit .grad kept beside it
    (``workload.lowp_grad_bytes``); under ZeRO-3, the unsharded working set (``zero3_buffers``). The
    ``mapping.optimizer_offload`` share of the optimizer state this rank owns is held on the host
    instead (``stage_host_bytes``)."""
    g = grad_bytes(workload)
    weights = grads = lowp_grads = total = 0.0
    for count, n in ((params_on_gpu, dp_group_size(mapping)), (expert_params_on_gpu, expert_dp_group_size(mapping))):
        if count:
            total += (
                memory.state_bytes_per_param(
                    mapping.zero, n, WEIGHT_BYTES, g, workload.adam_moment_bytes, workload.master_weight_bytes
                )
                * count
            )
            weights += count * WEIGHT_BYTES / (n if mapping.zero == 3 else 1)
            grads += count * g / (n if mapping.zero >= 2 else 1)
            # a 16-bit .grad the framework keeps beside the accumulation buffer: one per parameter held
            lowp_grads += count * workload.lowp_grad_bytes / (n if mapping.zero == 3 else 1)
    optimizer = (total - weights - grads) * (1.0 - mapping.optimizer_offload)  # the rest waits on the host
    grads += lowp_grads
    if mapping.weight_offload:  # ZeRO-3's weight shard waits on the host; the gathered layers are the zero3 buffers
        weights = 0.0
    out = {"weights": weights, "gradients": grads, "optimizer": optimizer}
    if mapping.zero == 3:
        out["zero3_buffers"] = memory.zero3_gather_buffer_bytes(
            workload.zero3_gather,
            params.layer_params(model) / mapping.tp,
            # every stage's: ZeRO-3 runs without a pipeline (DeepSpeed's engine), the one stage holds the tables
            params.largest_module_params_per_gpu(model, True, mapping.tp, mapping.etp),
            WEIGHT_BYTES,
        )
    return out


def stage_host_bytes(workload: Workload, mapping: Mapping, params_on_gpu: float, expert_params_on_gpu: float = 0.0) -> float:
    """Host memory one GPU of a stage uses for what it offloads, bytes: the ``mapping.optimizer_offload``
    share of the parameters it owns (``optimizer_owned_params``: its 1/(data-parallel group) shard of the
    dense and the expert parameters) at ``memory.host_optimizer_bytes_per_param`` each (Megatron-Core's
    HybridDeviceOptimizer), and with ``mapping.weight_offload`` that shard's weights."""
    owned = optimizer_owned_params(mapping.zero, params_on_gpu, dp_group_size(mapping)) + optimizer_owned_params(
        mapping.zero, expert_params_on_gpu, expert_dp_group_size(mapping)
    )
    host = mapping.optimizer_offload * owned * memory.host_optimizer_bytes_per_param()
    if mapping.weight_offload:  # ZeRO-3: the owned shard is the rank's shard of the weights
        host += owned * WEIGHT_BYTES
    return host


def optimizer_offload_problem(device: DeviceSpec, zero: int, share: float) -> str | None:
    """Why the optimizer state cannot be offloaded at ``share`` here, or None when it can:
    Megatron-Core offloads from its distributed optimizer (ZeRO-1 and above; --optimizer-cpu-offload
    needs --use-distributed-optimizer and --use-precision-aware-optimizer), and the host copies need
    the device's host link and the CPU step its host DRAM bandwidth."""
    if not share:
        return None
    if zero == 0:
        return "optimizer offloading needs zero 1 or more (Megatron-Core offloads from the distributed optimizer)"
    for key, value in (
        ("host_bytes_per_s", device.host_bytes_per_s),
        ("host_memory_bytes_per_s", device.host_memory_bytes_per_s),
    ):
        if value <= 0:
            return f"device {device.name} gives no {key}, which optimizer offloading needs"
    return None


def weight_offload_problem(device: DeviceSpec, zero: int, offload: bool) -> str | None:
    """Why ZeRO-3's shards cannot wait on the host here, or None when they can: DeepSpeed offloads
    parameters only under ZeRO-3 (offload_param), and the copies need the device's host link."""
    if not offload:
        return None
    if zero != 3:
        return "weight offloading needs zero 3 (DeepSpeed offloads parameter shards only under ZeRO-3, offload_param)"
    if device.host_bytes_per_s <= 0:
        return f"device {device.name} gives no host_bytes_per_s, which weight offloading needs"
    return None


def weight_offload_copy_time_s(device: DeviceSpec, shard_params: float) -> float:
    """Seconds one ZeRO-3 pass spends copying a rank's weight shard of ``shard_params`` parameters up from
    the host before its all-gather (DeepSpeed offload_param, ZeRO-Infinity, Rajbhandari et al. SC'21).
    Gradients stay on the GPU (they reach the host only with the optimizer: ``optimizer_offload``)."""
    return shard_params * WEIGHT_BYTES / device.host_bytes_per_s


@functools.cache
def harmonic_number(n: int) -> float:
    """H_n = 1 + 1/2 + ... + 1/n."""
    return math.fsum(1.0 / k for k in range(1, n + 1))


def straggler_stretch(num_gpus: int, straggler: float) -> float:
    """Factor by which waiting for the slowest of ``num_gpus`` GPUs stretches a synchronous step,
    dimensionless: each GPU's step is delayed by an independent, exponentially distributed amount of
    mean ``straggler`` x the step (OS jitter, clocks, congestion), and the step waits for the largest,
    whose mean exceeds one GPU's by ``straggler`` x (H_N - 1) (the expected maximum of N i.i.d.
    exponentials is mean x H_N; David and Nagaraja, Order Statistics, 2003, Sec. 4.6). One GPU's own
    delay is in the calibrated efficiencies; the stretch grows as ln N (H_N - 1 ~ ln N - 0.42)."""
    return 1.0 + straggler * (harmonic_number(num_gpus) - 1.0)


def offload_problem(model: ModelSpec, device: DeviceSpec, pp: int, recompute: str, offload_layers: int) -> str | None:
    """Why Megatron-Core cannot offload ``offload_layers`` layers' activations here, or None when it
    can: it needs a link to host memory, no pipeline parallelism, no recomputation, and fewer layers
    than the model's (TransformerConfig rejects the rest)."""
    if not offload_layers:
        return None
    if device.host_bytes_per_s <= 0:
        return f"device {device.name} gives no host_bytes_per_s (its link to host memory), which offloading needs"
    if pp > 1:
        return "activation offloading needs pp 1 (Megatron-Core has no pipelined CPU offloading)"
    if recompute != Recompute.NONE:
        return "activation offloading needs recompute none (Megatron-Core rejects both)"
    body = model.layers - (model.moe.first_dense_layers if model.moe is not None else 0)
    if offload_layers >= min(body + 1, model.layers):
        return (
            f"offload_layers {offload_layers} must be below the model's {model.layers} layers (and at most its {body} "
            "layers after the leading dense ones)"
        )
    return None


def check_cp_comm(model: ModelSpec, tp: int, cp: int, cp_comm: str, cp_layout: Layout | None = None) -> None:
    """ProblemError unless ``cp_comm`` is a CpComm that the model's heads allow: the all-to-all gives
    each of the tp·cp ranks whole query and key/value heads (Megatron-Core asserts it); hierarchically
    (a2a+p2p, on the CP group at ``cp_layout``, which it needs) each of the tp·a ranks of its all-to-all level."""
    if cp_comm not in tuple(CpComm):
        raise ProblemError(f"{cp_comm!r} is not allowed; allowed: {allowed(CpComm)}", field="mapping.cp_comm")
    if cp == 1 or cp_comm not in (CpComm.A2A, CpComm.A2A_P2P):
        return
    if cp_comm == CpComm.A2A_P2P and cp_layout.placement is not None:
        raise ProblemError(
            "a2a+p2p splits the CP group at the scale-up domain, and this system's topology places the groups "
            "itself (no two-tier domain); use cp_comm ring, a2a or allgather",
            field="mapping.cp_comm",
        )
    if cp_comm == CpComm.A2A:
        a, what = cp, "a2a context parallelism needs tp·cp"
    else:
        a = hierarchical_cp_sizes(cp_layout)[0]
        what = f"a2a+p2p context parallelism at its all-to-all level of {a} CP ranks per scale-up domain needs tp·a"
    if model.heads % (tp * a) or model.kv_heads % (tp * a):
        raise ProblemError(
            f"{what} = {tp * a} to divide the {model.heads} heads and the {model.kv_heads} kv_heads; use cp_comm ring",
            field="mapping.cp_comm",
        )


def check_grid(model: ModelSpec, system: SystemSpec, workload: Workload, tp: int, pp: int, dp: int, cp: int) -> None:
    """Divisibility rules of the parallel grid alone (Megatron-Core's): ProblemError if broken."""
    if tp * pp * dp * cp != system.num_gpus:
        raise ProblemError(
            f"tp·pp·dp·cp = {tp}·{pp}·{dp}·{cp} = {tp * pp * dp * cp} must equal system.num_gpus = {system.num_gpus}",
            field="mapping",
        )
    if model.heads % tp or model.kv_heads % tp:
        raise ProblemError(
            f"tp {tp} must divide the {model.heads} heads and the {model.kv_heads} kv_heads (Megatron-Core)", field="mapping.tp"
        )
    if workload.global_batch % dp:
        raise ProblemError(f"global_batch {workload.global_batch} is not divisible by dp {dp}", field="mapping.dp")
    if cp > 1 and workload.seq_len % (2 * cp):
        raise ProblemError(
            f"seq_len {workload.seq_len} must be divisible by 2·cp = {2 * cp} (load-balanced causal split)", field="mapping.cp"
        )
    if pp > model.layers:
        raise ProblemError(f"pp {pp} exceeds the {model.layers} layers", field="mapping.pp")


def check_expert_grid(model: ModelSpec, tp: int, dp: int, cp: int, ep: int, etp: int) -> None:
    """ProblemError unless the expert grid is one Megatron-Core builds: ep divides the experts, etp
    the expert FFN width, and ep·etp the dense grid's tp·dp·cp ranks of a stage (the expert data-
    parallel size tp·dp·cp/(ep·etp) is then whole); a dense model has neither."""
    if model.moe is None:
        for key, value, name in (("ep", ep, "expert parallelism"), ("etp", etp, "expert tensor parallelism")):
            if value != 1:
                raise ProblemError(
                    f"{name} needs a mixture-of-experts model; this model is dense: use {key} 1", field=f"mapping.{key}"
                )
        return
    ranks = tp * dp * cp
    if model.moe.experts % ep or ranks % ep:
        raise ProblemError(f"ep {ep} must divide the {model.moe.experts} experts and tp·dp·cp = {ranks}", field="mapping.ep")
    if model.moe.expert_ffn % etp or ranks % (ep * etp):
        raise ProblemError(
            f"etp {etp} must divide the expert FFN width {model.moe.expert_ffn}, and ep·etp = {ep * etp} must divide "
            f"tp·dp·cp = {ranks} (Megatron-Core's expert grid)",
            field="mapping.etp",
        )


def recompute_module_set(value, field: str, source: str | None = None) -> tuple:
    """``value`` (one module, or a list of them) as the tuple of choices.RecomputeModule values selective recomputation
    redoes, each once; ProblemError naming ``field`` for an empty list or a module Megatron-Core does not know."""
    modules = list(value) if isinstance(value, (list, tuple)) else [value]
    if not modules:
        raise ProblemError(
            f"an empty list recomputes nothing (use mapping.recompute none); allowed: {allowed(RecomputeModule)}",
            source=source,
            field=field,
        )
    return tuple(dict.fromkeys(str(checks.choice(module, RecomputeModule, field, source)) for module in modules))


def check_mapping(model: ModelSpec, system: SystemSpec, workload: Workload, mapping: Mapping) -> None:
    """Raise ProblemError naming the mapping field when the mapping cannot run this problem."""
    m = mapping
    for name in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "vpp"):
        value = getattr(m, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProblemError(f"must be a positive integer, got {value!r}", field=f"mapping.{name}")
    if m.recompute not in tuple(Recompute):
        raise ProblemError(f"{m.recompute!r} is not allowed; allowed: {allowed(Recompute)}", field="mapping.recompute")
    if isinstance(m.zero, bool) or m.zero not in tuple(ZeroStage):
        raise ProblemError(f"{m.zero!r} is not allowed; allowed: {allowed(ZeroStage)}", field="mapping.zero")
    if isinstance(m.etp, bool) or not isinstance(m.etp, int) or m.etp < 1:
        raise ProblemError(f"must be a positive integer, got {m.etp!r}", field="mapping.etp")
    check_expert_grid(model, m.tp, m.dp, m.cp, m.ep, m.etp)
    reason = fused_grouped_mlp_etp_problem((m.etp,)) if workload.fused_grouped_mlp else None
    if reason is not None:
        raise ProblemError(reason, field="mapping.etp")
    check_grid(model, system, workload, m.tp, m.pp, m.dp, m.cp)
    check_placement(m.placement, m.tp, m.cp, m.dp, m.pp, m.ep, model.moe is not None, m.etp)
    check_system(system)
    if workload.global_batch % (m.dp * m.micro_batch):
        raise ProblemError(
            f"global_batch {workload.global_batch} is not divisible by dp·micro_batch = {m.dp}·{m.micro_batch}",
            field="mapping.micro_batch",
        )
    if m.vpp > 1 and m.pp == 1:
        raise ProblemError("vpp > 1 (interleaved schedule) needs pp > 1", field="mapping.vpp")
    microbatches = workload.global_batch // (m.dp * m.micro_batch)
    if not isinstance(m.dualpipe, bool):
        raise ProblemError(f"must be true or false, got {m.dualpipe!r}", field="mapping.dualpipe")
    reason = dualpipe_problem(m.pp, m.vpp, microbatches) if m.dualpipe else None
    if reason is not None:
        raise ProblemError(reason, field="mapping.dualpipe")
    if m.vpp > 1 and microbatches % m.pp:
        # Megatron-LM's interleaved schedule runs micro-batches in groups of pp (schedules.py)
        raise ProblemError(
            f"the interleaved schedule (vpp {m.vpp}) needs the {microbatches} micro-batches per step to be "
            f"a multiple of pp {m.pp}",
            field="mapping.vpp",
        )
    layers = stage_layer_counts(model.layers, m.pp, m.first_stage_layers, m.last_stage_layers)
    lead = model.moe.first_dense_layers if model.moe is not None else 0
    if layers[0] < lead:
        raise ProblemError(
            f"the first stage holds {layers[0]} layers, fewer than the model's {lead} leading dense layers, "
            "which all sit on it; set mapping.first_stage_layers to at least that",
            field="mapping.first_stage_layers",
        )
    hierarchical = m.cp_comm == CpComm.A2A_P2P and m.cp > 1  # its check needs where the CP group sits
    check_cp_comm(model, m.tp, m.cp, m.cp_comm, group_layouts(system, m)["cp"] if hierarchical else None)
    if m.recompute_modules is not None:
        recompute_module_set(m.recompute_modules, "mapping.recompute_modules")
        if workload.fused_grouped_mlp:
            reason = unfused_recompute_problem(m.recompute_modules, "mapping.recompute_modules")
            if reason is not None:
                raise ProblemError(reason, field="mapping.recompute_modules")
    workload = m.chosen_workload(workload)  # the mapping's choices of what the workload states
    if m.moe_a2a_overlap is not None and not isinstance(m.moe_a2a_overlap, bool):
        raise ProblemError(f"must be true or false, got {m.moe_a2a_overlap!r}", field="mapping.moe_a2a_overlap")
    if model.moe is not None and m.a2a_overlapped(workload):
        reason = a2a_overlap_problem(m.pp, m.vpp, m.dualpipe, m.recompute, workload.recompute_modules, workload.mtp_layers)
        if reason is not None:
            origin = "workload" if m.moe_a2a_overlap is None else "mapping"
            raise ProblemError(reason, field=f"{origin}.moe_a2a_overlap")
    if m.tp_comm_overlap and not (m.sp and m.tp > 1):
        raise ProblemError(
            "tensor-parallel communication overlap needs tp > 1 and sp true (Megatron-LM asserts sequence parallelism)",
            field="mapping.tp_comm_overlap",
        )
    if isinstance(m.optimizer_offload, str):
        raise ProblemError(f"must be a share from 0 to 1, got {m.optimizer_offload!r}", field="mapping.optimizer_offload")
    checks.share(m.optimizer_offload, "mapping.optimizer_offload")
    reason = optimizer_offload_problem(system.device, m.zero, m.optimizer_offload)
    if reason is not None:
        raise ProblemError(reason, field="mapping.optimizer_offload")
    if not isinstance(m.weight_offload, bool):
        raise ProblemError(f"must be true or false, got {m.weight_offload!r}", field="mapping.weight_offload")
    reason = weight_offload_problem(system.device, m.zero, m.weight_offload)
    if reason is not None:
        raise ProblemError(reason, field="mapping.weight_offload")
    reason = offload_problem(model, system.device, m.pp, m.recompute, m.offload_layers)
    if reason is not None:
        raise ProblemError(reason, field="mapping.offload_layers")
    if not isinstance(m.module_offload, bool):
        raise ProblemError(f"must be true or false, got {m.module_offload!r}", field="mapping.module_offload")
    if m.module_offload:
        if not workload.offload_modules:
            raise ProblemError("module offloading needs workload.offload_modules", field="mapping.module_offload")
        reason = module_offload_problem(
            model, system.device, workload.offload_modules, m.offload_layers, m.recompute, workload.recompute_modules
        )
        if reason is not None:
            raise ProblemError(reason, field="mapping.module_offload")
    if not vpp_divides_stages(layers, m.vpp, workload.mtp_layers, m.uneven_chunks):
        hint = (
            "each chunk needs at least one layer"
            if m.uneven_chunks
            else "the first and last stage may count the embedding or loss as a layer; "
            "mapping.uneven_chunks: true allows chunks of unequal size (a pipeline layout)"
        )
        raise ProblemError(
            f"vpp {m.vpp} does not split the stages' layers {layers} into equal chunks ({hint})", field="mapping.vpp"
        )
