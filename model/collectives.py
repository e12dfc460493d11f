"""Collective algorithms on a topology: the alpha-beta time of each algorithm on the levels a group
occupies, with contention where its traffic crosses an oversubscribed tier.

Sizes follow nccl-tests (doc/PERFORMANCE.md): ``nbytes`` is the vector reduced (all-reduce), the
whole gathered or scattered array (all-gather, reduce-scatter: sendcount or recvcount x n), one
rank's send buffer (all-to-all), one message (p2p). Every time is steps x latency + bytes /
bandwidth (Hockney, Parallel Computing 20, 1994); a bandwidth is the link rate times the level's
``efficiency`` (data in the system file, never a constant here). Groups are laid out compactly by
``Topology.place``; ``concurrent`` identical groups may run the same collective at once (the DP
groups of a mapping), which matters where they share an oversubscribed tier.

Through a hierarchy, NCCL runs one ring (or tree) per NIC rail, so a ring across nodes with k
group members per node has k rings, each crossing a node boundary through its own member's NIC:
the per-rank bandwidth at that level is k x the NIC's (NCCL docs, "rings"; nccl-tests issue 160:
multi-node ring busbw is the node's total NIC bandwidth).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .errors import ProblemError
from .topology import DIRECT, Placement, Topology, ring_count_full_mesh

OPS = ("allreduce", "allgather", "reducescatter", "alltoall", "p2p")
ALGORITHMS = {
    "allreduce": ("in_network", "ring", "double_binary_tree", "halving_doubling", "hierarchical", "torus"),
    "reducescatter": ("ring", "halving_doubling", "hierarchical", "torus"),
    "allgather": ("ring", "halving_doubling", "hierarchical", "torus"),
    "alltoall": ("direct", "pairwise"),
    "p2p": ("direct",),
}
ALL_ALGORITHMS = tuple(dict.fromkeys(a for names in ALGORITHMS.values() for a in names))


class NotApplicable(Exception):
    """An algorithm cannot run on this group (the message says why)."""


def busbw_factor(op: str, n: int, in_network: bool = False) -> float:
    """nccl-tests bus-bandwidth factor (doc/PERFORMANCE.md; src/all_reduce.cu): busbw = algbw x
    factor. All-reduce 2(n-1)/n, or (n-1)/(n+1) when NCCL_ALGO names an in-network algorithm
    (NVLS, NVLSTree); reduce-scatter, all-gather, all-to-all (n-1)/n; send/recv 1."""
    if op == "allreduce":
        return (n - 1) / (n + 1) if in_network else 2.0 * (n - 1) / n
    return 1.0 if op == "p2p" else (n - 1) / n


@dataclass(frozen=True)
class CollectiveTime:
    """One collective: the algorithm used, its time, and every applicable algorithm's time."""

    op: str
    algorithm: str
    nbytes: float
    n: int
    time_s: float
    fixed: bool  # the caller or the system chose the algorithm (as NCCL_ALGO does)
    candidates: tuple  # ((algorithm, time_s), ...) of every applicable algorithm

    @property
    def algbw_bytes_per_s(self) -> float:
        """nccl-tests algorithm bandwidth S/t, bytes/s."""
        return self.nbytes / self.time_s

    @property
    def busbw_bytes_per_s(self) -> float:
        """nccl-tests bus bandwidth, bytes/s: the in-network factor only when the algorithm was fixed
        to in_network, as nccl-tests applies it only when NCCL_ALGO names NVLS."""
        return self.algbw_bytes_per_s * busbw_factor(self.op, self.n, self.fixed and self.algorithm == "in_network")


# ---- per-level quantities ---------------------------------------------------------------------


def _spanned(pl: Placement) -> list[int]:
    return [i for i, e in enumerate(pl.extents) if e > 1]


def _latency_s(topo: Topology, pl: Placement, level: int) -> float:
    """Latency of the farthest hop of the group at ``level`` (link, plus fat-tree tiers climbed; on a
    torus or ring, one link per unit of distance between neighbouring members)."""
    lv = topo.levels[level]
    if lv.kind in DIRECT:
        return lv.link.latency_s * max(pl.gaps(level))
    return lv.hop_latency_s(pl.span(level))


def _max_latency_s(topo: Topology, pl: Placement) -> float:
    return max(_latency_s(topo, pl, i) for i in _spanned(pl))


def _peer_bw(topo: Topology, level: int) -> float:
    """Bandwidth from one rank to one peer across ``level``: its own link(s), bytes/s (one peer's
    link on a mesh or torus)."""
    lv = topo.levels[level]
    return lv.link.bytes_per_s * lv.efficiency


def _wrapped(topo: Topology, pl: Placement, level: int, dim: int) -> bool:
    """Whether the group's line along ``dim`` of a torus/ring ``level`` closes into a ring."""
    if pl.wraps:
        return pl.wraps[level][dim]
    return topo.levels[level].wrapped(dim, pl.shapes[level][dim])


def _wrapped_dims(topo: Topology, pl: Placement, level: int) -> int:
    return sum(_wrapped(topo, pl, level, d) for d in range(len(pl.shapes[level])))


def _sharing(topo: Topology, pl: Placement, level: int) -> int:
    """Groups whose traffic shares each link of a torus/ring ``level``: a group whose members sit g
    units apart interleaves with g - 1 others of its kind along the same links; 1 on switched levels."""
    return max(pl.gaps(level)) if topo.levels[level].kind in DIRECT else 1


def _ring_bw(topo: Topology, pl: Placement, level: int) -> float:
    """Per-rank bandwidth of rings through ``level``, bytes/s: k rings per unit (one per member's
    link) for a level above the first; on a full mesh, arc-disjoint Hamiltonian rings
    (``ring_count_full_mesh``); on a torus slice two rings (one per direction) when a dimension
    wraps around, else one ring laid along the line."""
    lv, members = topo.levels[level], pl.extents[level]
    if lv.kind == "full_mesh":
        rings = ring_count_full_mesh(members)
    elif lv.kind in DIRECT:
        rings = 2 if _wrapped_dims(topo, pl, level) else 1
    else:
        rings = 1
    return pl.below(level) * rings * _peer_bw(topo, level) / _sharing(topo, pl, level)


def _taper_time_s(topo: Topology, pl: Placement, level: int, leaving, crosses=lambda b: True) -> float:
    """Seconds the group's traffic needs through the oversubscribed boundaries at ``level``: for each
    boundary it crosses, the bytes leaving one subtree (``leaving(boundary)``), times the concurrent
    groups that fit in the subtree, over the subtree's uplink bandwidth (injection / oversubscription)."""
    lv, worst = topo.levels[level], 0.0
    for b in topo.boundaries(pl, level):
        if not crosses(b):
            continue
        groups = min(pl.concurrent, max(1, b.subtree_gpus // b.members))
        uplink = b.subtree_gpus * lv.link.bytes_per_s * lv.efficiency / b.oversubscription
        worst = max(worst, groups * leaving(b) / uplink)
    return worst


def _sub(pl: Placement, keep: range, concurrent: int) -> Placement:
    """The placement restricted to the levels in ``keep`` (others set to one member)."""
    extents = tuple(e if i in keep else 1 for i, e in enumerate(pl.extents))
    return replace(pl, extents=extents, concurrent=concurrent)


def _require_switched(topo: Topology, pl: Placement, name: str) -> None:
    direct = [topo.levels[i] for i in _spanned(pl) if topo.levels[i].kind in DIRECT]
    if direct:
        raise NotApplicable(f"{name} needs switched levels; {direct[0].name!r} is a {direct[0].kind}")


# ---- algorithms -------------------------------------------------------------------------------


def ring_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Ring (bucket) algorithm, seconds (Patarasuk & Yuan, JPDC 69, 2009, bandwidth-optimal;
    Thakur, Rabenseifner & Gropp, IJHPCA 19, 2005, Sec. 4): reduce-scatter and all-gather take
    n-1 steps moving (n-1)/n S per rank, all-reduce both: 2(n-1) steps, 2(n-1)/n S. Bandwidth is
    the slowest level's ``_ring_bw``; every ring enters and leaves an oversubscribed subtree once,
    so the subtree exports one rank's volume per group."""
    n = pl.n
    steps, volume = (2 * (n - 1), 2.0 * (n - 1) / n * nbytes) if op == "allreduce" else (n - 1, (n - 1) / n * nbytes)
    levels = _spanned(pl)
    bandwidth = min(_ring_bw(topo, pl, i) for i in levels)
    taper = max(_taper_time_s(topo, pl, i, lambda b: volume) for i in levels)
    return steps * _max_latency_s(topo, pl) + max(volume / bandwidth, taper)


def double_binary_tree_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Double binary tree all-reduce, seconds (Sanders, Speck & Träff, Parallel Computing 35, 2009;
    NCCL 2.4): two trees each reduce then broadcast half the vector, pipelined, so every rank sends
    and receives S in each phase: 2 ceil(log2 n) latencies + 2S / bandwidth (NCCL's tuning model
    takes tree algbw = busbw / 2). Per-rank bandwidth as a ring's, one peer link on a mesh."""
    if op != "allreduce":
        raise NotApplicable("the double binary tree is an all-reduce algorithm")
    _require_switched(topo, pl, "the double binary tree")
    levels = _spanned(pl)
    bandwidth = min(pl.below(i) * _peer_bw(topo, i) for i in levels)
    taper = max(_taper_time_s(topo, pl, i, lambda b: 2.0 * nbytes) for i in levels)
    return 2 * math.ceil(math.log2(pl.n)) * _max_latency_s(topo, pl) + max(2.0 * nbytes / bandwidth, taper)


def halving_doubling_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Recursive halving (reduce-scatter) and doubling (all-gather), seconds; all-reduce is both
    (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005, Sec. 4.4): log2 p steps, step j
    exchanging S/2^(j+1) with the partner 2^j ranks away, so the largest pieces go to the nearest
    (fastest) partners. A non-power-of-two all-reduce first folds the n-p extra ranks in and
    finally sends them the result (2 latencies + 2 S/B). Each step runs at one peer link of the
    level it crosses, and at the oversubscribed tiers it crosses every member exports its piece."""
    _require_switched(topo, pl, "recursive halving-doubling")
    n = pl.n
    p = 1 << (n.bit_length() - 1)
    if p != n and op != "allreduce":
        raise NotApplicable(f"recursive halving-doubling {op} needs a power-of-two group, not {n}")
    total = 0.0
    for j in range(p.bit_length() - 1):
        distance, piece = 1 << j, nbytes / (2 << j)
        level = next(i for i in range(len(pl.extents)) if distance < pl.below(i + 1))
        units = distance // pl.below(level)
        gpus_per_unit = topo.gpus_per_unit(level)
        taper = _taper_time_s(
            topo,
            pl,
            level,
            lambda b, piece=piece: b.members * piece,
            crosses=lambda b, reach=units * gpus_per_unit: reach >= b.subtree_gpus,
        )
        total += _latency_s(topo, pl, level) + max(piece / _peer_bw(topo, level), taper)
    if op != "allreduce":
        return total
    top = pl.top
    extra = 2.0 * (_latency_s(topo, pl, top) + nbytes / _peer_bw(topo, top)) if p != n else 0.0
    return 2.0 * total + extra


def hierarchical_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Hierarchical (2D) collective, seconds: ring reduce-scatter inside the innermost level the
    group spans, the collective across the outer levels on the 1/m slice each of the m members
    holds (m such groups at once, one per member's link), ring all-gather inside (Jia et al.,
    arXiv 1807.11205, 2018; NCCL CollNet; ``comm.allreduce_time_s`` is this on two tiers)."""
    levels = _spanned(pl)
    if len(levels) < 2:
        raise NotApplicable("hierarchical needs a group spanning two or more levels")
    inner_level = levels[0]
    members = pl.extents[inner_level]
    inner = _sub(pl, range(inner_level, inner_level + 1), pl.concurrent)
    outer = _sub(pl, range(inner_level + 1, len(pl.extents)), pl.concurrent * members)
    inside = ring_time_s("reducescatter", nbytes, topo, inner)
    across = ring_time_s(op, nbytes / members, topo, outer)
    return across + (2.0 * inside if op == "allreduce" else inside)


def torus_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Multi-dimensional torus algorithm, seconds (Chan, Heimlich, Purkayastha & van de Geijn,
    CCPE 19, 2007, Sec. 6): one ring phase per dimension, each on the data the previous phases
    left (S, S/e1, S/(e1 e2), ...): reduce-scatter along every dimension in turn, all-gather back.
    A dimension that wraps around runs two rings, one per direction (2 links); an open line one.
    Members g links apart along a dimension take g hops per step and share each link with the
    g - 1 groups interleaved with them."""
    top = pl.top
    lv = topo.levels[top]
    if lv.kind not in DIRECT or pl.below(top) != 1:
        raise NotApplicable("the torus algorithm needs a group inside one torus or ring level")
    piece, phases = float(nbytes), 0.0
    for d, (extent, gap) in enumerate(zip(pl.shapes[top], pl.gaps(top))):
        if extent > 1:
            rings = 2 if _wrapped(topo, pl, top, d) else 1
            phases += (extent - 1) * gap * lv.link.latency_s + (extent - 1) / extent * piece * gap / (rings * _peer_bw(topo, top))
            piece /= extent
    return 2.0 * phases if op == "allreduce" else phases


def in_network_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """All-reduce reduced by the switches, seconds. NVLink SHARP (NVLS; Klenk et al., ISCA 2020;
    NCCL >= 2.17) inside one switch level: each GPU multimem-loads the reduced S/n it owns (the
    switch reads that slice from every GPU) and multicasts it back, so every link carries
    S (1 + 1/n) each way: 2 passes of the switch + S (1 + 1/n) / B. SHARP on a fat tree
    (Graham et al., COMHPC 2016) across nodes: ring reduce-scatter inside the node, every member
    sends its S/m slice up the aggregation tree and receives the result (2 passes + (S/m) / B),
    ring all-gather inside."""
    if op != "allreduce":
        raise NotApplicable("in-network reduction is modelled for all-reduce")
    top = pl.top
    lv = topo.levels[top]
    if lv.in_network is None:
        raise NotApplicable(f"level {lv.name!r} does not reduce in the network")
    rate = lv.link.bytes_per_s * lv.in_network.efficiency
    if lv.kind == "switch":
        if pl.below(top) != 1:
            raise NotApplicable(f"NVLS reduces inside one {lv.name!r} domain")
        return 2.0 * lv.in_network.latency_s + (1.0 + 1.0 / pl.n) * nbytes / rate
    members = pl.below(top)
    inside = ring_time_s("reducescatter", nbytes, topo, _sub(pl, range(top), pl.concurrent)) if members > 1 else 0.0
    piece = nbytes / members
    taper = _taper_time_s(topo, pl, top, lambda b: b.members * piece)
    return 2.0 * inside + 2.0 * lv.in_network.latency_s + max(piece / rate, taper)


def _alltoall_peers(pl: Placement) -> list[tuple[int, int]]:
    """(level, peers whose closest common level is that one) for every level the group spans."""
    return [(i, pl.below(i + 1) - pl.below(i)) for i in _spanned(pl)]


def direct_alltoall_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Direct all-to-all, seconds: each rank sends S/n to every peer at once, the part for each
    level over that level's links, all levels at the same time (Thakur et al. 2005, Sec. 4.5; as
    ``comm.alltoall_time_s``): (n-1) latencies of the farthest level + the busiest resource: a
    level's links (a mesh sends to its peers over separate links; a torus is bounded by its
    bisection, Dally & Towles 2004, Sec. 3.3), or an oversubscribed subtree's uplinks. A
    rail-optimised fat tree first moves cross-rail data over the scale-up level (NCCL PXN)."""
    if op == "p2p":
        return _p2p_time_s(nbytes, topo, pl)
    if op != "alltoall":
        raise NotApplicable("direct is an all-to-all (and p2p) algorithm")
    n, peers = pl.n, _alltoall_peers(pl)
    load = {i: nbytes * count / n for i, count in peers}
    inner = peers[0][0]
    for i, _count in peers[1:]:
        if topo.levels[i].rail_optimized:
            members = pl.below(i)
            load[inner] += load[i] * (members - 1) / members
    busiest = 0.0
    for i, _ in peers:
        lv, bytes_i = topo.levels[i], load[i]
        if lv.kind == "full_mesh":
            seconds = bytes_i / ((pl.extents[i] - 1) * _peer_bw(topo, i))
        elif lv.kind in DIRECT:
            shape = pl.shapes[i]
            dims = sum(e > 1 for e in shape)
            longest = max(range(len(shape)), key=lambda d: shape[d])
            wrap = 2 if _wrapped(topo, pl, i, longest) else 1
            bw = _peer_bw(topo, i) / _sharing(topo, pl, i)
            seconds = max(bytes_i / (2 * dims * bw), shape[longest] * bytes_i / (4 * wrap * bw))
        else:
            seconds = bytes_i / _peer_bw(topo, i)
        leaving = _taper_time_s(topo, pl, i, lambda b: b.members * nbytes * (n - b.members) / n)
        busiest = max(busiest, seconds, leaving)
    return (n - 1) * _max_latency_s(topo, pl) + busiest


def pairwise_alltoall_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """Pairwise-exchange all-to-all, seconds (Thakur et al. 2005, Sec. 4.5, long messages): n-1
    steps, in each every rank exchanges S/n with one partner, so a step runs at one peer link of
    the level it crosses (and, across an oversubscribed tier, every member exports its piece)."""
    if op != "alltoall":
        raise NotApplicable("pairwise exchange is an all-to-all algorithm")
    _require_switched(topo, pl, "pairwise exchange")
    piece, total = nbytes / pl.n, 0.0
    for level, steps in _alltoall_peers(pl):
        # partners beyond each tapered boundary: the steps to them export every member's piece through it
        members = [b.members for b in sorted(topo.boundaries(pl, level), key=lambda b: b.members)] + [pl.below(level + 1)]
        groups = [(steps - (members[-1] - members[0]), 0)] + [
            (members[j + 1] - members[j], members[j]) for j in range(len(members) - 1)
        ]
        for count, reach in groups:
            taper = _taper_time_s(topo, pl, level, lambda b: b.members * piece, crosses=lambda b, reach=reach: b.members <= reach)
            total += count * (_latency_s(topo, pl, level) + max(piece / _peer_bw(topo, level), taper))
    return total


def _p2p_time_s(nbytes: float, topo: Topology, pl: Placement) -> float:
    """Point-to-point, seconds, as nccl-tests sendrecv_perf runs it: every rank sends S to the next
    one at once, so the time is one latency of the farthest hop + S over the slowest hop's one
    peer link (a NIC between nodes, one link of a mesh or torus, shared by interleaved groups)."""
    return _max_latency_s(topo, pl) + nbytes / min(_peer_bw(topo, i) / _sharing(topo, pl, i) for i in _spanned(pl))


ALGORITHM_TIMES = {
    "ring": ring_time_s,
    "double_binary_tree": double_binary_tree_time_s,
    "halving_doubling": halving_doubling_time_s,
    "hierarchical": hierarchical_time_s,
    "torus": torus_time_s,
    "in_network": in_network_time_s,
    "direct": direct_alltoall_time_s,
    "pairwise": pairwise_alltoall_time_s,
}


def algorithm_times(op: str, nbytes: float, topo: Topology, pl: Placement) -> dict:
    """{algorithm: seconds or the NotApplicable reason} for every algorithm of ``op``."""
    out = {}
    for name in ALGORITHMS[op]:
        try:
            out[name] = ALGORITHM_TIMES[name](op, nbytes, topo, pl)
        except NotApplicable as exc:
            out[name] = exc
    return out


# Bytes at which ``cost_lines`` reads each algorithm's slope, and a third size it checks the line at.
LINE_BYTES, CHECK_BYTES = float(1 << 30), float(3 << 20)


def cost_lines(op: str, topo: Topology, pl: Placement) -> tuple | None:
    """The time of ``op`` over the group at ``pl`` as lines in the message size: ((latency_s,
    s_per_byte), ...), one per algorithm ``collective_time_on`` may choose (the system's fixed one
    when it applies, else every applicable one), so that the time of ``nbytes`` is the least
    latency_s + nbytes x s_per_byte (``lines_time_s``).

    Every algorithm above is a sum of per-step latencies and byte terms proportional to the message
    (the maximum of two such terms, a link's and an oversubscribed boundary's, is proportional too),
    hence a line: two evaluations give it exactly. A third size checks it; None (evaluate each size
    instead) if an algorithm ever stops being one (tests/test_collectives.py: none on the library's
    systems)."""
    lines = {}
    for name in ALGORITHMS[op]:
        try:
            latency = ALGORITHM_TIMES[name](op, 0.0, topo, pl)
            slope = (ALGORITHM_TIMES[name](op, LINE_BYTES, topo, pl) - latency) / LINE_BYTES
            check = ALGORITHM_TIMES[name](op, CHECK_BYTES, topo, pl)
        except NotApplicable:
            continue
        if not math.isclose(latency + slope * CHECK_BYTES, check, rel_tol=1e-9, abs_tol=1e-15):
            return None
        lines[name] = (latency, slope)
    fixed = topo.fixed_algorithm(op)
    return (lines[fixed],) if fixed in lines else tuple(lines.values())


def lines_time_s(lines: tuple, nbytes: float) -> float:
    """Seconds of a collective of ``nbytes`` given its algorithms' ``cost_lines``: the fastest."""
    return min(latency + slope * nbytes for latency, slope in lines)


def collective_time(
    op: str, nbytes: float, n: int, topo: Topology, algorithm: str | None = None, concurrent: int = 1
) -> CollectiveTime:
    """The collective ``op`` of ``nbytes`` (nccl-tests sizes) over ``n`` GPUs placed compactly on
    ``topo``: with ``algorithm`` if the caller fixes one (ProblemError if it cannot run there), else
    the system's fixed algorithm when it applies, else the fastest applicable one."""
    if op not in ALGORITHMS:
        raise ProblemError(f"unknown collective {op!r}; allowed: {', '.join(OPS)}", field="op")
    if isinstance(nbytes, bool) or not nbytes > 0:
        raise ProblemError(f"must be a positive number of bytes, got {nbytes!r}", field="bytes")
    if n < 2:
        raise ProblemError(f"a collective needs at least 2 GPUs, got {n}", field="gpus")
    return collective_time_on(op, nbytes, topo, topo.place(n, concurrent), algorithm)


def collective_time_on(op: str, nbytes: float, topo: Topology, pl: Placement, algorithm: str | None = None) -> CollectiveTime:
    """The collective ``op`` of ``nbytes`` over the group at ``pl`` (placed by the caller, e.g. a
    parallel group of a training mapping, ``model/placement.py``); the algorithm as ``collective_time``."""
    n = pl.n
    times = algorithm_times(op, nbytes, topo, pl)
    usable = {name: t for name, t in times.items() if not isinstance(t, NotApplicable)}
    if algorithm is not None:
        if algorithm not in times:
            raise ProblemError(f"{algorithm!r} is not an {op} algorithm; allowed: {', '.join(ALGORITHMS[op])}", field="algorithm")
        if algorithm not in usable:
            raise ProblemError(
                f"{algorithm!r} cannot run on {n} GPUs here ({times[algorithm]}); allowed: {', '.join(usable)}", field="algorithm"
            )
        chosen, fixed = algorithm, True
    elif topo.fixed_algorithm(op) in usable:
        chosen, fixed = topo.fixed_algorithm(op), True
    else:
        chosen, fixed = min(usable, key=lambda name: (usable[name], ALGORITHMS[op].index(name))), False
    return CollectiveTime(op, chosen, float(nbytes), n, usable[chosen], fixed, tuple(usable.items()))
