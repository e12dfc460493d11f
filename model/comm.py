"""Collective communication on a two-tier network (scale-up domain, scale-out fabric).

Alpha-beta costs of ring algorithms (Thakur, Rabenseifner & Gropp, IJHPCA 2005; Patarasuk &
Yuan 2009): a ring all-reduce of S bytes over n ranks moves 2(n-1)/n·S per rank in 2(n-1)
steps; reduce-scatter and all-gather move (n-1)/n·S in n-1 steps. S is the full buffer, as
nccl-tests counts it. A group that spans several scale-up domains runs hierarchically
(reduce-scatter inside each domain, the collective across domains on 1/k of the data, all-gather
inside; the 2D algorithm of NCCL's CollNet / Jia et al. 2018), each GPU using its own NIC.
The training model uses these on systems whose topology is such a two-tier network, with each
group's members per domain from its placement (``model/placement.py``).
"""

from __future__ import annotations

from .specs import NetworkTier, SystemSpec


def ring_reduce_scatter_time_s(nbytes: float, n: int, tier: NetworkTier) -> float:
    """Ring reduce-scatter (or all-gather) of an ``nbytes`` buffer over ``n`` ranks, seconds."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) * tier.latency_s + (n - 1) / n * nbytes / tier.effective_bytes_per_s


def ring_allreduce_time_s(nbytes: float, n: int, tier: NetworkTier) -> float:
    """Ring all-reduce of an ``nbytes`` buffer over ``n`` ranks, seconds (= RS + AG)."""
    return 2.0 * ring_reduce_scatter_time_s(nbytes, n, tier)


def ranks_per_domain(group_size: int, stride: int, system: SystemSpec) -> int:
    """How many members of a parallel group share one scale-up domain.

    A group whose consecutive members sit ``stride`` ranks apart has domain/stride members per
    domain; the strides follow from the mapping's placement (``model/placement.py``; Megatron's
    default lays tp fastest, then cp, dp, pp).
    """
    return members_per_domain(group_size, stride, system.scale_up_domain)


def members_per_domain(group_size: int, stride: int, domain: int) -> int:
    """``ranks_per_domain`` for a scale-up domain of ``domain`` GPUs."""
    if stride >= domain:
        return 1
    return max(1, min(group_size, domain // stride))


def reduce_scatter_time_s(nbytes: float, group_size: int, stride: int, system: SystemSpec) -> float:
    """Reduce-scatter (or all-gather, same cost) on the tiers the group spans, seconds."""
    return reduce_scatter_local_time_s(nbytes, group_size, ranks_per_domain(group_size, stride, system), system)


def reduce_scatter_local_time_s(nbytes: float, group_size: int, local: int, system: SystemSpec) -> float:
    """Reduce-scatter (or all-gather) of a group with ``local`` members per scale-up domain, seconds:
    a ring inside each domain, then one across domains on 1/local of the data (hierarchical)."""
    remote = group_size // local
    inside = ring_reduce_scatter_time_s(nbytes, local, system.scale_up)
    across = ring_reduce_scatter_time_s(nbytes / local, remote, system.scale_out)
    return inside + across


def allreduce_time_s(nbytes: float, group_size: int, stride: int, system: SystemSpec) -> float:
    """All-reduce on the tiers the group spans (hierarchical when it leaves the domain), seconds."""
    return 2.0 * reduce_scatter_time_s(nbytes, group_size, stride, system)


def p2p_time_s(nbytes: float, crosses_domain: bool, system: SystemSpec) -> float:
    """One point-to-point transfer of ``nbytes`` (pipeline send/recv), seconds."""
    if nbytes <= 0:
        return 0.0
    tier = system.scale_out if crosses_domain else system.scale_up
    return tier.latency_s + nbytes / tier.effective_bytes_per_s


def tier_name(group_size: int, stride: int, system: SystemSpec) -> str:
    """'scale_up' if the whole group sits in one scale-up domain, else 'scale_out'."""
    return "scale_up" if ranks_per_domain(group_size, stride, system) >= group_size else "scale_out"


def alltoall_split_time_s(inside_bytes: float, across_bytes: float, group_size: int, local: int, system: SystemSpec) -> float:
    """All-to-all in which each rank sends ``inside_bytes`` to peers in its own scale-up domain
    and ``across_bytes`` to other domains, seconds: both tiers at once at their effective rates
    (the slower sets the pace), plus n-1 pairwise steps of latency on the slower tier the group
    uses (pairwise exchange, Thakur et al. 2005, Sec. 4.5)."""
    if group_size <= 1 or inside_bytes + across_bytes <= 0:
        return 0.0
    inside = inside_bytes / system.scale_up.effective_bytes_per_s
    across = across_bytes / system.scale_out.effective_bytes_per_s
    tier = system.scale_out if local < group_size else system.scale_up
    return (group_size - 1) * tier.latency_s + max(inside, across)


def alltoall_time_s(nbytes: float, group_size: int, stride: int, system: SystemSpec) -> float:
    """All-to-all of ``nbytes`` per rank, spread evenly over the group, seconds: each rank keeps
    1/n and sends the rest, the part bound for its own scale-up domain over the scale-up links and
    the part for other domains through its NIC (``alltoall_split_time_s``)."""
    if group_size <= 1 or nbytes <= 0:
        return 0.0
    local = ranks_per_domain(group_size, stride, system)
    return alltoall_split_time_s(
        nbytes * (local - 1) / group_size, nbytes * (group_size - local) / group_size, group_size, local, system
    )
