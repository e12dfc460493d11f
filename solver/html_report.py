"""``parasol report``: one plan as a self-contained HTML page (no network, no scripts, no external
style): the plan and its solve, the time and memory breakdowns, the pipeline schedule (training),
the placement of the parallel groups on the scale-up domains and, when asked, the Pareto front.

The charts are inline SVG drawn here from the evaluation the model returned (``Evaluation.metrics``,
``breakdown``, training's ``stages``), the schedule from ``model.pipeline.pipeline_schedule`` and the
placement from ``model.placement.group_layouts``; nothing here computes a model quantity. Every text
put into the page goes through ``html.escape``. Each chart is an ``<svg>`` with a fixed id:
``time-breakdown``, ``memory-breakdown``, ``pipeline-schedule``, ``placement``, ``pareto-front``.
"""

from __future__ import annotations

import os
from html import escape

from parasol.model.errors import ProblemError
from parasol.model.inference import budget_micro_batch
from parasol.model.pipeline import pipeline_schedule
from parasol.model.placement import describe, group_layouts

from . import training_report
from .accuracy_bands import accuracy_rows
from .report import axis_label, pipeline_unit
from .results import mapping_row, write_new_file

PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
WIDTH = 960
MAX_PASSES = 5000  # schedule passes drawn at most; beyond, fewer micro-batches are shown (the bubble does not depend on them)
STYLE = """
body{font-family:sans-serif;margin:24px;color:#222;background:#fff;max-width:1000px}
h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}
th{background:#f3f3f3}.note{color:#555;font-size:13px}svg{display:block;margin:8px 0}
"""


def _num(value) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:,.4g}"


def _text(x, y, s, size=12, anchor="start", colour="#222", weight="normal") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="{colour}" '
        f'font-weight="{weight}">{escape(str(s))}</text>'
    )


def _rect(x, y, w, h, fill, title=None, stroke="none") -> str:
    tip = f"<title>{escape(title)}</title>" if title else ""
    return f'<rect x="{x:.2f}" y="{y:.2f}" width="{max(w, 0):.2f}" height="{h:.2f}" fill="{fill}" stroke="{stroke}">{tip}</rect>'


def _svg(chart_id: str, height: float, body: list, title: str) -> str:
    return (
        f'<svg id="{chart_id}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
        f'viewBox="0 0 {WIDTH} {height:.0f}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _table(rows: list[tuple]) -> str:
    return (
        "<table>"
        + "".join("<tr><th>" + escape(str(k)) + "</th><td>" + escape(str(v)) + "</td></tr>" for k, v in rows)
        + "</table>"
    )


def _grid(head: list[str], rows: list[list[str]]) -> str:
    """A table with a header row."""

    def row(tag: str, cells: list[str]) -> str:
        return "<tr>" + "".join(f"<{tag}>{escape(str(c).strip())}</{tag}>" for c in cells) + "</tr>"

    return '<table class="grid">' + row("th", head) + "".join(row("td", r) for r in rows) + "</table>"


# ---- the charts ---------------------------------------------------------------------------------


def bars_svg(chart_id: str, title: str, series: list[tuple[str, dict]], unit: str, capacity: float | None = None) -> str:
    """Stacked horizontal bars, one per (label, {part: value}), parts coloured alike across bars,
    with a legend of every non-zero part and, if given, a dashed line at ``capacity``."""
    parts = list(dict.fromkeys(k for _, d in series for k, v in d.items() if abs(v) > 1e-12))
    colours = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(parts)}
    left, right, bar_h = 150, WIDTH - 90, 26
    scale_max = max([sum(max(v, 0) for v in d.values()) for _, d in series] + [capacity or 0]) or 1.0
    px = (right - left) / scale_max
    body, y = [_text(10, 18, title, 14, weight="bold")], 34
    for label, d in series:
        body.append(_text(left - 8, y + 17, label, 12, "end"))
        x, total = left, sum(max(v, 0) for v in d.values())
        for p in parts:
            v = max(d.get(p, 0.0), 0.0)
            if v > 0:
                body.append(_rect(x, y, v * px, bar_h, colours[p], f"{p}: {_num(v)} {unit} ({100 * v / total:.1f} %)"))
                x += v * px
        body.append(_text(x + 4, y + 17, f"{_num(total)} {unit}", 11))
        y += bar_h + 10
    if capacity is not None:
        cx = left + capacity * px
        body.append(f'<line x1="{cx:.1f}" y1="30" x2="{cx:.1f}" y2="{y:.1f}" stroke="#000" stroke-dasharray="5,4"/>')
        body.append(_text(cx, y + 12, f"usable {_num(capacity)} {unit}", 11, "middle"))
        y += 16
    lx, ly = 10, y + 14
    for p in parts:
        label = p if len(series) > 1 else f"{p} {_num(series[0][1][p])} {unit}"
        width = 18 + 7 * len(label)
        if lx + width > WIDTH:
            lx, ly = 10, ly + 18
        body += [_rect(lx, ly - 10, 12, 12, colours[p]), _text(lx + 16, ly, label, 11)]
        lx += width + 10
    return _svg(chart_id, ly + 12, body, title)


def schedule_svg(stages: list[dict], pp: int, vpp: int, microbatches: int, bubble_s: float | None) -> str:
    """The 1F1B / interleaved schedule (``pipeline_schedule``) of the plan's stages as a Gantt chart:
    one row per stage, forwards light and backwards dark, coloured by micro-batch; grey is idle or a
    boundary send, each as long as the model charges it (a stage's ``sends_s`` per micro-batch are 2·vpp
    sends), sent synchronously as the model composes them."""
    shown = microbatches
    if microbatches * vpp * pp * 2 > MAX_PASSES:
        shown = min(microbatches, max(2 * pp, (MAX_PASSES // (2 * vpp * pp)) // pp * pp))
    fwd = [s["time_fwd_s"] for s in stages]
    bwd = [s["time_bwd_s"] for s in stages]
    transfer = stages[0]["sends_s"] / (2 * vpp)  # one send, one way: the model's sends per micro-batch are 2·vpp
    try:
        passes = pipeline_schedule(fwd, bwd, shown, vpp, transfer)
    except ValueError as exc:  # an order Megatron's rule would not run: say so rather than draw
        return _svg("pipeline-schedule", 40, [_text(10, 24, f"no schedule drawn: {exc}", 12)], "pipeline schedule")
    end = max(p[5] for p in passes)
    busy = sum(p[5] - p[4] for p in passes)
    idle = 1 - busy / (end * pp)
    left, right = 70, WIDTH - 20
    row_h = max(6, min(22, 360 // pp))
    px = (right - left) / end
    title = f"pipeline schedule: pp {pp}, vpp {vpp}, {microbatches} micro-batches" + (
        f" (first {shown} shown)" if shown < microbatches else ""
    )
    body = [_text(10, 18, title, 14, weight="bold")]
    top = 30
    for s in range(pp):
        y = top + s * (row_h + 2)
        body.append(_rect(left, y, right - left, row_h, "#e6e6e6"))
        if pp <= 32 or s % max(1, pp // 16) == 0:
            body.append(_text(left - 6, y + row_h * 0.75, f"stage {s}", min(11, row_h), "end"))
    for s, kind, mb, c, start, stop in passes:
        y = top + s * (row_h + 2)
        base = PALETTE[mb % len(PALETTE)]
        fill = base if kind == "F" else "#333333"
        body.append(_rect(left + start * px, y, (stop - start) * px, row_h, fill, f"stage {s} {kind} micro-batch {mb} chunk {c}"))
    y = top + pp * (row_h + 2) + 16
    sending = f", each boundary send {transfer * 1e3:.3g} ms" if transfer else ""
    body.append(_text(left, y, f"0 s — {end:.4g} s shown;  grey (the bubble{sending}) {100 * idle:.1f} % of stage time", 11))
    legend = "coloured: forward pass (colour = micro-batch); dark: backward pass"
    if bubble_s is not None:
        legend += f";  the model's pipeline bubble for the whole step: {bubble_s:.4g} s"
    body.append(_text(left, y + 16, legend, 11))
    return _svg("pipeline-schedule", y + 26, body, title)


def placement_svg(rows: list[tuple[str, int, int, str]], domain: int) -> str:
    """One row per parallel group (name, members, members per scale-up domain, text): a box per
    scale-up domain it spans (at most 16 drawn), a dot per member in it."""
    title = f"placement: parallel groups on scale-up domains of {domain} GPUs"
    body, y = [_text(10, 18, title, 14, weight="bold")], 34
    for i, (name, n, local, text) in enumerate(rows):
        domains = max(1, n // max(local, 1))
        body.append(_text(70, y + 18, name, 13, "end", weight="bold"))
        x = 80
        box = 10 * min(local, 16) + 10
        drawn = 0
        while drawn < min(domains, 16) and x <= WIDTH - 330:
            body.append(_rect(x, y, box, 26, "#f7f7f7", f"{name}: {local} members in this scale-up domain", "#888"))
            for k in range(min(local, 16)):
                body.append(f'<circle cx="{x + 8 + 10 * k:.1f}" cy="{y + 13}" r="3.5" fill="{PALETTE[i % len(PALETTE)]}"/>')
            x += box + 6
            drawn += 1
        if domains > drawn:
            body.append(_text(x + 2, y + 18, f"+{domains - drawn} domains", 11))
            x += 80
        body.append(_text(max(x + 8, 520), y + 18, f"{name} {text}", 12))
        y += 36
    if not rows:
        body.append(_text(10, y + 12, "every parallel group has one member: nothing crosses a device", 12))
        y += 24
    return _svg("placement", y + 6, body, title)


def front_svg(points: list[tuple[float, float, str]], chosen: tuple[float, float], x_name: str, y_name: str, title: str) -> str:
    """The front as a scatter (x_name, y_name), the points joined in x order, the chosen plan marked."""
    left, right, top, bottom = 90, WIDTH - 30, 34, 380
    xs = [p[0] for p in points] + [chosen[0]]
    ys = [p[1] for p in points] + [chosen[1]]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    x0, x1 = (x0 - 0.5, x1 + 0.5) if x1 == x0 else (x0 - 0.05 * (x1 - x0), x1 + 0.05 * (x1 - x0))
    y0, y1 = (y0 - 0.5, y1 + 0.5) if y1 == y0 else (y0 - 0.05 * (y1 - y0), y1 + 0.05 * (y1 - y0))

    def at(x, y):
        return left + (x - x0) / (x1 - x0) * (right - left), bottom - (y - y0) / (y1 - y0) * (bottom - top)

    body = [_text(10, 18, title, 14, weight="bold"), _rect(left, top, right - left, bottom - top, "#fafafa", stroke="#999")]
    for k in range(5):
        gx, gy = x0 + (x1 - x0) * k / 4, y0 + (y1 - y0) * k / 4
        px, _ = at(gx, y0)
        _, py = at(x0, gy)
        body += [_text(px, bottom + 16, f"{gx:.4g}", 11, "middle"), _text(left - 6, py + 4, f"{gy:.4g}", 11, "end")]
    line = " ".join("{:.1f},{:.1f}".format(*at(x, y)) for x, y, _ in sorted(points))
    body.append(f'<polyline points="{line}" fill="none" stroke="#4e79a7" stroke-dasharray="4,3"/>')
    for x, y, label in points:
        cx, cy = at(x, y)
        body.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="#4e79a7"><title>{escape(label)}</title></circle>')
    cx, cy = at(*chosen)
    body.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" fill="none" stroke="#e15759" stroke-width="3"/>')
    body.append(_text(cx + 12, cy - 8, "this plan", 12, colour="#e15759", weight="bold"))
    body += [_text((left + right) / 2, bottom + 34, x_name, 12, "middle")]
    body.append(
        f'<text x="18" y="{(top + bottom) / 2:.0f}" font-size="12" text-anchor="middle" '
        f'transform="rotate(-90 18 {(top + bottom) / 2:.0f})">{escape(y_name)}</text>'
    )
    return _svg("pareto-front", bottom + 44, body, title)


# ---- the page -----------------------------------------------------------------------------------


def _plan_rows(problem, plan, result, evaluated: bool) -> list[tuple]:
    rows = [("model", problem.model.name), ("system", problem.system_name), ("GPUs", plan.num_gpus)]
    rows += [("workload", problem.workload.kind)]
    if evaluated:
        rows.append(("plan", "the mapping fixed in the problem file, evaluated (--evaluate)"))
    else:
        rows += [
            ("solve status", result.status),
            ("objective", f"{result.objective} = {_num(result.objective_value)}"),
            ("bound", _num(result.bound) if result.bound is not None else "n/a"),
            ("gap", f"{100 * result.gap:.3f} %" if result.gap is not None else "n/a"),
            ("solve time", f"{result.solve_time_s:.2f} s over {result.space_size:,} points"),
        ]
    return rows


def _metric_rows(metrics: dict) -> list[tuple]:
    return [(k, _num(v)) for k, v in metrics.items() if isinstance(v, (int, float, bool, str))]


def _training_charts(problem, plan) -> list[str]:
    ev, m = plan.evaluation, plan.mapping
    bd, met = ev.breakdown, ev.metrics
    time_s = {k: v for k, v in bd["time_s"].items() if abs(v) > 1e-12}
    out = ["<h2>Time</h2>", bars_svg("time-breakdown", f"time of one step: {met['step_time_s']:.4g} s", [("step", time_s)], "s")]
    out += [
        "<h2>Memory</h2>",
        bars_svg(
            "memory-breakdown",
            f"memory per GPU ({pipeline_unit(m)} {bd['peak_memory_stage']}): {met['peak_memory_gib']:.2f} GiB",
            [(f"{pipeline_unit(m)} {bd['peak_memory_stage']}", bd["memory_gib"])],
            "GiB",
            capacity=met["usable_memory_gib"],
        ),
    ]
    if m.dualpipe:  # two stages per rank in two directions: not a 1F1B chart
        bubble = bd["time_s"].get("pipeline/bubble", 0.0)
        out += [
            "<h2>Pipeline schedule</h2>",
            f'<p class="note">DualPipe: rank i runs stage i of one direction and stage {m.pp - 1}−i of the other, '
            f"half of the {met['microbatches']} micro-batches through each; its bubble, DeepSeek-V3's "
            f"(pp/2 − 1)(F&amp;B + B − 3W), is {bubble:.4g} s of the step. No chart is drawn for it.</p>",
        ]
    else:
        out += [
            "<h2>Pipeline schedule</h2>",
            schedule_svg(ev.stages, m.pp, m.vpp, met["microbatches"], bd["time_s"].get("pipeline/bubble")),
            '<p class="note">The schedule is played out from each stage\'s forward and backward time per '
            "micro-batch (point-to-point transfers left out); with pp 1 there is no bubble.</p>",
        ]
    if m.pp > 1:
        head, stage_rows = training_report.stage_rows(m, ev, problem.model.moe is not None)
        out += [
            f"<h2>{pipeline_unit(m).capitalize()}s</h2>",
            '<div id="stages">' + _grid(head, stage_rows) + "</div>",
            '<p class="note">Per micro-batch; consecutive stages alike in all but memory share a row. * marks the '
            "slowest, which sets the pipeline's pace; the head is the embedding, the output layer, the loss and an "
            "MTP module.</p>",
        ]
    system = problem.system(plan.num_gpus)
    rows = [
        (kind, where.n, where.local, describe(where, system))
        for kind, where in group_layouts(system, m).items()
        if where.n > 1 and (kind not in ("ep", "edp", "etp") or problem.model.moe is not None)
    ]
    out += ["<h2>Placement</h2>", placement_svg(rows, system.scale_up_domain)]
    return out


def _serving_charts(problem, plan) -> list[str]:
    ev, m = plan.evaluation, plan.mapping
    bd, met = ev.breakdown, ev.metrics
    ms = {key: {k: 1e3 * v for k, v in bd[key].items()} for key in ("ttft_s", "tpot_s")}
    out = [
        "<h2>Time</h2>",
        bars_svg(
            "time-breakdown",
            f"time to first token {1e3 * met['ttft_s']:.4g} ms, time per output token {1e3 * met['tpot_s']:.4g} ms",
            [("TTFT", ms["ttft_s"]), ("TPOT", ms["tpot_s"])],
            "ms",
        ),
        '<p class="note">Throughput: '
        + escape(
            f"{met['tokens_per_s']:,.0f} output tokens/s ({met['tokens_per_s_per_gpu']:,.1f} per GPU, "
            f"{met['tokens_per_s_per_user']:,.1f} per user), {met['concurrent_requests']:,} concurrent requests"
            + (f"; the set served in {met['makespan_s']:,.1f} s" if "makespan_s" in met else "")
            + (
                f"; the token budget of {problem.workload.max_prefill_tokens:,} a pass holds "
                f"{budget_micro_batch(problem.workload):,} sequences a micro-batch"
                + ("" if met["within_token_budget"] else " (the plan is above it)")
                if "within_token_budget" in met
                else ""
            )
        )
        + "</p>",
        "<h2>Memory</h2>",
        bars_svg(
            "memory-breakdown",
            f"memory per GPU ({bd['peak_memory_pool']} pool): {met['peak_memory_gib']:.2f} GiB, "
            f"largest batch that fits {met['max_batch']:,}",
            [(f"{bd['peak_memory_pool']} pool", bd["memory_gib"])],
            "GiB",
            capacity=met["usable_memory_gib"],
        ),
    ]
    system = problem.system(plan.num_gpus)
    domain = system.scale_up_domain
    rows = []
    for name, pool in (("prefill", m.prefill), ("decode", m.decode)):
        if pool is None:
            continue
        prefix = f"{name} " if m.prefill is not None else ""
        size = pool.tp * pool.pp
        rows.append(
            (f"{prefix}replica", size, min(size, domain), f"tp {pool.tp} x pp {pool.pp}, {pool.dp} replicas (ep {pool.ep})")
        )
    out += ["<h2>Placement</h2>", placement_svg(rows, domain)]
    return out


def report_html(planner, problem, plan, result=None, front=None) -> str:
    """The page of ``plan`` (a ``planner.Plan``): its solve ``result`` (None: evaluated) and, if
    given, the ``front`` (a ``pareto.ParetoResult``) with the plan marked."""
    title = f"parasol report: {problem.model.name} on {plan.num_gpus} x {problem.system_name}"
    mapping = {k: v for k, v in mapping_row(plan.mapping, plan.num_gpus).items() if k != "num_gpus"}
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<h2>Plan</h2>",
        '<div id="plan">' + _table(_plan_rows(problem, plan, result, result is None)) + "</div>",
        "<h2>Mapping</h2>",
        '<div id="mapping">' + _table([(k, v) for k, v in mapping.items()]) + "</div>",
        f'<p class="note">{escape(planner.plan_label(plan))}</p>',
    ]
    if planner.kind == "training":
        parts += _training_charts(problem, plan)
    else:
        parts += _serving_charts(problem, plan)
        parts.append('<p class="note">No pipeline schedule: a serving plan runs no training pipeline.</p>')
    if front is not None:
        parts += ["<h2>Pareto front</h2>", _front_section(planner, problem, plan, front)]
    parts += [
        "<h2>Metrics</h2>",
        '<div id="metrics">' + _table(_metric_rows(plan.evaluation.metrics)) + "</div>",
        "<h2>Accuracy</h2>",
        '<div id="accuracy">'
        + _accuracy_table(problem.for_system(plan.system_name), plan.evaluation.metrics.get("chiplets"))
        + "</div>",
        "</body></html>",
    ]
    return "\n".join(parts)


def _accuracy_table(problem, chiplets: int | None) -> str:
    """The model's out-of-sample error for the plan's regime, one row per figure (``accuracy_bands``), or why
    none is known."""
    head, rows = accuracy_rows(problem, chiplets=chiplets)
    if not rows[0][0]:
        return f'<p class="note">{escape(head)}: {escape(rows[0][1])}</p>'
    return f'<p class="note">{escape(head)}</p>' + _table(rows)


def _front_section(planner, problem, plan, front) -> str:
    if not front.plans:
        return f'<p class="note">No front: {escape(front.message or front.status)}</p>'
    a, b = (planner.front_metric(problem, n).metric for n in front.objectives[:2])
    points = [(p.evaluation.metrics[a], p.evaluation.metrics[b], planner.plan_label(p)) for p in front.plans]
    chosen = (plan.evaluation.metrics[a], plan.evaluation.metrics[b])
    title = f"{front.status} front of {a} and {b}: {len(points)} points"
    return front_svg(points, chosen, axis_label(a), axis_label(b), title)


def write_report(path: str, page: str) -> None:
    """Write the page to ``path``, never over an existing file (``results.write_new_file``)."""

    def write(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # a page to share: readable as any new file, not mkstemp's 0600

    write_new_file(path, "-o", write)


def report_inputs(problem, args) -> tuple:
    """(plan, solve result or None, front or None) for ``parasol report``: the file's fixed mapping
    evaluated (``--evaluate``) or the best plan of ``solve``; with ``--pareto A,B`` the front too.
    The plan is None when the solve found none (the result says why)."""
    from .pareto import check_metrics, pareto_front  # noqa: PLC0415
    from .planner import Plan, planner_for, solve  # noqa: PLC0415

    planner = planner_for(problem)
    if args.pareto:
        try:
            check_metrics(planner, problem, args.pareto)  # before the solve: a typo fails at once
        except ProblemError as exc:
            raise exc.located(field="--pareto") from None
    if args.evaluate:
        num_gpus, mapping = planner.fixed_plan(problem)
        plan, result = Plan(num_gpus, mapping, planner.evaluate(problem, num_gpus, mapping)), None
    else:
        result = solve(problem, objective=args.objective, time_limit=args.time_limit, workers=args.workers, seed=args.seed)
        if not result.plans:
            return None, result, None
        plan = result.plans[0]
    front = None
    if args.pareto:
        front = pareto_front(problem, args.pareto, args.time_limit, args.workers, args.seed)
    return plan, result, front
