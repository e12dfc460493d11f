"""The decision space of a serving problem, as relations (``relations.Space``).

- ``pool``: the plan's GPUs, the decode (or only) pool's GPUs, tp, pp, ep, dp and where its groups
  sit (``inference.serving_layouts``), every pool the rules (``inference.check_pool``) and the
  mapping's restrictions allow;
- ``batch``: pp, the sequences of one pipeline micro-batch and the batch per replica (a multiple of
  pp): the listed batches, or by default pp x the step sizes serving engines run at (1, 2, 4 and the
  multiples of 8: vLLM captures CUDA graphs for exactly these and pads a step up to the next one,
  vllm/config.py), up to the largest that fits and at most ``workload.max_batch_size`` (else ``MAX_DEFAULT_BATCH``) per replica
  and pp x the micro-batch the token budget allows (``inference.budget_micro_batch``, where stated); for a
  finite set of requests also the micro-batches that split it into full waves (``inference.wave_batches``);
- disaggregated serving adds ``prefill`` (its pool: GPUs, tp, pp, ep, dp, groups) and ``split``
  (the plan's GPUs, the two pools' and where the KV cache crosses between them).
"""

from __future__ import annotations

import pandas as pd

from parasol.model.decisions import ServingDecision as S
from parasol.model.errors import ProblemError
from parasol.model.inference import budget_micro_batch, check_pool, kv_link_layout, serving_layouts, wave_batches
from parasol.model.serving_step import ServingContext, max_batch
from parasol.model.specs import PoolMapping, ServingMapping

from .relations import Relation, Space, categorical, numeric
from .training_space import allowed_values, divisors

MAX_DEFAULT_BATCH = 1024
GROUPS = ("tp", "ep", "pp")


def batch_cap(workload) -> int:
    """The largest batch per replica the planner's default batches reach: ``workload.max_batch_size``, else
    ``MAX_DEFAULT_BATCH``."""
    return workload.max_batch_size or MAX_DEFAULT_BATCH


def largest_batch(problem) -> int:
    """The largest batch per replica the space may hold: the largest listed one, else ``batch_cap``."""
    return max(problem.mapping["batch"]) if "batch" in problem.mapping else batch_cap(problem.workload)


def default_micro_batches(largest: int) -> tuple:
    """1, 2, 4, 8, 16, 24, … up to ``largest`` (at least 1)."""
    return tuple(b for b in range(1, max(1, largest) + 1) if b in (1, 2, 4) or b % 8 == 0)


def pool_rows(problem, total: int, n: int, prefix: str, layouts: dict) -> list[tuple]:
    """(total, n, tp, pp, ep, dp, group codes) of every n-GPU pool of a ``total``-GPU plan that the rules
    and the mapping's restrictions allow; ``prefix`` is '' or 'prefill.'/'decode.'."""
    model, system = problem.model, problem.system(total)
    rows = []
    for tp in allowed_values(problem, prefix + "tp", divisors(n)):
        for pp in allowed_values(problem, prefix + "pp", [p for p in divisors(n // tp) if p <= model.layers]):
            dp = n // (tp * pp)
            if dp not in allowed_values(problem, prefix + "dp", [dp]):
                continue
            eps = [1] if model.moe is None else [e for e in divisors(model.moe.experts) if (tp * dp) % e == 0]
            for ep in allowed_values(problem, prefix + "ep", eps):
                try:
                    check_pool(model, system, PoolMapping(tp=tp, pp=pp, ep=ep, dp=dp))
                except ProblemError:
                    continue
                where = serving_layouts(system, tp, pp, ep)
                codes = tuple(layouts[g].setdefault(where[g], len(layouts[g])) for g in GROUPS)
                rows.append((total, n, tp, pp, ep, dp) + codes)
    return rows


def build_space(problem) -> Space:
    """The space of a serving ``problem``; ProblemError when its restrictions leave no plan."""
    model, wl = problem.model, problem.workload
    disaggregated = wl.serving == "disaggregated"
    layouts = {g: {} for g in GROUPS}
    pre_layouts = {g: {} for g in GROUPS}
    links = {}
    if disaggregated:
        decode, prefill, split = [], [], []
        for total in problem.num_gpus:
            for n in range(1, total):
                d = pool_rows(problem, total, total - n, "decode.", layouts)
                p = pool_rows(problem, total, n, "prefill.", pre_layouts)
                if d and p:
                    decode += d
                    prefill += p
                    link = links.setdefault(kv_link_layout(problem.system(total)), len(links))
                    split.append((total, n, total - n, link))
    else:
        decode = [r for n in problem.num_gpus for r in pool_rows(problem, n, n, "", layouts)]
        prefill, split = [], []
    if not decode or (disaggregated and not prefill):
        fixed = {k: list(v) for k, v in problem.mapping.items() if k != "batch"}
        raise ProblemError(
            f"no tp·pp·dp grid of num_gpus {list(problem.num_gpus)} serves {model.heads} heads, "
            f"{model.kv_heads} kv_heads and {model.layers} layers" + (f" under the restrictions {fixed}" if fixed else ""),
            source=problem.source,
            field="mapping",
        )
    pps = sorted({r[3] for r in decode})
    cap = batch_cap(wl)
    if "batch" in problem.mapping:
        above = [b for b in problem.mapping["batch"] if b > cap]
        if wl.max_batch_size is not None and above:
            raise ProblemError(
                f"lists batch {above[0]} above workload.max_batch_size {cap}; allowed: 1 to {cap}",
                source=problem.source,
                field="mapping.batch",
            )
        batches = [(pp, b // pp, b) for pp in pps for b in sorted(problem.mapping["batch"]) if b % pp == 0]
    else:
        ctx = ServingContext(model, problem.system(problem.num_gpus[0]), wl)
        budget = budget_micro_batch(wl)  # the token budget's micro-batch, where stated: no default batch above it
        largest = max(
            max_batch(ctx.model, ctx.system, wl, PoolMapping(*r[2:6]), cap if budget is None else min(cap, r[3] * budget)) // r[3]
            for r in decode
        )
        micro = set(default_micro_batches(largest))
        if wl.requests is not None:  # a finite set: also the batches that fill its waves (any dp, pp)
            micro |= set(wave_batches(wl.requests, largest))
        batches = [(pp, m, pp * m) for pp in pps for m in sorted(micro) if pp * m <= cap]
    if not batches:
        raise ProblemError(
            f"no allowed batch {sorted(problem.mapping.get('batch', ()))[:8]} splits into the pp "
            "micro-batches of any allowed pool (batch must be a multiple of pp)",
            source=problem.source,
            field="mapping",
        )
    pool_cols = [S.NUM_GPUS, S.POOL_GPUS, S.TP, S.PP, S.EP, S.DP, S.TP_GROUP, S.EP_GROUP, S.PP_GROUP]
    frames = [
        ("pool", pd.DataFrame(decode, columns=pool_cols).drop_duplicates()),
        ("batch", pd.DataFrame(batches, columns=[S.PP, S.MICRO_BATCH, S.BATCH])),
    ]
    domains = {S(f"{g}_group"): categorical(tuple(layouts[g])) for g in GROUPS}
    if disaggregated:
        pre_cols = [
            S.NUM_GPUS,
            S.PREFILL_GPUS,
            S.PREFILL_TP,
            S.PREFILL_PP,
            S.PREFILL_EP,
            S.PREFILL_DP,
            S.PREFILL_TP_GROUP,
            S.PREFILL_EP_GROUP,
            S.PREFILL_PP_GROUP,
        ]
        frames.insert(0, ("split", pd.DataFrame(split, columns=[S.NUM_GPUS, S.PREFILL_GPUS, S.POOL_GPUS, S.KV_LINK])))
        frames.insert(1, ("prefill", pd.DataFrame(prefill, columns=pre_cols).drop_duplicates()))
        domains.update({S(f"prefill.{g}_group"): categorical(tuple(pre_layouts[g])) for g in GROUPS})
        domains[S.KV_LINK] = categorical(tuple(links))
    for _, frame in frames:
        for c in frame.columns:
            if c not in domains:
                domains[c] = numeric(frame[c])
            elif domains[c].numeric:
                domains[c] = numeric(set(domains[c].values) | set(frame[c]))
    space = Space(tuple(Relation(name, frame.astype("int64").reset_index(drop=True)) for name, frame in frames), domains)
    if not space.size():
        raise ProblemError(
            f"no allowed batch {sorted(problem.mapping.get('batch', ()))[:8]} splits into the pp "
            "micro-batches of any allowed pool (batch must be a multiple of pp)",
            source=problem.source,
            field="mapping",
        )
    return space


def plan_of(space: Space, stored: dict) -> tuple[int, ServingMapping]:
    """(num_gpus, ServingMapping) of one point given by its stored values."""

    def v(key):
        return space.domains[key].value(stored[key])

    pool = PoolMapping(v(S.TP), v(S.PP), v(S.EP), v(S.DP))
    prefill = None
    if S.PREFILL_TP in stored:
        prefill = PoolMapping(v(S.PREFILL_TP), v(S.PREFILL_PP), v(S.PREFILL_EP), v(S.PREFILL_DP))
    return v(S.NUM_GPUS), ServingMapping(batch=v(S.BATCH), decode=pool, prefill=prefill)
