"""CP-SAT encoding of the training planner.

Decisions are integer variables; each factor table (solver/tables.py) is an allowed-assignment
constraint tying the decisions it depends on to its scaled outputs; products (layers x per-layer
time, micro-batches x slowest stage, in-flight chunks x layers x activation) are
``add_multiplication_equality``; overlaps are ``add_max_equality``; totals are linear sums.
The composition mirrors model/training.evaluate_training: stage time = layers·layer time +
edge extras + vpp·p2p; pipeline = m·max + (sum - max)/vpp (model/pipeline.py); exposed DP
communication and optimizer on stage 0; memory per stage = state + in-flight activations.
The placement (an index into ``model.placement.PLACEMENTS``) rides on the grid table with the layout
classes it gives the groups; the layer, DP and p2p tables are keyed by those classes, never by the
placement itself (solver/tables.py). Every plan is decoded and re-evaluated by the model
(solver/plan.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from parasol.model.placement import PLACEMENTS
from parasol.model.specs import Mapping

from .space import RECOMPUTE, Space
from .tables import BODY_KEYS, DP_KEYS, LAYER_KEYS, Tables

STATUS = {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "FEASIBLE", cp_model.INFEASIBLE: "INFEASIBLE",
          cp_model.UNKNOWN: "UNKNOWN", cp_model.MODEL_INVALID: "MODEL_INVALID"}


def _status_name(code) -> str:
    if code not in STATUS:
        raise RuntimeError(f"unexpected CP-SAT status {code!r}")  # a bug, not a user error
    return STATUS[code]


def _bounds(rows, col) -> tuple[int, int]:
    values = [r[col] for r in rows]
    return min(values + [0]), max(values + [0])


# The cost objective's weights: $/hour in units of 1/1,000 of the cheapest allowed system's, a
# relative rounding under 5e-4. Finer units (1e4, 1e5) put step x weight near 1e17-1e18, where
# CP-SAT 9.15's presolve (one pass) wrongly reported feasible problems INFEASIBLE; measured.
COST_WEIGHT_UNITS = 1000


@dataclass
class Encoding:
    model: cp_model.CpModel
    decisions: dict  # name -> IntVar (the mapping's keys and num_gpus)
    step: cp_model.IntVar  # step time, time units
    peak_memory: cp_model.IntVar  # memory units
    cost: cp_model.IntVar | None = None  # step x the system's $/hour, when hourly costs were given

    def metric(self, name: str) -> cp_model.IntVar:
        """The integer to minimise for a training metric (solver.pareto): throughput and step_time
        by the step time (tokens per step are fixed), cost and tokens_per_usd by step x $/hour,
        memory by the peak memory."""
        if name in ("throughput", "step_time"):
            return self.step
        if name in ("cost", "tokens_per_usd") and self.cost is not None:
            return self.cost
        if name == "memory":
            return self.peak_memory
        raise KeyError(name)


def encode(space: Space, tables: Tables, objective: str, enforce_memory: bool = True, hourly_cost: dict | None = None,
           max_step_s: float | None = None) -> Encoding:
    problem = space.problem
    L = problem.model.layers
    md = cp_model.CpModel()
    sc = tables.scale

    bounds = {}  # variable index -> (lo, hi), to size the products' domains

    def var(lo, hi, name):
        x = md.new_int_var(int(lo), int(hi), name)
        bounds[x.index] = (int(lo), int(hi))
        return x

    def hi(x) -> int:
        return bounds[x.index][1]

    def prod(a, b, name):
        lo_a, hi_a = bounds[a.index]
        lo_b, hi_b = bounds[b.index]
        corners = [lo_a * lo_b, lo_a * hi_b, hi_a * lo_b, hi_a * hi_b]
        out = var(min(corners), max(corners), name)
        md.add_multiplication_equality(out, [a, b])
        return out

    def table_vars(rows, names, prefix):
        out = []
        for i, name in enumerate(names):
            lo, hi_ = _bounds(rows, i)
            out.append(var(lo, hi_, f"{prefix}_{name}"))
        return out

    def factor(keys, rows, outputs, prefix, with_index=False):
        """A factor table: an index variable tied to the key decisions by one table constraint,
        each output read with an element constraint (lighter than output columns in the table)."""
        rows = sorted(rows)
        k = len(keys)
        index = var(0, len(rows) - 1, f"{prefix}_row")
        md.add_allowed_assignments(list(keys) + [index], [tuple(r[:k]) + (i,) for i, r in enumerate(rows)])
        out = [index] if with_index else []
        for j, name in enumerate(outputs):
            values = [int(r[k + j]) for r in rows]
            # the domain is the values' own range (not widened to 0): a valid bound the LP can use
            x = var(min(values), max(values), f"{prefix}_{name}")
            md.add_element(index, values, x)
            out.append(x)
        return out

    grid = [tuple(g) for g in tables.grid]
    # the placement and the layout classes it gives the groups (solver/tables.py) ride on the grid table
    N, tp, pp, dp, cp, ep, place, lay_layer, lay_body, lay_dp, lay_pp = table_vars(
        grid, ["N", "tp", "pp", "dp", "cp", "ep", "placement", "layer_class", "body_class", "dp_class", "pp_class"], "grid")
    md.add_allowed_assignments([N, tp, pp, dp, cp, ep, place, lay_layer, lay_body, lay_dp, lay_pp], grid)
    mb = var(min(space.micro_batch), max(space.micro_batch), "micro_batch")
    used = space.used_values()
    v = var(1, max(used["vpp"]), "vpp")
    md.add_allowed_assignments([v], [(x,) for x in used["vpp"]])
    sp = md.new_bool_var("sp")
    rc = var(0, 2, "recompute")
    md.add_allowed_assignments([rc], [(RECOMPUTE.index(r),) for r in space.recompute])
    zero = var(0, 3, "zero")
    md.add_allowed_assignments([zero], [(z,) for z in space.zero])

    # factor tables
    m = var(1, problem.workload.global_batch, "microbatches")
    md.add_allowed_assignments([dp, mb, m], tables.micro)
    # lead layers (dense, on the first stage: k of them) and body layers (MoE, or dense again)
    k = space.lead_layers
    layer_rows = sorted(tables.layer)
    layer_row, T, Tf, Tb, A, W = factor([tp, cp, mb, sp, rc, lay_layer], layer_rows, ["T", "Tf", "Tb", "A", "W"], "layer",
                                        with_index=True)
    Tm, Tfm, Tbm, Am, Wm = factor([tp, cp, mb, sp, rc, ep, lay_body], tables.body, ["T", "Tf", "Tb", "A", "W"], "body")
    Eff, Efb, Elf, Elb, LA = factor([tp, cp, mb], tables.edge, ["Eff", "Efb", "Elf", "Elb", "LA"], "edge")
    (EA,) = factor([tp, cp, mb, pp], tables.embed_act, ["EA"], "emb")
    (P,) = factor([tp, cp, mb, lay_pp], tables.p2p, ["P"], "p2p")
    pp1 = md.new_bool_var("pp1")
    md.add(pp == 1).only_enforce_if(pp1)
    md.add(pp >= 2).only_enforce_if(~pp1)
    Sl, Sm, Se, So, Z3 = factor([tp, zero, dp, cp, pp1, ep], tables.state, ["Sl", "Sm", "Se", "So", "Z3"], "state")
    G0, G1, Gs, A0, A1, As, O0, O1, Os = factor([tp, zero, dp, cp, pp1, ep, lay_dp], tables.dp,
                                               ["G0", "G1", "Gs", "A0", "A1", "As", "O0", "O1", "Os"], "dp")
    # in-flight chunks = min(m·vpp, the schedule's limit) (model/memory.in_flight_chunks)
    chunks = {}
    mv = prod(m, v, "microbatch_chunks")
    for kind, rows in tables.chunks.items():
        limit = var(0, max(r[2] for r in rows), f"chunk_limit_{kind}")
        md.add_allowed_assignments([pp, v, limit], rows)
        chunks[kind] = var(0, max(r[2] for r in rows), f"chunks_{kind}")
        md.add_min_equality(chunks[kind], [mv, limit])

    # pipeline partition: first, middle (each of pp-2), last
    n1, nL, nm = var(1, L, "first_stage_layers"), var(1, L, "last_stage_layers"), var(0, L, "middle_stage_layers")
    md.add_allowed_assignments([n1], [(x,) for x in used["first"]])
    md.add_allowed_assignments([nL], [(x,) for x in used["last"]])
    pp3 = md.new_bool_var("pp3")
    md.add(pp >= 3).only_enforce_if(pp3)
    md.add(pp <= 2).only_enforce_if(~pp3)
    pm2 = var(-1, max(g[2] for g in grid) - 2, "pp_minus_2")
    md.add(pm2 == pp - 2)
    k_nm = var(-L, L * max(g[2] for g in grid), "middle_layers_total")
    md.add_multiplication_equality(k_nm, [pm2, nm])
    md.add(n1 == L).only_enforce_if(pp1)
    md.add(nL == L).only_enforce_if(pp1)
    md.add(nm == 0).only_enforce_if(~pp3)
    md.add(n1 + nL + k_nm == L).only_enforce_if(~pp1)
    md.add(nm >= 1).only_enforce_if(pp3)
    md.add(v == 1).only_enforce_if(pp1)
    md.add(v <= n1)
    md.add(v <= nL)
    md.add(v <= nm).only_enforce_if(pp3)
    # the interleaved schedule needs the micro-batches to be a multiple of pp (model check_mapping)
    m_mod_pp = var(0, max(g[2] for g in grid), "microbatches_mod_pp")
    pp_divisor = var(1, max(g[2] for g in grid), "pp_as_divisor")  # a modulus domain must exclude 0
    md.add(pp_divisor == pp)
    md.add_modulo_equality(m_mod_pp, m, pp_divisor)
    interleaved = md.new_bool_var("interleaved")
    md.add(v >= 2).only_enforce_if(interleaved)
    md.add(v == 1).only_enforce_if(~interleaved)
    md.add(m_mod_pp == 0).only_enforce_if(interleaved)
    # vpp splits every stage into equal chunks; an edge stage may count its embedding or loss as a
    # layer (model/pipeline.vpp_divides_stages)
    rest_m = var(0, L, "middle_mod_vpp")
    md.add_modulo_equality(rest_m, nm, v)
    md.add(rest_m == 0).only_enforce_if(pp3)
    for n, name in ((n1, "first"), (nL, "last")):
        rest = var(0, L, f"{name}_mod_vpp")
        md.add_modulo_equality(rest, n, v)
        exact = md.new_bool_var(f"{name}_divides")
        md.add(rest == 0).only_enforce_if(exact)
        md.add(rest + 1 == v).only_enforce_if(~exact)
    if space.default_split:
        rows = sorted({(g[2],) + space.partitions(g[2])[0] for g in grid})
        md.add_allowed_assignments([pp, n1, nL], rows)
    else:
        # a restriction on the edge stages applies when there are several stages (pp = 1 holds all L)
        for n, allowed in ((n1, space.first_stage_layers), (nL, space.last_stage_layers)):
            if allowed:
                md.add_allowed_assignments([pp1, n], [(0, x) for x in allowed] + [(1, L)])

    # stage times per micro-batch; the first stage holds the k lead layers and b1 body layers
    b1 = var(0, L, "first_body_layers")
    md.add(b1 == n1 - k)
    has_body1 = md.new_bool_var("first_has_body_layers")
    md.add(b1 >= 1).only_enforce_if(has_body1)
    md.add(b1 == 0).only_enforce_if(~has_body1)
    vP = prod(v, P, "vpp_p2p")  # read only when pp > 1
    t1 = prod(b1, Tm, "layers_time_first")
    tL, tm = (prod(n, Tm, f"layers_time_{kind}") for n, kind in ((nL, "last"), (nm, "middle")))
    hi_t = (L * max(_bounds(tables.layer, LAYER_KEYS)[1], _bounds(tables.body, BODY_KEYS)[1])
            + 4 * max(_bounds(tables.edge, i)[1] for i in range(3, 7))
            + max(used["vpp"]) * _bounds(tables.p2p, 4)[1])
    s1, sL, sm = var(0, hi_t, "stage_first"), var(0, hi_t, "stage_last"), var(0, hi_t, "stage_middle")
    md.add(s1 == k * T + t1 + Eff + Efb + vP).only_enforce_if(~pp1)
    md.add(s1 == k * T + t1 + Eff + Efb + Elf + Elb).only_enforce_if(pp1)
    md.add(sL == tL + Elf + Elb + vP).only_enforce_if(~pp1)
    md.add(sL == s1).only_enforce_if(pp1)
    md.add(sm == tm + vP).only_enforce_if(pp3)
    md.add(sm == 0).only_enforce_if(~pp3)
    slowest = var(0, hi_t, "slowest_stage")
    md.add_max_equality(slowest, [s1, sL, sm])
    middle_sum = prod(pm2, sm, "middle_stages_time")
    total = var(0, hi_t * max(g[2] for g in grid), "stages_sum")
    md.add(total == s1 + sL + middle_sum).only_enforce_if(~pp1)
    md.add(total == s1).only_enforce_if(pp1)
    busy = prod(m, slowest, "slowest_x_microbatches")
    # Redundant bound that gives the LP a direct handle on the dominant term: the slowest stage
    # works m times at least its share of all layers (k lead, L-k body), and m/pp = gb·tp·cp/(N·mb),
    # so m·slowest >= gb·tp·cp·(k·T + (L-k)·Tm)/(N·mb) (floor), which depends on the layer factors
    # and N only (MoE: T at its fastest layout class, a valid lower bound).
    gb = problem.workload.global_batch
    if problem.model.moe is None:  # one layer kind: an element over the layer row is lighter
        if len(problem.num_gpus) == 1:
            n_ = problem.num_gpus[0]
            values = [(gb * L * r[LAYER_KEYS] * r[0] * r[1]) // (n_ * r[2]) for r in layer_rows]
            work = var(0, max(values), "work")
            md.add_element(layer_row, values, work)
        else:
            work_rows = [(n_,) + r[:LAYER_KEYS] + ((gb * L * r[LAYER_KEYS] * r[0] * r[1]) // (n_ * r[2]),)
                         for n_ in problem.num_gpus for r in layer_rows]
            (work,) = factor([N, tp, cp, mb, sp, rc, lay_layer], work_rows, ["work"], "work")
    else:
        lead_time = {}
        for r in layer_rows:  # the fastest layout class of each (tp, cp, mb, sp, rc)
            lead_time[r[:5]] = min(lead_time.get(r[:5], r[LAYER_KEYS]), r[LAYER_KEYS])
        work_rows = sorted({(n_,) + r[:BODY_KEYS]
                            + ((gb * r[0] * r[1] * (k * lead_time[r[:5]] + (L - k) * r[BODY_KEYS])) // (n_ * r[2]),)
                            for n_ in problem.num_gpus for r in tables.body if r[:5] in lead_time})
        keys = [N, tp, cp, mb, sp, rc, ep, lay_body]
        if len(problem.num_gpus) == 1:
            keys, work_rows = keys[1:], [r[1:] for r in work_rows]
        (work,) = factor(keys, work_rows, ["work"], "work")
    md.add(busy >= work)
    bubble = var(0, hi_t * max(g[2] for g in grid), "bubble")
    md.add_division_equality(bubble, total - slowest, v)

    # data-parallel exposure and optimizer (stage 0)
    f0, b0 = prod(b1, Tfm, "first_fwd_layers"), prod(b1, Tbm, "first_bwd_layers")
    fwd0, bwd0 = var(0, hi_t, "first_fwd"), var(0, hi_t, "first_bwd")
    md.add(fwd0 == k * Tf + f0 + Eff).only_enforce_if(~pp1)
    md.add(fwd0 == k * Tf + f0 + Eff + Elf).only_enforce_if(pp1)
    md.add(bwd0 == k * Tb + b0 + Efb).only_enforce_if(~pp1)
    md.add(bwd0 == k * Tb + b0 + Efb + Elb).only_enforce_if(pp1)
    b1_less = var(-1, L, "first_body_layers_minus_1")
    md.add(b1_less == b1 - 1)

    def first_stage_affine(at0, at1, slope, name):
        """Stage 0's DP or optimizer time: its value with no body layer, or at one plus a slope
        per further body layer (the model's collectives are affine in the bytes once non-zero)."""
        hi_ = max(_bounds(tables.dp, i)[1] for i in range(DP_KEYS, DP_KEYS + 9)) * (L + 2)
        out = var(0, hi_, name)
        md.add(out == at0).only_enforce_if(~has_body1)
        md.add(out == at1 + prod(b1_less, slope, f"{name}_layers")).only_enforce_if(has_body1)
        return out

    grads = first_stage_affine(G0, G1, Gs, "dp_grads")
    gather = first_stage_affine(A0, A1, As, "dp_gather")
    hi_c = int(hi(grads) + hi(gather))
    ea, eb, eb3 = var(0, hi_c, "exp_gather"), var(0, hi_c, "exp_grads"), var(0, hi_c, "exp_z3")
    md.add_max_equality(ea, [0, gather - fwd0])
    md.add_max_equality(eb, [0, grads - bwd0])
    md.add_max_equality(eb3, [0, gather + grads - bwd0])
    z3 = md.new_bool_var("zero3")
    md.add(zero == 3).only_enforce_if(z3)
    md.add(zero <= 2).only_enforce_if(~z3)
    per = var(0, 2 * hi_c, "dp_exposed_per")
    if problem.workload.overlap_dp:
        md.add(per == ea + eb).only_enforce_if(~z3)
    else:
        md.add(per == grads + gather).only_enforce_if(~z3)
    md.add(per == ea + eb3).only_enforce_if(z3)
    per_m = prod(m, per, "dp_exposed_z3")
    dpx = var(0, hi(per_m), "dp_exposed")
    md.add(dpx == per_m).only_enforce_if(z3)
    md.add(dpx == per).only_enforce_if(~z3)
    opt = first_stage_affine(O0, O1, Os, "optimizer")

    step = var(0, hi(busy) + hi(bubble) + hi(dpx) + hi(opt), "step")
    md.add(step == busy + bubble + dpx + opt)

    # memory per stage (memory units, rounded up)
    cap = sc.memory_cap(problem.system(problem.num_gpus[0]).usable_memory_bytes)
    mem, act, state = {}, {}, {}
    for kind, n in (("first", b1), ("middle", nm), ("last", nL)):
        layer_act = prod(n, Am, f"body_act_{kind}")
        if kind == "first" and k:
            lead_act = var(0, hi(layer_act) + k * _bounds(tables.layer, LAYER_KEYS + 3)[1], "first_layers_act")
            md.add(lead_act == layer_act + k * A)
            layer_act = lead_act
        cna = prod(chunks[kind], layer_act, f"act_raw_{kind}")
        # activations = chunks x (layers x per-layer) / vpp, rounded up: vpp·act >= chunks·layers·A
        act[kind] = var(0, hi(cna), f"act_{kind}")
        md.add(prod(v, act[kind], f"act_v_{kind}") >= cna)
        state[kind] = prod(n, Sm, f"state_layers_{kind}")
        hi_m = int(hi(act[kind]) + hi(state[kind]) + k * _bounds(tables.state, 6)[1]
                   + sum(_bounds(tables.state, i)[1] for i in (8, 9, 10))
                   + max(_bounds(tables.layer, LAYER_KEYS + 4)[1], _bounds(tables.body, BODY_KEYS + 4)[1]) + _bounds(tables.edge, 7)[1]
                   + _bounds(tables.embed_act, 4)[1])
        mem[kind] = var(0, hi_m, f"memory_{kind}")
    # the recompute working set of the first stage: the largest of the layer kinds it holds
    W1 = var(0, max(_bounds(tables.layer, LAYER_KEYS + 4)[1], _bounds(tables.body, BODY_KEYS + 4)[1]), "first_working")
    Wm_first = var(0, _bounds(tables.body, BODY_KEYS + 4)[1], "first_body_working")
    md.add(Wm_first == Wm).only_enforce_if(has_body1)
    md.add(Wm_first == 0).only_enforce_if(~has_body1)
    md.add_max_equality(W1, [W, Wm_first] if k else [Wm_first])
    md.add(mem["first"] == k * Sl + state["first"] + Se + So + Z3 + act["first"] + W1 + EA + LA).only_enforce_if(pp1)
    md.add(mem["first"] == k * Sl + state["first"] + Se + Z3 + act["first"] + W1 + EA).only_enforce_if(~pp1)
    md.add(mem["last"] == state["last"] + So + Z3 + act["last"] + Wm + LA).only_enforce_if(~pp1)
    md.add(mem["last"] == mem["first"]).only_enforce_if(pp1)
    md.add(mem["middle"] == state["middle"] + Z3 + act["middle"] + Wm).only_enforce_if(pp3)
    md.add(mem["middle"] == 0).only_enforce_if(~pp3)
    peak = var(0, max(int(hi(x)) for x in mem.values()), "peak_memory")
    md.add_max_equality(peak, list(mem.values()))
    if enforce_memory:
        md.add(peak <= cap)

    if objective in ("throughput", "step_time"):
        obj = step
    elif objective == "tokens_per_gpu":
        obj = prod(step, N, "step_x_gpus")
    elif objective == "memory":
        obj = peak
    elif objective in ("cost", "tokens_per_usd"):
        obj = None  # the cost variable below
    else:
        raise ValueError(objective)
    cost = None
    if hourly_cost is not None:
        # $ per token ∝ step time x the system's $ per hour (tokens per step are fixed); a linear
        # equality per device count, enforced by N's value (lighter than a product); weights in
        # units of 1/COST_WEIGHT_UNITS of the cheapest system's $/hour
        cheapest = min(hourly_cost.values())
        weights = {n_: int(round(hourly_cost[n_] / cheapest * COST_WEIGHT_UNITS)) for n_ in problem.num_gpus}
        step_hi = int(hi(step)) if max_step_s is None else min(int(hi(step)), int(max_step_s / tables.scale.time_unit_s))
        cost = var(0, step_hi * max(weights.values()), "step_x_usd_per_hour")
        for n_, w in weights.items():
            is_n = md.new_bool_var(f"num_gpus_is_{n_}")
            md.add(N == n_).only_enforce_if(is_n)
            md.add(N != n_).only_enforce_if(~is_n)
            md.add(cost == w * step).only_enforce_if(is_n)
    if obj is None:
        obj = cost
    if max_step_s is not None:  # max_run_hours (solver/costing.max_step_time_s)
        md.add(step <= int(max_step_s / tables.scale.time_unit_s))
    md.minimize(obj)
    decisions = {"num_gpus": N, "tp": tp, "pp": pp, "dp": dp, "cp": cp, "ep": ep, "micro_batch": mb, "vpp": v, "sp": sp,
                 "recompute": rc, "zero": zero, "first_stage_layers": n1, "last_stage_layers": nL, "placement": place}
    return Encoding(model=md, decisions=decisions, step=step, peak_memory=peak, cost=cost)


def decode(values: dict, space: Space) -> tuple[int, Mapping]:
    """(num_gpus, Mapping) from the decision values of a solution."""
    return values["num_gpus"], Mapping(
        tp=values["tp"], pp=values["pp"], dp=values["dp"], cp=values["cp"], ep=values["ep"], micro_batch=values["micro_batch"],
        vpp=values["vpp"],
        sp=bool(values["sp"]), recompute=RECOMPUTE[values["recompute"]], zero=values["zero"],
        first_stage_layers=values["first_stage_layers"], last_stage_layers=values["last_stage_layers"],
        placement=PLACEMENTS[values["placement"]])
