"""Planning: CP-SAT solve (with top-K and infeasibility explanations) and the exhaustive enumerator.

Every plan returned is re-evaluated by ``model.evaluate_training``; its metrics are the model's
float numbers, and the solver's integer step time must agree with them within the scaling
resolution (``check_round_trip``).
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from parasol.model.errors import ProblemError
from parasol.model.placement import PLACEMENTS
from parasol.model.specs import Mapping
from parasol.model.training import Evaluation, evaluate_training

from . import costing
from .cpsat import RECOMPUTE, _status_name, decode, encode
from .problem import Problem

from .space import Space, build_space
from .tables import compile_tables

# Relative agreement required between the solver's integer step time and the model's float one.
ROUND_TRIP_TOLERANCE = 1e-3


@dataclass
class Plan:
    num_gpus: int
    mapping: Mapping
    evaluation: Evaluation
    solver_step_s: float | None = None
    units: dict = field(default_factory=dict)  # pareto: the plan's metrics in CP-SAT's integer units


@dataclass
class PlanResult:
    status: str
    objective: str
    plans: list = field(default_factory=list)
    objective_value: float | None = None
    bound: float | None = None
    gap: float | None = None
    solve_time_s: float = 0.0
    deterministic_time: float = 0.0
    workers: int = 0
    space_size: int = 0
    points_evaluated: int | None = None
    message: str | None = None
    feasible_points: list = field(default_factory=list)  # enumerate keep_all: every plan that fits and meets the limits
    all_points: list = field(default_factory=list)  # enumerate keep_all: every point evaluated


def objective_value(objective: str, metrics: dict) -> float:
    """The objective in its natural unit: tokens/s, seconds, GiB, tokens/s per GPU, $ (the run's
    cost with workload.train_tokens, else $ per million tokens) or tokens per $."""
    if objective == "cost":
        return metrics["run_cost_usd"] if "run_cost_usd" in metrics else metrics["usd_per_million_tokens"]
    key = {"throughput": "tokens_per_s", "step_time": "step_time_s", "memory": "peak_memory_gib",
           "tokens_per_gpu": "tokens_per_s_per_gpu", "tokens_per_usd": "tokens_per_usd"}[objective]
    return metrics[key]


def _minimised(objective: str, metrics: dict) -> float:
    """What both the solver and the enumerator minimise (floats, model units)."""
    if objective in ("throughput", "step_time"):
        return metrics["step_time_s"]
    if objective == "tokens_per_gpu":
        return metrics["step_time_s"] * metrics["num_gpus"]
    if objective in costing.COST_OBJECTIVES:
        return metrics["step_time_s"] * metrics["cost_per_hour_usd"]
    return metrics["peak_memory_gib"]


def _from_minimised(objective: str, value: float, tokens: float, metrics: dict) -> float:
    """The minimised quantity back in the objective's unit (tokens per step-second, or as is);
    a lower bound on it becomes an upper bound on throughput."""
    if objective in ("throughput", "tokens_per_gpu"):
        return tokens / value if value > 0 else float("inf")
    if objective in costing.COST_OBJECTIVES:  # value = step x $/hour, proportional to the objective
        ratio = value / _minimised(objective, metrics)
        return objective_value(objective, metrics) * (ratio if objective == "cost" else 1.0 / max(ratio, 1e-300))
    return value


def evaluate_plan(problem: Problem, num_gpus: int, mapping: Mapping) -> Evaluation:
    """The model's evaluation of a plan, with its cost metrics when the problem asks for cost."""
    ev = evaluate_training(problem.model, problem.system(num_gpus), problem.workload, mapping)
    try:
        row = problem.system_cost(num_gpus)
    except ProblemError:
        if problem.needs_cost:
            raise
        return ev  # a device with neither chiplet data nor a price: no cost metrics unless asked for
    _add_cost_metrics(problem, ev, row)
    if problem.chiplets != (None,):
        ev.metrics["chiplets"] = problem.chiplets[0]
    return ev


def _add_cost_metrics(problem: Problem, ev: Evaluation, system_cost_row: dict) -> None:
    """Join the system's cost with the plan's throughput (solver.costing.cost_metrics) in its metrics."""
    ev.metrics.update(costing.cost_metrics(system_cost_row, ev.metrics["tokens_per_s"], problem.workload.train_tokens))


def _cost_filter(problem: Problem) -> tuple[Problem | None, str | None]:
    """The problem restricted to the device counts whose system meets max_capex_usd / max_power_w,
    or (None, why not) when none does."""
    if not problem.constraints:
        return problem, None
    rows = {(n, problem.chiplets[0]): problem.system_cost(n) for n in problem.num_gpus}
    why = costing.cost_limits_message(problem, rows)
    if why is not None:
        return None, why
    return dataclasses.replace(problem, num_gpus=tuple(n for n in problem.num_gpus if costing.within_limits(problem, rows[(n, problem.chiplets[0])]))), None


def check_round_trip(plan: Plan) -> None:
    """The solver's step time and the model's must agree; the plan must fit unscaled (bugs only)."""
    model_step = plan.evaluation.metrics["step_time_s"]
    assert plan.evaluation.metrics["fits"], f"solver returned a plan that does not fit: {plan.mapping}"
    if plan.solver_step_s is not None:
        assert abs(plan.solver_step_s - model_step) <= ROUND_TRIP_TOLERANCE * model_step, (
            f"solver step {plan.solver_step_s} vs model {model_step} for {plan.mapping}")


# One presolve pass: measured on the 1,024-GPU ladder (GPT-3 175B, Llama 3 70B, 405B), later
# passes cost 0.4-1.3 s and never shortened the search (benchmarks/solve_speed.py).
# MoE problems skip presolve: their expert tables (keyed by ep as well) make CP-SAT's presolve
# expand ~1e8 objective entries and probe 2.5M clauses; on the DeepSeek-V3 2,048-GPU example it
# took 47 of 52 s, the search 5 s; without presolve the solve takes 14 s. Dense problems keep it
# (GPT-3 175B on 1,024 A100: 2.1 s with, 6.6 s without).
PRESOLVE_ITERATIONS = 1


def _solver(time_limit: float, workers: int, seed: int, presolve: bool = True) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.random_seed = int(seed)
    solver.parameters.num_workers = int(workers)
    solver.parameters.max_presolve_iterations = PRESOLVE_ITERATIONS
    solver.parameters.cp_model_presolve = presolve
    return solver


def _per_chiplet_count(problem: Problem, run, time_limit: float | None, top: int) -> PlanResult:
    """Run ``run(problem, seconds left)`` once per allowed chiplet count (a decomposition: the counts
    change the device, so each gets its own exact solve or enumeration) on the device counts that
    meet the cost limits, and keep the best ``top`` plans over all of them."""
    start = time.perf_counter()
    results = []
    for index, count in enumerate(problem.chiplets):
        sub, why = _cost_filter(dataclasses.replace(problem, chiplets=(count,)))
        if sub is None:
            results.append(PlanResult(status="INFEASIBLE", objective=problem.objective, message=why))
            continue
        # the time left, shared by the counts still to solve
        left = None if time_limit is None else max(0.1, (time_limit - (time.perf_counter() - start)) / (len(problem.chiplets) - index))
        results.append(run(sub, left))
    if len(results) == 1:
        return results[0]
    best = min((r for r in results if r.plans), key=lambda r: _minimised(problem.objective, r.plans[0].evaluation.metrics),
               default=None)
    out = PlanResult(status="INFEASIBLE", objective=problem.objective, space_size=sum(r.space_size for r in results),
                     workers=max(r.workers for r in results), deterministic_time=sum(r.deterministic_time for r in results))
    if any(r.points_evaluated is not None for r in results):
        out.points_evaluated = sum(r.points_evaluated or 0 for r in results)
    out.plans = sorted((p for r in results for p in r.plans), key=lambda p: _minimised(problem.objective, p.evaluation.metrics))[:top]
    out.feasible_points = [p for r in results for p in r.feasible_points]
    out.all_points = [p for r in results for p in r.all_points]
    statuses = {r.status for r in results}
    if best is not None:
        proven = statuses <= {"OPTIMAL", "INFEASIBLE"}
        out.status = "OPTIMAL" if proven else "FEASIBLE"
        out.objective_value = objective_value(problem.objective, out.plans[0].evaluation.metrics)
        out.bound, out.gap = (out.objective_value, 0.0) if proven else (None, None)
    elif statuses != {"INFEASIBLE"}:
        out.status = "UNKNOWN"
    else:
        out.message = "; ".join(f"chiplets {c}: {r.message}" for c, r in zip(problem.chiplets, results) if r.message)
    out.solve_time_s = time.perf_counter() - start
    return out


def solve(problem: Problem, objective: str | None = None, top: int = 1, time_limit: float = 60.0,
          workers: int = 1, seed: int = 0) -> PlanResult:
    """The best mapping (or the ``top`` best distinct ones) under the model, with proof status.

    One CP-SAT worker by default: deterministic for a given seed, and on two cores as fast as two
    workers on the benchmark ladder.
    """
    problem = _with_objective(problem, objective)
    return _per_chiplet_count(problem, lambda p, left: _solve_one(p, top, left, workers, seed), time_limit, top)


def _with_objective(problem: Problem, objective: str | None) -> Problem:
    """The problem with ``objective`` (a command line's --objective), which must be a training one."""
    from .problem import OBJECTIVES
    objective = objective or problem.objective
    if objective not in OBJECTIVES:
        raise ProblemError(f"{objective!r} is not a training objective; allowed: {', '.join(OBJECTIVES)}", field="--objective")
    return dataclasses.replace(problem, objective=objective)


def _solve_one(problem: Problem, top: int, time_limit: float, workers: int, seed: int) -> PlanResult:
    objective = problem.objective
    start = time.perf_counter()  # solve_time_s: the whole planning, tables and hint included
    space = build_space(problem)
    tables = compile_tables(space)
    hourly = {n: problem.system_cost(n)["cost_per_hour_usd"] for n in problem.num_gpus} if objective in costing.COST_OBJECTIVES else None
    enc = encode(space, tables, objective, hourly_cost=hourly, max_step_s=costing.max_step_time_s(problem))
    hint = greedy_plan(problem, space, objective)
    if hint is not None:
        _hint(enc, *hint)
    tokens = problem.workload.global_batch * problem.workload.seq_len
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size())

    def record(rank, solver, values):
        n, mapping = decode(values, space)
        plan = Plan(n, mapping, evaluate_plan(problem, n, mapping), tables.scale.seconds(solver.value(enc.step)))
        check_round_trip(plan)
        result.plans.append(plan)
        if rank == 0:
            best = _minimised(objective, plan.evaluation.metrics)
            gap = relative_gap(solver)
            result.objective_value = objective_value(objective, plan.evaluation.metrics)
            result.bound = _from_minimised(objective, best * (1.0 - gap), tokens, plan.evaluation.metrics)
            result.gap = gap

    solve_top(enc.model, enc.decisions, top, start + time_limit, workers, seed, result, record,
              lambda: (run_length_binds(problem, max(0.1, start + time_limit - time.perf_counter()), workers, seed)
                       or explain_infeasible(problem, space, tables, max(0.1, start + time_limit - time.perf_counter()),
                                             workers, seed)),
              presolve=problem.model.moe is None)
    result.solve_time_s = time.perf_counter() - start
    return result


def relative_gap(solver: cp_model.CpSolver) -> float:
    """CP-SAT's proven relative gap in its own integer units, (found - bound) / found, applied by
    the callers to the model's float value."""
    found = solver.objective_value
    return max(0.0, (found - solver.best_objective_bound) / found) if found > 0 else 0.0


def solve_top(model: cp_model.CpModel, decisions: dict, top: int, deadline: float, workers: int, seed: int,
              result: PlanResult, record, explain, presolve: bool = True) -> None:
    """The top-K loop of a solve: up to ``top`` solves of ``model``, each later one forbidding the
    previous assignment of ``decisions``. ``record(rank, solver, values)`` turns a solution into a
    plan; ``explain()`` names what binds when the first solve is INFEASIBLE. Fills the result's
    status, message, worker count and deterministic time."""
    for rank in range(top):
        solver = _solver(max(0.1, deadline - time.perf_counter()), workers, seed, presolve=presolve)
        status = _status_name(solver.solve(model))
        assert status != "MODEL_INVALID", model.validate()  # a bug in an encoding, not a user error
        result.deterministic_time += solver.deterministic_time
        result.workers = solver.parameters.num_workers
        if status not in ("OPTIMAL", "FEASIBLE"):
            if rank == 0:
                result.status = status
                if status == "INFEASIBLE":
                    result.message = explain()
            break
        values = {k: solver.value(v) for k, v in decisions.items()}
        record(rank, solver, values)
        if rank == 0:
            result.status = status
        model.add_forbidden_assignments(list(decisions.values()), [[values[k] for k in decisions]])


def greedy_plan(problem: Problem, space: Space, objective: str) -> tuple[int, Mapping] | None:
    """A good starting plan for the solver's hint: the model evaluated on a few hundred common
    choices (every grid, the smallest micro-batch, every recomputation and ZeRO stage, no
    interleaving, the default stage split, the first placement: the default's class when allowed);
    the best that fits, then its best interleaving depth."""
    best = None
    gb = problem.workload.global_batch
    systems = {}
    for n, tp, pp, dp, cp, ep in space.grid:
        options = space.partitions_or_default(pp)
        if not options:
            continue
        first, last = options[len(options) // 2]
        vpps = space.vpp_values(pp, first, last)
        if not vpps:
            continue
        system = systems.setdefault(n, problem.system(n))
        for mb in [m for m in space.micro_batch if gb % (dp * m) == 0][:2]:
            for rc, zero in itertools.product(space.recompute, space.zero):
                sp = tp > 1 and True in space.sp
                mapping = Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=mb, vpp=vpps[0], sp=sp,
                                  recompute=rc, zero=zero, first_stage_layers=first, last_stage_layers=last,
                                  placement=space.placements[(n, tp, pp, dp, cp, ep)][0])
                try:
                    ev = evaluate_training(problem.model, system, problem.workload, mapping)
                except ProblemError:
                    continue  # an interleaving the micro-batch count does not allow
                if problem.needs_cost:
                    _add_cost_metrics(problem, ev, problem.system_cost(n))
                if ev.metrics["fits"]:
                    key = _minimised(objective, ev.metrics)
                    if best is None or key < best[0]:
                        best = (key, n, mapping)
    if best is None:
        return None
    # then the interleaving depth of the best one, which the sweep left at its smallest value
    key, n, mapping = best
    for v in space.vpp_values(mapping.pp, mapping.first_stage_layers, mapping.last_stage_layers):
        trial = dataclasses.replace(mapping, vpp=v)
        try:
            ev = evaluate_plan(problem, n, trial)
        except ProblemError:
            continue  # e.g. micro-batches not a multiple of pp for this interleaving
        if ev.metrics["fits"] and _minimised(objective, ev.metrics) < key:
            key, mapping = _minimised(objective, ev.metrics), trial
    return n, mapping


def _hint(enc, num_gpus: int, mapping: Mapping) -> None:
    values = {"num_gpus": num_gpus, **mapping.as_dict()}
    values["sp"] = int(values["sp"])
    values["recompute"] = RECOMPUTE.index(values["recompute"])
    values["placement"] = PLACEMENTS.index(values["placement"])
    for key, var in enc.decisions.items():
        enc.model.add_hint(var, values[key])


def run_length_binds(problem: Problem, time_limit: float, workers: int, seed: int) -> str | None:
    """If max_run_hours is what binds, say so with the fastest allowed plan's run length."""
    if costing.max_step_time_s(problem) is None:
        return None
    free = dataclasses.replace(problem, objective="throughput", constraints={k: v for k, v in problem.constraints.items()
                                                                            if k != "max_run_hours"})
    fastest = _solve_one(free, 1, time_limit, workers, seed)
    if not fastest.plans:
        return None
    met = fastest.plans[0].evaluation.metrics
    return (f"max_run_hours binds: the fastest allowed plan ({fastest.plans[0].num_gpus} GPUs, "
            f"{met['tokens_per_s']:,.0f} tokens/s) needs {met['run_hours']:,.0f} h, over the limit "
            f"{problem.constraints['max_run_hours']:,.0f} h")


def explain_infeasible(problem: Problem, space: Space, tables, time_limit: float, workers: int, seed: int) -> str:
    """Name the binding constraint by relaxation: drop the memory cap and minimise peak memory.

    If that relaxation is feasible, memory binds, and the smallest peak memory any allowed
    mapping reaches says by how much. Otherwise the mapping restrictions themselves conflict.
    """
    enc = encode(space, compile_tables(space, prune_memory=False), "memory", enforce_memory=False)
    solver = _solver(time_limit, workers, seed, presolve=problem.model.moe is None)
    status = _status_name(solver.solve(enc.model))
    system = problem.system(problem.num_gpus[0])
    device = system.device
    usable = system.usable_memory_bytes / 2**30
    if status in ("OPTIMAL", "FEASIBLE"):
        values = {k: solver.value(v) for k, v in enc.decisions.items()}
        n, mapping = decode(values, space)
        ev = evaluate_plan(problem, n, mapping)
        mem = ev.breakdown["memory_gib"]
        states = sum(v for k, v in mem.items() if k != "activations")
        proof = "the least any allowed mapping needs" if status == "OPTIMAL" else "the least found within the time limit"
        return (f"memory binds: {ev.metrics['peak_memory_gib']:.1f} GiB per GPU is {proof} "
                f"(weights, gradients and optimizer states {states:.1f} GiB + activations {mem['activations']:.1f} GiB, "
                f"at tp {mapping.tp}, pp {mapping.pp}, dp {mapping.dp}, zero {mapping.zero}, recompute {mapping.recompute}, "
                f"micro_batch {mapping.micro_batch}); the {device.name} offers {usable:.1f} GiB "
                f"({device.hbm_bytes / 2**30:.1f} GiB minus {system.memory_reserve_bytes / 2**30:.1f} GiB reserved)")
    return "the mapping restrictions and the pipeline partition rules admit no mapping, whatever the memory"


def _candidates(space: Space):
    """Every point of the space, in a fixed order (the enumerator's loop)."""
    gb = space.problem.workload.global_batch
    for n, tp, pp, dp, cp, ep in space.grid:
        partitions = space.pipeline_options[pp]
        for mb in space.micro_batch:
            if gb % (dp * mb):
                continue
            interleave = (gb // (dp * mb)) % pp == 0  # the interleaved schedule needs m % pp == 0
            for sp, rc, zero, placement in itertools.product(space.sp, space.recompute, space.zero,
                                                             space.placements[(n, tp, pp, dp, cp, ep)]):
                if sp and tp == 1:
                    continue
                for f, last, vpps in partitions:
                    for v in vpps if interleave else [v for v in vpps if v == 1]:
                        yield n, Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=mb, vpp=v, sp=sp, recompute=rc,
                                         zero=zero, first_stage_layers=f, last_stage_layers=last, placement=placement)


def keep_best(best: list, entry: tuple, top: int) -> None:
    """Add ``entry`` = (key, index, ...) to the enumerator's ``best``, trimmed now and then to the
    ``top`` smallest (key, index): ties keep the order of the space."""
    best.append(entry)
    if len(best) > 4 * top:
        best.sort(key=lambda x: (x[0], x[1]))
        del best[top:]


def finish_enumeration(result: PlanResult, evaluated: int, start: float, everything: list | None) -> None:
    """Record an enumeration's count and time, and every evaluated point when they were kept."""
    result.points_evaluated = evaluated
    result.solve_time_s = time.perf_counter() - start
    if everything is not None:
        result.all_points = everything


def enumerate_space(problem: Problem, objective: str | None = None, top: int = 1, time_limit: float | None = None,
                    keep_all: bool = False) -> PlanResult:
    """Exhaustive baseline: evaluate every point of the same space with the model."""
    problem = _with_objective(problem, objective)
    return _per_chiplet_count(problem, lambda p, left: _enumerate_one(p, top, left, keep_all), time_limit, top)


def _enumerate_one(problem: Problem, top: int, time_limit: float | None, keep_all: bool) -> PlanResult:
    objective = problem.objective
    max_step = costing.max_step_time_s(problem)
    space = build_space(problem)
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size(), workers=1)
    start = time.perf_counter()
    systems = {n: problem.system(n) for n in problem.num_gpus}
    costs = {n: problem.system_cost(n) for n in problem.num_gpus} if problem.needs_cost else {}
    best = []  # (key, index, plan)
    evaluated = 0
    everything, feasible = [], []
    too_slow, fastest_hours = 0, float("inf")  # points that fit but miss max_run_hours
    complete = True
    for index, (n, mapping) in enumerate(_candidates(space)):
        if time_limit is not None and evaluated % 256 == 0 and time.perf_counter() - start > time_limit:
            complete = False
            break
        ev = evaluate_training(problem.model, systems[n], problem.workload, mapping)
        evaluated += 1
        if problem.needs_cost:
            _add_cost_metrics(problem, ev, costs[n])
        if keep_all:
            if problem.chiplets != (None,):
                ev.metrics["chiplets"] = problem.chiplets[0]
            everything.append(Plan(n, mapping, ev))
        if ev.metrics["fits"] and max_step is not None and ev.metrics["step_time_s"] > max_step:
            too_slow += 1
            fastest_hours = min(fastest_hours, ev.metrics["run_hours"])
            continue
        if not ev.metrics["fits"]:
            continue
        if keep_all:
            feasible.append(everything[-1])
        keep_best(best, (_minimised(objective, ev.metrics), index, Plan(n, mapping, ev)), top)
    best.sort(key=lambda x: (x[0], x[1]))
    result.plans = [b[2] for b in best[:top]]
    finish_enumeration(result, evaluated, start, everything if keep_all else None)
    result.feasible_points = feasible
    if result.plans:
        result.status = "OPTIMAL" if complete else "FEASIBLE"
        result.objective_value = objective_value(objective, result.plans[0].evaluation.metrics)
        result.bound = result.objective_value if complete else None
        result.gap = 0.0 if complete else None
    else:
        result.status = "INFEASIBLE" if complete else "UNKNOWN"
        if complete:
            result.message = ("no point of the space fits in memory" if not too_slow else
                              f"max_run_hours binds: {too_slow:,} points fit in memory, but the fastest needs "
                              f"{fastest_hours:,.0f} h, over the limit {problem.constraints['max_run_hours']:,.0f} h")
    return result

