"""Expert-parallel token dispatch and combine: how many copies of each token cross which tier.

Two dispatchers, as Megatron-Core offers them:

- ``alltoall`` (Megatron-Core MoEAlltoAllTokenDispatcher): tokens are permuted by expert and
  exchanged with one all-to-all, so a token routed to k experts travels k times, each copy to the
  rank holding that expert (GShard, Lepikhin et al. 2020). Both directions carry activations at
  the training precision's activation width.
- ``deepep`` (DeepEP, DeepSeek-AI 2025; DeepSeek-V3 report, arXiv 2412.19437, Sec. 3.2.2): a
  token crosses the scale-out network once per destination node holding any of its experts and
  is forwarded inside the node over NVLink once per destination GPU; with FP8 training the
  dispatch may be sent in FP8 with one fp32 scale per 128 elements (Sec. 3.3.3, ``workload.moe_fp8_dispatch``),
  the combine in BF16; the copies leaving the node go at the fraction of the NIC's line rate DeepEP's
  kernels were measured to reach (``dispatcher_system``).
  Node-limited routing (Sec. 2.1.2) caps the destination nodes per token.

Experts are spread evenly over the ranks of the expert-parallel group (E/ep per rank) and routing
is balanced (the benchmark runs force it); a token's top-k experts are k distinct experts drawn
uniformly, so the chance it needs a given set of g experts is hypergeometric.
"""

from __future__ import annotations

import dataclasses
import functools
from math import comb

from . import comm, compute
from .choices import MoeDispatcher
from .placement import Layout, collective_time_s
from .precision import activation_precision, bytes_per_element
from .specs import ModelSpec, SystemSpec, Workload

FP8_SCALE_BYTES_PER_ELEMENT = 4.0 / 128.0  # one fp32 scale per 1x128 block (DeepSeek-V3 Sec. 3.3.2)
# SMs the all-to-all kernels take from the computation they overlap (DeepSeek-V3 Sec. 3.2.2: "only 20 SMs
# are sufficient"; DeepEP's Buffer.num_sms default 20 and Megatron-Core's moe_deepep_num_sms 20, HybridEP's
# 24; NCCL's all-to-all under Megatron-Core's alltoall dispatcher: the same count [assumption])
A2A_COMM_SMS = 20


def expert_set_hit_probability(experts: int, top_k: int, set_size: int) -> float:
    """Probability that a token's k distinct experts, drawn uniformly from E, include at least one
    of a given ``set_size`` experts: 1 - C(E-g, k)/C(E, k) (hypergeometric), dimensionless."""
    if set_size >= experts:
        return 1.0
    return 1.0 - comb(experts - set_size, top_k) / comb(experts, top_k)


def dispatch_copies_per_token(model: ModelSpec, ep: int, local: int, dispatcher: MoeDispatcher) -> tuple[float, float]:
    """(copies sent inside the scale-up domain, copies sent across it) per routed token, for an
    expert-parallel group of ``ep`` ranks with ``local`` of them per scale-up domain.

    alltoall: k copies, spread evenly over the ep ranks: k(local-1)/ep stay in the domain (the
    copy to the rank itself is free), k(ep-local)/ep leave it.
    deepep: one copy per distinct remote node hit, (N-1)·p_node with N = ep/local nodes, and the
    NVLink forwards, one per distinct GPU hit, ep·p_gpu, other than the receiving one (by symmetry
    each GPU forwards as much as it originates); node-limited routing scales both down to the M
    nodes a token may reach.
    """
    moe = model.moe
    if dispatcher == MoeDispatcher.ALLTOALL:
        return moe.top_k * (local - 1) / ep, moe.top_k * (ep - local) / ep
    nodes = ep // local
    p_node = expert_set_hit_probability(moe.experts, moe.top_k, moe.experts // nodes)
    p_gpu = expert_set_hit_probability(moe.experts, moe.top_k, moe.experts // ep)
    limit = 1.0
    if moe.max_nodes_per_token and nodes * p_node > moe.max_nodes_per_token:
        limit = moe.max_nodes_per_token / (nodes * p_node)
    across = (nodes - 1) * p_node * limit
    inside = ep * p_gpu * limit * (local - 1) / local  # a hit GPU that is not the receiving one
    return inside, across


def fp8_dispatch(workload: Workload) -> bool:
    """Whether the FP8 training forward dispatch travels in FP8 with its block scales
    (``workload.moe_fp8_dispatch``): the tokens are quantised before the dispatch, and the rows that
    arrive are the experts' FP8 GEMM input (DeepSeek-V3 Sec. 3.3.3, "Low-Precision Communication").
    DeepSeek's framework does; Megatron-Core's DeepEP and HybridEP dispatchers send 16-bit tokens and
    quantise after them (NVIDIA Megatron-LM, docs/discussions/deepseek-v3-gb200-optimization: FP8 "EP
    Dispatch (which [is] not yet supported)"), so it is off unless the workload says so."""
    return workload.moe_fp8_dispatch and workload.moe_dispatcher == MoeDispatcher.DEEPEP and workload.precision == "fp8"


def local_sort_bytes(model: ModelSpec, workload: Workload, rows: float, ep: int) -> float:
    """Bytes one GPU streams per pass (forward, or backward) to sort the ``rows`` routed rows it received by local
    expert and to restore their order before the combine, bytes: Megatron-Core's alltoall dispatcher receives
    each rank's rows grouped by source rank and, with more than one local expert, reorders them by expert
    ("Permutation 2", ``sort_chunks_by_idxs`` in ``MoEAlltoAllTokenDispatcher.dispatch_postprocess``; with token
    drop a transpose to the same effect) and back ("Unpermutation 2", ``combine_preprocess``): read and write
    h per row each way (``compute.row_permutation_bytes``); the backward sorts the gradients the same two ways. DeepEP
    (the flex dispatcher) delivers a token once per destination rank and permutes it there into expert order,
    which ``compute.elementwise_forward_bytes`` counts with the permutation every dispatcher does: no second sort."""
    if workload.moe_dispatcher != MoeDispatcher.ALLTOALL or model.moe.experts // ep <= 1:
        return 0.0
    return compute.row_permutation_bytes(model, rows, workload.precision)


def dispatch_bytes_per_element(workload: Workload, direction: str) -> float:
    """Bytes per hidden element of a token copy: the activation width, except that DeepEP sends
    the FP8 training forward dispatch in FP8 plus its block scales (``fp8_dispatch``);
    ``direction`` is ``dispatch`` or ``combine`` (the backward pass sends gradients in BF16)."""
    if fp8_dispatch(workload) and direction == "dispatch":
        return 1.0 + FP8_SCALE_BYTES_PER_ELEMENT
    return bytes_per_element(activation_precision(workload.precision))


@functools.lru_cache(maxsize=64)
def dispatcher_system(system: SystemSpec, dispatcher: MoeDispatcher) -> SystemSpec:
    """``system`` as ``dispatcher``'s kernels see it: DeepEP's copies leave a scale-up domain at the
    fraction of the NIC's line rate its kernels were measured to reach (the system file's
    ``scale_out.deepep_efficiency``, benchmarks/deepep_efficiency.py), on the two tiers and on a
    topology the model follows alike; NCCL's all-to-all, and DeepEP on a system without the
    measurement, at the tier's fitted efficiency."""
    out = system.scale_out
    if dispatcher != MoeDispatcher.DEEPEP or not out.deepep_efficiency:
        return system
    return dataclasses.replace(system, scale_out=dataclasses.replace(out, efficiency=out.deepep_efficiency))


def alltoall_time_s(
    row_bytes: float,
    inside: float,
    across: float,
    where: Layout,
    system: SystemSpec,
    dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL,
) -> float:
    """One all-to-all of token copies over the expert-parallel group at ``where``, seconds, on the
    network as ``dispatcher``'s kernels see it (``dispatcher_system``): each rank sends ``inside``
    copies of ``row_bytes`` per token to peers in its scale-up domain and ``across`` to other domains
    (``dispatch_copies_per_token``). On two tiers, both tiers at once (``comm.alltoall_split_time_s``);
    on a topology the model follows, the copies leaving each rank timed as an all-to-all spread evenly
    over the group (a send buffer of which (ep-1)/ep leaves the rank; DeepEP's node deduplication
    counts in the volume, not in its split)."""
    ep = where.n
    if ep <= 1:
        return 0.0
    system = dispatcher_system(system, dispatcher)
    if where.placement is None:
        return comm.alltoall_split_time_s(row_bytes * inside, row_bytes * across, ep, where.local, system)
    return collective_time_s("alltoall", row_bytes * (inside + across) * ep / (ep - 1), where, system)
