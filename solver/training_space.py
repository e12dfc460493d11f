"""The decision space of a training problem, as relations (``relations.Space``).

Domains come from the problem's ``mapping`` section (a scalar fixes, a list restricts, an absent
key is free) and from divisibility, checked by the model's own rules (``training.check_grid``,
``placement.check_placement``, ``pipeline.split_stages``) so that they live in one place. The
relations, in the order rows are materialised:

- ``grid``: num_gpus, tp, pp, dp, cp, ep, etp, the placement and where it puts each parallel group
  (``placement.group_layouts``), one placement per class the model cannot tell apart
  (``placement_classes``);
- ``micro``: dp, micro_batch and the micro-batch count global_batch / (dp·micro_batch);
- ``sp``: tp, sp (sequence parallelism needs tp > 1); ``zero``;
- ``schedule``: pp, the micro-batch count, interleaved (Megatron's interleaved schedule runs
  micro-batches in groups of pp);
- ``pipeline``: pp, the first, last and middle stages' layers, vpp (which must split every stage)
  and whether it interleaves;
- ``recompute``: recompute and the module set selective recomputation redoes (``recompute_rows``);
- ``moe_dispatcher``; ``moe_a2a_overlap``: ep, pp, interleaved, DualPipe, recompute, the module set and whether the
  expert all-to-all is overlapped, where the schedule allows it (``pipeline.a2a_overlap_problem``).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from typing import NamedTuple

import pandas as pd

from parasol.model.choices import CpComm, MoeDispatcher, Recompute, ZeroStage, plain
from parasol.model.decisions import GROUP_KEYS, TRAINING_MAPPING_KEYS
from parasol.model.decisions import TrainingDecision as D
from parasol.model.errors import ProblemError
from parasol.model.offload import module_offload_problem
from parasol.model.pipeline import (
    a2a_overlap_problem,
    default_edge_stage_layers,
    dualpipe_problem,
    edge_stage_slots,
    last_stage_options,
    layers_held,
    split_stages,
    vpp_splits_stage,
)
from parasol.model.placement import (
    PLACEMENTS,
    check_placement,
    check_system,
    expert_grid_sizes,
    group_layouts,
    layout,
    parallel_groups,
    rank_strides,
    topology_decides,
)
from parasol.model.specs import DEFAULT_PLACEMENT, Mapping
from parasol.model.training import (
    check_cp_comm,
    check_expert_grid,
    check_grid,
    offload_problem,
    optimizer_offload_problem,
    weight_offload_problem,
)
from parasol.model.training_step import lead_layers

from . import deadline
from .relations import CompactForm, Identity, Relation, Space, categorical, numeric

MIN_TOKENS_PER_CP_RANK = 2048


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (trial division up to its square root)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def allowed_values(problem, key: str, free) -> list:
    chosen = problem.mapping.get(key)
    return [v for v in free if v in chosen] if chosen is not None else list(free)


def expert_grids(problem, tp: int, dp: int, cp: int) -> list[tuple[int, int]]:
    """Allowed (ep, etp): (1, 1) for dense models; for MoE the ep dividing the expert count and the
    etp the mapping lists (1 when it lists none: expert tensor parallelism is off unless asked for)
    with ep·etp dividing tp·dp·cp (``training.check_expert_grid``), within the mapping's restrictions."""
    moe = problem.model.moe
    if moe is None:
        return [(1, 1)]
    out = []
    for ep in allowed_values(problem, "ep", divisors(moe.experts)):
        for etp in problem.mapping.get("etp", (1,)):
            try:
                check_expert_grid(problem.model, tp, dp, cp, ep, etp)
            except ProblemError:
                continue
            out.append((ep, etp))
    return out


def context_parallel_degrees(problem, n: int) -> list[int]:
    """Allowed cp for ``n`` GPUs: the listed values, or when cp is free the powers of two dividing n
    whose ranks keep at least 2,048 tokens each and split the sequence into the 2·cp chunks of
    causal load balancing (Megatron-Core). A planner pruning, not a model rule: below ~2K tokens per
    rank the ring's K/V block transfer outlasts the block's attention on a scale-out link (for a
    70B-class GQA model, transfer ∝ s/cp, compute ∝ (s/cp)², equal near 2,500 tokens at 50 GB/s and
    1 PFLOP/s), so smaller shards only add exposed communication; list cp values to go below."""
    if "cp" in problem.mapping:
        return list(problem.mapping["cp"])
    seq = problem.workload.seq_len
    return [
        c for c in divisors(n) if c & (c - 1) == 0 and (c == 1 or (seq % (2 * c) == 0 and seq // c >= MIN_TOKENS_PER_CP_RANK))
    ]


def free_placements(systems) -> tuple:
    """The placements an absent ``mapping.placement`` leaves to the planner: all of them on a system
    whose topology the model follows (a torus, dragonfly, full mesh or oversubscribed tier:
    ``placement.topology_decides``), else only the default. On the two-tier DGX/HGX systems a
    placement changes only how many members of each group share an NVLink domain; freeing it there
    cost 2.6x the solve time on GPT-3 175B at 1,024 GPUs for the same optimum (docs/placement.md),
    so a problem lists placements to make it a decision there."""
    return PLACEMENTS if any(topology_decides(s.topology) for s in systems) else (DEFAULT_PLACEMENT,)


def placement_classes(problem, system, point: tuple, allowed: tuple) -> tuple:
    """The placements of ``allowed`` worth trying at grid point (n, tp, pp, dp, cp, ep, etp): one per
    class of equivalent placements, the first of each class in ``allowed``'s order (the default
    placement first). Symmetry breaking, exact because the model reads a placement only through
    where it puts each group (``placement.group_layouts``): (1) a dimension of size 1 can sit
    anywhere, so placements giving every dimension of size > 1 the same stride in both rank grids
    build the same groups; (2) placements that build different groups which nevertheless sit
    alike (same members per domain, same levels, spacing and wrap-around) give the same times."""
    n, tp, pp, dp, cp, ep, etp = point
    moe = problem.model.moe is not None
    dense = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    expert = expert_grid_sizes(tp, cp, dp, pp, ep, etp)
    kinds = ("tp", "cp", "dp", "pp", "ep", "edp", "etp") if moe else ("tp", "cp", "dp", "pp")
    if len(allowed) == 1:  # nothing to compare: only the rules
        try:
            check_placement(allowed[0], tp, cp, dp, pp, ep, moe, etp)
        except ProblemError:
            return ()
        return allowed
    strides, layouts = set(), {}
    for p in allowed:
        try:
            check_placement(p, tp, cp, dp, pp, ep, moe, etp)
        except ProblemError:
            continue
        key = tuple((d, s) for sizes in (dense, expert) for d, s in rank_strides(p, sizes).items() if sizes[d] > 1)
        if key in strides:
            continue
        strides.add(key)
        groups = parallel_groups(p, tp, cp, dp, pp, ep, etp)
        layouts.setdefault(tuple(layout(system, groups[k]) for k in kinds), p)
    return tuple(layouts.values())


class GridPoint(NamedTuple):
    """A device count and its parallel degrees: tp·pp·dp·cp = num_gpus, ep·etp within tp·dp·cp."""

    num_gpus: int
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    etp: int


def _grid(problem) -> list[GridPoint]:
    """Every grid point of every device count, with the divisibility rules and restrictions."""
    model, wl = problem.model, problem.workload
    grid, unplaceable = [], None
    for n in problem.num_gpus:
        deadline.check()  # thousands of device counts take seconds
        system = problem.system(n)
        try:
            check_system(system)
        except ProblemError as exc:  # this GPU count does not fit the topology: the others may
            unplaceable = unplaceable or exc.located(source=problem.source)
            continue
        for tp in allowed_values(problem, "tp", divisors(n)):
            for cp in context_parallel_degrees(problem, n):
                for pp in allowed_values(problem, "pp", [p for p in divisors(n) if p <= model.layers]):
                    if n % (tp * cp * pp):
                        continue
                    dp = n // (tp * cp * pp)
                    if "dp" in problem.mapping and dp not in problem.mapping["dp"]:
                        continue
                    try:
                        check_grid(model, system, wl, tp, pp, dp, cp)
                    except ProblemError:
                        continue
                    grid.extend(GridPoint(n, tp, pp, dp, cp, ep, etp) for ep, etp in expert_grids(problem, tp, dp, cp))
    if not grid and unplaceable is not None:
        raise unplaceable
    if not grid:
        fixed = {k: list(v) for k, v in problem.mapping.items() if k in ("tp", "pp", "dp", "cp")}
        raise ProblemError(
            f"no tp·pp·dp·cp grid fits num_gpus {list(problem.num_gpus)} with {model.heads} heads, {model.kv_heads} kv_heads, "
            f"{model.layers} layers and global_batch {wl.global_batch}" + (f" under the restrictions {fixed}" if fixed else ""),
            source=problem.source,
            field="mapping",
        )
    return grid


def pipeline_partitions(problem, pp: int) -> list[tuple[int, int]]:
    """(first, last) stage layer counts allowed for ``pp`` stages: the default split when the problem
    asks for it (first = last = 0), else every split the restrictions and ``split_stages`` allow;
    the first stage holds the model's leading dense layers."""
    L, lead = problem.model.layers, lead_layers(problem.model)
    if pp == 1:
        return [(L, L)]
    first, last = problem.mapping.get("first_stage_layers", ()), problem.mapping.get("last_stage_layers", ())
    if first == (0,) and last == (0,):
        split = default_edge_stage_layers(L, pp)
        return [split] if split_stages(L, pp, *split)[0] and split[0] >= lead else []
    firsts = [v for v in first if v > 0] or range(1, L + 1)
    lasts = {v for v in last if v > 0} or None
    return [(f, la) for f in firsts if f >= lead for la in reversed(last_stage_options(L, pp, f)) if lasts is None or la in lasts]


MAX_PIPELINE_ROWS = 1_000_000  # layouts of the pipeline relation: a cap on the space's memory (about 0.2 GB)


def _pipeline_rows(problem, pps, device) -> list[tuple]:
    """(pp, single stage, first, last, middle, vpp, interleaved, uneven chunks) of every partition and
    interleaving depth allowed (``pipeline.split_stages``; vpp splitting each stage,
    ``pipeline.vpp_splits_stage``, with chunks of equal size or, where ``mapping.uneven_chunks`` allows,
    of unequal size)."""
    L = problem.model.layers
    vpps = tuple(problem.mapping.get("vpp", range(1, L + 1)))
    unevens = problem.mapping.get("uneven_chunks", (False,))
    plain_u = unevens[0] if len(unevens) == 1 else False  # the value a stage without interleaving carries
    offloads = problem.mapping.get("offload_layers", (0,))
    first_slots, last_slots = edge_stage_slots(problem.workload.mtp_layers)
    splits = {}

    def splitting(n: int, slots: int, uneven: bool) -> set:
        if (n, slots, uneven) not in splits:
            splits[(n, slots, uneven)] = {v for v in vpps if vpp_splits_stage(n, v, slots, uneven)}
        return splits[(n, slots, uneven)]

    rows = []
    for pp in pps:
        deadline.check()  # a deep model with free stage edges lists millions of layouts
        if len(rows) > MAX_PIPELINE_ROWS:
            raise ProblemError(
                f"more than {MAX_PIPELINE_ROWS:,} pipeline layouts (pp, stage layer counts, vpp); restrict "
                "mapping.pp, mapping.first_stage_layers, mapping.last_stage_layers or mapping.vpp",
                source=problem.source,
                field="mapping",
            )
        for f, la in pipeline_partitions(problem, pp):
            for u in unevens:
                if pp == 1:
                    allowed = {v for v in vpps if v == 1}
                    middle = 0
                else:
                    middle = split_stages(L, pp, f, la)[0][1] if pp >= 3 else 0
                    allowed = (
                        splitting(f, first_slots, u)
                        & splitting(la, last_slots, u)
                        & (splitting(middle, 0, u) if pp >= 3 else set(vpps))
                    )
                rows.extend(
                    (pp, int(pp == 1), f, la, middle, v, int(v > 1), int(u), x)
                    for v in sorted(allowed)
                    for x in offloads
                    if offload_problem(problem.model, device, pp, Recompute.NONE, x) is None  # recomputation aside
                    and (v > 1 or u == plain_u)  # without interleaving chunks are stages: one row
                )
    return rows


def _pipeline_compact(problem, pipeline: pd.DataFrame) -> CompactForm:
    """The pipeline relation as CP-SAT takes it best: the first, last and middle layer counts each pp
    allows, the interleaving depths each stage's layer count allows (``vpp_splits_stage``), and the
    identity that the stages hold all the model's layers (``pipeline.layers_held``)."""
    f, la, mid, v, i, pp = (D.FIRST_STAGE_LAYERS, D.LAST_STAGE_LAYERS, D.MIDDLE_STAGE_LAYERS, D.VPP, D.INTERLEAVED, D.PP)
    u, off = D.UNEVEN_CHUNKS, D.OFFLOAD_LAYERS
    vpps, unevens = sorted(set(pipeline[v])), sorted(set(pipeline[u]))
    first_slots, last_slots = edge_stage_slots(problem.workload.mtp_layers)
    parts = [
        pipeline[[pp, D.SINGLE_STAGE]],
        pipeline[[pp, f]],
        pipeline[[pp, la]],
        pipeline[[pp, mid]],
        pipeline[[pp, v]],
        pipeline[[v, i]],
        pipeline[[v, u]],
    ]
    for column, slots in ((f, first_slots), (la, last_slots), (mid, 0)):
        counts = sorted(set(pipeline[column]))
        parts.append(
            pd.DataFrame(
                [(n, x, y) for n in counts for x in vpps for y in unevens if n == 0 or vpp_splits_stage(n, x, slots, bool(y))],
                columns=[column, v, u],
            )
        )
    parts.append(pipeline[[pp, off]])  # the offloading each pipeline depth allows (training.offload_problem)
    relations = tuple(
        Relation(f"pipeline_{j}", part.drop_duplicates().reset_index(drop=True).astype("int64")) for j, part in enumerate(parts)
    )
    held = Identity(
        lambda o: layers_held(o, o.decision(pp), o.decision(f), o.decision(la), o.decision(mid)), problem.model.layers
    )
    return CompactForm(relations, (held,))


def cp_comm_rows(problem, tp_cp_groups: list) -> list[tuple]:
    """(tp, cp, CP group code, cp_comm code) allowed, from the grid's (tp, cp, CP group Layout, its code): the
    exchanges ``mapping.cp_comm`` lists (default ring) that the model's heads allow where the group sits
    (``training.check_cp_comm``); without context parallelism there is nothing to exchange, so cp 1 keeps one."""
    listed = [c for c in CpComm if c in problem.mapping.get("cp_comm", (CpComm.RING,))]
    rows = []
    for tp, cp, where, code in tp_cp_groups:
        for c in listed[:1] if cp == 1 else listed:
            try:
                check_cp_comm(problem.model, tp, cp, c, where)
            except ProblemError:
                continue
            rows.append((tp, cp, code, tuple(CpComm).index(c)))
    return rows


def offload_rows(problem, device, zero: list, key: str, off, check) -> tuple[tuple, list[tuple]]:
    """(the values ``mapping.<key>`` lists, default ``off``; the (ZeRO stage, value code) rows that
    ``check(device, zero, value)`` allows). A value that no ZeRO stage allows (the device lacks the host
    link or bandwidth it needs) is a ProblemError naming the field."""
    values = tuple(problem.mapping.get(key, (off,)))
    for x in values:
        reason = check(device, ZeroStage.WEIGHTS, x)  # ZeRO-3 allows what any stage does
        if reason is not None:
            raise ProblemError(reason, source=problem.source, field=f"mapping.{key}")
    return values, [(z, j) for z in zero for j, x in enumerate(values) if check(device, z, x) is None]


def dispatcher_rows(problem) -> tuple[list, tuple]:
    """(dispatcher codes, the domain's values): for an MoE model the dispatchers ``mapping.moe_dispatcher`` lists
    (default: the workload's, ``workload.moe_dispatcher``), which solve then chooses among; a dense model sends no
    tokens to experts, and its mapping states no dispatcher (None; the problem file may not list one)."""
    if problem.model.moe is None:
        return [0], (None,)
    listed = problem.mapping.get("moe_dispatcher", (problem.workload.moe_dispatcher,))
    values = tuple(MoeDispatcher)
    return [values.index(d) for d in values if d in listed], values


class RecomputeChoice(NamedTuple):
    """One (recompute, module set) pair of the space: the codes its relations hold, and what they stand for."""

    code: int  # of Recompute
    modules_code: int  # of the module sets' domain
    recompute: Recompute
    modules: tuple  # what selective recomputation redoes (the workload's where the mapping lists none)


def recompute_rows(problem, recompute: list) -> tuple[list[RecomputeChoice], tuple]:
    """(the (recompute, module set) pairs, the module sets' domain): under selective recomputation each set
    ``mapping.recompute_modules`` lists, which solve then chooses among; otherwise (nothing, or every module, redone)
    the first alone, which changes nothing there. Where the mapping lists none, the workload's own (None: the mapping
    states nothing)."""
    values = tuple(problem.mapping.get("recompute_modules", (None,)))
    own = problem.workload.recompute_modules
    rows = [
        RecomputeChoice(r, c, tuple(Recompute)[r], own if values[c] is None else values[c])
        for r in recompute
        for c in (range(len(values)) if tuple(Recompute)[r] == Recompute.SELECTIVE else (0,))
    ]
    return rows, values


def a2a_overlap_rows(
    problem, eps: list, pps: list, dualpipe: list, recompute: list[RecomputeChoice]
) -> tuple[pd.DataFrame, tuple]:
    """(the relation, the domain's values) of ``moe_a2a_overlap``, whether the expert all-to-all is hidden behind
    another micro-batch's compute: for an MoE model, (ep, pp, interleaved, dualpipe, recompute, overlap) rows of
    the values ``mapping.moe_a2a_overlap`` lists (default: the workload's, ``workload.moe_a2a_overlap``) where
    the schedule allows the overlap (``pipeline.a2a_overlap_problem``; ``recompute``: ``recompute_rows``); at ep 1
    there is no all-to-all to hide (false). A dense model has none at all, and its mapping states nothing (None)."""
    if problem.model.moe is None:
        return pd.DataFrame({D.MOE_A2A_OVERLAP: [0]}), (None,)
    wl = problem.workload
    listed = problem.mapping.get("moe_a2a_overlap", (wl.moe_a2a_overlap,))
    rows = set()
    for ep, pp, i, d, r in itertools.product(eps, pps, (0, 1), dualpipe, recompute):
        for overlap in listed:
            if not (overlap and ep > 1):
                rows.add((ep, pp, i, d, r.code, r.modules_code, 0))
            elif a2a_overlap_problem(pp, 1 + i, bool(d), r.recompute, r.modules, wl.mtp_layers) is None:
                rows.add((ep, pp, i, d, r.code, r.modules_code, 1))
    columns = [D.EP, D.PP, D.INTERLEAVED, D.DUALPIPE, D.RECOMPUTE, D.RECOMPUTE_MODULES, D.MOE_A2A_OVERLAP]
    return pd.DataFrame(sorted(rows), columns=columns), (False, True)


def build_space(problem) -> Space:
    """The space of a training ``problem``; ProblemError when its restrictions leave no mapping."""
    model, wl = problem.model, problem.workload
    if model.moe is None:  # a dense model has no expert grid: only ep = etp = 1 (training.check_expert_grid)
        try:
            for ep in problem.mapping.get("ep", (1,)):
                for etp in problem.mapping.get("etp", (1,)):
                    check_expert_grid(model, 1, 1, 1, ep, etp)
        except ProblemError as exc:
            raise exc.located(source=problem.source) from None
    grid = _grid(problem)
    systems = {n: problem.system(n) for n in {g.num_gpus for g in grid}}
    device = next(iter(systems.values())).device
    least = min((x for x in problem.mapping.get("offload_layers", (0,)) if x), default=0)
    reason = offload_problem(model, device, 1, Recompute.NONE, least)  # what no mapping can get around
    if reason is not None:
        raise ProblemError(reason, source=problem.source, field="mapping.offload_layers")
    free = free_placements(systems.values())
    listed = problem.mapping.get("placement", free)
    if "placement" in problem.framework_keys:  # left free in the file: what the framework builds, where the planner decides it
        listed = tuple(p for p in listed if p in free) or (DEFAULT_PLACEMENT,)
    allowed = tuple(p for p in PLACEMENTS if p in listed)
    pipeline = _pipeline_rows(problem, sorted({g.pp for g in grid}), device)
    usable_pp = {partition[0] for partition in pipeline}  # its rows start with pp
    if not usable_pp:
        raise ProblemError(
            f"no pipeline depth allowed here splits the {model.layers} layers as the mapping asks "
            "(first_stage_layers, last_stage_layers, vpp)",
            source=problem.source,
            field="mapping",
        )
    rows, used = [], set()
    layouts = defaultdict(dict)  # group kind -> {Layout: code}
    for i, point in enumerate(grid):
        if i % 64 == 0:
            deadline.check()  # tens of thousands of grid points, each placed, take seconds
        n, tp, pp, dp, cp, ep, etp = point
        if pp not in usable_pp:
            continue
        for placement in placement_classes(problem, systems[n], point, allowed):
            grid_mapping = Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, micro_batch=1, placement=placement)
            where = group_layouts(systems[n], grid_mapping)
            codes = tuple(layouts[kind].setdefault(where[kind], len(layouts[kind])) for kind in GROUP_KEYS)
            rows.append((*point, PLACEMENTS.index(placement), *codes))
            used.add(point)
    if not rows:
        raise ProblemError(
            f"no grid allows the placements {list(allowed)}: with experts, Megatron-Core needs pp last "
            "(or tp·cp = ep) and the same pipeline groups in the dense and expert grids; allowed: an order "
            "ending with pp",
            source=problem.source,
            field="mapping.placement",
        )
    grid_cols = [D.NUM_GPUS, D.TP, D.PP, D.DP, D.CP, D.EP, D.ETP, D.PLACEMENT, *GROUP_KEYS.values()]
    gb = wl.global_batch
    dps = sorted({point.dp for point in used})
    micro_batches = allowed_values(problem, "micro_batch", divisors(gb))
    micro = [(dp, mb, gb // (dp * mb)) for dp in dps for mb in micro_batches if gb % (dp * mb) == 0]
    tps = sorted({point.tp for point in used})
    sp_with_tp = problem.framework is not None and problem.framework.sequence_parallel_with_tp
    sp = [
        (tp, int(s), int(o))
        for tp in tps
        for s in allowed_values(problem, "sp", [False, True])
        for o in problem.mapping.get("tp_comm_overlap", (False,))  # off unless the mapping lists it
        if (tp > 1 or not s)
        and (s or not o)  # the overlap needs sequence parallelism (hence tp > 1)
        and (not sp_with_tp or s == (tp > 1))  # a framework whose tensor parallelism always shards the sequence
    ]
    recompute = [tuple(Recompute).index(r) for r in allowed_values(problem, "recompute", list(Recompute))]
    recomputing, module_sets = recompute_rows(problem, recompute)
    at = [grid_cols.index(key) for key in (D.TP, D.CP, D.CP_GROUP)]
    cp_codes = sorted({tuple(row[i] for i in at) for row in rows})  # (tp, cp, CP group code) of the grid
    cp_groups = {code: where for where, code in layouts["cp"].items()}
    cp_comm = cp_comm_rows(problem, [(tp, cp, cp_groups[code], code) for tp, cp, code in cp_codes])
    dispatchers, dispatcher_values = dispatcher_rows(problem)
    # fine-grained offloading (workload.offload_modules): off unless the mapping (or the listed modules) asks; not
    # beside whole-layer offloading (Megatron-Core refuses both), nothing to move under full recomputation
    module_offloads = [int(x) for x in problem.mapping.get("module_offload", (False,))]
    offload_recompute = [
        (x, r.code, r.modules_code, u)
        for x in sorted({row[-1] for row in pipeline})
        for r in recomputing
        for u in module_offloads
        if offload_problem(model, device, 1, r.recompute, x) is None  # pp: the pipeline relation's rows
        and not (u and module_offload_problem(model, device, wl.offload_modules, x, r.recompute, r.modules))
    ]
    if module_offloads == [1] and not offload_recompute:  # offloading forced on beside choices it cannot run with
        reasons = (
            module_offload_problem(model, device, wl.offload_modules, x, r.recompute, r.modules)
            for x in sorted({row[-1] for row in pipeline})
            for r in recomputing
        )
        reason = next((why for why in reasons if why is not None), None)
        if reason is not None:
            raise ProblemError(reason, source=problem.source, field="mapping.module_offload")
    zero = [int(z) for z in allowed_values(problem, "zero", list(ZeroStage))]
    # offloading to the host: none unless the mapping lists it
    shares, optimizer_offload = offload_rows(problem, device, zero, "optimizer_offload", 0.0, optimizer_offload_problem)
    weights, weight_offload = offload_rows(problem, device, zero, "weight_offload", False, weight_offload_problem)
    counts = sorted({m for _, _, m in micro})
    # the schedule: 1F1B, interleaved (vpp > 1: micro-batches in groups of pp), or DualPipe where the mapping lists it
    dualpipe = [int(d) for d in problem.mapping.get("dualpipe", (False,))]
    schedule = [
        (pp, m, i, d)
        for pp in sorted(usable_pp)
        for m in counts
        for i in (0, 1)
        for d in dualpipe
        if (not i or (pp > 1 and m % pp == 0)) and (not d or (not i and dualpipe_problem(pp, 1, m) is None))
    ]
    overlap, overlap_values = a2a_overlap_rows(problem, sorted({p.ep for p in used}), sorted(usable_pp), dualpipe, recomputing)
    frames = [
        ("grid", pd.DataFrame(rows, columns=grid_cols)),
        ("micro", pd.DataFrame(micro, columns=[D.DP, D.MICRO_BATCH, D.MICROBATCHES])),
        ("sp", pd.DataFrame(sp, columns=[D.TP, D.SP, D.TP_COMM_OVERLAP])),
        ("recompute", pd.DataFrame([(r.code, r.modules_code) for r in recomputing], columns=[D.RECOMPUTE, D.RECOMPUTE_MODULES])),
        ("cp_comm", pd.DataFrame(cp_comm, columns=[D.TP, D.CP, D.CP_GROUP, D.CP_COMM])),
        ("moe_dispatcher", pd.DataFrame({D.MOE_DISPATCHER: dispatchers})),
        ("moe_a2a_overlap", overlap),
        (
            "offload_recompute",
            pd.DataFrame(offload_recompute, columns=[D.OFFLOAD_LAYERS, D.RECOMPUTE, D.RECOMPUTE_MODULES, D.MODULE_OFFLOAD]),
        ),
        ("optimizer_offload", pd.DataFrame(optimizer_offload, columns=[D.ZERO, D.OPTIMIZER_OFFLOAD])),
        ("weight_offload", pd.DataFrame(weight_offload, columns=[D.ZERO, D.WEIGHT_OFFLOAD])),
        ("schedule", pd.DataFrame(schedule, columns=[D.PP, D.MICROBATCHES, D.INTERLEAVED, D.DUALPIPE])),
        (
            "pipeline",
            pd.DataFrame(
                pipeline,
                columns=[
                    D.PP,
                    D.SINGLE_STAGE,
                    D.FIRST_STAGE_LAYERS,
                    D.LAST_STAGE_LAYERS,
                    D.MIDDLE_STAGE_LAYERS,
                    D.VPP,
                    D.INTERLEAVED,
                    D.UNEVEN_CHUNKS,
                    D.OFFLOAD_LAYERS,
                ],
            ),
        ),
    ]
    domains = {
        D.PLACEMENT: categorical(PLACEMENTS),
        D.SP: categorical((False, True)),
        D.TP_COMM_OVERLAP: categorical((False, True)),
        D.UNEVEN_CHUNKS: categorical((False, True)),
        D.RECOMPUTE: categorical(tuple(Recompute)),
        D.CP_COMM: categorical(tuple(CpComm)),
        D.MOE_DISPATCHER: categorical(dispatcher_values),
        D.OPTIMIZER_OFFLOAD: categorical(shares),
        D.WEIGHT_OFFLOAD: categorical(weights),
        D.DUALPIPE: categorical((False, True)),
        D.MODULE_OFFLOAD: categorical((False, True)),
        D.MOE_A2A_OVERLAP: categorical(overlap_values),
        D.RECOMPUTE_MODULES: categorical(module_sets),
    }
    domains.update({key: categorical(tuple(layouts[kind])) for kind, key in GROUP_KEYS.items()})
    for _, frame in frames:
        for c in frame.columns:
            if c not in domains:
                domains[c] = numeric(frame[c])
            elif domains[c].numeric:
                domains[c] = numeric(set(domains[c].values) | set(frame[c]))
    relations = [Relation(name, frame.astype("int64")) for name, frame in frames]
    relations[-1] = Relation("pipeline", relations[-1].frame, _pipeline_compact(problem, relations[-1].frame))
    space = Space(tuple(relations), domains)
    if not space.size():
        restrictions = {k: [str(x).lower() if isinstance(x, bool) else x for x in v] for k, v in problem.mapping.items()}
        raise ProblemError(
            f"the mapping restrictions {restrictions} leave no valid mapping (global_batch {wl.global_batch} must divide by "
            "dp·micro_batch; sp needs tp > 1; tp_comm_overlap needs sp; vpp must split every stage; cp_comm a2a needs tp·cp to divide the heads and "
            "kv_heads, a2a+p2p tp times its all-to-all level and a two-tier system; offload_layers needs pp 1 and recompute none; optimizer_offload needs zero 1 or more; weight_offload needs zero 3; dualpipe needs an even pp and an even count of at "
            "least 2·pp micro-batches, without vpp; module_offload needs neither offload_layers nor recompute full; moe_a2a_overlap needs vpp > 1 or dualpipe "
            "at pp > 1, no full recomputation and at most one MTP layer)",
            source=problem.source,
            field="mapping",
        )
    return space


def mapping_of(space: Space, stored: dict) -> tuple[int, Mapping]:
    """(num_gpus, Mapping) of one point given by its stored values (the keys a mapping states,
    ``TRAINING_MAPPING_KEYS``, as plain values)."""
    fields = {key.value: plain(space.domains[key].value(stored[key])) for key in TRAINING_MAPPING_KEYS}
    return space.domains[D.NUM_GPUS].value(stored[D.NUM_GPUS]), Mapping(**fields)


def placements_by_point(space: Space) -> dict:
    """{(num_gpus, tp, pp, dp, cp, ep, etp): the placements the space tries there, in order}."""
    grid = space.relation("grid")
    out = {}
    for row in grid.itertuples(index=False):
        point = tuple(int(getattr(row, str(k))) for k in (D.NUM_GPUS, D.TP, D.PP, D.DP, D.CP, D.EP, D.ETP))
        out.setdefault(point, ())
        out[point] += (space.domains[D.PLACEMENT].value(getattr(row, str(D.PLACEMENT))),)
    return out
