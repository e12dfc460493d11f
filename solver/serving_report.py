"""Readable tables and JSON documents for serving evaluations, plans and Pareto fronts."""

from __future__ import annotations

from parasol.model.inference import budget_micro_batch

from . import report
from .accuracy_bands import accuracy_lines
from .report import rows_block


def evaluation_json(problem, mapping, evaluation) -> dict:
    """evaluate --json of an inference problem: metrics, breakdown, mapping."""
    return report.evaluation_json(problem, mapping, evaluation)


def mapping_line(mapping) -> str:
    """tp 2  pp 1  ep 1  dp 4  batch 64, or both pools of a disaggregated plan."""

    def pool(p):
        return f"tp {p.tp}  pp {p.pp}  ep {p.ep}  dp {p.dp}"

    if mapping.prefill is None:
        return f"{pool(mapping.decode)}  batch {mapping.batch} per replica"
    return f"prefill {pool(mapping.prefill)} | decode {pool(mapping.decode)}  batch {mapping.batch} per decode replica"


def _slo(value: float, limit: float | None) -> str:
    return "" if limit is None else f"  (SLO {limit:g} s: {'met' if value <= limit * (1 + 1e-12) else 'MISSED'})"


def evaluation_table(problem, mapping, evaluation) -> str:
    """The readable report of one evaluated serving plan."""
    wl, met, bd = problem.workload, evaluation.metrics, evaluation.breakdown
    lines = [
        f"{problem.model.name} on {met['num_gpus']} x {report.system_label(problem.system_name)} ({wl.serving} serving; {wl.precision} GEMMs, "
        f"{wl.weight_precision} weights, {wl.kv_precision} KV cache; input {wl.input_len}, output {wl.output_len})",
        f"mapping: {mapping_line(mapping)}",
        "",
    ]
    lines += rows_block(
        "metrics",
        [
            ("time to first token", f"{met['ttft_s']:.4f} s{_slo(met['ttft_s'], wl.ttft_slo_s)}"),
            ("time per output token", f"{met['tpot_s'] * 1e3:.2f} ms{_slo(met['tpot_s'], wl.tpot_slo_s)}"),
            ("end-to-end latency", f"{met['e2e_latency_s']:.3f} s"),
            (
                "output tokens/s",
                f"{met['tokens_per_s']:,.0f}  ({met['tokens_per_s_per_gpu']:,.1f} per GPU, "
                f"{met['tokens_per_s_per_user']:,.1f} per user)",
            ),
            ("concurrent requests", f"{met['concurrent_requests']:,}"),
            *(
                [
                    (
                        "time to serve the set",
                        f"{met['makespan_s']:,.1f} s  ({wl.requests:,} requests queued at once"
                        + (f"; the last {met['drain_s']:,.1f} s drain it)" if "drain_s" in met else ")"),
                    )
                ]
                if "makespan_s" in met
                else []
            ),
            (
                "requests/s" if wl.requests is not None else "requests/s sustained",
                f"{met['requests_per_s']:,.2f}"
                + (
                    ""
                    if wl.request_rate is None
                    else f"  (load {wl.request_rate:g}/s: {'met' if met['sustains_rate'] else 'MISSED'})"
                ),
            ),
            *([("cost per hour", f"${met['cost_per_hour_usd']:,.2f}")] if "cost_per_hour_usd" in met else []),
            (
                "peak memory per GPU",
                f"{met['peak_memory_gib']:.1f} GiB of {met['usable_memory_gib']:.1f} GiB usable"
                + ("" if met["peak_memory_gib"] <= met["usable_memory_gib"] else "  ** DOES NOT FIT **")
                + f"  (largest batch that fits: {met['max_batch']:,})",
            ),
            *(
                [
                    (
                        "token budget",
                        f"{wl.max_prefill_tokens:,} tokens a pass (workload.max_prefill_tokens) hold "
                        f"{budget_micro_batch(wl):,} sequences a micro-batch"
                        + ("" if met["within_token_budget"] else "  ** ABOVE THE BUDGET **"),
                    )
                ]
                if "within_token_budget" in met
                else []
            ),
            *(
                [
                    (
                        "longest request",
                        f"{met['longest_sequence_gib']:.1f} GiB per GPU beside the weights (input_len + output_len_max)"
                        + ("" if met["longest_sequence_gib"] <= met["usable_memory_gib"] else "  ** DOES NOT FIT **"),
                    )
                ]
                if "longest_sequence_gib" in met
                else []
            ),
        ],
    )
    for key, title in (("tpot_s", "time per output token (one decode round)"), ("ttft_s", "time to first token")):
        total = sum(bd[key].values())
        lines += [""] + rows_block(
            title, [(k, f"{v * 1e3:9.3f} ms  {100 * v / total:5.1f} %") for k, v in bd[key].items() if abs(v) > 1e-12]
        )
    lines += [""] + rows_block(
        f"memory per GPU ({bd['peak_memory_pool']} pool, stage {bd['peak_memory_stage']})",
        [(k, f"{v:7.2f} GiB") for k, v in bd["memory_gib"].items()],
    )
    return "\n".join([*lines, "", *accuracy_lines(problem, chiplets=met.get("chiplets"))])


def plans_table(plans) -> list[str]:
    """The top-K lines of a solve or an enumeration."""
    lines = [
        "   #  mapping                                                   TTFT s   TPOT ms   tokens/s   tok/s/GPU  memory GiB"
    ]
    for i, p in enumerate(plans, 1):
        met = p.evaluation.metrics
        lines.append(
            f"  {i:>2}  {mapping_line(p.mapping):<56}  {met['ttft_s']:7.3f}  {met['tpot_s'] * 1e3:8.2f}  "
            f"{met['tokens_per_s']:>9,.0f}  {met['tokens_per_s_per_gpu']:>10,.1f}  {met['peak_memory_gib']:6.1f}"
        )
    return lines


def plan_label(plan) -> str:
    return mapping_line(plan.mapping)
