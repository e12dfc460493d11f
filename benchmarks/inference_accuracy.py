"""Measured vs predicted serving figures for every published inference run in the validation set.

    python benchmarks/inference_accuracy.py [--json] [--markdown] [--oos-variant steady|largest-batch|trtllm-bench]

Runs: problems/validation/inference_runs.yaml (copied from ../shared/reference/calibration_runs.yaml
with sources): TensorRT-LLM 0.6.1 static-batch throughput (output tokens/s per GPU) on H100 FP8 and
A100 FP16, TensorRT-LLM 0.5 first-token latency at batch 1. One number of the inference model is fitted
to the throughput runs: the serving runtime's per-pass overhead (the device files' serving_step_overhead_s,
benchmarks/calibrate.py --step-overhead). The device efficiencies are microbenchmarks (problems/measurements/). The first-token
latencies were measured on TensorRT-LLM 0.5 and are evaluated with its engine profile
(problems/engines/trtllm-0.5.yaml: one weight-streaming efficiency per device), which was fitted on
that release's own throughput tables (problems/validation/engine_runs.yaml, printed in their own
section as a calibration set) and never on these latencies.

Out of sample, reported apart and never fitted: problems/validation/inference_runs_oos.yaml, newer
TensorRT-LLM max-throughput runs (trtllm-bench, in-flight batching; perf-overview.md) on H100/H200 in
FP8, where the engine chose the batch: each is the planner's best plan with the batch free, and TensorRT-LLM's own
DeepSeek-R1 max-throughput runs on 8 B200 and 8 H200 (its best-practice blog, the engine sizes stated: the planner's
best batch within them); and
problems/validation/latency_runs_oos.yaml, NVIDIA NIM 1.8.0 single-request TTFT and time per output
token (Llama 3.3 70B on 2 H100, FP8); and MLPerf Inference's Offline runs (problems/validation/mlperf_inference_runs.yaml:
NVIDIA's Llama 2 70B, Mixtral 8x7B, Llama 3.1 405B and 8B and DeepSeek-R1 results on Hopper and Blackwell, at the
datasets' mean lengths and their spread (workload.output_len_dispersion, prompt_output_comoment), the batch the
planner's best up to the run's gpu_batch_size; five v5.0 Blackwell runs fit the
devices' serving GEMM share, benchmarks/calibrate.py --serving-gemm, the rest out of sample). Each max-throughput run of
inference_runs_oos.yaml serves the set of requests the page lists
(``workload.requests``); ``--oos-variant steady`` drops it (the steady state), ``--oos-variant largest-batch``
keeps it but evaluates the largest batch that fits (at most TensorRT-LLM's max_batch_size 2,048) instead of
the planner's best, ``--oos-variant trtllm-bench`` gives each run the max_batch_size and max_num_tokens trtllm-bench's
own sizing rule would build its engine with (``trtllm_bench_settings``): checks of the protocol, printed, never adopted.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys

from parasol.model import params
from parasol.model.precision import stored_bytes_per_element
from parasol.model.serving_step import max_batch
from parasol.model.specs import PoolMapping
from parasol.solver.inference_validation import (
    InferenceRunResult,
    evaluate_all,
    evaluate_mlperf,
    evaluate_oos,
    evaluate_planned_run,
    evaluate_run,
    load_engine_runs,
    load_latency_oos_runs,
    load_mlperf_runs,
    load_oos_runs,
    problem_from_entry,
)
from parasol.solver.report import text_table

LATENCY_LABELS = {"ttft_s": "TTFT", "tpot_s": "TPOT"}
METRIC_NAMES = {
    "ttft_s": "first-token latency",
    "tpot_s": "time per output token",
    "tokens_per_s_per_gpu": "throughput (output tokens/s per GPU)",
}


def summarise(results) -> dict:
    by_family, by_metric = {}, {}
    for r in results:
        by_family.setdefault(r.family, []).append(abs(r.error))
        by_metric.setdefault(r.metric, []).append(abs(r.error))
    stats = lambda v: {"runs": len(v), "mean_abs_error": statistics.fmean(v), "max_abs_error": max(v)}  # noqa: E731
    return {"by_metric": {k: stats(v) for k, v in by_metric.items()}, "by_family": {k: stats(v) for k, v in by_family.items()}}


def table(results, markdown: bool) -> str:
    head = ["run", "GPUs", "tp", "batch", "in/out", "metric", "measured", "predicted", "error", "memory GiB"]
    rows = []
    for r in results:
        wl, met = r.problem.workload, r.evaluation.metrics
        unit = (lambda x: f"{x * 1e3:.1f} ms") if r.metric in LATENCY_LABELS else (lambda x: f"{x:,.0f}")
        rows.append(
            [
                r.run_id,
                str(met["num_gpus"]),
                str(r.problem.mapping["tp"][0]),
                str(met["batch"]),
                f"{wl.input_len}/{wl.output_len}",
                LATENCY_LABELS.get(r.metric, "tok/s/GPU"),
                unit(r.measured),
                unit(r.predicted),
                f"{100 * r.error:+.1f} %",
                f"{met['peak_memory_gib']:.1f}" + ("" if met["fits"] else " (does not fit)"),
            ]
        )
    return text_table(head, rows, markdown)


def report(results) -> str:
    summary = summarise(results)
    lines = []
    for name, s in summary["by_metric"].items():
        what = METRIC_NAMES[name]
        lines.append(
            f"{s['runs']} inference runs, {what}: mean |error| {100 * s['mean_abs_error']:.1f} %, max {100 * s['max_abs_error']:.1f} %"
        )
    for name, s in summary["by_family"].items():
        lines.append(
            f"  {name:<54} {s['runs']:>3} runs  mean {100 * s['mean_abs_error']:5.1f} %  max {100 * s['max_abs_error']:5.1f} %"
        )
    unfit = [r.run_id for r in results if not r.evaluation.metrics["fits"]]
    if unfit:
        lines.append(f"published runs the model says do not fit in memory ({len(unfit)}): {', '.join(unfit)}")
    return "\n".join(lines)


OOS_BATCH = {
    None: "the planner's best",
    "steady": "the planner's best, steady state",
    "largest-batch": "the largest that fits",
    "trtllm-bench": "the planner's best within trtllm-bench's engine sizes",
}


def oos_report(results, variant: str | None = None) -> str:
    """The out-of-sample family against published max-throughput runs, at the batch ``variant`` says
    (``OOS_BATCH``; the planner's best by default)."""
    s = summarise(results)["by_metric"]["tokens_per_s_per_gpu"]
    over = sum(r.error > 0 for r in results)
    lines = [
        f"{s['runs']} out-of-sample max-throughput runs (batch = {OOS_BATCH[variant]}; never fitted): mean |error| "
        f"{100 * s['mean_abs_error']:.1f} %, max {100 * s['max_abs_error']:.1f} %, {over} of {len(results)} predicted faster"
    ]
    families = summarise(results)["by_family"]
    width = max(map(len, families))
    for name, f in families.items():
        lines.append(
            f"  {name:<{width}} {f['runs']:>3} runs  mean {100 * f['mean_abs_error']:5.1f} %  max {100 * f['max_abs_error']:5.1f} %"
        )
    return "\n".join(lines)


def mlperf_report(results) -> str:
    """MLPerf Inference Offline runs by family, with how many of each the model puts faster than measured."""
    lines = []
    for name, f in summarise(results)["by_family"].items():
        own = [r for r in results if r.family == name]
        over = sum(r.error > 0 for r in own)
        mean_signed = statistics.fmean(r.error for r in own)
        lines.append(
            f"  {name:<78} {f['runs']:>2} runs  mean |error| {100 * f['mean_abs_error']:5.1f} %  mean {100 * mean_signed:+5.1f} %  "
            f"max {100 * f['max_abs_error']:5.1f} %  {over} of {len(own)} predicted faster"
        )
    return "\n".join(lines)


def as_json(results) -> dict:
    return {
        "summary": summarise(results),
        "runs": [
            {
                "id": r.run_id,
                "family": r.family,
                "metric": r.metric,
                "measured": r.measured,
                "predicted": r.predicted,
                "error": r.error,
                "peak_memory_gib": r.evaluation.metrics["peak_memory_gib"],
                "fits": r.evaluation.metrics["fits"],
                **({"makespan_s": r.evaluation.metrics["makespan_s"]} if "makespan_s" in r.evaluation.metrics else {}),
            }
            for r in results
        ],
    }


def parser(doc: str) -> argparse.ArgumentParser:
    """--json and --markdown, the options of the accuracy scripts."""
    out = argparse.ArgumentParser(description=doc.splitlines()[0])
    out.add_argument("--json", action="store_true")
    out.add_argument("--markdown", action="store_true")
    out.add_argument("--write-docs", action="store_true", help="rewrite the generated tables of docs/ (accuracy.py)")
    return out


def arguments(doc: str):
    return parser(doc).parse_args()


TRTLLM_MAX_BATCH = 2048  # TensorRT-LLM's default max_batch_size (the LLM API's BuildConfig)


def steady_state_run(entry: dict) -> InferenceRunResult:
    """An out-of-sample run evaluated in the steady state: its set of requests dropped."""
    entry = copy.deepcopy(entry)
    entry["workload"].pop("requests", None)
    return evaluate_planned_run(entry)


def largest_batch_run(entry: dict) -> InferenceRunResult:
    """An out-of-sample run at the largest batch that fits its published pool (TensorRT-LLM admits requests
    up to its KV capacity and max_batch_size), not at the planner's best batch. A run that states its engine's
    max_batch_size (the DeepSeek-R1 blog runs) keeps the planner's best batch within it."""
    if "max_batch_size" in entry["workload"]:
        return evaluate_planned_run(entry)
    problem = problem_from_entry(entry)
    pool = PoolMapping(**{k: problem.mapping.get(k, (1,))[0] for k in ("tp", "pp", "ep", "dp")})
    entry = copy.deepcopy(entry)
    entry["mapping"]["batch"] = min(TRTLLM_MAX_BATCH, max_batch(problem.model, problem.system(), problem.workload, pool))
    return evaluate_run(entry)


# trtllm-bench's engine sizing (NVIDIA/TensorRT-LLM tensorrt_llm/bench/build/tuning.py, calc_engine_setting and
# finetune_setting): the KV requests its own estimate holds, the batch and token budget rounded up from them
TRTLLM_BENCH_KV_SHARE = 0.90  # trtllm-bench throughput's --kv_cache_free_gpu_mem_fraction default
TRTLLM_BENCH_BATCH_CAP, TRTLLM_BENCH_TOKEN_CAP = 4096, 32768


def _round_up(value: float, step: int) -> int:
    return step * -(-value // step)


def trtllm_bench_settings(entry: dict) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) trtllm-bench builds a run's engine with: the requests of input + output tokens
    its KV estimate holds (the device memory of tp·pp GPUs less the weights at the checkpoint's bytes per parameter,
    at TRTLLM_BENCH_KV_SHARE; a token's K and V on max(tp, kv_heads) heads), at most 4,096, per pipeline stage; the
    batch rounded up to 32, 128 or 256 (at least 64) and the budget batch·(1 + input/output), at most 32,768, to 256,
    512 or 1,024 (at least 2,048)."""
    problem = problem_from_entry(entry)
    model, wl, device = problem.model, problem.workload, problem.system().device
    tp, pp = (problem.mapping.get(k, (1,))[0] for k in ("tp", "pp"))
    weights = params.total_params(model) * stored_bytes_per_element(wl.weight_precision)
    per_token = 2 * model.layers * max(tp, model.kv_heads) * model.head_dim * stored_bytes_per_element(wl.kv_precision)
    requests = (device.hbm_bytes * tp * pp - weights) * TRTLLM_BENCH_KV_SHARE / (per_token * (wl.input_len + wl.output_len))
    return trtllm_bench_sizes(requests, wl.input_len, wl.output_len, pp)


def trtllm_bench_sizes(requests: float, input_len: int, output_len: int, pp: int = 1) -> tuple[int, int]:
    """(max_batch_size, max_num_tokens) of trtllm-bench's ``finetune_setting`` for ``requests`` its KV estimate holds."""
    batch = min(requests, TRTLLM_BENCH_BATCH_CAP) / pp
    tokens = min(batch * (1 + input_len / output_len), TRTLLM_BENCH_TOKEN_CAP)
    step = 32 if batch < 256 else 128 if batch < 1024 else 256
    budget = max(2048, _round_up(tokens, 256)) if tokens < 4096 else _round_up(tokens, 512 if tokens < 8192 else 1024)
    return int(max(64, _round_up(batch, step)) if batch < 256 else _round_up(batch, step)), int(budget)


def trtllm_bench_run(entry: dict) -> InferenceRunResult:
    """An out-of-sample run with the max_batch_size and max_num_tokens trtllm-bench would build its engine with
    (``trtllm_bench_settings``; the page does not say them), at the planner's best batch within them. A run that
    states its engine's sizes (the DeepSeek-R1 blog runs) keeps them."""
    if "max_batch_size" in entry["workload"]:
        return evaluate_planned_run(entry)
    entry = copy.deepcopy(entry)
    batch, budget = trtllm_bench_settings(entry)
    entry["workload"].update(max_batch_size=batch * entry["mapping"].get("pp", 1), max_prefill_tokens=budget)
    return evaluate_planned_run(entry)


def batch_sweep(run_id: str) -> int:
    """An MLPerf Inference run's predicted tokens/s per GPU and its step's parts at fixed batches from 256 up to its
    gpu_batch_size (every other setting as the run's): whether the batch the planner chose matters, and where the
    step's time goes; 2 when no MLPerf run has that id."""
    entries = [e for e in load_mlperf_runs() if e["id"] == run_id]
    if not entries:
        print(f"inference_accuracy.py: no run {run_id} in problems/validation/mlperf_inference_runs.yaml", file=sys.stderr)
        return 2
    (entry,) = entries
    cap = entry["workload"]["max_batch_size"]
    for batch in (b for b in (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144) if b <= cap):
        fixed = copy.deepcopy(entry)
        fixed["mapping"]["batch"] = batch
        result = evaluate_run(fixed)
        met = result.evaluation.metrics
        verdict = "" if met["fits"] else "  (does not fit)"
        parts = ", ".join(f"{k} {1e3 * v:.1f}" for k, v in result.evaluation.breakdown["tpot_s"].items() if v)
        print(
            f"batch {batch:>5}: {result.predicted:9,.0f} tok/s per GPU ({100 * result.error:+.1f} %), TPOT {1e3 * met['tpot_s']:.1f} ms"
            f"{verdict}\n    ms: {parts}"
        )
    return 0


def main() -> int:
    cli = parser(__doc__)
    cli.add_argument(
        "--oos-variant", choices=("steady", "largest-batch", "trtllm-bench"), help="evaluate the out-of-sample runs so instead"
    )
    cli.add_argument("--batch-sweep", metavar="RUN_ID", help="an MLPerf Inference run at fixed batches instead")
    args = cli.parse_args()
    if args.batch_sweep:
        return batch_sweep(args.batch_sweep)
    variant = {"steady": steady_state_run, "largest-batch": largest_batch_run, "trtllm-bench": trtllm_bench_run}.get(
        args.oos_variant
    )
    oos = evaluate_oos() if variant is None else [variant(e) for e in load_oos_runs()]
    results, engine = evaluate_all(), evaluate_all(load_engine_runs())
    latency = evaluate_all(load_latency_oos_runs())
    mlperf = evaluate_mlperf()
    if args.json:
        print(
            json.dumps(
                {
                    **as_json(results),
                    "out_of_sample": as_json(oos),
                    "engine_calibration": as_json(engine),
                    "latency_out_of_sample": as_json(latency),
                    "mlperf": as_json(mlperf),
                },
                indent=2,
            )
        )
        return 0
    print(table(results, args.markdown))
    print()
    print(report(results))
    print()
    print(
        "Engine-profile calibration set (problems/validation/engine_runs.yaml: TensorRT-LLM 0.5.0 throughput; "
        "problems/engines/trtllm-0.5.yaml was fitted on these, benchmarks/calibrate.py --engine trtllm-0.5)"
    )
    print(table(engine, args.markdown))
    print()
    print(report(engine))
    print()
    print(f"Out of sample (problems/validation/inference_runs_oos.yaml; batch = {OOS_BATCH[args.oos_variant]})")
    print(table(oos, args.markdown))
    print()
    print(oos_report(oos, args.oos_variant))
    print()
    print("Out of sample, single request (problems/validation/latency_runs_oos.yaml; TTFT measured at the client)")
    print(table(latency, args.markdown))
    print()
    print(report(latency))
    print()
    print(
        "MLPerf Inference Offline (problems/validation/mlperf_inference_runs.yaml; batch = the planner's best up to the "
        "run's gpu_batch_size; five v5.0 Blackwell runs fit the devices' serving GEMM share, the rest out of sample)"
    )
    print(table(mlperf, args.markdown))
    print()
    print(mlperf_report(mlperf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
