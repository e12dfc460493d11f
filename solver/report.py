"""Readable tables and JSON documents for evaluations and plans."""

from __future__ import annotations

from parasol.model.placement import describe, group_layouts
from parasol.model.training import Evaluation


def mapping_dict(mapping, num_gpus: int) -> dict:
    """Every mapping key as a scalar, plus num_gpus (accepted back by ``evaluate``)."""
    return {**mapping.as_dict(), "num_gpus": num_gpus}


def evaluation_json(problem, mapping, evaluation: Evaluation) -> dict:
    """evaluate --json: metrics, breakdown, mapping and per-stage detail."""
    stages = [{k: v for k, v in s.items() if k != "state"} | {"state_bytes": s["state"]} for s in evaluation.stages]
    return {
        "model": problem.model.name,
        "system": problem.system_name,
        "metrics": evaluation.metrics,
        "breakdown": evaluation.breakdown,
        "mapping": mapping_dict(mapping, evaluation.metrics["num_gpus"]),
        "stages": stages,
    }


def _rows(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [title] + [f"  {k:<{width}}  {v}" for k, v in rows]


def evaluation_table(problem, mapping, evaluation: Evaluation, num_gpus: int | None = None) -> str:
    """The readable report of one evaluated mapping."""
    m, met, bd = mapping, evaluation.metrics, evaluation.breakdown
    lines = [f"{problem.model.name} on {met['num_gpus']} x {problem.system_name} "
             f"({problem.workload.precision}, seq {problem.workload.seq_len}, global batch {problem.workload.global_batch})"]
    lines.append(f"mapping: tp {m.tp}  pp {m.pp}  dp {m.dp}  cp {m.cp}  ep {m.ep}  micro_batch {m.micro_batch}  vpp {m.vpp}  "
                 f"sp {str(m.sp).lower()}  recompute {m.recompute}  zero {m.zero}  placement {m.placement}  "
                 f"stage layers {[s['layers'] for s in evaluation.stages] if m.pp <= 8 else 'first %d, last %d' % (evaluation.stages[0]['layers'], evaluation.stages[-1]['layers'])}")
    system = problem.system(met["num_gpus"])
    groups = [f"{kind} {describe(where, system)}" for kind, where in group_layouts(system, m).items()
              if where.n > 1 and (kind not in ("ep", "edp") or problem.model.moe is not None)]
    if groups:
        lines.append("groups: " + "  ".join(groups))
    lines.append("")
    lines += _rows("metrics", [
        ("step time", f"{met['step_time_s']:.3f} s"),
        ("tokens/s", f"{met['tokens_per_s']:,.0f}  ({met['tokens_per_s_per_gpu']:,.0f} per GPU)"),
        ("MFU", f"{met['mfu'] * 100:.1f} %"),
        ("model TFLOP/s per GPU", f"{met['tflops_per_gpu']:.1f}"),
        ("peak memory per GPU", f"{met['peak_memory_gib']:.1f} GiB of {met['usable_memory_gib']:.1f} GiB usable"
                                + ("" if met["fits"] else "  ** DOES NOT FIT **")),
        ("micro-batches per step", str(met["microbatches"])),
    ])
    if "cost_per_hour_usd" in met:
        cost_rows = [("system capex", f"${met['capex_usd']:,.0f}"), ("power", f"{met['power_w'] / 1e3:,.1f} kW"),
                     ("cost per hour", f"${met['cost_per_hour_usd']:,.2f}"),
                     ("$ per million tokens", f"${met['usd_per_million_tokens']:,.4f}")]
        if "run_hours" in met:
            cost_rows += [("run", f"{met['run_hours']:,.1f} h ({met['run_hours'] / 24:,.1f} days)"),
                          ("run cost", f"${met['run_cost_usd']:,.0f}")]
        if "chiplets" in met:
            cost_rows.insert(0, ("chiplets per device", str(met["chiplets"])))
        lines.append("")
        lines += _rows("cost", cost_rows)
    step = met["step_time_s"]
    lines.append("")
    lines += _rows(f"time (slowest stage {bd['critical_stage']}, whole step)",
                   [(k, f"{v:9.3f} s  {100 * v / step:5.1f} %") for k, v in bd["time_s"].items() if abs(v) > 1e-9])
    lines.append("")
    lines += _rows(f"memory per GPU (stage {bd['peak_memory_stage']})",
                   [(k, f"{v:7.2f} GiB") for k, v in bd["memory_gib"].items()])
    return "\n".join(lines)


def plan_json(problem, plan) -> dict:
    return {"mapping": mapping_dict(plan.mapping, plan.num_gpus), "metrics": plan.evaluation.metrics,
            "breakdown": plan.evaluation.breakdown}


def plan_result_json(problem, result, top: int) -> dict:
    """solve/enumerate --json: status, the best plan, its model metrics, objective, bound and gap."""
    out = {"status": result.status, "objective_name": result.objective, "objective": result.objective_value,
           "bound": result.bound, "gap": result.gap, "solve_time_s": result.solve_time_s,
           "deterministic_time": result.deterministic_time, "workers": result.workers, "space_size": result.space_size}
    if result.points_evaluated is not None:
        out["points_evaluated"] = result.points_evaluated
    if result.plans:
        out.update({"mapping": plan_json(problem, result.plans[0])["mapping"], "metrics": result.plans[0].evaluation.metrics,
                    "breakdown": result.plans[0].evaluation.breakdown})
    else:
        out.update({"mapping": None, "metrics": None})
    if top > 1:
        out["plans"] = [plan_json(problem, p) for p in result.plans]
    if result.message:
        out["message"] = result.message
    return out


def plan_result_head(result, points: str = "mappings") -> str:
    """The first line of a solve or enumeration report: status, objective, bound, gap, time, space."""
    return (f"status {result.status}  objective {result.objective} = "
            + (f"{result.objective_value:,.4g}" if result.objective_value is not None else "n/a")
            + (f"  bound {result.bound:,.4g}  gap {100 * result.gap:.3f} %" if result.bound is not None and result.gap is not None else "")
            + f"  time {result.solve_time_s:.2f} s  space {result.space_size:,} {points}"
            + (f"  evaluated {result.points_evaluated:,}" if result.points_evaluated is not None else ""))


def text_table(head: list, rows: list, markdown: bool) -> str:
    """Rows of strings under a header, as a Markdown table or aligned plain text."""
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*row) for row in rows])


def plan_result_table(problem, result) -> str:
    """The readable report of a solve or an enumeration."""
    head = plan_result_head(result)
    if not result.plans:
        return head + ("\n" + result.message if result.message else "")
    best = result.plans[0]
    lines = [head, "", evaluation_table(problem, best.mapping, best.evaluation, num_gpus=best.num_gpus)]
    if len(result.plans) > 1:
        lines += ["", f"top {len(result.plans)}:",
                  "   #  tp  pp   dp  cp  mb  vpp  sp     recompute  zero  first/last  step s    tokens/s    memory GiB  placement"]
        for i, p in enumerate(result.plans, 1):
            m, met = p.mapping, p.evaluation.metrics
            lines.append(f"  {i:>2}  {m.tp:>2}  {m.pp:>2}  {m.dp:>3}  {m.cp:>2}  {m.micro_batch:>2}  {m.vpp:>3}  {str(m.sp).lower():<5}  "
                         f"{m.recompute:<9}  {m.zero:>4}  {m.first_stage_layers:>4}/{m.last_stage_layers:<4}  {met['step_time_s']:7.3f}  "
                         f"{met['tokens_per_s']:>10,.0f}  {met['peak_memory_gib']:6.1f}      {m.placement}")
    return "\n".join(lines)
