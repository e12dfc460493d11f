"""Network topologies as data: a hierarchy of levels, a scale-up topology inside a scale-out one.

A ``Topology`` is a tuple of ``Level``s, innermost first. Level 0 joins ``size`` GPUs; level i
joins ``size`` units of level i-1 (a fat tree of 8-GPU nodes, a dragonfly of 4-GPU nodes). Every
link is given per GPU (per rank), per direction: its bandwidth, latency and how many of them the
GPU has into that level (``count``). Kinds:

- ``switch``: a non-blocking crossbar (NVSwitch, NVL72), optionally reducing in the switch
  (NVLink SHARP, Klenk et al., ISCA 2020).
- ``fat_tree``: a folded Clos of switch tiers (Leiserson 1985; Al-Fares et al., SIGCOMM 2008),
  each tier with the number of units below one of its switch groups and its oversubscription:
  the GPUs' injection bandwidth under one subtree over the bandwidth of its uplinks (Llama 3's
  1:7 above a 3,072-GPU pod is 7). Optionally rail-optimised (GPU i of every node on rail i), and
  optionally reducing in the switches (SHARP, Graham et al., COMHPC 2016).
- ``torus`` (k-ary n-cube, Dally & Towles 2004, ch. 5) with wrap-around links per dimension;
  ``ring`` is the one-dimensional torus.
- ``dragonfly`` (Kim, Dally, Scott & Abts, ISCA 2008): groups of routers, all-to-all inside a
  group, groups joined by global links.
- ``full_mesh``: one link from every member to every other (MI300X xGMI, chiplets on a package).

``place`` lays a group of ranks over the hierarchy compactly (innermost level first, as Megatron
and NCCL number ranks), which is what the collective model in ``collectives.py`` evaluates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

from .errors import ProblemError
from .hashing import hash_once, state_without_hash

KINDS = ("switch", "fat_tree", "torus", "ring", "dragonfly", "full_mesh")
SWITCHED = ("switch", "fat_tree", "dragonfly")  # every pair of units one path apart; no hop distance
DIRECT = ("torus", "ring")  # neighbour links only
IN_NETWORK_KINDS = ("switch", "fat_tree")


@dataclass(frozen=True)
class Link:
    """A GPU's link(s) into one level: ``count`` links of ``bandwidth_bytes_per_s`` each, per
    direction (per neighbour for torus/ring, per peer for full_mesh)."""

    bandwidth_bytes_per_s: float
    latency_s: float
    count: int = 1

    @property
    def bytes_per_s(self) -> float:
        """All ``count`` links together, one direction, bytes/s."""
        return self.bandwidth_bytes_per_s * self.count


@dataclass(frozen=True)
class InNetworkReduction:
    """Reduction done by the switches (NVLS on NVSwitch, SHARP on InfiniBand): achieved fraction of
    the link rate and the latency of one pass through the reducing switch."""

    efficiency: float
    latency_s: float


@dataclass(frozen=True)
class Tier:
    """One switch tier of a fat tree: ``size`` units of the tier below under one subtree."""

    name: str
    size: int
    oversubscription: float = 1.0  # injection : uplink bandwidth of one subtree of this tier (<= 1: full bisection)
    radix: int = 0  # switch ports (0: not given); a check that ``size`` fits, not used by the model
    latency_s: float = 0.0  # added one-way latency of a path that has to climb to this tier


@dataclass(frozen=True)
class Level:
    """One level of the hierarchy (see the module docstring for the kinds)."""

    name: str
    kind: str
    size: int
    link: Link
    efficiency: float  # achieved fraction of the link rate by bandwidth-bound collective traffic
    in_network: InNetworkReduction | None = None
    dims: tuple = ()  # torus/ring: extent of each dimension
    wrap: tuple = ()  # torus/ring: wrap-around links per dimension
    wrap_multiple: int = 0  # torus: a slice whose extent in a dimension is a multiple of this gets wrap-around (TPU OCS)
    tiers: tuple = ()  # fat_tree
    rail_optimized: bool = False  # fat_tree
    groups: int = 0  # dragonfly
    routers_per_group: int = 0
    units_per_router: int = 0
    global_links_per_router: int = 0
    global_link: Link | None = None

    def __post_init__(self):
        expected = {
            "fat_tree": math.prod(t.size for t in self.tiers) if self.tiers else self.size,
            "torus": math.prod(self.dims),
            "ring": math.prod(self.dims),
            "dragonfly": self.groups * self.routers_per_group * self.units_per_router,
        }.get(self.kind, self.size)
        if self.size != expected:
            raise ProblemError(f"is {self.size} but the {self.kind} it describes joins {expected} units", field="size")
        for tier in self.tiers:
            if tier.radix and tier.size > tier.radix:
                raise ProblemError(
                    f"tier {tier.name!r} joins {tier.size} units but its switches have radix {tier.radix}", field="tiers"
                )
        if self.in_network is not None and self.kind not in IN_NETWORK_KINDS:
            raise ProblemError(
                f"a {self.kind} level cannot reduce in the network; allowed on: {', '.join(IN_NETWORK_KINDS)}",
                field="in_network_reduction",
            )

    def wrapped(self, dim: int, extent: int) -> bool:
        """Whether a slice of ``extent`` along dimension ``dim`` closes into a ring (extent > 2)."""
        if extent <= 2 or not self.wrap[dim]:
            return False
        return extent == self.dims[dim] or (self.wrap_multiple > 0 and extent % self.wrap_multiple == 0)

    def hop_latency_s(self, extent: int) -> float:
        """One-way latency of the farthest hop inside a block of ``extent`` units of this level:
        the link latency, plus the tiers a fat-tree path climbs, plus a global link in a dragonfly."""
        latency = self.link.latency_s
        if self.kind == "fat_tree":
            reach = 1
            for tier in self.tiers:
                if extent <= reach:
                    break
                latency += tier.latency_s
                reach *= tier.size
        elif self.kind == "dragonfly" and extent > self.routers_per_group * self.units_per_router:
            latency += self.global_link.latency_s
        return latency


@dataclass(frozen=True)
class Boundary:
    """A tapered boundary a group's traffic crosses: one subtree (fat-tree tier, dragonfly group)
    holding ``subtree_gpus`` GPUs, ``members`` of them in the group, whose uplinks carry
    1/``oversubscription`` of the subtree's injection bandwidth."""

    name: str
    subtree_gpus: int
    members: int
    oversubscription: float


@dataclass(frozen=True)
class Placement:
    """Where a group sits: members along each level (innermost first; product = group size), the
    slice shape on torus/ring levels, and how many such groups run the same collective at once.

    A group laid with a stride (``model/placement.py``) may also leave gaps: ``spacing`` gives per
    level the distance between neighbouring members, in units of that level (one value for a
    switched level, one per dimension for a torus or ring), and ``wraps`` per torus/ring level
    whether the group's line closes into a ring in each dimension (it covers the whole wrapped
    dimension of the job's slice). Empty: compact, and the slice wraps as ``Level.wrapped`` says."""

    extents: tuple
    shapes: tuple
    concurrent: int = 1
    spacing: tuple = ()
    wraps: tuple = ()

    __hash__ = hash_once
    __getstate__ = state_without_hash

    @property
    def n(self) -> int:
        return math.prod(self.extents)

    @property
    def top(self) -> int:
        """Index of the outermost level the group spans (-1 for a single rank)."""
        spanned = [i for i, e in enumerate(self.extents) if e > 1]
        return spanned[-1] if spanned else -1

    def below(self, level: int) -> int:
        """Group members inside one unit of ``level`` (members per node for the network level)."""
        return math.prod(self.extents[:level])

    def gaps(self, level: int) -> tuple:
        """Distance between neighbouring members along ``level`` (per dimension on a torus/ring)."""
        return self.spacing[level] if self.spacing else (1,) * max(1, len(self.shapes[level]))

    def span(self, level: int) -> int:
        """Units of a switched ``level`` from the group's first member to past its last (extent x spacing)."""
        return self.extents[level] * self.gaps(level)[0]


@dataclass(frozen=True)
class Topology:
    """A hierarchy of levels, innermost first, with the collective algorithm the system fixes per op."""

    levels: tuple
    algorithms: tuple = ()  # ((op, algorithm), ...) fixed by the system file
    source: str | None = None

    __hash__ = hash_once
    __getstate__ = state_without_hash

    @property
    def size(self) -> int:
        """GPUs in the whole topology."""
        return math.prod(level.size for level in self.levels)

    def gpus_per_unit(self, level: int) -> int:
        """GPUs inside one unit that ``level`` joins (1 for level 0, a node's GPUs above it)."""
        return math.prod(lv.size for lv in self.levels[:level])

    def fixed_algorithm(self, op: str) -> str | None:
        return dict(self.algorithms).get(op)

    def place(self, n: int, concurrent: int = 1) -> Placement:
        """Lay ``n`` ranks over the hierarchy compactly: fill level 0, then whole units of level 0
        inside level 1, and so on. ProblemError if ``n`` exceeds the topology or does not fill
        whole units of the levels below the outermost one it needs."""
        if not isinstance(n, int) or n < 1:
            raise ProblemError(f"must be a positive number of GPUs, got {n!r}", field="gpus")
        if n > self.size:
            raise ProblemError(f"{n} GPUs exceed the {self.size} GPUs of this topology", field="gpus")
        extents, rest = [], n
        for i, level in enumerate(self.levels):
            if rest <= level.size:
                extents.append(rest)
                rest = 1
            elif rest % level.size:
                unit = self.gpus_per_unit(i + 1)
                raise ProblemError(
                    f"{n} GPUs are not placeable: a group larger than one {level.name} unit "
                    f"({unit} GPUs) must fill whole units (a multiple of {unit})",
                    field="gpus",
                )
            else:
                extents.append(level.size)
                rest //= level.size
        shapes = []
        for level, extent in zip(self.levels, extents):
            shape = _slice_shape(level, extent) if level.kind in DIRECT else ()
            if level.kind in DIRECT and not shape:
                raise ProblemError(
                    f"{n} GPUs are not placeable: {extent} units do not form a slice of the "
                    f"{'x'.join(map(str, level.dims))} {level.kind} {level.name!r}",
                    field="gpus",
                )
            shapes.append(shape)
        return Placement(tuple(extents), tuple(shapes), max(1, int(concurrent)))

    def boundaries(self, placement: Placement, level: int) -> list[Boundary]:
        """The tapered boundaries (oversubscription > 1) that traffic between the group's units at
        ``level`` crosses: fat-tree tiers the group outgrows, the dragonfly's global links."""
        lv, per_unit = self.levels[level], self.gpus_per_unit(level)
        span, gap = placement.span(level), placement.gaps(level)[0]  # a spaced group spans more subtrees, fewer members in each
        members_per_unit = placement.below(level)

        def members(reach):
            return max(1, reach // gap) * members_per_unit

        out = []
        if lv.kind == "fat_tree":
            reach = 1
            for tier in lv.tiers:
                reach *= tier.size
                if span > reach and tier.oversubscription > 1.0:
                    out.append(Boundary(tier.name, reach * per_unit, members(reach), tier.oversubscription))
        elif lv.kind == "dragonfly":
            units = lv.routers_per_group * lv.units_per_router
            if span > units:
                spanned = math.ceil(span / units)
                out.append(
                    Boundary("global", units * per_unit, members(units), dragonfly_oversubscription(lv, spanned, per_unit))
                )
        return [b for b in out if b.oversubscription > 1.0]


def dragonfly_oversubscription(level: Level, groups_spanned: int, gpus_per_unit: int) -> float:
    """Injection over usable global bandwidth of one dragonfly group when traffic is spread over
    ``groups_spanned`` groups. Minimal routing uses only the links to those groups; Valiant routing
    uses every global link but each packet crosses two (Kim, Dally, Scott & Abts, ISCA 2008,
    Sec. 4); adaptive routing (Slingshot, UGAL) gets the better of the two."""
    links = level.routers_per_group * level.global_links_per_router
    per_pair = links / max(1, level.groups - 1)
    usable = max((groups_spanned - 1) * per_pair, links / 2.0) * level.global_link.bytes_per_s
    injection = level.routers_per_group * level.units_per_router * gpus_per_unit * level.link.bytes_per_s
    return injection / usable


def _slice_shape(level: Level, extent: int) -> tuple:
    """The most cubic slice of ``extent`` units that fits the level's dimensions (TPU slices are
    4x4x4, 4x4x8, ...): the smallest longest side, then the smallest perimeter (4x4x8 before
    2x8x8), the first such in dimension order; () if none exists."""
    best = None
    for shape in product(*(range(1, d + 1) for d in level.dims)):
        if math.prod(shape) == extent and (best is None or (max(shape), sum(shape)) < (max(best), sum(best))):
            best = shape
    return best or ()


def ring_count_full_mesh(members: int) -> int:
    """Arc-disjoint directed Hamiltonian rings in a complete graph of ``members`` nodes with a link
    each way between every pair: members - 1, except members - 2 for 4 and 6 (Tillson, J. Comb.
    Theory B 29, 1980). Each ring drives one outgoing link per member."""
    if members <= 1:
        return 0
    return members - 2 if members in (4, 6) else members - 1


def default_topology(scale_up, scale_out, domain: int, num_gpus: int) -> Topology:
    """The two-level topology a system file without ``topology:`` describes: a non-blocking switch
    of ``domain`` GPUs (scale_up) inside a non-blocking fat tree (scale_out) of as many domains as
    ``num_gpus`` needs, with the tiers' bandwidth, latency and efficiency. On it the hierarchical
    ring collectives of ``collectives.py`` give the numbers of ``comm.py``."""
    units = max(1, math.ceil(num_gpus / domain))
    up = Level("scale_up", "switch", domain, Link(scale_up.bandwidth_bytes_per_s, scale_up.latency_s), scale_up.efficiency)
    out = Level(
        "scale_out",
        "fat_tree",
        units,
        Link(scale_out.bandwidth_bytes_per_s, scale_out.latency_s),
        scale_out.efficiency,
        tiers=(Tier("network", units),),
    )
    return Topology((up, out))
