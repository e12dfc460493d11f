"""Readable reports and JSON documents of training evaluations and plans."""

from __future__ import annotations

from parasol.model.choices import MoeDispatcher, Recompute
from parasol.model.evaluation import Evaluation
from parasol.model.placement import describe, group_layouts
from parasol.model.training import mapping_cp_hierarchy

from . import report
from .accuracy_bands import accuracy_lines
from .report import rows_block, text_table


def evaluation_json(problem, mapping, evaluation: Evaluation) -> dict:
    """evaluate --json: metrics, breakdown, mapping and per-stage detail."""
    stages = [{k: v for k, v in s.items() if k != "state"} | {"state_bytes": s["state"]} for s in evaluation.stages]
    return {**report.evaluation_json(problem, mapping, evaluation), "stages": stages}


def evaluation_table(problem, mapping, evaluation: Evaluation, num_gpus: int | None = None) -> str:
    """The readable report of one evaluated mapping."""
    m, met, bd = mapping, evaluation.metrics, evaluation.breakdown
    system = problem.system(met["num_gpus"])
    lines = [
        f"{problem.model.name} on {met['num_gpus']} x {report.system_label(problem.system_name)} "
        f"({problem.workload.precision}, seq {problem.workload.seq_len}, global batch {problem.workload.global_batch})"
    ]
    lines.append(
        f"mapping: tp {m.tp}  pp {m.pp}  dp {m.dp}  cp {m.cp}  ep {m.ep}  micro_batch {m.micro_batch}  vpp {m.vpp}  "
        f"sp {str(m.sp).lower()}  recompute {m.recompute}{modules_chosen(m)}  zero {m.zero}  placement {m.placement}  "
        f"{report.pipeline_unit(m)} layers {[s['layers'] for s in evaluation.stages] if m.pp <= 8 else 'first {}, last {}'.format(evaluation.stages[0]['layers'], evaluation.stages[-1]['layers'])}"
        + ("  uneven chunks" if m.uneven_chunks and m.vpp > 1 else "")
        + (f"  offload_layers {m.offload_layers}" if m.offload_layers else "")
        + (f"  cp_comm {m.cp_comm}{hierarchy(m, system)}" if m.cp > 1 else "")
        + (f"  moe_dispatcher {m.chosen_workload(problem.workload).moe_dispatcher}" if problem.model.moe is not None else "")
        + ("  moe_a2a_overlap" if problem.model.moe is not None and m.a2a_overlapped(problem.workload) else "")
        + (f"  etp {m.etp}" if m.etp > 1 else "")
        + ("  tp_comm_overlap" if m.tp_comm_overlap else "")
        + (f"  optimizer_offload {m.optimizer_offload:g}" if m.optimizer_offload else "")
        + ("  weight_offload" if m.weight_offload else "")
        + (f"  module_offload {'/'.join(problem.workload.offload_modules)}" if m.module_offload else "")
        + ("  dualpipe (each rank: its stage and the mirrored one)" if m.dualpipe else "")
    )
    groups = [
        f"{kind} {describe(where, system)}"
        for kind, where in group_layouts(system, m).items()
        if where.n > 1 and (kind not in ("ep", "edp", "etp") or problem.model.moe is not None)
    ]
    if groups:
        lines.append("groups: " + "  ".join(groups))
    lines.append("")
    lines += rows_block(
        "metrics",
        [
            ("step time", f"{met['step_time_s']:.3f} s"),
            ("tokens/s", f"{met['tokens_per_s']:,.0f}  ({met['tokens_per_s_per_gpu']:,.0f} per GPU)"),
            ("MFU", f"{met['mfu'] * 100:.1f} %"),
            ("model TFLOP/s per GPU", f"{met['tflops_per_gpu']:.1f}"),
            (
                "peak memory per GPU",
                f"{met['peak_memory_gib']:.1f} GiB of {met['usable_memory_gib']:.1f} GiB usable"
                + ("" if met["device_fits"] else "  ** DOES NOT FIT **"),
            ),
        ]
        + (
            [
                (
                    "device memory per GPU",
                    f"{met['device_memory_gib']:.1f} GiB in use (with the allocator's cache and the runtime's reserve)",
                )
            ]
            if "device_memory_gib" in met
            else []
        )
        + [("micro-batches per step", str(met["microbatches"]))]
        + (
            [("host memory per GPU", f"{met['host_memory_gib']:.1f} GiB{host_capacity(met)} ({host_contents(m)})")]
            if "host_memory_gib" in met
            else []
        ),
    )
    if "cost_per_hour_usd" in met:
        cost_rows = [
            ("system capex", f"${met['capex_usd']:,.0f}"),
            ("power", f"{met['power_w'] / 1e3:,.1f} kW"),
            ("cost per hour", f"${met['cost_per_hour_usd']:,.2f}"),
            ("$ per million tokens", f"${met['usd_per_million_tokens']:,.4f}"),
        ]
        if "run_hours" in met:
            cost_rows += [
                ("goodput", f"{100 * met['goodput']:.1f} % of wall-clock time trains"),
                ("run", f"{met['run_hours']:,.1f} h ({met['run_hours'] / 24:,.1f} days)"),
                ("run cost", f"${met['run_cost_usd']:,.0f}"),
            ]
        if "chiplets" in met:
            cost_rows.insert(0, ("chiplets per device", str(met["chiplets"])))
        lines.append("")
        lines += rows_block("cost", cost_rows)
    step = met["step_time_s"]
    lines.append("")
    lines += rows_block(
        f"time (slowest {report.pipeline_unit(m)} {bd['critical_stage']}, whole step)",
        [(k, f"{v:9.3f} s  {100 * v / step:5.1f} %") for k, v in bd["time_s"].items() if abs(v) > 1e-9],
    )
    lines.append("")
    lines += rows_block(
        f"memory per GPU ({report.pipeline_unit(m)} {bd['peak_memory_stage']})",
        [(k, f"{v:7.2f} GiB") for k, v in bd["memory_gib"].items()],
    )
    if m.pp > 1:
        lines += ["", *stage_lines(m, evaluation, problem.model.moe is not None)]
    return "\n".join([*lines, "", *accuracy_lines(problem, chiplets=met.get("chiplets"))])


STAGE_TIMES_S = ("time_fwd_s", "time_bwd_s", "sends_s")  # what a stage's time per micro-batch is made of


def stage_rows(m, evaluation: Evaluation, moe: bool) -> tuple[list[str], list[list[str]]]:
    """Each pipeline stage (rank under DualPipe) per micro-batch: its layers, forward, backward and send
    milliseconds (the embedding, the output layer and loss, and an MTP module within them, also shown apart), and
    its device memory; consecutive stages alike in all but memory share a row, their memory a range. The row of the
    slowest stage (``critical_stage``), which sets the pipeline's pace, is marked "*". The header and the rows, as
    strings, for the text report and the HTML page."""
    unit, critical = report.pipeline_unit(m), evaluation.breakdown["critical_stage"]
    head = [
        f"{unit}s",
        "layers",
        *(["MoE layers"] if moe else []),
        "forward ms",
        "backward ms",
        "sends ms",
        "of which head ms",
        "total ms",
        "memory GiB",
    ]

    def shape(s: dict) -> tuple:
        return (s["layers"], s["moe_layers"], *(round(s[k] * 1e3, 3) for k in (*STAGE_TIMES_S, "extra_s", "mtp_s")))

    runs: list[list[dict]] = []
    for s in evaluation.stages:
        if runs and shape(runs[-1][-1]) == shape(s):
            runs[-1].append(s)
        else:
            runs.append([s])
    rows = []
    for run in runs:
        first, last = run[0], run[-1]
        memory = sorted({round(s["memory_bytes"] / 2**30, 1) for s in run})
        rows.append(
            [
                ("* " if first["stage"] <= critical <= last["stage"] else "  ")
                + (f"{first['stage']}-{last['stage']}" if len(run) > 1 else str(first["stage"])),
                str(first["layers"]),
                *([str(first["moe_layers"])] if moe else []),
                *(f"{first[k] * 1e3:.2f}" for k in STAGE_TIMES_S),
                f"{(first['extra_s'] + first['mtp_s']) * 1e3:.2f}",
                f"{first['time_per_microbatch_s'] * 1e3:.2f}",
                f"{memory[-1]:.1f}" + (f"-{memory[0]:.1f}" if len(memory) > 1 else ""),
            ]
        )
    return head, rows


def stage_lines(m, evaluation: Evaluation, moe: bool) -> list[str]:
    """The text report's table of ``stage_rows``, under its title."""
    head, rows = stage_rows(m, evaluation, moe)
    unit = report.pipeline_unit(m)
    title = f"{unit}s, per micro-batch (* the slowest, which sets the pace; head: the embedding, output layer, loss and MTP)"
    return [title, *("  " + line.rstrip() for line in text_table(head, rows, markdown=False).splitlines())]


def host_capacity(met: dict) -> str:
    """' of X GiB' where the system file gives its host DRAM (``usable_host_memory_gib``), marked when the plan
    overfills it; '' otherwise."""
    if "usable_host_memory_gib" not in met:
        return ""
    return f" of {met['usable_host_memory_gib']:.1f} GiB" + ("" if met["host_fits"] else "  ** DOES NOT FIT **")


def host_contents(m) -> str:
    """What a mapping keeps in host memory, in words: offloaded states (optimizer or weight shards) and/or
    activations (whole layers' or the listed modules' inputs)."""
    kinds = [("offloaded states", m.optimizer_offload or m.weight_offload), ("activations", m.module_offload or m.offload_layers)]
    return " and ".join(k for k, on in kinds if on)


def plans_table(plans) -> list[str]:
    """The top-K lines of a solve or an enumeration."""
    lines = ["   #  tp  pp   dp  cp  mb  vpp  sp     recompute  zero  first/last  step s    tokens/s    memory GiB  placement"]
    for i, p in enumerate(plans, 1):
        m, met = p.mapping, p.evaluation.metrics
        lines.append(
            f"  {i:>2}  {m.tp:>2}  {m.pp:>2}  {m.dp:>3}  {m.cp:>2}  {m.micro_batch:>2}  {m.vpp:>3}  {str(m.sp).lower():<5}  "
            f"{m.recompute:<9}  {m.zero:>4}  {m.first_stage_layers:>4}/{m.last_stage_layers:<4}  {met['step_time_s']:7.3f}  "
            f"{met['tokens_per_s']:>10,.0f}  {met['peak_memory_gib']:6.1f}      {m.placement}{plan_choices(m)}"
        )
    return lines


def hierarchy(m, system) -> str:
    """`` (a2a A x ring R)``: hierarchical context parallelism's two levels (``training.mapping_cp_hierarchy``), where
    the mapping exchanges a2a+p2p; '' otherwise."""
    levels = mapping_cp_hierarchy(system, m)
    return "" if levels is None else f" (a2a {levels[0]} x ring {levels[1]})"


def modules_chosen(m) -> str:
    """`` (a/b)``: the modules selective recomputation redoes, where the mapping chose them (mapping.recompute_modules)."""
    return f" ({'/'.join(m.recompute_modules)})" if m.recompute == Recompute.SELECTIVE and m.recompute_modules else ""


def plan_choices(m) -> str:
    """The choices beyond Megatron's defaults a mapping makes, each after a comma (uneven chunks, offloaded
    layers, all-to-all CP, expert tensor parallelism, DeepEP's dispatch, the expert all-to-all's overlap, TP communication
    overlap, offloading, DualPipe)."""
    return (
        (f", recompute{modules_chosen(m)}" if modules_chosen(m) else "")
        + (", uneven" if m.uneven_chunks and m.vpp > 1 else "")
        + (f", offload {m.offload_layers}" if m.offload_layers else "")
        + (f", cp {m.cp_comm}" if m.cp > 1 and m.cp_comm != "ring" else "")
        + (f", etp {m.etp}" if m.etp > 1 else "")
        + (", deepep" if m.moe_dispatcher == MoeDispatcher.DEEPEP else "")
        + (", a2a overlap" if m.moe_a2a_overlap and m.ep > 1 else "")
        + (", tp overlap" if m.tp_comm_overlap else "")
        + (f", optimizer offload {m.optimizer_offload:g}" if m.optimizer_offload else "")
        + (", weight offload" if m.weight_offload else "")
        + (", module offload" if m.module_offload else "")
        + (", dualpipe" if m.dualpipe else "")
    )


def plan_label(plan) -> str:
    """A plan in one short line: GPUs (and chiplets), tp/pp/dp/cp/ep, micro-batch, vpp, and the
    choices beyond Megatron's defaults (``plan_choices``)."""
    m, met = plan.mapping, plan.evaluation.metrics
    chips = f" x{met['chiplets']}c" if "chiplets" in met else ""
    return f"{plan.num_gpus}{chips} GPUs  {m.tp}/{m.pp}/{m.dp}/{m.cp}/{m.ep}, mb {m.micro_batch}, vpp {m.vpp}{plan_choices(m)}"
