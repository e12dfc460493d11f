"""Cost anchors that join the performance model with the cost model (issue 7, Validation).

    python benchmarks/cost_validation.py [--time-limit S]

1. DeepSeek-V3's pre-training budget (arXiv 2412.19437, Sec. 1 and Table 1: 2,664K H800 GPU-hours
   for the 14.8T pre-training tokens, $5.328M at $2 per GPU-hour) from the model's throughput on
   2,048 H800 with the published mapping (PP 16 under DualPipe, EP 64, no TP, ZeRO-1 DP; DeepEP-style
   FP8 dispatch and DualPipe's all-to-all overlap, BF16 Adam moments, one MTP module), without
   recomputation and with the report's selective recomputation (RMSNorm, MLA up-projections, the SwiGLU
   output: Sec. 3.3), the same under 1F1B (not how it ran: what the schedule is worth), and with
   parasol's plan of the example problem (the same workload).
2. DeepSeek-V2's training cost (arXiv 2405.04434, Sec. 3.2.3: 172.8K H800 GPU-hours per trillion tokens)
   from the model's throughput with the report's parallelism (Sec. 3.1.3: 16-way zero-bubble pipeline, 8-way
   expert parallelism, ZeRO-1 data parallelism, no tensor parallelism, some operators recomputed, the shared
   experts' computation overlapped with the all-to-all); what the report does not state is assumed and each
   assumption's effect printed (``deepseek_v2_rows``).
3. The seeds' headline that an A100 -> B200 system trains LLMs about 35x faster, as a design-space
   example: the best plan for the same model on the same number of GPUs of each system, at each
   system's best training precision.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from parasol.solver.planner import solve
from parasol.solver.problem import load_problem, parse_problem
from parasol.solver.training_planner import evaluate_plan

DEEPSEEK_TOKENS = 14.8e12  # pre-training tokens (paper abstract)
DEEPSEEK_GPU_HOURS = 2.664e6  # pre-training H800 GPU-hours (paper Table 1)
DEEPSEEK_PRICE = 2.0  # $ per H800 GPU-hour (paper Table 1)
EXAMPLE = Path(__file__).resolve().parents[1] / "problems" / "examples" / "deepseek-v3-h800.yaml"
DEEPSEEK_V2_GPU_HOURS_PER_T = 172.8e3  # H800 GPU-hours per trillion training tokens (DeepSeek-V2 report, Sec. 3.2.3)
# not stated in the V2 report: 2,048, the H800 cluster DeepSeek-V3's report trains on (Sec. 3.1) [assumption]
DEEPSEEK_V2_GPUS = 2048


def fits_label(metrics: dict) -> str:
    """'fits', or by how much a plan's peak memory (or its host memory) does not."""
    if metrics["fits"]:
        return "fits"
    if not metrics.get("host_fits", True):
        return f"does not fit the host: {metrics['host_memory_gib']:.0f} GiB"
    return f"does not fit: {metrics['peak_memory_gib']:.0f} GiB"


def published_mapping_row(recompute: str, dualpipe: bool) -> tuple[str, float, float, float]:
    """(label, tokens/s per GPU, GPU-hours, $) of DeepSeek-V3's published mapping on 2,048 H800 under
    DualPipe (``dualpipe``, as it ran) or 1F1B, with ``recompute`` none or the report's selective."""
    workload = {
        "kind": "training",
        "seq_len": 4096,
        "global_batch": 15360,
        "precision": "fp8",
        "low_precision_recipe": "blockwise",  # the report's 1x128 / 128x128 scaling (Sec. 3.3.2)
        "moe_dispatcher": "deepep",
        "moe_fp8_dispatch": True,  # the report's FP8 dispatch (Sec. 3.3.3)
        "moe_a2a_overlap": True,
        "adam_moment_bytes": 2,
        "mtp_layers": 1,
        # what the report recomputes (Sec. 3.2.3: RMSNorm, MLA up-projections; Sec. 3.3.3: the MoE SwiGLU's
        # output from its cached input), and nothing else: not the attention core
        "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"],
        "train_tokens": DEEPSEEK_TOKENS,
    }
    p = parse_problem(
        {
            "model": "deepseek-v3",
            "system": {"name": "dgx-h800", "num_gpus": 2048, "gpu_hour_usd": DEEPSEEK_PRICE},
            "workload": workload,
            "mapping": {
                "tp": 1,
                "pp": 16,
                "dp": 128,
                "ep": 64,
                "micro_batch": 1,
                "zero": 1,
                "sp": False,
                "recompute": recompute,
                "first_stage_layers": 3,
                "last_stage_layers": 2,
                "dualpipe": dualpipe,
                # DualPipe merges one micro-batch's forward with another's backward, which hides the all-to-all;
                # plain 1F1B over 16 stages merges nothing (pipeline.a2a_overlap_problem)
                "moe_a2a_overlap": dualpipe,
            },
        },
        source="published mapping",
    )
    met = evaluate_plan(p, 2048, p.fixed_mapping()).metrics
    fits = fits_label(met)
    label = f"published mapping, {'DualPipe' if dualpipe else '1F1B'}, recompute {recompute} ({fits})"
    return label, met["tokens_per_s_per_gpu"], met["run_hours"] * 2048, met["run_cost_usd"]


def published_mapping_rows() -> list[tuple[str, float, float, float]]:
    """The published mapping under DualPipe without and with the report's selective recomputation, and
    under 1F1B (``published_mapping_row``)."""
    return [published_mapping_row(r, d) for r, d in (("none", True), ("selective", True), ("selective", False))]


def deepseek_budget(time_limit: float) -> list[tuple[str, float, float, float]]:
    """(label, tokens/s per GPU, GPU-hours, $) for the published mapping and for parasol's plan."""
    rows = published_mapping_rows()
    plan = solve(load_problem(EXAMPLE), time_limit=time_limit)
    if plan.plans:
        met = plan.plans[0].evaluation.metrics
        gpu_hours = DEEPSEEK_TOKENS / met["tokens_per_s"] / 3600 * 2048
        rows.append((f"parasol's plan ({plan.status})", met["tokens_per_s_per_gpu"], gpu_hours, gpu_hours * DEEPSEEK_PRICE))
    return rows


def deepseek_v2_row(num_gpus: int = DEEPSEEK_V2_GPUS) -> tuple[str, float, float, float]:
    """(label, tokens/s per GPU, H800 GPU-hours per trillion tokens, the same without the pipeline bubble) of
    DeepSeek-V2 with the report's parallelism on ``num_gpus`` H800 (Sec. 3.1.3): pp 16, ep 8 (one node), no tp,
    ZeRO-1, dp the rest; the batch of 9,216 sequences of 4K it trains at after its first 225B tokens (Sec. 3.1.2).
    Assumed where the report is silent: BF16 (its FP8 is for serving only), micro-batch 1, the 60 layers as
    2 + 14 x 4 + 2 (lighter first and last stages, which hold the embedding and the output head), the recomputed
    operators DeepSeek-V3's report lists (RMSNorm, the MLA up-projections, the MoE SwiGLU output). Its zero-bubble
    schedule is not in the model: 1F1B stands in, and the GPU-hours without the bubble bound what it saves. Its
    overlap (only the shared experts' computation hides the all-to-all) is not either, and no schedule that hides
    the all-to-all behind another micro-batch fits this mapping: plain 1F1B over 16 stages merges no passes
    (pipeline.a2a_overlap_problem), DualPipe holds two stages' parameters (94 GiB of the H800's 80 at 2,048 GPUs) and
    Megatron-Core's interleaved schedule more chunks (101 GiB at vpp 2 on 1,024 GPUs; measured 2026-11-29)."""
    workload = {
        "kind": "training",
        "seq_len": 4096,
        "global_batch": 9216,
        "precision": "bf16",
        "moe_dispatcher": "alltoall",
        "recompute_modules": ["layernorm", "mla_up_proj", "moe_act"],
        "train_tokens": 1e12,
    }
    mapping = {"tp": 1, "pp": 16, "dp": num_gpus // 16, "ep": 8, "micro_batch": 1, "zero": 1, "sp": False}
    mapping |= {"recompute": "selective", "first_stage_layers": 2, "last_stage_layers": 2}
    p = parse_problem(
        {"model": "deepseek-v2", "system": {"name": "dgx-h800", "num_gpus": num_gpus}, "workload": workload, "mapping": mapping},
        source="DeepSeek-V2's parallelism",
    )
    ev = evaluate_plan(p, num_gpus, p.fixed_mapping())
    met, step = ev.metrics, ev.metrics["step_time_s"]
    gpu_hours = met["run_hours"] * num_gpus
    without_bubble = gpu_hours * (step - ev.breakdown["time_s"]["pipeline/bubble"]) / step
    label = f"{num_gpus:,} GPUs, all-to-all exposed ({fits_label(met)})"
    return label, met["tokens_per_s_per_gpu"], gpu_hours, without_bubble


def deepseek_v2_rows() -> list[tuple[str, float, float, float]]:
    """DeepSeek-V2 on the assumed 2,048 GPUs and on 1,024 (``deepseek_v2_row``)."""
    return [deepseek_v2_row(n) for n in (DEEPSEEK_V2_GPUS, 1024)]


def a100_to_b200(time_limit: float, num_gpus: int = 1024) -> list[tuple[str, str, float]]:
    """(system, precision, best tokens/s) for GPT-3 175B on ``num_gpus`` GPUs of each system."""
    out = []
    for system, precision in (
        ("dgx-a100", "bf16"),
        ("dgx-b200", "bf16"),
        ("dgx-b200", "fp8"),
        ("gb200-nvl72", "fp8"),
        ("gb200-nvl72", "fp4"),
    ):
        p = parse_problem(
            {
                "model": "gpt3-175b",
                "system": {"name": system, "num_gpus": num_gpus},
                "workload": {"kind": "training", "seq_len": 2048, "global_batch": 1536, "precision": precision},
                "mapping": {"vpp": [1, 2, 4], "cp": 1},
            },
            source=f"{system} {precision}",
        )
        r = solve(p, time_limit=time_limit)
        out.append((system, precision, r.objective_value or 0.0, r.status))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=120.0)
    args = parser.parse_args()
    print(
        f"DeepSeek-V3 pre-training budget: published {DEEPSEEK_GPU_HOURS / 1e6:.3f}M H800 GPU-hours, "
        f"${DEEPSEEK_GPU_HOURS * DEEPSEEK_PRICE / 1e6:.3f}M at ${DEEPSEEK_PRICE:.0f}/GPU-hour "
        f"({DEEPSEEK_TOKENS / DEEPSEEK_GPU_HOURS / 3600:,.0f} tokens/s per GPU)"
    )
    for label, per_gpu, gpu_hours, usd in deepseek_budget(args.time_limit):
        print(
            f"  {label:<66} {per_gpu:7,.0f} tok/s/GPU  {gpu_hours / 1e6:6.3f}M GPU-h  ${usd / 1e6:6.3f}M  "
            f"({100 * (gpu_hours / DEEPSEEK_GPU_HOURS - 1):+.1f} %)"
        )
    print(
        f"\nDeepSeek-V2 training cost: published {DEEPSEEK_V2_GPU_HOURS_PER_T / 1e3:.1f}K H800 GPU-hours per trillion tokens "
        f"({1e12 / DEEPSEEK_V2_GPU_HOURS_PER_T / 3600:,.0f} tokens/s per GPU); the report's parallelism under 1F1B "
        "(without its bubble in brackets: what a zero-bubble schedule saves at most):"
    )
    for label, per_gpu, gpu_hours, without_bubble in deepseek_v2_rows():
        print(
            f"  {label:<66} {per_gpu:7,.0f} tok/s/GPU  {gpu_hours / 1e3:6.1f}K GPU-h/T "
            f"({100 * (gpu_hours / DEEPSEEK_V2_GPU_HOURS_PER_T - 1):+.1f} %)  [{without_bubble / 1e3:6.1f}K, "
            f"{100 * (without_bubble / DEEPSEEK_V2_GPU_HOURS_PER_T - 1):+.1f} %]"
        )
    print("\nA100 -> B200 (GPT-3 175B, 1,024 GPUs, best plan each):")
    rows = a100_to_b200(args.time_limit)
    base = rows[0][2]
    for system, precision, tokens, status in rows:
        print(f"  {system:<12} {precision:<5} {tokens:12,.0f} tokens/s  x{tokens / base:5.2f}  ({status})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
