"""DeepSeek-V2's published training cost (172.8K H800 GPU-hours per trillion tokens, arXiv 2405.04434
Sec. 3.2.3) against the model with the report's parallelism (benchmarks/cost_validation.py): out of sample,
nothing was fitted to it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from parasol.model import params
from parasol.solver.library import load_model

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import cost_validation  # noqa: E402  benchmarks/cost_validation.py


def test_the_model_file_has_the_reports_parameter_count():
    """236B parameters (Sec. 3.1.2) from the architecture the report and config.json state."""
    assert params.total_params(load_model("deepseek-v2")) / 1e9 == pytest.approx(236.0, rel=0.005)


def test_published_parallelism_predicts_the_cost_per_trillion_tokens():
    """On the assumed 2,048 H800, under 1F1B, the all-to-all exposed: 173.8K GPU-hours per trillion tokens,
    +0.6 % (measured 2026-11-27; 176.4K, +2.1 % at moe_expert 0.64; 177.7K, +2.8 % with the FP8 tensor-parallel
    all-gathers and the networks refitted, 2026-11-28; 167.5K, -3.1 % with the overlapped traffic slowing the compute beside it,
    moe_expert 0.68, 2026-11-29; 164.1K, -5.1 % at moe_expert 0.74 with MXFP8's GEMM share, 2026-11-29; 170.9K, -1.1 % at moe_expert 0.63 with
    Blackwell's training GEMM share, the same day; 171.1K, -1.0 % at moe_expert 0.71, refitted once Megatron-Bridge 25.09's
    DeepSeek-V3 run had its script's layout, recomputation and MTP layer; 162.5K, -5.9 % at 0.90, once 25.09's Qwen3 rows
    had their script's dispatcher too), within the issue's 20 %. Each assumption the
    report leaves open moves it one way: 1,024 GPUs and a schedule without bubble make it cheaper, none by more than the
    published cost's 26 %, and every variant fits in the H800's memory. An overlapped all-to-all is no variant: the schedules
    that hide it at pp 16 (DualPipe, Megatron-Core's interleaved one) do not fit this mapping (cost_validation.deepseek_v2_row)."""
    rows = {
        label.split(" (")[0]: (gpu_hours, no_bubble, label)
        for label, _, gpu_hours, no_bubble in cost_validation.deepseek_v2_rows()
    }
    published = cost_validation.DEEPSEEK_V2_GPU_HOURS_PER_T
    primary, primary_no_bubble, label = rows["2,048 GPUs, all-to-all exposed"]
    assert label.endswith("(fits)") and all(r[2].endswith("(fits)") for r in rows.values())
    assert abs(primary / published - 1.0) <= 0.06
    for name, (gpu_hours, no_bubble, _) in rows.items():
        assert no_bubble < gpu_hours <= primary, name
        assert no_bubble > 0.74 * published, name
    assert primary_no_bubble < primary
