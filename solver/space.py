"""The decision space of a problem: the domain of every mapping choice and the valid grids.

Domains come from the problem's ``mapping`` section (a scalar fixes, a list restricts, an absent
key is free) and from divisibility, checked by the model's own ``check_mapping`` so the rules
live in one place. cp and ep stay 1 unless the problem lists other values (context and expert
parallelism plug in here). The placement (``model/placement.py``) is kept per grid point as one
representative of each class of placements the model cannot tell apart (``placement_classes``).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field

from parasol.model.errors import ProblemError
from parasol.model.pipeline import default_edge_stage_layers, split_stages, vpp_divides_stages
from parasol.model.placement import PLACEMENTS, check_placement, check_system, layout, parallel_groups, rank_strides, topology_decides
from parasol.model.specs import DEFAULT_PLACEMENT
from parasol.model.training import check_grid

from .problem import Problem

RECOMPUTE = ("none", "selective", "full")


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Space:
    """Every choice the planner may make, as finite domains."""

    problem: Problem
    grid: tuple  # (num_gpus, tp, pp, dp, cp, ep) that pass the divisibility rules
    micro_batch: tuple
    vpp: tuple
    sp: tuple  # booleans
    recompute: tuple
    zero: tuple
    first_stage_layers: tuple  # allowed values; () = free (1..L)
    last_stage_layers: tuple
    default_split: bool  # the problem asks for the default split (first = last = 0)
    placements: dict = field(default_factory=dict)  # grid point -> placements to try, one per class (the default's first)

    @property
    def layers(self) -> int:
        return self.problem.model.layers

    def partitions(self, pp: int) -> list[tuple[int, int]]:
        """(first, last) stage layer counts allowed for ``pp`` stages."""
        L = self.layers
        if pp == 1:
            return [(L, L)]
        if self.default_split:
            split = default_edge_stage_layers(L, pp)
            return [split] if split_stages(L, pp, *split)[0] and split[0] >= self.lead_layers else []
        firsts = self.first_stage_layers or range(1, L + 1)
        lasts = self.last_stage_layers or range(1, L + 1)
        return [(f, last) for f in firsts for last in lasts if split_stages(L, pp, f, last)[0] and f >= self.lead_layers]

    @property
    def lead_layers(self) -> int:
        """Dense layers before the first MoE layer; the planner keeps them on the first stage."""
        moe = self.problem.model.moe
        return moe.first_dense_layers if moe is not None else 0

    def partitions_or_default(self, pp: int) -> list[tuple[int, int]]:
        """The default split if the space allows it (cheap), else every allowed partition."""
        split = default_edge_stage_layers(self.layers, pp) if pp > 1 else (self.layers, self.layers)
        if not split_stages(self.layers, pp, *split)[0] or split[0] < self.lead_layers:
            return self.partitions(pp)
        firsts, lasts = self.first_stage_layers, self.last_stage_layers
        if (not firsts or split[0] in firsts) and (not lasts or split[1] in lasts) or pp == 1:
            return [split]
        return self.partitions(pp)

    def vpp_values(self, pp: int, first: int, last: int) -> list[int]:
        """Interleaving depths allowed with this pipeline partition."""
        if pp == 1:
            return [v for v in self.vpp if v == 1]
        layers = split_stages(self.layers, pp, first, last)[0]
        return [v for v in self.vpp if vpp_divides_stages(layers, v)]


    @functools.cached_property
    def pipeline_options(self) -> dict:
        """pp -> [(first, last, allowed vpp values)] for every pipeline depth of the grid."""
        return {pp: [(f, last, self.vpp_values(pp, f, last)) for f, last in self.partitions(pp)]
                for pp in sorted({g[2] for g in self.grid})}

    def used_values(self) -> dict:
        """Values of vpp, first and last stage layers that some valid pipeline uses (solver domains)."""
        options = [o for opts in self.pipeline_options.values() for o in opts if o[2]]
        return {"vpp": sorted({v for o in options for v in o[2]}), "first": sorted({o[0] for o in options}),
                "last": sorted({o[1] for o in options})}

    def size(self) -> int:
        """Number of mappings in the space (counted once, not enumerated point by point)."""
        return self._size

    @functools.cached_property
    def _size(self) -> int:
        gb = self.problem.workload.global_batch
        per_pp = {pp: sum(len(o[2]) for o in opts) for pp, opts in self.pipeline_options.items()}
        total = 0
        # pipelines without interleaving, usable whatever the micro-batch count
        plain = {pp: sum(1 for o in opts if 1 in o[2]) for pp, opts in self.pipeline_options.items()}
        for n, tp, pp, dp, cp, ep in self.grid:
            sps = sum(1 for s in self.sp if tp > 1 or not s) * len(self.placements[(n, tp, pp, dp, cp, ep)])
            for mb in self.micro_batch:
                if gb % (dp * mb):
                    continue
                pipelines = per_pp[pp] if (gb // (dp * mb)) % pp == 0 else plain[pp]
                total += pipelines * sps * len(self.recompute) * len(self.zero)
        return total


def _allowed(problem: Problem, key: str, free: list) -> list:
    chosen = problem.mapping.get(key)
    return [v for v in free if v in chosen] if chosen is not None else list(free)


def expert_parallel_degrees(problem: Problem, expert_ranks: int) -> list[int]:
    """Allowed ep: 1 for dense models; for MoE the divisors of the expert count that divide
    tp·dp·cp (Megatron-Core with expert tensor parallelism 1), within the mapping's restriction."""
    moe = problem.model.moe
    if moe is None:
        return [1]
    return _allowed(problem, "ep", [e for e in divisors(moe.experts) if expert_ranks % e == 0])


MIN_TOKENS_PER_CP_RANK = 2048


def context_parallel_degrees(problem: Problem, n: int) -> list[int]:
    """Allowed cp for ``n`` GPUs: the listed values, or when cp is free the powers of two dividing n
    whose ranks keep at least 2,048 tokens each and split the sequence into the 2·cp chunks of
    causal load balancing (Megatron-Core). A planner pruning, not a model rule: below ~2K tokens per
    rank the ring's K/V block transfer outlasts the block's attention on a scale-out link (for a
    70B-class GQA model, transfer ∝ s/cp, compute ∝ (s/cp)², equal near 2,500 tokens at 50 GB/s and
    1 PFLOP/s), so smaller shards only add exposed communication; list cp values to go below."""
    if "cp" in problem.mapping:
        return list(problem.mapping["cp"])
    seq = problem.workload.seq_len
    return [c for c in divisors(n) if c & (c - 1) == 0 and (c == 1 or (seq % (2 * c) == 0 and seq // c >= MIN_TOKENS_PER_CP_RANK))]


def free_placements(systems) -> tuple:
    """The placements an absent ``mapping.placement`` leaves to the planner: all of them on a system
    whose topology the model follows (a torus, dragonfly, full mesh or oversubscribed tier:
    ``placement.topology_decides``), else only the default. On the two-tier DGX/HGX systems a
    placement changes only how many members of each group share an NVLink domain; freeing it there
    cost 3.7x the solve time on GPT-3 175B at 1,024 GPUs for the same optimum (README, "Placement"),
    so a problem lists placements to make it a decision there."""
    return PLACEMENTS if any(topology_decides(s.topology) for s in systems) else (DEFAULT_PLACEMENT,)


def placement_classes(problem: Problem, system, point: tuple, allowed: tuple) -> tuple:
    """The placements of ``allowed`` worth trying at grid point (n, tp, pp, dp, cp, ep): one per
    class of equivalent placements, the first of each class in ``allowed``'s order (the default
    placement first). Symmetry breaking, exact because the model reads a placement only through
    where it puts each group (``placement.group_layouts``): (1) a dimension of size 1 can sit
    anywhere, so placements giving every dimension of size > 1 the same stride in both rank grids
    build the same groups; (2) placements that build different groups which nevertheless sit
    alike (same members per domain, same levels, spacing and wrap-around) give the same times."""
    n, tp, pp, dp, cp, ep = point
    moe = problem.model.moe is not None
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    expert = {"tp": 1, "cp": 1, "ep": ep, "dp": tp * cp * dp // ep, "pp": pp}
    kinds = ("tp", "cp", "dp", "pp", "ep", "edp") if moe else ("tp", "cp", "dp", "pp")
    if len(allowed) == 1:  # nothing to compare: only the rules
        try:
            check_placement(allowed[0], tp, cp, dp, pp, ep, moe)
        except ProblemError:
            return ()
        return allowed
    strides, layouts = set(), {}
    for p in allowed:
        try:
            check_placement(p, tp, cp, dp, pp, ep, moe)
        except ProblemError:
            continue
        key = tuple((d, s) for sizes in (dense, expert) for d, s in rank_strides(p, sizes).items() if sizes[d] > 1)
        if key in strides:
            continue
        strides.add(key)
        groups = parallel_groups(p, tp, cp, dp, pp, ep)
        layouts.setdefault(tuple(layout(system, groups[k]) for k in kinds), p)
    return tuple(layouts.values())


def build_space(problem: Problem) -> Space:
    """The space of ``problem``; ProblemError when a restriction leaves no valid grid."""
    model, wl = problem.model, problem.workload
    if model.moe is None and any(e != 1 for e in problem.mapping.get("ep", (1,))):
        raise ProblemError("expert parallelism needs a mixture-of-experts model; this model is dense: use ep 1",
                           source=problem.source, field="mapping.ep")
    grid, unplaceable = [], None
    for n in problem.num_gpus:
        system = problem.system(n)
        try:
            check_system(system)
        except ProblemError as exc:  # this GPU count does not fit the topology: the others may
            unplaceable = unplaceable or exc.located(source=problem.source)
            continue
        for tp in _allowed(problem, "tp", divisors(n)):
            for cp in context_parallel_degrees(problem, n):
                for pp in _allowed(problem, "pp", [p for p in divisors(n) if p <= model.layers]):
                    if n % (tp * cp * pp):
                        continue
                    dp = n // (tp * cp * pp)
                    if "dp" in problem.mapping and dp not in problem.mapping["dp"]:
                        continue
                    try:
                        check_grid(model, system, wl, tp, pp, dp, cp)
                    except ProblemError:
                        continue
                    for ep in expert_parallel_degrees(problem, tp * dp * cp):
                        grid.append((n, tp, pp, dp, cp, ep))
    if not grid and unplaceable is not None:
        raise unplaceable
    if not grid:
        fixed = {k: list(v) for k, v in problem.mapping.items() if k in ("tp", "pp", "dp", "cp")}
        raise ProblemError(
            f"no tp·pp·dp·cp grid fits num_gpus {list(problem.num_gpus)} with {model.heads} heads, {model.kv_heads} kv_heads, "
            f"{model.layers} layers and global_batch {wl.global_batch}" + (f" under the restrictions {fixed}" if fixed else ""),
            source=problem.source, field="mapping")
    gb = wl.global_batch
    micro = _allowed(problem, "micro_batch", divisors(gb))
    vmax = model.layers
    vpp = _allowed(problem, "vpp", list(range(1, vmax + 1))) if "vpp" in problem.mapping else list(range(1, vmax + 1))
    first = problem.mapping.get("first_stage_layers", ())
    last = problem.mapping.get("last_stage_layers", ())
    default_split = first == (0,) and last == (0,)
    space = Space(problem=problem, grid=tuple(grid), micro_batch=tuple(micro), vpp=tuple(vpp),
                  sp=tuple(_allowed(problem, "sp", [False, True])), recompute=tuple(_allowed(problem, "recompute", list(RECOMPUTE))),
                  zero=tuple(_allowed(problem, "zero", [0, 1, 2, 3])),
                  first_stage_layers=tuple(v for v in first if v > 0), last_stage_layers=tuple(v for v in last if v > 0),
                  default_split=default_split)
    # a pipeline depth with no valid layer partition (or none with an allowed vpp) has no mapping
    usable = {pp for pp in {g[2] for g in grid} if any(space.vpp_values(pp, f, last) for f, last in space.partitions(pp))}
    systems = {n: problem.system(n) for n in {g[0] for g in grid}}
    allowed = tuple(p for p in PLACEMENTS if p in problem.mapping.get("placement", free_placements(systems.values())))
    placements = {g: placement_classes(problem, systems[g[0]], g, allowed) for g in grid if g[2] in usable}
    if not placements:
        raise ProblemError(f"no pipeline depth allowed here splits the {model.layers} layers as the mapping asks "
                           "(first_stage_layers, last_stage_layers, vpp)", source=problem.source, field="mapping")
    space = dataclasses.replace(space, grid=tuple(g for g in placements if placements[g]), placements=placements)
    if not space.grid:
        raise ProblemError(f"no grid allows the placements {list(allowed)}: with experts, Megatron-Core needs pp last "
                           "(or tp·cp = ep) and the same pipeline groups in the dense and expert grids; allowed: an order "
                           "ending with pp", source=problem.source, field="mapping.placement")
    if not space.micro_batch or not space.vpp or not space.sp or not space.recompute or not space.zero or not space.size():
        restrictions = {k: [str(x).lower() if isinstance(x, bool) else x for x in v] for k, v in problem.mapping.items()}
        raise ProblemError(
            f"the mapping restrictions {restrictions} leave no valid mapping (global_batch {wl.global_batch} must divide by "
            "dp·micro_batch; sp needs tp > 1; vpp must split every stage)", source=problem.source, field="mapping")
    return space
