"""Compile the model into small factor tables over the decisions each factor depends on.

Every number here comes from a ``model/`` function called on one point of a factor's domain; no
equation is written in this module. Tables hold scaled integers (solver/scaling.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from model import memory
from model.specs import Mapping
from model.training import (dp_comm_times_s, edge_stage_times, layer_times, optimizer_owned_params, pipeline_crosses_domain,
                            pipeline_p2p_time_s, stage_expert_params, stage_params, stage_state_bytes)
from model import compute

from .scaling import Scale
from .space import RECOMPUTE, Space


def _mapping(tp=1, pp=1, dp=1, cp=1, micro_batch=1, vpp=1, sp=False, recompute="none", zero=1, ep=1) -> Mapping:
    """A Mapping carrying the decisions a factor depends on (the others are not read)."""
    return Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=micro_batch, vpp=vpp, sp=sp, recompute=recompute, zero=zero)


@dataclass
class Tables:
    scale: Scale
    grid: list  # (num_gpus, tp, pp, dp, cp, ep, pipeline crosses a domain)
    layer: list  # lead (dense) layers: (tp, cp, mb, sp, rc, total, fwd, bwd, activation_units, working_units)
    body: list  # body (MoE, or for dense models the same dense) layers: (tp, cp, mb, sp, rc, ep, total, fwd, bwd, act, working)
    edge: list  # (tp, cp, mb, first_fwd, first_bwd, last_fwd, last_bwd, logits_act_units)
    embed_act: list  # (tp, cp, mb, pp, units)
    p2p: list  # (tp, cp, mb, crosses, time): zero is never read when pp = 1
    micro: list  # (dp, mb, m)
    state: list  # (tp, zero, dp, cp, pp1, ep, lead_layer, body_layer, first_edge, last_edge, zero3_buffer) units
    dp: list  # (tp, zero, dp, cp, pp1, ep, then for grads, gather, optimizer: at 0 body layers, at 1, slope per layer)
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
    eps = sorted({g[5] for g in space.grid})
    saved = memory.saved_gemm_input_bytes(wl.precision)

    def layer_row(tp, cp, mb, sp, rc, ep, moe_layer):
        lt = layer_times(model, system, wl, tp, cp, mb, sp, rc, ep, moe_layer)
        args = (model, mb, wl.seq_len, tp, cp, sp, rc, wl.attention, saved, moe_layer)
        return lt.total, lt.forward, lt.backward, memory.activation_bytes_per_layer(*args), memory.recompute_working_bytes(*args)

    # "lead" layers: the dense layers before the first MoE layer (all layers of a dense model);
    # "body" layers: the MoE layers (for a dense model the same dense layers, with ep = 1)
    raw_lead, raw_body = {}, {}
    for tp in tps:
        for cp in cps:
            for mb in mbs:
                for sp in space.sp:
                    if sp and tp == 1:
                        continue  # sequence parallelism is a no-op without tensor parallelism: one symmetric copy
                    for rc in space.recompute:
                        raw_lead[(tp, cp, mb, sp, rc)] = layer_row(tp, cp, mb, sp, rc, 1, False)
                        for ep in eps:
                            raw_body[(tp, cp, mb, sp, rc, ep)] = (layer_row(tp, cp, mb, sp, rc, ep, True) if moe
                                                                  else raw_lead[(tp, cp, mb, sp, rc)])
    if prune_memory:
        usable = min(s_.usable_memory_bytes for s_ in systems.values())
        raw_body = {k: v for k, v in raw_body.items() if v[3] + v[4] <= usable} or raw_body  # none fits: keep, proven infeasible
        if not moe:
            raw_lead = {k[:5]: raw_lead[k[:5]] for k in raw_body}
    scale = Scale(min(v[0] for v in list(raw_lead.values()) + list(raw_body.values())))
    t, mem = scale.time, scale.memory
    layer = [(tp, cp, mb, int(sp), RECOMPUTE.index(rc), t(tot), t(f), t(b), mem(act), mem(work))
             for (tp, cp, mb, sp, rc), (tot, f, b, act, work) in raw_lead.items()]
    body = [(tp, cp, mb, int(sp), RECOMPUTE.index(rc), ep, t(tot), t(f), t(b), mem(act), mem(work))
            for (tp, cp, mb, sp, rc, ep), (tot, f, b, act, work) in raw_body.items()]

    edge, embed_act = [], []
    for tp in tps:
        for cp in cps:
            for mb in mbs:
                e = edge_stage_times(model, system, wl, tp, cp, mb)
                logits = memory.logits_activation_bytes(model, mb, wl.seq_len, tp, cp)
                edge.append((tp, cp, mb, t(e.first_fwd), t(e.first_bwd), t(e.last_fwd), t(e.last_bwd), mem(logits)))
                for pp in pps:
                    embed_act.append((tp, cp, mb, pp, mem(memory.embedding_activation_bytes(model, mb, wl.seq_len, tp, cp, pp))))

    grid = [g + (int(pipeline_crosses_domain(systems[g[0]], g[1], g[4], g[3], g[2])),) for g in space.grid]
    p2p = []
    for tp in tps:
        for cp in cps:
            for mb in mbs:
                for crosses in sorted({g[6] for g in grid}):
                    p2p.append((tp, cp, mb, crosses, t(pipeline_p2p_time_s(model, system, wl, tp, cp, mb, bool(crosses)))))
    micro = sorted({(dp, mb, gb // (dp * mb)) for dp in dps for mb in mbs if gb % (dp * mb) == 0})

    state, dp_rows = [], []
    lead = space.lead_layers
    strip = lambda d: sum(v for k, v in d.items() if k != "zero3_buffers")  # noqa: E731
    for tp, dp, cp, pp1, ep in sorted({(g[1], g[3], g[4], g[2] == 1, g[5]) for g in space.grid}):
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
                          mem(strip(s_out)), mem(z3)))

            def first_stage(b):  # DP traffic and optimizer of stage 0 holding the lead layers and b body layers
                p = stage_params(model, lead + b, True, pp1, tp, b if moe else 0)
                pe = stage_expert_params(model, b if moe else 0, ep)
                g, a = dp_comm_times_s(system, wl, m, p, pe)
                return g, a, compute.optimizer_step_time_s(system.device, optimizer_owned_params(m, p, pe), wl.grad_bytes)
            f0, f1, f2 = first_stage(0), first_stage(1), first_stage(2)
            dp_rows.append((tp, zero, dp, cp, int(pp1), ep) + tuple(
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
