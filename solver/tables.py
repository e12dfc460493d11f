"""Compile the model into small factor tables over the decisions each factor depends on.

Every number here comes from a ``model/`` function called on one point of a factor's domain; no
equation is written in this module. Tables hold scaled integers (solver/scaling.py). Where a
placement puts the parallel groups (``model.placement.group_layouts``) enters as small class ids
per table key, so a free placement multiplies a table only by the layouts it can really take.
"""

from __future__ import annotations

from dataclasses import dataclass

from parasol.model import memory
from parasol.model.placement import PLACEMENTS, group_layouts
from parasol.model.specs import Mapping
from parasol.model.training import (dp_comm_times_s, edge_stage_times, layer_times, optimizer_owned_params, pipeline_p2p_time_s,
                            stage_expert_params, stage_params, stage_state_bytes)
from parasol.model import compute

from .scaling import Scale
from .space import RECOMPUTE, Space

# Key columns of the tables whose outputs cpsat.py reads by position (outputs follow the keys).
LAYER_KEYS, BODY_KEYS, DP_KEYS = 6, 7, 7


def _mapping(tp=1, pp=1, dp=1, cp=1, micro_batch=1, vpp=1, sp=False, recompute="none", zero=1, ep=1) -> Mapping:
    """A Mapping carrying the decisions a factor depends on (the others are not read)."""
    return Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=micro_batch, vpp=vpp, sp=sp, recompute=recompute, zero=zero)


@dataclass
class Tables:
    scale: Scale
    # (num_gpus, tp, pp, dp, cp, ep, placement index in PLACEMENTS, layout class of the TP+CP groups, of the
    # TP+CP+EP groups, of the DP+expert-DP groups, of the PP group): where the placement puts each group,
    # as small class ids the communication tables are keyed by (never the placement itself)
    grid: list
    layer: list  # lead (dense) layers: (tp, cp, mb, sp, rc, layer class, total, fwd, bwd, activation_units, working_units)
    body: list  # body (MoE, or dense again) layers: (tp, cp, mb, sp, rc, ep, body class, total, fwd, bwd, act, working)
    edge: list  # (tp, cp, mb, first_fwd, first_bwd, last_fwd, last_bwd, logits_act_units)
    embed_act: list  # (tp, cp, mb, pp, units)
    p2p: list  # (tp, cp, mb, pp class, time): zero is never read when pp = 1
    micro: list  # (dp, mb, m)
    state: list  # (tp, zero, dp, cp, pp1, ep, lead_layer, body_layer, first_edge, last_edge, zero3_buffer) units
    dp: list  # (tp, zero, dp, cp, pp1, ep, dp class, then for grads, gather, optimizer: at 0 body layers, at 1, slope per layer)
    chunks: dict  # stage kind -> list of (pp, vpp, chunk limit)


def compile_tables(space: Space, prune_memory: bool = True) -> Tables:
    """All factor tables of ``space``. With ``prune_memory``, layer rows whose activations for a
    single layer and micro-batch already exceed the device's usable memory are left out: no
    mapping can use them (every stage holds at least one layer of one micro-batch), and dropping
    them keeps the micro-batch domain small (a solver technique; the space itself is unchanged)."""
    problem = space.problem
    model, wl = problem.model, problem.workload
    systems = {n: problem.system(n) for n in problem.num_gpus}
    system = systems[problem.num_gpus[0]]  # device and network are the same for every count
    tps = sorted({g[1] for g in space.grid})
    cps = sorted({g[4] for g in space.grid})
    dps = sorted({g[3] for g in space.grid})
    pps = sorted({g[2] for g in space.grid})
    gb = wl.global_batch
    mbs = [mb for mb in space.micro_batch if any(gb % (dp * mb) == 0 for dp in dps)]

    moe = model.moe is not None
    saved = memory.saved_gemm_input_bytes(wl.precision)

    # Where each placement puts the groups, as class ids numbered apart for each key of the table that
    # reads them: (tp, cp) for the layer table, (tp, cp, ep) for the body, (tp, dp, cp, pp1, ep) for
    # DP, (tp, cp) for p2p. Ids are 0 wherever the table's own keys already decide the layout (a fixed
    # placement), so the class adds no variable there; pipeline layouts with the same p2p times are
    # one class (on two tiers only whether the pipeline leaves the scale-up domain counts).
    classes = {kind: {} for kind in ("layer", "body", "dp", "pp")}

    def class_id(kind, key, value) -> int:
        ids = classes[kind].setdefault(key, {})
        return ids.setdefault(value, len(ids))

    placed = [(g, placement, group_layouts(systems[g[0]], Mapping(tp=g[1], pp=g[2], dp=g[3], cp=g[4], ep=g[5], micro_batch=1,
                                                                 placement=placement)))
              for g in space.grid for placement in space.placements[g]]
    p2p_times = {}  # (tp, cp, pp layout) -> scaled p2p times over the micro-batches, once the time unit is known
    grid = []
    for (n, tp, pp, dp, cp, ep), placement, where in placed:
        grid.append((n, tp, pp, dp, cp, ep, PLACEMENTS.index(placement),
                     class_id("layer", (tp, cp), (where["tp"], where["cp"])),
                     class_id("body", (tp, cp, ep), (where["tp"], where["cp"], where["ep"])),
                     class_id("dp", (tp, dp, cp, pp == 1, ep), (where["dp"], where["edp"])), where["pp"]))

    def layer_row(tp, cp, mb, sp, rc, ep, moe_layer, layouts):
        lt = layer_times(model, system, wl, tp, cp, mb, sp, rc, ep, moe_layer, layouts)
        args = (model, mb, wl.seq_len, tp, cp, sp, rc, wl.attention, saved, moe_layer)
        return lt.total, lt.forward, lt.backward, memory.activation_bytes_per_layer(*args), memory.recompute_working_bytes(*args)

    # "lead" layers: the dense layers before the first MoE layer (all layers of a dense model);
    # "body" layers: the MoE layers (for a dense model the same dense layers, with ep = 1)
    raw_lead, raw_body = {}, {}
    for mb in mbs:
        for sp in space.sp:
            for rc in space.recompute:
                for (tp, cp), ids in sorted(classes["layer"].items()):
                    for (tp_at, cp_at), c in ids.items():
                        if not (sp and tp == 1):  # sequence parallelism is a no-op without tensor parallelism: one symmetric copy
                            raw_lead[(tp, cp, mb, sp, rc, c)] = layer_row(tp, cp, mb, sp, rc, 1, False, {"tp": tp_at, "cp": cp_at})
                for (tp, cp, ep), ids in sorted(classes["body"].items()):
                    for (tp_at, cp_at, ep_at), c in ids.items():
                        if not (sp and tp == 1):
                            raw_body[(tp, cp, mb, sp, rc, ep, c)] = (
                                layer_row(tp, cp, mb, sp, rc, ep, True, {"tp": tp_at, "cp": cp_at, "ep": ep_at}) if moe
                                else raw_lead[(tp, cp, mb, sp, rc, classes["layer"][(tp, cp)][(tp_at, cp_at)])])
    if prune_memory:
        usable = min(s_.usable_memory_bytes for s_ in systems.values())
        raw_body = {k: v for k, v in raw_body.items() if v[3] + v[4] <= usable} or raw_body  # none fits: keep, proven infeasible
        if not moe:
            fits = {k[:5] for k in raw_body}  # memory does not depend on where the groups sit
            raw_lead = {k: v for k, v in raw_lead.items() if k[:5] in fits}
    scale = Scale(min(v[0] for v in list(raw_lead.values()) + list(raw_body.values())))
    t, mem = scale.time, scale.memory
    layer = [(tp, cp, mb, int(sp), RECOMPUTE.index(rc), c, t(tot), t(f), t(b), mem(act), mem(work))
             for (tp, cp, mb, sp, rc, c), (tot, f, b, act, work) in raw_lead.items()]
    body = [(tp, cp, mb, int(sp), RECOMPUTE.index(rc), ep, c, t(tot), t(f), t(b), mem(act), mem(work))
            for (tp, cp, mb, sp, rc, ep, c), (tot, f, b, act, work) in raw_body.items()]

    edge, embed_act = [], []
    for tp in tps:
        for cp in cps:
            for mb in mbs:
                e = edge_stage_times(model, system, wl, tp, cp, mb)
                logits = memory.logits_activation_bytes(model, mb, wl.seq_len, tp, cp)
                edge.append((tp, cp, mb, t(e.first_fwd), t(e.first_bwd), t(e.last_fwd), t(e.last_bwd), mem(logits)))
                for pp in pps:
                    embed_act.append((tp, cp, mb, pp, mem(memory.embedding_activation_bytes(model, mb, wl.seq_len, tp, cp, pp))))

    for i, g in enumerate(grid):
        tp, cp, pp_at = g[1], g[4], g[10]
        if (tp, cp, pp_at) not in p2p_times:
            p2p_times[(tp, cp, pp_at)] = tuple(t(pipeline_p2p_time_s(model, system, wl, tp, cp, mb, pp_at)) for mb in mbs)
        grid[i] = g[:10] + (class_id("pp", (tp, cp), p2p_times[(tp, cp, pp_at)]),)
    p2p = [(tp, cp, mb, c, value) for (tp, cp), ids in classes["pp"].items() for times, c in ids.items()
           for mb, value in zip(mbs, times)]
    micro = sorted({(dp, mb, gb // (dp * mb)) for dp in dps for mb in mbs if gb % (dp * mb) == 0})

    state, dp_rows = [], []
    lead = space.lead_layers
    strip = lambda d: sum(v for k, v in d.items() if k != "zero3_buffers")  # noqa: E731
    dp_at = {key + (c,): {"dp": a, "edp": b} for key, ids in classes["dp"].items() for (a, b), c in ids.items()}
    for tp, dp, cp, pp1, ep, c in sorted(dp_at):
        body_moe = 1 if moe else 0
        for zero in space.zero:
            m = _mapping(tp=tp, dp=dp, cp=cp, zero=zero, ep=ep)
            s_lead = stage_state_bytes(model, wl, m, stage_params(model, 1, False, False, tp))
            s_body = stage_state_bytes(model, wl, m, stage_params(model, 1, False, False, tp, body_moe),
                                       stage_expert_params(model, body_moe, ep))
            # pp = 1: one stage holds embedding and output (no second copy of tied embeddings)
            s_emb = stage_state_bytes(model, wl, m, stage_params(model, 0, True, pp1, tp))
            s_out = stage_state_bytes(model, wl, m, stage_params(model, 0, False, True, tp)) if not pp1 else {}
            z3 = s_lead.get("zero3_buffers", 0.0)
            state.append((tp, zero, dp, cp, int(pp1), ep, mem(strip(s_lead)), mem(strip(s_body)), mem(strip(s_emb)),
                          mem(strip(s_out)), mem(z3)))  # memory does not depend on the placement: one row for all

            def first_stage(b):  # DP traffic and optimizer of stage 0 holding the lead layers and b body layers
                p = stage_params(model, lead + b, True, pp1, tp, b if moe else 0)
                pe = stage_expert_params(model, b if moe else 0, ep)
                g, a = dp_comm_times_s(system, wl, m, p, pe, dp_at[(tp, dp, cp, pp1, ep, c)])
                return g, a, compute.optimizer_step_time_s(system.device, optimizer_owned_params(m, p, pe), wl.grad_bytes)
            f0, f1, f2 = first_stage(0), first_stage(1), first_stage(2)
            dp_rows.append((tp, zero, dp, cp, int(pp1), ep, c) + tuple(
                t(x) for x in (f0[0], f1[0], f2[0] - f1[0], f0[1], f1[1], f2[1] - f1[1], f0[2], f1[2], f2[2] - f1[2])))
    state = sorted(set(state))
    dp_rows = sorted(set(dp_rows))

    chunks = {"first": set(), "middle": set(), "last": set()}
    for pp in pps:
        for v in space.used_values()["vpp"]:
            if pp == 1 and v > 1:
                continue
            chunks["first"].add((pp, v, memory.in_flight_chunk_limit(0, pp, v)))
            chunks["middle"].add((pp, v, memory.in_flight_chunk_limit(min(1, pp - 1), pp, v)))
            chunks["last"].add((pp, v, memory.in_flight_chunk_limit(pp - 1, pp, v)))
    return Tables(scale=scale, grid=grid, layer=layer, body=body, edge=edge, embed_act=sorted(set(embed_act)), p2p=p2p, micro=micro,
                  state=state, dp=dp_rows, chunks={k: sorted(v) for k, v in chunks.items()})
