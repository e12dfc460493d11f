"""Reports shared by training and serving: the JSON documents of plans, results and fronts, the
first line of a result, the text of a front, and a front drawn as a PNG."""

from __future__ import annotations

from pathlib import Path

from parasol.model.errors import ProblemError

from .accuracy_bands import plan_accuracy
from .library import is_system_path
from .results import write_new_file


def mapping_dict(mapping, num_gpus: int) -> dict:
    """Every mapping key as a scalar, plus num_gpus (accepted back by ``evaluate``)."""
    return {**mapping.as_dict(), "num_gpus": num_gpus}


def evaluation_json(problem, mapping, evaluation) -> dict:
    """evaluate --json: the model and system, metrics, breakdown and mapping (training adds its stages), and the
    out-of-sample accuracy of the plan's regime (``accuracy_bands.plan_accuracy``)."""
    return {
        "model": problem.model.name,
        "system": problem.system_name,
        "metrics": evaluation.metrics,
        "breakdown": evaluation.breakdown,
        "mapping": mapping_dict(mapping, evaluation.metrics["num_gpus"]),
        "accuracy": plan_accuracy(problem, chiplets=evaluation.metrics.get("chiplets")),
    }


def rows_block(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [title] + [f"  {k:<{width}}  {v}" for k, v in rows]


def plan_json(problem, plan) -> dict:
    return {
        "system": plan.system_name or problem.system_name,
        "mapping": mapping_dict(plan.mapping, plan.num_gpus),
        "metrics": plan.evaluation.metrics,
        "breakdown": plan.evaluation.breakdown,
    }


def plan_result_json(problem, result, top: int) -> dict:
    """solve/enumerate --json: status, the best plan, its model metrics, objective, bound and gap, and the
    out-of-sample accuracy of the best plan's regime (``accuracy_bands.plan_accuracy``)."""
    out = {
        "status": result.status,
        "objective_name": result.objective,
        "objective": result.objective_value,
        "bound": result.bound,
        "gap": result.gap,
        "solve_time_s": result.solve_time_s,
        "deterministic_time": result.deterministic_time,
        "workers": result.workers,
        "method": result.method,
        "space_size": result.space_size,
    }
    if result.points_evaluated is not None:
        out["points_evaluated"] = result.points_evaluated
    if result.plans:
        out.update(
            {
                "system": result.plans[0].system_name or problem.system_name,
                "mapping": plan_json(problem, result.plans[0])["mapping"],
                "metrics": result.plans[0].evaluation.metrics,
                "breakdown": result.plans[0].evaluation.breakdown,
                "accuracy": plan_accuracy(
                    problem.for_system(result.plans[0].system_name), chiplets=result.plans[0].evaluation.metrics.get("chiplets")
                ),
            }
        )
    else:
        out.update({"system": None if problem.alternatives else problem.system_name, "mapping": None, "metrics": None})
    if top > 1:
        out["plans"] = [plan_json(problem, p) for p in result.plans]
    if result.message:
        out["message"] = result.message
    return out


def plan_result_head(result, points: str = "mappings") -> str:
    """The first line of a solve or enumeration report: status, objective, bound, gap, time, space."""
    return (
        f"status {result.status}  objective {result.objective} = "
        + (f"{result.objective_value:,.4g}" if result.objective_value is not None else "n/a")
        + (
            f"  bound {result.bound:,.4g}  gap {100 * result.gap:.3f} %"
            if result.bound is not None and result.gap is not None
            else ""
        )
        + f"  time {result.solve_time_s:.2f} s  space {result.space_size:,} {points}"
        + (f"  evaluated {result.points_evaluated:,}" if result.points_evaluated is not None else "")
    )


def text_table(head: list, rows: list, markdown: bool) -> str:
    """Rows of strings under a header, as a Markdown table or aligned plain text."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*row) for row in rows])


def plan_result_table(planner, problem, result) -> str:
    """The readable report of a solve or an enumeration: the head, the best plan, the top K."""
    head = plan_result_head(result, planner.points_name)
    if not result.plans:
        return head + ("\n" + result.message if result.message else "")
    best = result.plans[0]
    lines = [head, "", planner.evaluation_table(problem.for_system(best.system_name), best.mapping, best.evaluation)]
    if len(result.plans) > 1:
        table = planner.plans_table(result.plans)
        if problem.alternatives:  # several systems compared: a system column
            names = [system_label(p.system_name) for p in result.plans]
            width = max(len("system"), *map(len, names))
            table = [f"{'system':<{width}}  {table[0]}"] + [f"{n:<{width}}  {row}" for n, row in zip(names, table[1:])]
        lines += ["", f"top {len(result.plans)}:"] + table
    return "\n".join(lines)


def system_label(name: str | None) -> str:
    """A system as a report shows it: its library name, or a system file's name."""
    if name is None:
        return ""
    return Path(name).name if is_system_path(name) else name


def front_json(planner, problem, result) -> dict:
    """pareto --json: {objectives, status, gap, front: [{mapping, metrics}], ...}."""
    return {
        "objectives": list(result.objectives),
        "status": result.status,
        "gap": result.gap,
        "front": [
            {
                **({"system": p.system_name} if problem.alternatives else {}),  # several systems compared
                "mapping": mapping_dict(p.mapping, p.num_gpus),
                "metrics": p.evaluation.metrics,
            }
            for p in result.plans
        ],
        "solve_time_s": result.solve_time_s,
        "solves": result.solves,
        "space_size": result.space_size,
        "method": result.method,
        **({"points_evaluated": result.points_evaluated} if result.points_evaluated is not None else {}),
        **({"message": result.message} if result.message else {}),
    }


def front_table(planner, problem, result) -> str:
    keys = [planner.front_metric(problem, n).metric for n in result.objectives]
    head = (
        f"status {result.status}  {len(result.plans)} points on the front of {', '.join(result.objectives)}"
        + (f"  gap {100 * result.gap:.3f} %" if result.gap else "")
        + f"  time {result.solve_time_s:.2f} s  "
        + (
            f"{result.solves} CP-SAT solves"
            if result.method == "cpsat"
            else f"{result.method}: {result.points_evaluated:,} evaluated"
        )
        + f"  space {result.space_size:,} {planner.points_name}"
    )
    names = [system_label(p.system_name) for p in result.plans] if problem.alternatives else []
    width = max([len("system"), *map(len, names)]) if names else 0
    column = (lambda text: f"{text:<{width}}  ") if names else (lambda text: "")
    lines = [head, "", f"   #  {column('system')}{'plan':<58}" + "".join(f"  {k:>22}" for k in keys)]
    for i, p in enumerate(result.plans, 1):
        met = p.evaluation.metrics
        label = column(names[i - 1]) if names else ""
        lines.append(f"  {i:>2}  {label}{planner.plan_label(p):<58}" + "".join(f"  {met[k]:>22,.4g}" for k in keys))
    if result.message:
        lines += ["", result.message]
    return "\n".join(lines)


# a front metric's axis title with its unit (``plot_front``, the report's front chart)
METRIC_LABELS = {
    "tokens_per_s": "tokens/s",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "tokens_per_s_per_user": "output tokens/s per user",
    "ttft_s": "time to first token (s)",
    "tpot_s": "time per output token (s)",
    "e2e_latency_s": "end-to-end latency (s)",
    "peak_memory_gib": "peak memory per GPU (GiB)",
    "step_time_s": "step time (s)",
    "usd_per_million_tokens": "cost ($ per million tokens)",
    "run_cost_usd": "run cost ($)",
    "tokens_per_usd": "tokens per $",
}


def pipeline_unit(mapping) -> str:
    """What a training evaluation's per-stage rows are: stages, or under DualPipe ranks of two stages each."""
    return "rank" if mapping.dualpipe else "stage"


def axis_label(metric: str) -> str:
    """``metric`` as an axis title: its words and unit, then its key (e.g. 'time to first token (s)  [ttft_s]')."""
    return f"{METRIC_LABELS[metric]}  [{metric}]" if metric in METRIC_LABELS else metric


def point_label(planner, plan) -> str:
    """A front point's short tag: training its GPUs (and chiplets), serving its decode tp/pp and batch."""
    if planner.kind == "training":
        met = plan.evaluation.metrics
        return f"{plan.num_gpus}" + (f"x{met['chiplets']}c" if "chiplets" in met else "")
    m = plan.mapping
    return ("P/D " if m.prefill is not None else "") + f"tp{m.decode.tp} pp{m.decode.pp} b{m.batch}"


def plot_front(planner, problem, result, path: str) -> None:
    """Draw the front, training's or serving's, as a PNG (matplotlib, the optional `plot` extra) into a
    new file (``results.write_new_file``): the first two metrics on the axes (``axis_label``), a third as
    the colour, each point of a front of at most 12 tagged by ``point_label``."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ProblemError("needs matplotlib: pip install -e '.[plot]'", field="--plot") from None
    a, b = (planner.front_metric(problem, n).metric for n in result.objectives[:2])  # a third metric: the colour
    xs = [p.evaluation.metrics[a] for p in result.plans]
    ys = [p.evaluation.metrics[b] for p in result.plans]
    fig, ax = plt.subplots(figsize=(6, 4))
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    ax.plot([xs[i] for i in order], [ys[i] for i in order], "--", color="tab:blue", alpha=0.4)
    if len(result.objectives) == 3:
        c = planner.front_metric(problem, result.objectives[2]).metric
        dots = ax.scatter(xs, ys, c=[p.evaluation.metrics[c] for p in result.plans], cmap="viridis")
        fig.colorbar(dots, ax=ax, label=axis_label(c))
    else:
        ax.scatter(xs, ys, color="tab:blue")
    for p, x, y in zip(result.plans, xs, ys) if len(xs) <= 12 else ():  # tags on a crowded front would overlap
        label = point_label(planner, p) + (f" {system_label(p.system_name)}" if problem.alternatives else "")
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    ax.set_xlabel(axis_label(a))
    ax.set_ylabel(axis_label(b))
    systems = ", ".join(system_label(p.system_name) for p in problem.systems)
    ax.set_title(f"{problem.model.name} on {systems}: {result.status} front ({len(xs)} points)", fontsize=9)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    try:
        write_new_file(path, "--plot", lambda tmp: fig.savefig(tmp, dpi=120, format="png"))
    finally:
        plt.close(fig)
