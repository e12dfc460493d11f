"""Placement: the order in which the parallel dimensions are laid over the ranks, and where each
parallel group then sits in the network.

A placement is Megatron-Core's rank order string (``parallel_state.initialize_model_parallel``,
``RankGenerator``; default ``tp-cp-ep-dp-pp``): the five dimensions, innermost (fastest varying)
first. Rank r has coordinate (r // stride_d) mod size_d in dimension d, stride_d being the product of
the sizes before d. Two grids share the order (Megatron-Core builds both from it):

- the dense grid, sizes (tp, cp, ep = 1, dp, pp): TP, CP and PP groups, and the gradient group
  dp x cp (Megatron reduces gradients over data and context ranks);
- the expert grid, sizes (etp, 1, ep, edp = tp·cp·dp/(ep·etp), pp), etp being the expert tensor
  parallelism (Megatron-Core --expert-tensor-parallel-size; it takes the tp slot of the order): the
  ETP group that splits each expert, the EP all-to-all group and the expert data-parallel group that
  reduces the expert gradients.

Megatron-Core's rules hold: any order of the five (since its MoE parallel folding the expert grid has
a RankGenerator of its own, so ep need not sit next to dp, as it had to before: "The ep and dp must be
adjacent in order"; --use-tp-pp-dp-mapping builds tp-cp-ep-pp-dp, megatron/training/initialize.py), and
for a mixture-of-experts model the expert grid's pipeline groups equal the dense grid's, with pp last
unless pp = 1 or edp = dp (its two checks after building the expert RankGenerator).

The system numbers its GPUs innermost level first (``Topology.place``): a GPU's rank is its
position in the job's compact slice of the hierarchy, on a torus dimension by dimension (x
fastest). So the order decides, for each group, how many members share a scale-up domain, which
tiers and how many subtrees it spans, which torus dimensions it occupies, and how far apart its
members sit (``Layout``). The default order reproduces the layout the model always used: TP in
consecutive ranks, CP at stride tp, DP at stride tp·cp, PP outermost, EP in consecutive ranks.

Which model times the collectives: on a system whose ``topology:`` section has something the two
tiers cannot express — a torus or ring, a dragonfly, a full mesh, or an oversubscribed fat-tree
tier (``topology_decides``) — every group's collectives go through ``model/collectives.py`` on the
group's placement in that topology (the best algorithm, contention on shared links and tapered
tiers). Elsewhere (the DGX/HGX/NVL72 systems: a non-blocking switch inside a non-blocking fat tree)
the two-tier hierarchical rings of ``model/comm.py`` give the same answer the topology would and
are used, with the group's members per scale-up domain from the placement.

The two efficiencies: a topology level's ``efficiency`` is what an isolated collective reaches
(nccl-tests; it serves ``parasol collective``); the system's ``scale_up``/``scale_out`` efficiencies
are fitted on end-to-end training step times (``benchmarks/calibrate.py``), so they also carry
what a collective loses beside compute (SM and memory contention, imperfect overlap). The training
model always uses the fitted ones: on a topology it times, the innermost level takes the scale_up
efficiency and every outer level the scale_out one, and an in-network reduction's efficiency is
scaled by the same factor as its level's (``training_topology``). The calibrated DGX/HGX figures
therefore do not move, and a topology system without training runs uses its stated efficiencies.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass, replace

from . import collectives, comm
from .errors import ProblemError
from .hashing import hash_once, state_without_hash
from .nccl_channels import channel_floor_s
from .specs import DEFAULT_PLACEMENT, PLACEMENT_DIMENSIONS, Mapping, SystemSpec
from .topology import DIRECT, Placement, Topology

FIELD = "mapping.placement"
ALLOWED = f"each of {', '.join(PLACEMENT_DIMENSIONS)} once, joined by '-', innermost first, e.g. {DEFAULT_PLACEMENT}"
GROUPS = ("tp", "cp", "ep", "dp", "edp", "pp", "etp")  # edp, etp: the expert data- and tensor-parallel groups
TOPOLOGY_KINDS = ("torus", "ring", "dragonfly", "full_mesh")  # levels the two-tier model cannot express


def _ep_beside_dp(order: tuple) -> bool:
    i, j = order.index("ep"), order.index("dp")
    return abs(i - j) == 1


def _moves(order: tuple) -> int:
    """Pairs of dimensions in the opposite order to the default's (Kendall tau distance)."""
    rank = [PLACEMENT_DIMENSIONS.index(d) for d in order]
    return sum(a > b for i, a in enumerate(rank) for b in rank[i + 1 :])


# Every placement (120): first the 48 with ep next to dp (the orders Megatron-Core accepted before folding;
# for a dense model, whose ep is 1, they hold every layout), then the others; each part nearest the default
# first (the default itself, then one swap away, ...), ties in lexicographic order: the planner reports the
# first of equivalent placements, so the most Megatron-like one.
PLACEMENTS = tuple(
    "-".join(o) for o in sorted(itertools.permutations(PLACEMENT_DIMENSIONS), key=lambda o: (not _ep_beside_dp(o), _moves(o), o))
)


def placement_order(placement) -> tuple:
    """The dimensions of a placement string, innermost first; ProblemError naming the allowed values."""
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ProblemError(f"{placement!r} is not a placement; allowed: {ALLOWED}", field=FIELD)
    return tuple(placement.split("-"))


def rank_strides(placement: str, sizes: dict) -> dict:
    """Rank distance between neighbours along each dimension: the product of the sizes laid before it."""
    out, stride = {}, 1
    for name in placement_order(placement):
        out[name] = stride
        stride *= sizes[name]
    return out


@dataclass(frozen=True)
class Group:
    """The parallel group holding rank 0, as ranks {sum_f k_f stride_f : 0 <= k_f < size_f}:
    ``factors`` ((size, stride), ...) by increasing stride, size-1 factors left out, and a factor
    that continues the previous one (stride = previous size x stride) merged into it."""

    factors: tuple

    @property
    def size(self) -> int:
        return math.prod(n for n, _ in self.factors)

    @staticmethod
    def of(*factors) -> Group:
        out = []
        for n, s in sorted(((n, s) for n, s in factors if n > 1), key=lambda f: f[1]):
            if out and out[-1][0] * out[-1][1] == s:
                out[-1] = (out[-1][0] * n, out[-1][1])
            else:
                out.append((n, s))
        return Group(tuple(out))


def parallel_groups(placement: str, tp: int, cp: int, dp: int, pp: int, ep: int = 1, etp: int = 1) -> dict:
    """{kind: Group} of the groups a mapping communicates over (``GROUPS``), from its placement."""
    return dict(zip(GROUPS, _parallel_groups(placement, tp, cp, dp, pp, ep, etp)))


def expert_grid_sizes(tp: int, cp: int, dp: int, pp: int, ep: int, etp: int) -> dict:
    """Sizes of the expert grid along the placement's dimensions: etp in the tp slot, ep, and the
    expert data-parallel size tp·cp·dp/(ep·etp) in the dp slot (Megatron-Core's expert RankGenerator)."""
    return {"tp": etp, "cp": 1, "ep": ep, "dp": tp * cp * dp // (ep * etp), "pp": pp}


@functools.lru_cache(maxsize=1 << 14)
def _parallel_groups(placement: str, tp: int, cp: int, dp: int, pp: int, ep: int, etp: int) -> tuple:
    dense = rank_strides(placement, {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp})
    sizes = expert_grid_sizes(tp, cp, dp, pp, ep, etp)
    edp = sizes["dp"]
    expert = rank_strides(placement, sizes)
    return (
        Group.of((tp, dense["tp"])),
        Group.of((cp, dense["cp"])),
        Group.of((ep, expert["ep"])),
        Group.of((cp, dense["cp"]), (dp, dense["dp"])),
        Group.of((edp, expert["dp"])),
        Group.of((pp, dense["pp"])),
        Group.of((etp, expert["tp"])),
    )


def check_placement(placement: str, tp: int, cp: int, dp: int, pp: int, ep: int, moe: bool, etp: int = 1) -> None:
    """ProblemError unless ``placement`` is valid here: its format, and for a mixture-of-experts model
    Megatron-Core's two rules on the expert grid (pp last, or pp 1, or edp = dp; the same pipeline
    groups in both grids, i.e. the same pp stride)."""
    order = placement_order(placement)
    if not moe or pp == 1:
        return
    expert_sizes = expert_grid_sizes(tp, cp, dp, pp, ep, etp)
    edp = expert_sizes["dp"]
    sizes = {"tp": tp, "cp": cp, "ep": ep, "dp": dp, "pp": pp}
    pp_last = all(sizes[d] == 1 for d in order[order.index("pp") + 1 :])  # Megatron appends size-1 dimensions it is not given
    if not pp_last and edp != dp:
        raise ProblemError(
            f"{placement!r} does not end with pp, so Megatron-Core needs the expert data-parallel size "
            f"tp·cp·dp/(ep·etp) = {edp} to equal dp = {dp}; allowed: an order ending with pp",
            field=FIELD,
        )
    dense = rank_strides(placement, {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp})["pp"]
    expert = rank_strides(placement, expert_sizes)["pp"]
    if dense != expert:
        raise ProblemError(
            f"{placement!r} gives the expert layers other pipeline groups than the dense ones (pp stride "
            f"{expert} against {dense}), which Megatron-Core rejects; allowed: an order ending with pp",
            field=FIELD,
        )


# ---- where a group sits -------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Where one parallel group sits: ``n`` members, ``local`` of them in one scale-up domain (the
    innermost level's unit) and, on a system whose topology the model follows (``topology_decides``),
    its ``collectives`` placement there (None: the two-tier model of ``comm.py``)."""

    n: int
    local: int
    placement: Placement | None = None

    __hash__ = hash_once
    __getstate__ = state_without_hash

    @property
    def crosses(self) -> bool:
        """Whether the group leaves one scale-up domain."""
        return self.local < self.n


@functools.lru_cache(maxsize=256)
def topology_decides(topology: Topology | None) -> bool:
    """Whether a system's topology changes the answer of the two-tier model: a torus, ring, dragonfly
    or full mesh level, or a fat-tree tier with oversubscription above 1."""
    return topology is not None and any(
        level.kind in TOPOLOGY_KINDS or any(tier.oversubscription > 1.0 for tier in level.tiers) for level in topology.levels
    )


@functools.lru_cache(maxsize=64)
def _training_topology(topology: Topology, scale_up_efficiency: float, scale_out_efficiency: float) -> Topology:
    levels = []
    for i, level in enumerate(topology.levels):
        efficiency = scale_up_efficiency if i == 0 else scale_out_efficiency
        reduction = level.in_network
        if reduction is not None:
            reduction = replace(reduction, efficiency=min(1.0, reduction.efficiency * efficiency / level.efficiency))
        levels.append(replace(level, efficiency=efficiency, in_network=reduction))
    return replace(topology, levels=tuple(levels))


def training_topology(system: SystemSpec) -> Topology:
    """The system's topology with the calibrated training efficiencies (module docstring): the
    innermost level at scale_up's, the others at scale_out's, in-network reduction scaled alike."""
    return _training_topology(system.topology, system.scale_up.efficiency, system.scale_out.efficiency)


def check_system(system: SystemSpec) -> None:
    """ProblemError (field system.num_gpus) when the job's GPUs cannot be placed on the topology the
    model follows (more GPUs than it has, or no slice of the torus holds them)."""
    if topology_decides(system.topology):
        try:
            system.topology.place(system.num_gpus)
        except ProblemError as exc:
            raise ProblemError(f"{exc.args[0].split(': ', 1)[-1]} (topology of {system.name})", field="system.num_gpus") from None


@functools.lru_cache(maxsize=4096)
def _topology_placement(topo: Topology, num_gpus: int, factors: tuple) -> Placement:
    """The group's placement on ``topo``: the job fills a compact slice (``Topology.place``) whose
    positions are mixed-radix digits of the rank, innermost level first and on a torus/ring level
    one digit per dimension. Per digit: the distinct positions the group's members take inside one
    unit of the next digit, their spacing, and (torus/ring) whether they close the wrapped line.
    A group that does not divide the units evenly (3 ranks on 4-GPU nodes) is taken where the group
    of rank 0 sits, the positions it reaches in each unit counted whole: an approximation, as
    ``comm.ranks_per_domain`` is on two tiers."""
    import numpy as np  # noqa: PLC0415 (a group's members as an array: only a new placement needs numpy)

    job = topo.place(num_gpus)
    members = np.zeros(1, dtype=np.int64)
    for n, s in factors:
        members = (members[:, None] + np.arange(n, dtype=np.int64) * s).ravel()
    extents, shapes, spacing, wraps = [], [], [], []
    unit = 1
    for i, level in enumerate(topo.levels):
        digits = job.shapes[i] if level.kind in DIRECT else (job.extents[i],)
        counts, gaps = [], []
        for radix in digits:
            inside = members[members < unit * radix]  # members in the unit of the next digit holding rank 0
            positions = np.unique((inside // unit) % radix)
            counts.append(len(positions))
            gaps.append(int(np.diff(positions).min()) if len(positions) > 1 else 1)
            unit *= radix
        extents.append(math.prod(counts))
        shapes.append(tuple(counts) if level.kind in DIRECT else ())
        spacing.append(tuple(gaps))
        wraps.append(
            tuple(c > 1 and c * g == r and level.wrapped(d, r) for d, (c, g, r) in enumerate(zip(counts, gaps, digits)))
            if level.kind in DIRECT
            else ()
        )
    n = math.prod(f[0] for f in factors)
    return Placement(tuple(extents), tuple(shapes), max(1, num_gpus // n), tuple(spacing), tuple(wraps))


@functools.lru_cache(maxsize=1 << 14)
def _two_tier_layout(domain: int, factors: tuple) -> Layout:
    """Members per scale-up domain of a strided group (``comm.ranks_per_domain`` per factor)."""
    return Layout(math.prod(n for n, _ in factors), math.prod(comm.members_per_domain(n, s, domain) for n, s in factors))


def layout(system: SystemSpec, group: Group) -> Layout:
    """Where ``group`` sits on ``system`` (see ``Layout``)."""
    n = group.size
    if n == 1:
        return Layout(1, 1)
    if not topology_decides(system.topology):
        return _two_tier_layout(system.scale_up_domain, group.factors)
    pl = _topology_placement(training_topology(system), system.num_gpus, group.factors)
    return Layout(n, pl.extents[0], pl)


def group_layouts(system: SystemSpec, mapping: Mapping) -> dict:
    """{kind: Layout} of every group of ``mapping`` (``GROUPS``)."""
    m = mapping
    groups = parallel_groups(m.placement, m.tp, m.cp, m.dp, m.pp, m.ep, m.etp)
    return {kind: layout(system, g) for kind, g in groups.items()}


# ---- communication on a layout ------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 14)
def _cost_lines(op: str, topo: Topology, pl: Placement) -> tuple | None:
    return collectives.cost_lines(op, topo, pl)


def _topology_time_s(op: str, nbytes: float, topo: Topology, pl: Placement) -> float:
    """``collectives.collective_time_on``'s time, from the group's cost lines (one evaluation of the
    algorithms per group and op, not per message size)."""
    lines = _cost_lines(op, topo, pl)
    if lines is None:
        return collectives.collective_time_on(op, nbytes, topo, pl).time_s
    return collectives.lines_time_s(lines, nbytes)


def collective_time_s(op: str, nbytes: float, layout: Layout, system: SystemSpec, ctas: int | None = None) -> float:
    """Seconds of ``op`` (allreduce, reducescatter, allgather, p2p, alltoall) of ``nbytes`` (sizes as
    nccl-tests counts them) over the group at ``layout``: on the topology with the best algorithm
    (``collectives.collective_time_on``), or on the two tiers (``comm.py``: hierarchical rings; p2p
    over the slower tier the group spans; all-to-all spread evenly). A communicator capped at ``ctas``
    NCCL channels takes no less than ``nccl_channels.channel_floor_s``."""
    if layout.n <= 1 or nbytes <= 0:
        return 0.0
    return max(_uncapped_time_s(op, nbytes, layout, system), channel_floor_s(op, nbytes, layout.n, ctas, system.device))


def _uncapped_time_s(op: str, nbytes: float, layout: Layout, system: SystemSpec) -> float:
    if layout.placement is not None:
        return _topology_time_s(op, float(nbytes), training_topology(system), layout.placement)
    if op == "p2p":
        return comm.p2p_time_s(nbytes, layout.crosses, system)
    if op == "alltoall":
        n, local = layout.n, layout.local
        return comm.alltoall_split_time_s(nbytes * (local - 1) / n, nbytes * (n - local) / n, n, local, system)
    rs = comm.reduce_scatter_local_time_s(nbytes, layout.n, layout.local, system)
    return 2.0 * rs if op == "allreduce" else rs


def describe(layout: Layout, system: SystemSpec) -> str:
    """A short text of where a group sits: '8 (in one scale_up domain)', '16 (2 per scale_up domain)',
    '4 (2x2x1 on ici)', '8 (1x2x4 on ici, 1x2x1 apart)' (members per torus dimension, their spacing)."""
    if layout.n == 1:
        return "1"
    if layout.placement is None:
        where = "in one scale_up domain" if not layout.crosses else f"{layout.local} per scale_up domain"
        return f"{layout.n} ({where})"
    topo, pl, parts = system.topology, layout.placement, []
    for i, level in enumerate(topo.levels):
        if pl.extents[i] > 1:
            shape = "x".join(map(str, pl.shapes[i])) if level.kind in DIRECT else str(pl.extents[i])
            gaps = pl.gaps(i)
            apart = f", {'x'.join(map(str, gaps))} apart" if max(gaps) > 1 else ""
            parts.append(f"{shape} on {level.name}{apart}")
    return f"{layout.n} ({'; '.join(parts)})"
