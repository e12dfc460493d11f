"""DeepSeek-V3/R1 serving kernels: the model's times against published kernel timings.

    python benchmarks/deepseek_kernels.py [--json]

Published kernel measurements (problems/measurements/published_kernels.yaml), each held against the model's time
for the same work, kernel by kernel:

- ``trtllm_gen_mla_decode_b200``: TensorRT-LLM's trtllm-gen MLA decode kernel on B200, FP8 KV cache, 128 heads, one
  query per sequence, 8,192 cached tokens, against ``inference.decode_attention_time_s`` on the B200 device file.
- ``trtllm_nvfp4_moe_b300``: TensorRT-LLM's NVFP4 fused MoE on B300, one EP 8 shard (32 of 256 experts), against
  ``inference.routed_experts_time_s`` (the experts' grouped GEMMs and the router) on the B300 device file at its
  serving GEMM share, for the tokens/8 each of the 8 GPUs routes.
- ``flashmla_decode_h800``: FlashMLA's dense MLA decode on H800, a published maximum (660 of 989 TFLOP/s).

Then the MLPerf Inference v5.1 DeepSeek-R1 Offline runs (problems/validation/mlperf_inference_runs.yaml) and
TensorRT-LLM's own DeepSeek-R1 max-throughput runs (its best-practice blog, problems/validation/inference_runs_oos.yaml)
are evaluated twice: as the model times them, and with those kernels timed by the measurements instead:

- MLA decode on every Blackwell device at the measured FLOP rate, the median of the batches of 64 and more
  [assumption for Blackwell Ultra: no measurement]; on Hopper at FlashMLA's maximum as a share of the 16-bit peak
  [an upper bound: "up to"; assumption: TensorRT-LLM's Hopper kernel as fast];
- the routed experts on every Blackwell device interpolated in the B300 table by the rows a shard computes [B200 and
  GB200 have two thirds of B300's FP4 peak: a lower bound for them].

The substitution is an analysis: the model keeps its own kernel times.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import statistics
import sys

import yaml

from parasol.model import compute, inference
from parasol.model.choices import Architecture
from parasol.solver.inference_validation import evaluate_mlperf, evaluate_oos, load_mlperf_runs, load_oos_runs
from parasol.solver.library import library_root
from parasol.solver.validation import problem_from_entry

DATA = yaml.safe_load((library_root() / "measurements" / "published_kernels.yaml").read_text())
MLA = DATA["trtllm_gen_mla_decode_b200"]
MOE = DATA["trtllm_nvfp4_moe_b300"]
FLASHMLA = DATA["flashmla_decode_h800"]
BLACKWELL = (Architecture.BLACKWELL, Architecture.BLACKWELL_ULTRA)
DSR1 = "MLPerf Inference DeepSeek-R1"


def _dsr1_entries() -> list[dict]:
    return [e for e in load_mlperf_runs() if e["family"].startswith(DSR1)]


def _problem_on(system: str):
    """The B200 DeepSeek-R1 run's serving problem (DeepSeek-V3's architecture, NVFP4, FP8 KV) on ``system``."""
    entry = dict(next(e for e in _dsr1_entries() if e["system"] == "dgx-b200"), system=system)
    return problem_from_entry(entry)


def mla_rows() -> list[dict]:
    problem = _problem_on("dgx-b200")
    model, device = inference.serving_model(problem.model), problem.system().device
    assert model.heads == MLA["heads"], "the measurement's heads are DeepSeek-V3's"
    out = []
    for row in MLA["rows"]:
        modelled = inference.decode_attention_time_s(model, device, MLA["kv_precision"], row["batch"], MLA["context"], 1)
        measured = row["ms"] * 1e-3
        flops = inference.mla_decode_flops(model, row["batch"], MLA["context"], 1)
        out.append(
            {
                "batch": row["batch"],
                "measured_ms": row["ms"],
                "model_ms": modelled * 1e3,
                "model_over_measured": modelled / measured,
                "measured_tflops": flops / measured / 1e12,
                "measured_share_of_bf16_peak": flops / measured / compute.attention_peak_flops(device),
            }
        )
    return out


def measured_mla_flops_per_s(rows: list[dict]) -> float:
    """The measured FLOP rate the substitution times MLA decode at: the median over the batches of 64 and more."""
    return statistics.median(r["measured_tflops"] for r in rows if r["batch"] >= 64) * 1e12


def moe_rows() -> list[dict]:
    problem = _problem_on("dgx-b300")
    model, device, workload = inference.serving_model(problem.model), problem.system().device, problem.workload
    ep = MOE["experts"] // MOE["local_experts"]
    assert model.moe.experts == MOE["experts"] and model.moe.top_k == MOE["top_k"]
    out = []
    for row in MOE["rows"]:
        modelled = inference.routed_experts_time_s(model, device, workload, row["tokens"] / ep, 1, ep)
        out.append(
            {
                "tokens": row["tokens"],
                "rows": compute.routed_rows_per_gpu(model, row["tokens"] / ep, 1),
                "measured_ms": row["ms"],
                "model_ms": modelled * 1e3,
                "model_over_measured": modelled / (row["ms"] * 1e-3),
            }
        )
    return out


def measured_moe_s(rows: float) -> float:
    """One MoE layer of a 32-expert shard computing ``rows`` routed rows, seconds: log-log interpolation in the B300
    table (tokens over the group = rows of the shard), held at its ends."""
    points = [(math.log(r["tokens"]), math.log(r["ms"] * 1e-3)) for r in MOE["rows"]]
    x = math.log(max(rows, 1.0))
    if x <= points[0][0]:
        return math.exp(points[0][1])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return math.exp(y0 + (x - x0) / (x1 - x0) * (y1 - y0))
    return math.exp(points[-1][1])


@contextlib.contextmanager
def measured_kernels(mla_flops_per_s: float):
    """Within: MLA decode attention on a Blackwell or Hopper device and the routed experts of a 256-expert model on a
    Blackwell device timed by the measurements (the rest of the model as it is); on Blackwell MLA decode at the FP8 KV
    cache's measured rate whatever the cache's precision [assumption for a 16-bit cache], on Hopper at FlashMLA's."""
    decode, routed = inference.decode_attention_time_s, inference.routed_experts_time_s

    def decode_attention(model, device, kv_precision, seqs, context_len, tp, reads=1.0):
        if model.mla is None or seqs <= 0 or device.architecture not in (*BLACKWELL, Architecture.HOPPER):
            return decode(model, device, kv_precision, seqs, context_len, tp, reads)
        # the model's own roofline, its attention share set to the measured rate
        peak = compute.attention_peak_flops(device)
        share = (
            FLASHMLA["tflops"] / FLASHMLA["peak_tflops"] if device.architecture == Architecture.HOPPER else mla_flops_per_s / peak
        )
        measured = dataclasses.replace(device, attention_efficiency=share)
        return decode(model, measured, kv_precision, seqs, context_len, tp, reads)

    def routed_experts(model, device, workload, tokens, tp, ep):
        if model.moe is None or model.moe.experts != MOE["experts"] or device.architecture not in BLACKWELL:
            return routed(model, device, workload, tokens, tp, ep)
        shards = (model.moe.experts / ep) / MOE["local_experts"]  # this GPU's experts in 32-expert shards
        rows = compute.routed_rows_per_gpu(model, tokens, tp) / shards
        return shards * measured_moe_s(rows)

    inference.decode_attention_time_s, inference.routed_experts_time_s = decode_attention, routed_experts
    try:
        yield
    finally:
        inference.decode_attention_time_s, inference.routed_experts_time_s = decode, routed


def _blog_entries() -> list[dict]:
    return [e for e in load_oos_runs() if e["model"] == "deepseek-v3"]


def _evaluated() -> dict:
    """{run id: InferenceRunResult} of the MLPerf and the blog DeepSeek-R1 runs, each at the planner's best batch."""
    return {r.run_id: r for r in evaluate_mlperf(_dsr1_entries()) + evaluate_oos(_blog_entries())}


def whole_runs(mla_flops_per_s: float) -> list[dict]:
    """Each DeepSeek-R1 run's error as the model times it and with the measured kernels; its decode step (TPOT) both
    ways, and the step its measured throughput implies at the same batch (batch / tokens per second per GPU)."""
    plain = _evaluated()
    with measured_kernels(mla_flops_per_s):
        substituted = _evaluated()
    out = []
    for run_id, r in plain.items():
        batch = r.evaluation.metrics["batch"]
        out.append(
            {
                "run": run_id,
                "source": "mlperf" if run_id.startswith("mlperf") else "trtllm-blog",
                "batch": batch,
                "model_error": r.error,
                "measured_kernels_error": substituted[run_id].error,
                "model_tpot_ms": 1e3 * r.evaluation.metrics["tpot_s"],
                "measured_kernels_tpot_ms": 1e3 * substituted[run_id].evaluation.metrics["tpot_s"],
                "implied_step_ms": 1e3 * batch / r.measured,
            }
        )
    return out


def report() -> dict:
    mla, moe = mla_rows(), moe_rows()
    rate = measured_mla_flops_per_s(mla)
    runs = whole_runs(rate)
    mlperf = [r for r in runs if r["source"] == "mlperf"]
    return {
        "mla_decode_b200": mla,
        "moe_nvfp4_b300": moe,
        "measured_mla_tflops": rate / 1e12,
        "dsr1_runs": runs,
        "dsr1_mean_abs_error": statistics.mean(abs(r["model_error"]) for r in mlperf),
        "dsr1_mean_abs_error_measured_kernels": statistics.mean(abs(r["measured_kernels_error"]) for r in mlperf),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    doc = report()
    if args.json:
        print(json.dumps(doc, indent=1))
        return 0
    print(f"MLA decode, B200, FP8 KV, {MLA['heads']} heads, {MLA['context']:,} cached tokens (trtllm-gen; {MLA['source']})")
    for r in doc["mla_decode_b200"]:
        print(
            f"  batch {r['batch']:>4}: measured {r['measured_ms']:.4f} ms ({r['measured_tflops']:,.0f} TFLOP/s, "
            f"{r['measured_share_of_bf16_peak']:.2f} of the 16-bit peak), model {r['model_ms']:.4f} ms "
            f"({r['model_over_measured']:.2f}x)"
        )
    print(f"NVFP4 routed experts, B300, one EP 8 shard of 32 experts (trtllm-gen fused MoE; {MOE['source']})")
    for r in doc["moe_nvfp4_b300"]:
        print(
            f"  {r['tokens']:>6} tokens ({r['rows']:,.0f} rows): measured {r['measured_ms']:.4f} ms, "
            f"model {r['model_ms']:.4f} ms ({r['model_over_measured']:.2f}x)"
        )
    print(
        "DeepSeek-R1 runs, predicted over measured throughput - 1, and the decode step (TPOT) as modelled against the step "
        f"the measured rate implies at the same batch (MLA at {doc['measured_mla_tflops']:,.0f} TFLOP/s)"
    )
    for r in doc["dsr1_runs"]:
        print(
            f"  {r['run']:<56} batch {r['batch']:>4}: model {r['model_error']:+6.1%} (step {r['model_tpot_ms']:5.1f} ms), "
            f"with the measured kernels {r['measured_kernels_error']:+6.1%} ({r['measured_kernels_tpot_ms']:5.1f} ms); "
            f"implied {r['implied_step_ms']:5.1f} ms"
        )
    print(
        f"  MLPerf's eight: mean |error| {doc['dsr1_mean_abs_error']:.1%}; with the measured kernels "
        f"{doc['dsr1_mean_abs_error_measured_kernels']:.1%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
