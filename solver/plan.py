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

from model.errors import ProblemError
from model.specs import Mapping
from model.training import Evaluation, evaluate_training

from model.placement import PLACEMENTS

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


def objective_value(objective: str, metrics: dict) -> float:
    """The objective in its natural unit: tokens/s, seconds, GiB or tokens/s per GPU."""
    return {"throughput": metrics["tokens_per_s"], "step_time": metrics["step_time_s"],
            "memory": metrics["peak_memory_gib"], "tokens_per_gpu": metrics["tokens_per_s_per_gpu"]}[objective]


def _minimised(objective: str, metrics: dict) -> float:
    """What both the solver and the enumerator minimise (floats, model units)."""
    if objective in ("throughput", "step_time"):
        return metrics["step_time_s"]
    if objective == "tokens_per_gpu":
        return metrics["step_time_s"] * metrics["num_gpus"]
    return metrics["peak_memory_gib"]


def _from_minimised(objective: str, value: float, tokens: float) -> float:
    """The minimised quantity back in the objective's unit (tokens per step-second, or as is);
    a lower bound on it becomes an upper bound on throughput."""
    if objective in ("throughput", "tokens_per_gpu"):
        return tokens / value if value > 0 else float("inf")
    return value


def evaluate_plan(problem: Problem, num_gpus: int, mapping: Mapping) -> Evaluation:
    return evaluate_training(problem.model, problem.system(num_gpus), problem.workload, mapping)


def check_round_trip(plan: Plan) -> None:
    """The solver's step time and the model's must agree; the plan must fit unscaled (bugs only)."""
    model_step = plan.evaluation.metrics["step_time_s"]
    assert plan.evaluation.metrics["fits"], f"solver returned a plan that does not fit: {plan.mapping}"
    if plan.solver_step_s is not None:
        assert abs(plan.solver_step_s - model_step) <= ROUND_TRIP_TOLERANCE * model_step, (
            f"solver step {plan.solver_step_s} vs model {model_step} for {plan.mapping}")


# One presolve pass: measured on the 1,024-GPU ladder (GPT-3 175B, Llama 3 70B, 405B), later
# passes cost 0.4-1.3 s and never shortened the search (benchmarks/solve_speed.py).
PRESOLVE_ITERATIONS = 1


def _solver(time_limit: float, workers: int, seed: int) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = float(time_limit)
    solver.parameters.random_seed = int(seed)
    solver.parameters.num_workers = int(workers)
    solver.parameters.max_presolve_iterations = PRESOLVE_ITERATIONS
    return solver


def solve(problem: Problem, objective: str | None = None, top: int = 1, time_limit: float = 60.0,
          workers: int = 1, seed: int = 0) -> PlanResult:
    """The best mapping (or the ``top`` best distinct ones) under the model, with proof status.

    One CP-SAT worker by default: deterministic for a given seed, and on two cores as fast as two
    workers on the benchmark ladder.
    """
    objective = objective or problem.objective
    start = time.perf_counter()  # solve_time_s: the whole planning, tables and hint included
    space = build_space(problem)
    tables = compile_tables(space)
    enc = encode(space, tables, objective)
    hint = greedy_plan(problem, space, objective)
    if hint is not None:
        _hint(enc, *hint)
    tokens = problem.workload.global_batch * problem.workload.seq_len
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size())
    deadline = start + time_limit
    for rank in range(top):
        solver = _solver(max(0.1, deadline - time.perf_counter()), workers, seed)
        code = solver.solve(enc.model)
        status = _status_name(code)
        result.deterministic_time += solver.deterministic_time
        result.workers = solver.parameters.num_workers
        if status not in ("OPTIMAL", "FEASIBLE"):
            if rank == 0:
                result.status = status
                if status == "INFEASIBLE":
                    result.message = explain_infeasible(problem, space, tables, time_limit, workers, seed)
            break
        values = {k: solver.value(v) for k, v in enc.decisions.items()}
        n, mapping = decode(values, space)
        plan = Plan(n, mapping, evaluate_plan(problem, n, mapping), tables.scale.seconds(solver.value(enc.step)))
        check_round_trip(plan)
        result.plans.append(plan)
        if rank == 0:
            result.status = status
            best = _minimised(objective, plan.evaluation.metrics)
            # CP-SAT's proven relative gap, in its own integer units, applied to the model's float value
            found_units = solver.objective_value
            gap = max(0.0, (found_units - solver.best_objective_bound) / found_units) if found_units > 0 else 0.0
            result.objective_value = objective_value(objective, plan.evaluation.metrics)
            result.bound = _from_minimised(objective, best * (1.0 - gap), tokens)
            result.gap = gap
        enc.model.add_forbidden_assignments(list(enc.decisions.values()), [[values[k] for k in enc.decisions]])
    result.solve_time_s = time.perf_counter() - start
    return result


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
            ev = evaluate_training(problem.model, systems[n], problem.workload, trial)
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


def explain_infeasible(problem: Problem, space: Space, tables, time_limit: float, workers: int, seed: int) -> str:
    """Name the binding constraint by relaxation: drop the memory cap and minimise peak memory.

    If that relaxation is feasible, memory binds, and the smallest peak memory any allowed
    mapping reaches says by how much. Otherwise the mapping restrictions themselves conflict.
    """
    enc = encode(space, compile_tables(space, prune_memory=False), "memory", enforce_memory=False)
    solver = _solver(time_limit, workers, seed)
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


def enumerate_space(problem: Problem, objective: str | None = None, top: int = 1, time_limit: float | None = None,
                    keep_all: bool = False) -> PlanResult:
    """Exhaustive baseline: evaluate every point of the same space with the model."""
    objective = objective or problem.objective
    space = build_space(problem)
    result = PlanResult(status="UNKNOWN", objective=objective, space_size=space.size(), workers=1)
    start = time.perf_counter()
    systems = {n: problem.system(n) for n in problem.num_gpus}
    best = []  # (key, index, plan)
    evaluated = 0
    everything = []
    complete = True
    for index, (n, mapping) in enumerate(_candidates(space)):
        if time_limit is not None and evaluated % 256 == 0 and time.perf_counter() - start > time_limit:
            complete = False
            break
        ev = evaluate_training(problem.model, systems[n], problem.workload, mapping)
        evaluated += 1
        if keep_all:
            everything.append(Plan(n, mapping, ev))
        if not ev.metrics["fits"]:
            continue
        key = _minimised(objective, ev.metrics)
        best.append((key, index, Plan(n, mapping, ev)))
        if len(best) > 4 * top:
            best.sort(key=lambda x: (x[0], x[1]))
            del best[top:]
    best.sort(key=lambda x: (x[0], x[1]))
    result.plans = [b[2] for b in best[:top]]
    result.points_evaluated = evaluated
    result.solve_time_s = time.perf_counter() - start
    if keep_all:
        result.all_points = everything  # type: ignore[attr-defined]
    if result.plans:
        result.status = "OPTIMAL" if complete else "FEASIBLE"
        result.objective_value = objective_value(objective, result.plans[0].evaluation.metrics)
        result.bound = result.objective_value if complete else None
        result.gap = 0.0 if complete else None
    else:
        result.status = "INFEASIBLE" if complete else "UNKNOWN"
        if complete:
            result.message = "no point of the space fits in memory"
    return result

