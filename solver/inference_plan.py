"""Planning serving: the decision space, factor tables compiled from ``model.inference``, the CP-SAT
encoding, the exhaustive enumerator (the oracle) and the round trip.

Decisions: the device count (when listed), tp, pp, ep and dp of the serving pool, or of both pools
of disaggregated serving (their split of the GPUs included), and the batch per replica, split into
pp equal micro-batches (batch = pp·m). Every number comes from a ``model/`` function called on
one point of a factor's own domain (solver/ writes no model equation):

- per-layer time of each pass the serving mode runs (``inference.layer_time``) on (tp, ep, m),
  dense and MoE layers apart; the embedding and output-layer extras (``edge_times``) on (tp, m);
  the send between stages (``p2p_time_s``) on (tp, m, crosses a domain);
- the layers of each stage kind (``stage_layouts``) on pp;
- weights per stage kind (``stage_weight_bytes``) on (tp, pp, ep), the KV cache of one sequence
  per stage kind with its pool headroom (``kv_cache.kv_pool_bytes`` of ``kv_bytes_per_sequence``) on (tp, pp), the activation working set
  (``activation_bytes``) on (tp, m);
- a disaggregated prefill pool, whose pass has no batch decision, on (tp, pp, ep) alone
  (``pass_time``, ``pool_memory``, ``kv_transfer_time_s``).

CP-SAT joins them as the model composes them (``evaluate_inference``): stage time = layers ×
layer time + extras (``add_multiplication_equality``), cycle = slowest stage + send
(``add_max_equality``), TTFT/TPOT/end-to-end as the mode says, throughput as a floor division
(``add_division_equality``) of GPU-time by tokens; memory per stage kind = weights + batch × KV +
activations, rounded up. Every plan is re-evaluated by the model and checked against the integers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from parasol.model import inference, kv_cache
from parasol.model.errors import ProblemError
from parasol.model.specs import PoolMapping, ServingMapping

from .cpsat import _status_name
from .inference_problem import INFERENCE_OBJECTIVES, OBJECTIVE_METRICS
from .plan import ROUND_TRIP_TOLERANCE, Plan, PlanResult, _solver, finish_enumeration, keep_best, relative_gap, solve_top
from .scaling import Scale
from .space import divisors

# Default batch domain when the problem leaves the batch free: each pipeline micro-batch (one engine
# step; the whole batch when pp is 1) takes the step sizes serving engines run at - 1, 2, 4 and the
# multiples of 8 (vLLM captures CUDA graphs for exactly these and pads a step up to the next one:
# vllm/config.py, cudagraph capture sizes) - so the batch is pp times one of them, up to the largest
# that fits and at most this many requests per replica. mapping.batch may list any batches.
MAX_DEFAULT_BATCH = 1024


def default_micro_batches(largest: int) -> tuple:
    """1, 2, 4, 8, 16, 24, … up to ``largest`` (at least 1)."""
    return tuple(b for b in range(1, max(1, largest) + 1) if b in (1, 2, 4) or b % 8 == 0)
# What each metric does for the user: +1 smaller is better, -1 larger is better.
METRIC_SENSE = {"tokens_per_s": -1, "tokens_per_s_per_gpu": -1, "tokens_per_s_per_user": -1, "ttft_s": 1, "tpot_s": 1,
                "e2e_latency_s": 1, "peak_memory_gib": 1}
# Relative resolution of the throughput quotients (GPU-seconds per token, integer floor division).
QUOTIENT_STEPS = 10**6


# ---------------------------------------------------------------- the space

def _allowed(problem, key: str, free) -> list:
    chosen = problem.mapping.get(key)
    return [v for v in free if v in chosen] if chosen is not None else list(free)


def pool_rows(problem, n: int, prefix: str) -> list[tuple]:
    """Every (n, tp, pp, ep, dp, crosses) of an n-GPU pool the rules (``inference.check_pool``) and
    the mapping's restrictions allow; ``prefix`` is '' or 'prefill.'/'decode.'."""
    model, system = problem.model, problem.system(problem.num_gpus[0])
    rows = []
    for tp in _allowed(problem, prefix + "tp", divisors(n)):
        for pp in _allowed(problem, prefix + "pp", [p for p in divisors(n // tp) if p <= model.layers]):
            dp = n // (tp * pp)
            if dp not in _allowed(problem, prefix + "dp", [dp]):
                continue
            eps = [1] if model.moe is None else [e for e in divisors(model.moe.experts) if (tp * dp) % e == 0]
            for ep in _allowed(problem, prefix + "ep", eps):
                try:
                    inference.check_pool(model, system, PoolMapping(tp=tp, pp=pp, ep=ep, dp=dp))
                except ProblemError:
                    continue
                rows.append((n, tp, pp, ep, dp, int(inference.pipeline_crosses_domain(system, tp, pp))))
    return rows


@dataclass(frozen=True)
class InferenceSpace:
    """Every serving plan the planner may choose: pool rows, the disaggregated splits, the batches."""

    problem: object
    decode: tuple  # (N, tp, pp, ep, dp, crosses) rows; colocated pools, or decode pools (N = their GPUs)
    prefill: tuple  # disaggregated: prefill pool rows; () otherwise
    batches: tuple  # allowed batch per (decode) replica, or () when ``micro_batches`` sets them
    micro_batches: tuple = ()  # default domain: batch = pp x one of these

    def batches_for(self, pp: int) -> list:
        """The batches allowed with pp pipeline stages (multiples of pp)."""
        if self.micro_batches:
            return [pp * m for m in self.micro_batches if pp * m <= MAX_DEFAULT_BATCH]
        return [b for b in self.batches if b % pp == 0]

    @property
    def all_batches(self) -> list:
        return sorted({b for r in self.decode for b in self.batches_for(r[2])})

    @property
    def disaggregated(self) -> bool:
        return self.problem.workload.serving == "disaggregated"

    def plans(self):
        """(num_gpus, ServingMapping) for every point of the space, in a fixed order."""
        if not self.disaggregated:
            for n, tp, pp, ep, dp, _ in self.decode:
                for b in self.batches_for(pp):
                    yield n, ServingMapping(batch=b, decode=PoolMapping(tp, pp, ep, dp))
            return
        for total in self.problem.num_gpus:
            for p in self.prefill:
                for d in self.decode:
                    if p[0] + d[0] == total:
                        for b in self.batches_for(d[2]):
                            yield total, ServingMapping(batch=b, decode=PoolMapping(*d[1:5]), prefill=PoolMapping(*p[1:5]))

    def size(self) -> int:
        per_pp = {}
        for row in self.decode:
            per_pp.setdefault(row[2], len(self.batches_for(row[2])))
        if not self.disaggregated:
            return sum(per_pp[r[2]] for r in self.decode)
        return sum(per_pp[d[2]] for total in self.problem.num_gpus for p in self.prefill for d in self.decode
                   if p[0] + d[0] == total)


def build_space(problem) -> InferenceSpace:
    """The space of an inference problem; ProblemError when the restrictions leave no plan."""
    model, wl = problem.model, problem.workload
    if wl.serving == "disaggregated":
        sizes = sorted({n for total in problem.num_gpus for n in range(1, total)})
        prefill = [r for n in sizes for r in pool_rows(problem, n, "prefill.")]
        decode = [r for n in sizes for r in pool_rows(problem, n, "decode.")]
        pairs = {(p[0], d[0]) for p in prefill for d in decode if p[0] + d[0] in problem.num_gpus}
        prefill = [p for p in prefill if any(p[0] == a for a, _ in pairs)]
        decode = [d for d in decode if any(d[0] == c for _, c in pairs)]
    else:
        prefill, decode = [], [r for n in problem.num_gpus for r in pool_rows(problem, n, "")]
    if not decode or (wl.serving == "disaggregated" and not prefill):
        fixed = {k: list(v) for k, v in problem.mapping.items() if k != "batch"}
        raise ProblemError(f"no tp·pp·dp grid of num_gpus {list(problem.num_gpus)} serves {model.heads} heads, "
                           f"{model.kv_heads} kv_heads and {model.layers} layers"
                           + (f" under the restrictions {fixed}" if fixed else ""), source=problem.source, field="mapping")
    batches, micros = (), ()
    if "batch" in problem.mapping:
        batches = tuple(sorted(problem.mapping["batch"]))
    else:
        systems = problem.system(problem.num_gpus[0])
        largest = max(inference.max_batch(model, systems, wl, PoolMapping(*r[1:5]), MAX_DEFAULT_BATCH) // r[2] for r in decode)
        micros = default_micro_batches(largest)
    space = InferenceSpace(problem=problem, decode=tuple(decode), prefill=tuple(prefill), batches=batches, micro_batches=micros)
    if not space.size():
        raise ProblemError(f"no allowed batch {list(batches)[:8]} splits into the pp micro-batches of any allowed pool "
                           "(batch must be a multiple of pp)", source=problem.source, field="mapping")
    return space


# ---------------------------------------------------------------- factor tables

def pass_kinds(workload) -> tuple:
    """The passes a colocated (or decode) replica runs: ('prefill', 'decode') for static serving,
    ('mixed',) for continuous, ('decode',) for a disaggregated decode pool."""
    return {"static": ("prefill", "decode"), "continuous": ("mixed",), "disaggregated": ("decode",)}[workload.serving]


def make_pass(workload, kind: str, micro: float) -> inference.Pass:
    return {"prefill": inference.prefill_pass, "decode": inference.decode_pass, "mixed": inference.mixed_pass}[kind](workload, micro)


@dataclass
class InferenceTables:
    scale: Scale
    micro: list  # (tp, ep, m, crosses, then per pass kind: dense layer, moe layer, first extra, last extra, send;
    #              then activations of an inner and of the last stage) - the decisions one pass depends on
    micro_names: list  # output names of ``micro`` after its four keys
    layout: list  # (pp, first dense, first moe, middle dense, middle moe, last dense, last moe)
    weights: list  # (tp, pp, ep, first, middle, last) memory units
    kv: list  # (tp, pp, first, middle, last) memory units per sequence
    prefill: list = field(default_factory=list)  # (tp, pp, ep, crosses, cycle, transfer, memory units)
    raw_min_time_s: float = 0.0


def stage_rows(model, pp: int) -> tuple:
    """(first dense, first moe, middle dense, middle moe, last dense, last moe) layer counts of a
    pp-deep replica (``inference.stage_layouts``); pp 1 puts everything on the first stage."""
    s = inference.stage_layouts(model, pp)
    mid = s[1] if pp >= 3 else inference.StageLayout(0, 0, False, False)
    last = s[-1] if pp >= 2 else inference.StageLayout(0, 0, False, False)
    return (s[0].dense, s[0].moe, mid.dense, mid.moe, last.dense, last.moe)


def usable_micro_batches(space: InferenceSpace, prune_memory: bool) -> dict:
    """(tp, ep, crosses) -> the micro-batches some pool row with those decisions serves within
    memory (``inference.serving_memory`` of the pool alone). A micro-batch no row fits can appear
    in no feasible plan; leaving it out of the tables keeps them small (a solver technique, the
    space is unchanged). When nothing fits, every micro-batch stays: the problem is proven
    infeasible by the memory constraint. Without ``prune_memory`` every micro-batch stays."""
    problem = space.problem
    usable = problem.system(problem.num_gpus[0]).usable_memory_bytes
    out, everything = {}, {}
    for _, tp, pp, ep, dp, c in space.decode:
        pool = PoolMapping(tp, pp, ep, dp)
        for b in space.batches_for(pp):
            everything.setdefault((tp, ep, c), set()).add(b // pp)
            if not prune_memory or inference.serving_memory(problem.model, problem.workload, pool, b, None)["bytes"] <= usable:
                out.setdefault((tp, ep, c), set()).add(b // pp)
    return {k: sorted(v) for k, v in (out or everything).items()}


def compile_tables(space: InferenceSpace, prune_memory: bool = True) -> InferenceTables:
    """The factor tables of ``space``. The per-pass quantities share one table on (tp, ep, m,
    crosses): each is a model function of those decisions alone (``layer_time`` on tp, ep and the
    pass's tokens; ``edge_times`` and ``activation_bytes`` on tp and the tokens; ``p2p_time_s`` on
    the tokens and the tier), and one index with element reads keeps the CP-SAT model light."""
    problem = space.problem
    model, wl = problem.model, problem.workload
    system = problem.system(problem.num_gpus[0])
    rows = space.decode
    kinds = pass_kinds(wl)
    raw = {}
    for (tp, ep, c), micros in usable_micro_batches(space, prune_memory).items():
        for m in micros:
            values = []
            for kind in kinds:
                p = make_pass(wl, kind, m)
                dense = inference.layer_time(model, system, wl, tp, ep, p, False).total
                moe = inference.layer_time(model, system, wl, tp, ep, p, True).total if model.moe is not None else 0.0
                values += [dense, moe, *inference.edge_times(model, system, wl, tp, p),
                           inference.p2p_time_s(model, system, wl, p.tokens, bool(c))]
            passes = inference.decode_passes(wl, m)
            acts = [max(inference.activation_bytes(model, wl, tp, p, last) for p in passes) for last in (False, True)]
            raw[(tp, ep, m, c)] = (values, acts)
    raw_prefill = {}
    if space.disaggregated:
        n = inference.prefill_prompts_per_pass(wl)
        for _, tp, pp, ep, dp, c in sorted(set(space.prefill)):
            pool = PoolMapping(tp, pp, ep, dp)
            t = inference.pass_time(model, system, wl, pool, inference.prefill_pass(wl, n))
            mem = inference.pool_memory(model, wl, pool, pp * n, wl.input_len, [inference.prefill_pass(wl, n)])["bytes"]
            raw_prefill[(tp, pp, ep, c)] = (t.cycle, inference.kv_transfer_time_s(model, system, wl, pool), mem)
    layer_times = [v for values, _ in raw.values() for i, v in enumerate(values) if i % 5 < 2 and v > 0]
    smallest = min(layer_times + [v[0] for v in raw_prefill.values()])
    scale = Scale(smallest)
    t, mem = scale.time, scale.memory
    micro = sorted(key + tuple(t(v) for v in values) + tuple(mem(a) for a in acts) for key, (values, acts) in raw.items())
    names = [f"{kind}_{what}" for kind in kinds for what in ("dense", "moe", "first", "last", "send")] + ["act_inner", "act_last"]
    layout = sorted({(pp,) + stage_rows(model, pp) for pp in {r[2] for r in rows}})
    weights, kv = set(), set()
    cached = wl.input_len + wl.output_len
    for _, tp, pp, ep, _, _ in rows:
        stages = inference.stage_layouts(model, pp)
        kinds_ = [stages[0], stages[1] if pp >= 3 else None, stages[-1] if pp >= 2 else None]
        weights.add((tp, pp, ep) + tuple(mem(inference.stage_weight_bytes(model, wl, s, tp, ep)) if s else 0 for s in kinds_))
        kv.add((tp, pp) + tuple(mem(kv_cache.kv_pool_bytes(kv_cache.kv_bytes_per_sequence(model, wl.kv_precision, tp, s.layers, cached,
                                                                                         wl.kv_block_tokens), wl.kv_cache_memory_fraction))
                                if s else 0 for s in kinds_))
    prefill = sorted((tp, pp, ep, c, t(cyc), t(tr), mem(mm)) for (tp, pp, ep, c), (cyc, tr, mm) in raw_prefill.items())
    return InferenceTables(scale=scale, micro=micro, micro_names=names, layout=layout, weights=sorted(weights), kv=sorted(kv),
                           prefill=prefill, raw_min_time_s=smallest)


# ---------------------------------------------------------------- the CP-SAT encoding

@dataclass
class InferenceEncoding:
    model: cp_model.CpModel
    decisions: dict  # name -> IntVar
    times: dict  # ttft, tpot, e2e -> IntVar (time units)
    peak_memory: cp_model.IntVar
    metric_vars: dict = field(default_factory=dict)  # metric name -> IntVar to minimise (built on demand)
    builders: dict = field(default_factory=dict)

    def metric(self, name: str):
        """The integer this encoding minimises for ``name`` (a metric of ``METRIC_SENSE``)."""
        if name not in self.metric_vars:
            if name not in self.builders:
                raise ProblemError(f"{name!r} cannot be planned; allowed: {', '.join(sorted(self.builders))}", field="objectives")
            self.metric_vars[name] = self.builders[name]()
        return self.metric_vars[name]


class _Builder:
    """Variables with known bounds, products and factor tables (the primer's container)."""

    def __init__(self):
        self.md = cp_model.CpModel()
        self.bounds = {}

    def var(self, lo, hi, name):
        x = self.md.new_int_var(int(lo), int(hi), name)
        self.bounds[x.index] = (int(lo), int(hi))
        return x

    def hi(self, x) -> int:
        return self.bounds[x.index][1]

    def prod(self, a, b, name):
        (la, ha), (lb, hb) = self.bounds[a.index], self.bounds[b.index]
        corners = [la * lb, la * hb, ha * lb, ha * hb]
        out = self.var(min(corners), max(corners), name)
        self.md.add_multiplication_equality(out, [a, b])
        return out

    def affine(self, expr, hi, name, lo=0):
        out = self.var(lo, hi, name)
        self.md.add(out == expr)
        return out

    def factor(self, keys, rows, outputs, prefix):
        """A factor table: an index tied to the key decisions by one table constraint, each output
        read with an element constraint."""
        rows = sorted(rows)
        k = len(keys)
        index = self.var(0, len(rows) - 1, f"{prefix}_row")
        self.md.add_allowed_assignments(list(keys) + [index], [tuple(r[:k]) + (i,) for i, r in enumerate(rows)])
        out = []
        for j, name in enumerate(outputs):
            values = [int(r[k + j]) for r in rows]
            x = self.var(min(values + [0]), max(values + [0]), f"{prefix}_{name}")
            self.md.add_element(index, values, x)
            out.append(x)
        return out

    def floor_div(self, num, den, name):
        lo_d = max(1, self.bounds[den.index][0])
        out = self.var(0, self.hi(num) // lo_d, name)
        self.md.add_division_equality(out, num, den)
        return out


def _pool(B: _Builder, rows, prefix: str):
    """Variables of one pool and its grid table: N, tp, pp, ep, dp, crosses."""
    names = ["N", "tp", "pp", "ep", "dp", "crosses"]
    xs = [B.var(min(r[i] for r in rows), max(r[i] for r in rows), f"{prefix}{n}") for i, n in enumerate(names)]
    B.md.add_allowed_assignments(xs, [tuple(r) for r in rows])
    return dict(zip(names, xs))


def _cycle(B: _Builder, kind: str, out: dict, pp1, counts, has_moe: bool) -> cp_model.IntVar:
    """The slowest stage of a pass plus its send (``inference.pass_time``'s cycle), time units."""
    Ld, Lm, E1, EL, P = (out[f"{kind}_{w}"] for w in ("dense", "moe", "first", "last", "send"))
    d1, m1, dm, mm, dL, mL = counts
    parts = {}
    for stage, (nd, nm) in (("first", (d1, m1)), ("middle", (dm, mm)), ("last", (dL, mL))):
        terms = [B.prod(nd, Ld, f"{kind}_{stage}_dense")]
        if has_moe:
            terms.append(B.prod(nm, Lm, f"{kind}_{stage}_moe"))
        parts[stage] = terms
    hi = max(sum(B.hi(x) for x in v) for v in parts.values()) + B.hi(E1) + B.hi(EL)
    s1, sm, sL = (B.var(0, hi, f"{kind}_stage_{s}") for s in ("first", "middle", "last"))
    B.md.add(s1 == sum(parts["first"]) + E1 + EL).only_enforce_if(pp1)
    B.md.add(s1 == sum(parts["first"]) + E1).only_enforce_if(~pp1)
    B.md.add(sm == sum(parts["middle"]))
    B.md.add(sL == sum(parts["last"]) + EL)
    slowest = B.var(0, hi, f"{kind}_slowest")
    B.md.add_max_equality(slowest, [s1, sm, sL])
    cycle = B.var(0, hi + B.hi(P), f"{kind}_cycle")
    B.md.add(cycle == slowest).only_enforce_if(pp1)
    B.md.add(cycle == slowest + P).only_enforce_if(~pp1)
    return cycle


def encode(space: InferenceSpace, tables: InferenceTables, enforce_memory: bool = True, enforce_slo: bool = True) -> InferenceEncoding:
    problem = space.problem
    wl = problem.workload
    B = _Builder()
    md = B.md
    out = wl.output_len
    pool = _pool(B, space.decode, "")
    tp, pp, dp = pool["tp"], pool["pp"], pool["dp"]
    micros = sorted({r[2] for r in tables.micro})
    m = B.var(min(micros), max(micros), "micro_batch")
    md.add_allowed_assignments([m], [(x,) for x in micros])
    b = B.prod(pp, m, "batch")
    md.add_allowed_assignments([pp, b], sorted({(r[2], x) for r in space.decode for x in space.batches_for(r[2])}))
    pp1 = md.new_bool_var("pp1")
    md.add(pp == 1).only_enforce_if(pp1)
    md.add(pp >= 2).only_enforce_if(~pp1)
    counts = B.factor([pp], tables.layout, ["d1", "m1", "dm", "mm", "dL", "mL"], "layout")
    out_vars = dict(zip(tables.micro_names, B.factor([tp, pool["ep"], m, pool["crosses"]], tables.micro, tables.micro_names, "micro")))
    has_moe = problem.model.moe is not None
    cycles = {kind: _cycle(B, kind, out_vars, pp1, counts, has_moe) for kind in pass_kinds(wl)}
    decisions = {"N": pool["N"], "tp": tp, "pp": pp, "ep": pool["ep"], "dp": dp, "batch": b}

    # memory per stage kind: weights + batch x KV per sequence + activations (model.inference.serving_memory)
    W1, Wm, WL = B.factor([tp, pp, pool["ep"]], tables.weights, ["first", "middle", "last"], "weights")
    K1, Km, KL = B.factor([tp, pp], tables.kv, ["first", "middle", "last"], "kv")
    A0, AL = out_vars["act_inner"], out_vars["act_last"]
    kv = {s: B.prod(b, k, f"kv_{s}") for s, k in (("first", K1), ("middle", Km), ("last", KL))}
    hi_mem = max(B.hi(W1), B.hi(Wm), B.hi(WL)) + max(B.hi(x) for x in kv.values()) + B.hi(AL)
    mem = {s: B.var(0, hi_mem, f"memory_{s}") for s in ("first", "middle", "last")}
    md.add(mem["first"] == W1 + kv["first"] + AL).only_enforce_if(pp1)
    md.add(mem["first"] == W1 + kv["first"] + A0).only_enforce_if(~pp1)
    md.add(mem["middle"] == Wm + kv["middle"] + A0)
    md.add(mem["last"] == WL + kv["last"] + AL)
    peak = B.var(0, hi_mem, "peak_memory")
    md.add_max_equality(peak, list(mem.values()))
    cap = tables.scale.memory_cap(problem.system(problem.num_gpus[0]).usable_memory_bytes)

    if wl.serving == "disaggregated":
        pre = _pool(B, space.prefill, "prefill_")
        total = B.var(min(problem.num_gpus), max(problem.num_gpus), "N_total")
        md.add_allowed_assignments([total], [(n,) for n in problem.num_gpus])
        md.add(pre["N"] + pool["N"] == total)
        cyc_p, transfer, mem_p = B.factor([pre["tp"], pre["pp"], pre["ep"], pre["crosses"]], tables.prefill,
                                          ["cycle", "transfer", "memory"], "prefill")
        decisions.update({f"prefill.{k}": pre[k] for k in ("tp", "pp", "ep", "dp")})
        decisions["N"] = total
        peak_all = B.var(0, max(hi_mem, B.hi(mem_p)), "peak_memory_all")
        md.add_max_equality(peak_all, [peak, mem_p])
        peak = peak_all
        tpot = B.prod(pp, cycles["decode"], "tpot")
        ttft = B.affine(B.prod(pre["pp"], cyc_p, "prefill_latency") + transfer, B.hi(cyc_p) * B.hi(pre["pp"]) + B.hi(transfer), "ttft")
    elif wl.serving == "static":
        twice = B.affine(2 * pp - 1, 2 * B.hi(pp), "prefill_cycles")
        ttft = B.prod(twice, cycles["prefill"], "ttft")
        tpot = B.prod(pp, cycles["decode"], "tpot")
    else:
        tpot = B.prod(pp, cycles["mixed"], "tpot")
        rounds = B.var(out, max(out, max(space.all_batches)), "prefill_rounds_x_batch")  # max(batch, output_len)
        md.add_max_equality(rounds, [b, out])
        ttft = B.floor_div(B.prod(tpot, rounds, "ttft_x_batch"), b, "ttft")
    e2e = B.affine(ttft + (out - 1) * tpot, B.hi(ttft) + (out - 1) * B.hi(tpot), "e2e")
    if enforce_memory:
        md.add(peak <= cap)
    if enforce_slo:
        if wl.ttft_slo_s is not None:
            md.add(ttft <= int(math.floor(wl.ttft_slo_s / tables.scale.time_unit_s)))
        if wl.tpot_slo_s is not None:
            md.add(tpot <= int(math.floor(wl.tpot_slo_s / tables.scale.time_unit_s)))

    enc = InferenceEncoding(model=md, decisions=decisions, times={"ttft": ttft, "tpot": tpot, "e2e": e2e}, peak_memory=peak)
    N = decisions["N"]
    busy_hi = B.hi(tpot) * max(1, out - 1) * B.hi(tp) if wl.serving == "disaggregated" else B.hi(e2e) * B.hi(tp)
    resolution = _quotient_resolution(space, tables, busy_hi * max(B.hi(N), 1))

    def seconds_per_token(per_gpu: bool):
        """GPU-time (or time) per output token, floor-divided: minimising it maximises tokens/s."""
        if wl.serving == "disaggregated":
            n = inference.prefill_prompts_per_pass(wl)
            pre_rate = B.floor_div(B.affine(cyc_p * resolution, B.hi(cyc_p) * resolution, "prefill_cycle_r"),
                                   B.affine(pre["dp"] * n, B.hi(pre["dp"]) * n, "prefill_prompts", lo=1), "prefill_s_per_request")
            dec_rate = B.floor_div(B.affine(tpot * ((out - 1) * resolution), B.hi(tpot) * (out - 1) * resolution, "decode_time_r"),
                                   B.prod(dp, b, "decode_requests"), "decode_s_per_request")
            slowest = B.var(0, max(B.hi(pre_rate), B.hi(dec_rate)), "s_per_request")
            md.add_max_equality(slowest, [pre_rate, dec_rate])
            return B.prod(slowest, N, "gpu_s_per_request") if per_gpu else slowest
        busy = e2e if wl.serving == "static" else tpot
        num = B.prod(tp, B.affine(busy * resolution, B.hi(busy) * resolution, "busy_r"), "gpu_busy_r")
        den = m if per_gpu else B.prod(N, m, "gpus_x_micro")
        return B.floor_div(num, den, "gpu_s_per_token" if per_gpu else "s_per_token")

    enc.builders = {"ttft_s": lambda: ttft, "tpot_s": lambda: tpot, "tokens_per_s_per_user": lambda: tpot,
                    "e2e_latency_s": lambda: e2e, "peak_memory_gib": lambda: peak,
                    "tokens_per_s": lambda: seconds_per_token(False), "tokens_per_s_per_gpu": lambda: seconds_per_token(True)}
    return enc


def _quotient_resolution(space: InferenceSpace, tables: InferenceTables, numerator_hi: int) -> int:
    """A multiplier that gives the throughput quotients about ``QUOTIENT_STEPS`` steps (each pass has
    at least L/pp layers of at least ``TIME_STEPS_PER_LAYER`` units; the divisor is at most N·max
    micro-batch, or the prefill prompts·dp), kept small enough that every product stays below 2^61."""
    problem = space.problem
    pp_max = max(r[2] for r in space.decode)
    least = max(1, tables.scale.time(tables.raw_min_time_s) * problem.model.layers // pp_max)
    divisor = max(problem.num_gpus) * max(space.all_batches) * max(1, inference.prefill_prompts_per_pass(problem.workload))
    return max(1, min(math.ceil(QUOTIENT_STEPS * divisor / least), 2**61 // max(1, numerator_hi)))


def decode_plan(values: dict, space: InferenceSpace) -> tuple[int, ServingMapping]:
    pool = PoolMapping(values["tp"], values["pp"], values["ep"], values["dp"])
    prefill = None
    if space.disaggregated:
        prefill = PoolMapping(values["prefill.tp"], values["prefill.pp"], values["prefill.ep"], values["prefill.dp"])
    return values["N"], ServingMapping(batch=values["batch"], decode=pool, prefill=prefill)


# ---------------------------------------------------------------- solve, round trip, enumerate

def objective_metric(problem, objective: str | None) -> str:
    objective = objective or problem.objective
    if objective not in INFERENCE_OBJECTIVES:
        raise ProblemError(f"{objective!r} is not an inference objective; allowed: {', '.join(INFERENCE_OBJECTIVES)}",
                           source=problem.source, field="objective")
    return OBJECTIVE_METRICS[objective][0]


def evaluate_plan(problem, num_gpus: int, mapping: ServingMapping, full: bool = True):
    return inference.evaluate_inference(problem.model, problem.system(num_gpus), problem.workload, mapping, full)


def check_round_trip(problem, plan: Plan, times: dict, scale: Scale) -> None:
    """The solver's TTFT, TPOT and end-to-end latency agree with the model's; the plan fits and meets
    the SLOs on the unscaled numbers (within the time resolution). Bugs only."""
    met = plan.evaluation.metrics
    assert met["fits"], f"solver returned a plan that does not fit: {plan.mapping}"
    for key, metric in (("ttft", "ttft_s"), ("tpot", "tpot_s"), ("e2e", "e2e_latency_s")):
        solver_s = scale.seconds(times[key])
        assert abs(solver_s - met[metric]) <= ROUND_TRIP_TOLERANCE * met[metric], (key, solver_s, met[metric], plan.mapping)
    wl = problem.workload
    for limit, metric in ((wl.ttft_slo_s, "ttft_s"), (wl.tpot_slo_s, "tpot_s")):
        assert limit is None or met[metric] <= limit * (1 + ROUND_TRIP_TOLERANCE), (metric, met[metric], limit, plan.mapping)


def metric_value(metrics: dict, name: str) -> float:
    """A metric oriented for minimisation (``METRIC_SENSE``), floats."""
    return METRIC_SENSE[name] * metrics[name]


def solve(problem, objective: str | None = None, top: int = 1, time_limit: float = 60.0, workers: int = 1,
          seed: int = 0) -> PlanResult:
    """The best serving plan (or the ``top`` best) under the SLOs and memory, with proof status."""
    metric = objective_metric(problem, objective)
    objective = objective or problem.objective
    start = time.perf_counter()
    space = build_space(problem)
    tables = compile_tables(space)
    enc = encode(space, tables)
    target = enc.metric(metric)
    enc.model.minimize(target)
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size())

    def record(rank, solver, values):
        n, mapping = decode_plan(values, space)
        plan = Plan(n, mapping, evaluate_plan(problem, n, mapping), tables.scale.seconds(solver.value(enc.times["e2e"])))
        check_round_trip(problem, plan, {k: solver.value(v) for k, v in enc.times.items()}, tables.scale)
        result.plans.append(plan)
        if rank == 0:
            gap = relative_gap(solver)
            value = plan.evaluation.metrics[metric]
            result.objective_value, result.gap = value, gap
            result.bound = value / (1.0 - gap) if METRIC_SENSE[metric] < 0 and gap < 1 else value * (1.0 - gap)

    solve_top(enc.model, enc.decisions, top, start + time_limit, workers, seed, result, record,
              lambda: explain_infeasible(space, tables, time_limit, workers, seed))
    result.solve_time_s = time.perf_counter() - start
    return result


def explain_infeasible(space: InferenceSpace, tables: InferenceTables, time_limit: float, workers: int, seed: int) -> str:
    """Name what binds: without the SLOs, does some plan fit? Then the SLOs bind (the best TTFT and
    TPOT reachable say by how much); else memory binds (the least peak memory says by how much)."""
    problem = space.problem
    wl = problem.workload
    system = problem.system(problem.num_gpus[0])
    usable = system.usable_memory_bytes / 2**30
    parts = []
    for name, limit in (("ttft_s", wl.ttft_slo_s), ("tpot_s", wl.tpot_slo_s)):
        if limit is None:
            continue
        enc = encode(space, tables, enforce_slo=False)
        enc.model.minimize(enc.metric(name))
        solver = _solver(time_limit, workers, seed)
        if _status_name(solver.solve(enc.model)) in ("OPTIMAL", "FEASIBLE"):
            n, mapping = decode_plan({k: solver.value(v) for k, v in enc.decisions.items()}, space)
            best = evaluate_plan(problem, n, mapping).metrics[name]
            if best > limit:
                parts.append(f"the {name[:-2].upper()} SLO binds: {best:.4g} s is the least any plan that fits reaches "
                             f"(SLO {limit:g} s)")
    if parts:
        return "; ".join(parts)
    enc = encode(space, tables, enforce_memory=False, enforce_slo=False)
    enc.model.minimize(enc.peak_memory)
    solver = _solver(time_limit, workers, seed)
    if _status_name(solver.solve(enc.model)) in ("OPTIMAL", "FEASIBLE"):
        n, mapping = decode_plan({k: solver.value(v) for k, v in enc.decisions.items()}, space)
        ev = evaluate_plan(problem, n, mapping)
        if ev.metrics["fits"]:
            return "the TTFT and TPOT SLOs together admit no plan that fits (each alone does)"
        mem = ev.breakdown["memory_gib"]
        return (f"memory binds: {ev.metrics['peak_memory_gib']:.1f} GiB per GPU is the least any plan needs (weights "
                f"{mem['weights']:.1f} GiB + KV cache {mem['kv_cache']:.1f} GiB (+ {mem['kv_headroom']:.1f} GiB the engine leaves outside its KV pool) + activations {mem['activations']:.1f} GiB, at "
                f"{mapping.as_dict()}); the {system.device.name} offers {usable:.1f} GiB")
    return "the SLOs together admit no plan that fits"


def enumerate_space(problem, objective: str | None = None, top: int = 1, time_limit: float | None = None,
                    keep_all: bool = False) -> PlanResult:
    """Exhaustive baseline: every plan of the same space evaluated by the model (the oracle)."""
    metric = objective_metric(problem, objective)
    objective = objective or problem.objective
    space = build_space(problem)
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size(), workers=1)
    start = time.perf_counter()
    wl = problem.workload
    best, everything, evaluated, complete = [], [], 0, True
    for index, (n, mapping) in enumerate(space.plans()):
        if time_limit is not None and evaluated % 256 == 0 and time.perf_counter() - start > time_limit:
            complete = False
            break
        ev = evaluate_plan(problem, n, mapping, full=False)
        evaluated += 1
        if keep_all:
            everything.append(Plan(n, mapping, ev))
        met = ev.metrics
        if not met["fits"] or not met["meets_slo"]:
            continue
        keep_best(best, (metric_value(met, metric), index, n, mapping), top)
    best.sort(key=lambda x: (x[0], x[1]))
    result.plans = [Plan(n, mapping, evaluate_plan(problem, n, mapping)) for _, _, n, mapping in best[:top]]
    finish_enumeration(result, evaluated, start, everything if keep_all else None)
    if result.plans:
        result.status = "OPTIMAL" if complete else "FEASIBLE"
        result.objective_value = result.plans[0].evaluation.metrics[metric]
        result.bound, result.gap = (result.objective_value, 0.0) if complete else (None, None)
    else:
        result.status = "INFEASIBLE" if complete else "UNKNOWN"
        if complete:
            result.message = "no plan of the space fits in memory and meets the SLOs"
    return result


def pareto_target(problem):
    """The serving space as a Pareto target (``solver.pareto``): every metric of ``METRIC_SENSE``."""
    from .pareto import ParetoTarget

    space = build_space(problem)
    tables = compile_tables(space)

    def check(plan, enc, solver):
        check_round_trip(problem, plan, {k: solver.value(v) for k, v in enc.times.items()}, tables.scale)

    return ParetoTarget(encode=lambda: encode(space, tables), decode=lambda values: decode_plan(values, space),
                        evaluate=lambda n, mapping: evaluate_plan(problem, n, mapping), metrics=tuple(METRIC_SENSE),
                        space_size=space.size(), check=check,
                        explain=lambda time_limit, workers, seed: explain_infeasible(space, tables, time_limit, workers, seed))
