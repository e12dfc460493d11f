"""Exact Pareto fronts of training plans (``parasol pareto`` on a training problem): throughput
against cost (or memory), over the mapping, the device count and the chiplet count.

Each chiplet count is its own exact front (``solver.pareto`` by epsilon-constraint over one CP-SAT
encoding); the front over all counts is the non-dominated subset of their union, which is exact
because a point dominated within its own count is dominated in the union too.
"""

from __future__ import annotations

import dataclasses

from .costing import COST_OBJECTIVES, max_step_time_s
from .cpsat import decode, encode
from .pareto import ParetoResult, ParetoTarget, non_dominated, pareto_front
from .plan import _cost_filter, check_round_trip, evaluate_plan, explain_infeasible, run_length_binds
from .space import build_space
from .tables import compile_tables

# front metric name -> (key in the model's metrics, sense: +1 smaller is better, -1 larger)
METRICS = {"throughput": ("tokens_per_s", -1), "step_time": ("step_time_s", 1), "memory": ("peak_memory_gib", 1),
           "cost": ("usd_per_million_tokens", 1), "tokens_per_usd": ("tokens_per_usd", -1)}


def metric_key(problem, name: str) -> str:
    """The model-metrics key a front metric is reported by (cost: the run's $ with train_tokens)."""
    if name == "cost" and problem.workload.train_tokens is not None:
        return "run_cost_usd"
    return METRICS[name][0]


def _target(problem) -> ParetoTarget:
    space = build_space(problem)
    tables = compile_tables(space)
    hourly = ({n: problem.system_cost(n)["cost_per_hour_usd"] for n in problem.num_gpus}
              if problem.objective in COST_OBJECTIVES else None)

    def check(plan, enc, solver):
        plan.solver_step_s = tables.scale.seconds(solver.value(enc.step))
        check_round_trip(plan)

    def explain(time_limit, workers, seed):
        return (run_length_binds(problem, time_limit, workers, seed)
                or explain_infeasible(problem, space, tables, time_limit, workers, seed))

    return ParetoTarget(encode=lambda: encode(space, tables, "throughput", hourly_cost=hourly, max_step_s=max_step_time_s(problem)),
                        decode=lambda values: decode(values, space), evaluate=lambda n, m: evaluate_plan(problem, n, m),
                        metrics=tuple(METRICS), space_size=space.size(), check=check, explain=explain)


def training_front(problem, objectives: tuple, time_limit: float, workers: int = 1, seed: int = 0) -> ParetoResult:
    """The exact front of two training metrics (names of ``METRICS``) over every allowed chiplet count."""
    if any(n in COST_OBJECTIVES for n in objectives):
        problem = dataclasses.replace(problem, objective="cost")  # cost metrics (and the cost variable) on every plan
    results = []
    for count in problem.chiplets:
        sub, why = _cost_filter(dataclasses.replace(problem, chiplets=(count,)))
        if sub is None:
            results.append(ParetoResult(objectives=tuple(objectives), status="INFEASIBLE", message=why))
            continue
        results.append(pareto_front(_target(sub), tuple(objectives), time_limit / len(problem.chiplets), workers, seed))
    if len(results) == 1:
        return results[0]
    sense = {metric_key(problem, n): METRICS[n][1] for n in objectives}
    keys = tuple(metric_key(problem, n) for n in objectives)
    plans = non_dominated([p for r in results for p in r.plans], keys, sense)
    statuses = {r.status for r in results}
    status = "PARTIAL" if "PARTIAL" in statuses else ("INFEASIBLE" if not plans else "COMPLETE")
    return ParetoResult(objectives=tuple(objectives), status=status, plans=sorted(plans, key=lambda p: p.evaluation.metrics[keys[0]] * sense[keys[0]]),
                        gap=max((r.gap or 0.0 for r in results), default=None) if status == "PARTIAL" else None,
                        solve_time_s=sum(r.solve_time_s for r in results), solves=sum(r.solves for r in results),
                        space_size=sum(r.space_size for r in results),
                        message="; ".join(r.message for r in results if r.message) or None)


def front_json(problem, result: ParetoResult) -> dict:
    """pareto --json for training: {objectives, status, gap, front: [{mapping, metrics}], ...}."""
    from .report import plan_json
    return {"objectives": list(result.objectives), "status": result.status, "gap": result.gap,
            "front": [plan_json(problem, p) for p in result.plans], "solve_time_s": result.solve_time_s,
            "solves": result.solves, "space_size": result.space_size, **({"message": result.message} if result.message else {})}


def front_table(problem, result: ParetoResult) -> str:
    keys = [metric_key(problem, n) for n in result.objectives]
    head = (f"status {result.status}  {len(result.plans)} points on the front of {', '.join(result.objectives)}  "
            f"time {result.solve_time_s:.2f} s  {result.solves} CP-SAT solves  space {result.space_size:,} mappings")
    lines = [head, "", f"   #  {'GPUs':>6}  {'chiplets':>8}  {'tp/pp/dp/cp/ep, mb, vpp':<26}" + "".join(f"  {k:>22}" for k in keys)]
    for i, p in enumerate(result.plans, 1):
        m, met = p.mapping, p.evaluation.metrics
        shape = f"{m.tp}/{m.pp}/{m.dp}/{m.cp}/{m.ep}, {m.micro_batch}, {m.vpp}"
        lines.append(f"  {i:>2}  {p.num_gpus:>6}  {str(met.get('chiplets', '-')):>8}  {shape:<26}"
                     + "".join(f"  {met[k]:>22,.4g}" for k in keys))
    if result.message:
        lines += ["", result.message]
    return "\n".join(lines)


def plot_front(problem, result: ParetoResult, path: str) -> None:
    """Write the front as a PNG (matplotlib, the optional `plot` extra), atomically."""
    import os
    import tempfile
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from parasol.model.errors import ProblemError
        raise ProblemError("needs matplotlib: pip install -e '.[plot]'", field="--plot") from None
    a, b = (metric_key(problem, n) for n in result.objectives[:2])  # a third metric: the colour
    xs = [p.evaluation.metrics[a] for p in result.plans]
    ys = [p.evaluation.metrics[b] for p in result.plans]
    fig, ax = plt.subplots(figsize=(6, 4))
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ax.plot([xs[i] for i in order], [ys[i] for i in order], "--", color="tab:blue", alpha=0.4)
    if len(result.objectives) == 3:
        c = metric_key(problem, result.objectives[2])
        dots = ax.scatter(xs, ys, c=[p.evaluation.metrics[c] for p in result.plans], cmap="viridis")
        fig.colorbar(dots, ax=ax, label=c)
    else:
        ax.scatter(xs, ys, color="tab:blue")
    for p, x, y in zip(result.plans, xs, ys):
        label = f"{p.num_gpus}" + (f"x{p.evaluation.metrics['chiplets']}c" if "chiplets" in p.evaluation.metrics else "")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(a)
    ax.set_ylabel(b)
    ax.set_title(f"{problem.model.name} on {problem.system_name}: {result.status} front ({len(xs)} points)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        from parasol.model.errors import ProblemError
        raise ProblemError(f"the folder {directory} does not exist", field="--plot")
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=".png")
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
