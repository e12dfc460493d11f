#!/usr/bin/env python3
"""Kernel microbenchmarks for the MoE and low-precision terms of parasol's training model.

Usage:
    python3 benchmarks/kernel_microbench.py --out DIR [--quick] [--time-budget S]

Writes DIR/kernel_microbench.yaml (rewritten after every section) and prints one line per
measurement. Needs torch with a CUDA device; timing is ``gpu_microbench.Timer`` (CUDA events,
GPU pre-filled by a spin kernel, median of repetitions: GPU time without launch gaps).

Sections
--------
grouped_gemm
    ``torch._grouped_mm`` (bf16, the grouped GEMM torchtitan and Megatron-Core's TE path use for
    MoE experts) of the expert shapes of DeepSeek-V3, Qwen3-235B-A22B, Qwen3-30B-A3B, GPT-OSS-120B
    and Mixtral: E local experts, r rows each (tokens sorted by expert, offsets per expert), the
    up projection (r x h @ h x 2f, SwiGLU gate+up fused) and the down projection (r x f @ f x h).
    Beside each, one dense ``torch.mm`` of the same FLOPs (E*r rows): efficiency_vs_dense =
    dense time / grouped time, and efficiency = FLOP/s / dense bf16 peak. Then an imbalanced
    split of the same rows (one expert takes ``imbalance`` x the mean, the others share the rest)
    to see whether the busiest expert sets the pace. FP8 (``torch._scaled_grouped_mm``, row-wise
    scales) where the build has it.
quantise
    The casts of Transformer Engine's FP8 recipes, as torch programs on a bf16 (m, k) activation:
    current scaling (amax over the tensor, scale, cast to e4m3), cast + transpose (the FP8 copy
    and its transpose for the weight gradient), 1x128 block scaling (DeepSeek-V3 / MXFP8-style:
    amax per block of 128, scale, cast), and a 16x16 Hadamard transform (NVFP4's random Hadamard
    on weight-gradient inputs) as a batched matmul. Each eager (several kernels) and, where
    ``torch.compile`` works, compiled (fused into one or two kernels, as TE ships them).
    Reported: seconds, and the minimal bytes (read 2 B, write 1 B per element and copy, scales
    aside) over time as a fraction of the nominal HBM bandwidth.
permute
    MoE token permutation: ``index_select`` of rows (tokens x top_k, h) in expert order, and the
    weighted unpermute ``index_add_`` back to tokens; bandwidth as a fraction of HBM.

NCCL needs two or more GPUs; a one-GPU machine measures none (parasol's collectives are
checked against published nccl-tests figures instead: problems/measurements/nccl_tests.yaml).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import os
import statistics
import sys
import time
import traceback

import torch
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_microbench import Timer, nominal_peaks, num  # noqa: E402

EXPERT_SHAPES = {  # name: (hidden h, expert ffn f, local experts E as the published runs hold them)
    "deepseek-v3": (7168, 2048, (4, 8)),
    "qwen3-235b-a22b": (4096, 1536, (4, 16)),
    "qwen3-30b-a3b": (2048, 768, (16,)),
    "gpt-oss-120b": (2880, 2880, (4, 16)),
    "mixtral-8x7b": (4096, 14336, (1, 2)),
}
ROWS_PER_EXPERT = (32, 128, 512, 2048, 8192)
IMBALANCE = (1.5, 2.0)


ALIGN_ROWS = 16  # grouped-GEMM groups padded to 16 rows (torchtitan pads expert groups so for FP8)


def _offsets(counts, device):
    return torch.tensor(list(itertools.accumulate(counts)), device=device, dtype=torch.int32)


class Section:
    def __init__(self, name: str, seconds: float):
        self.name, self.deadline, self.entries, self.skipped = name, time.time() + seconds, [], 0

    def ok(self) -> bool:
        if time.time() < self.deadline:
            return True
        self.skipped += 1
        return False

    def add(self, entry: dict) -> None:
        self.entries.append(entry)
        print(f"  {self.name}: " + "  ".join(f"{k}={v}" for k, v in entry.items()), flush=True)

    def result(self) -> dict:
        return {"entries": self.entries, "skipped_for_time": self.skipped}


def grouped_gemm(timer: Timer, section: Section, peak_bf16: float, peak_fp8: float | None, quick: bool) -> None:
    dev = "cuda"
    shapes = dict(list(EXPERT_SHAPES.items())[:2]) if quick else EXPERT_SHAPES
    rows_list = ROWS_PER_EXPERT[1:3] if quick else ROWS_PER_EXPERT
    for name, (h, f, locals_) in shapes.items():
        for experts in locals_:
            for r in rows_list:
                if experts * r * max(h, 2 * f) * 2 > 6e9 or not section.ok():
                    continue
                rows = experts * r
                for proj, (k, n) in (("up", (h, 2 * f)), ("down", (f, h))):
                    entry = {"model": name, "proj": proj, "experts": experts, "rows_per_expert": r, "k": k, "n": n}
                    flops = 2.0 * rows * k * n
                    try:
                        x = torch.randn(rows, k, device=dev, dtype=torch.bfloat16)
                        w = torch.randn(experts, k, n, device=dev, dtype=torch.bfloat16) * 0.02
                        wt = w.transpose(-2, -1).contiguous().transpose(-2, -1)  # (E, k, n) column-major per expert
                        offs = _offsets([r] * experts, dev)
                        grouped = timer.bench(lambda: torch._grouped_mm(x, wt, offs=offs))["seconds"]
                        wd = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
                        dense = timer.bench(lambda: torch.mm(x, wd))["seconds"]
                        entry.update(
                            flops=num(flops),
                            seconds=num(grouped),
                            dense_seconds=num(dense),
                            efficiency=num(flops / grouped / (peak_bf16 * 1e12), 4),
                            dense_efficiency=num(flops / dense / (peak_bf16 * 1e12), 4),
                            efficiency_vs_dense=num(dense / grouped, 4),
                        )
                        if proj == "up" and experts > 1 and r >= 128:
                            for imb in IMBALANCE:
                                busiest = int(round(imb * r / ALIGN_ROWS)) * ALIGN_ROWS
                                share = (rows - busiest) // (experts - 1) // ALIGN_ROWS * ALIGN_ROWS
                                counts = [busiest] + [share] * (experts - 1)
                                counts[-1] += rows - sum(counts)
                                offs_i = _offsets(counts, dev)
                                t_imb = timer.bench(lambda: torch._grouped_mm(x, wt, offs=offs_i))["seconds"]
                                entry[f"seconds_imbalance_{imb:g}"] = num(t_imb)
                        if peak_fp8 and hasattr(torch, "_scaled_grouped_mm"):
                            try:
                                x8 = x.to(torch.float8_e4m3fn)
                                w8 = wt.to(torch.float8_e4m3fn)
                                w8 = w8.transpose(-2, -1).contiguous().transpose(-2, -1)
                                sa = torch.ones(rows, device=dev, dtype=torch.float32)
                                sb = torch.ones(experts, n, device=dev, dtype=torch.float32)
                                t8 = timer.bench(
                                    lambda: torch._scaled_grouped_mm(x8, w8, sa, sb, offs=offs, out_dtype=torch.bfloat16)
                                )["seconds"]
                                entry.update(fp8_seconds=num(t8), fp8_efficiency=num(flops / t8 / (peak_fp8 * 1e12), 4))
                            except Exception as exc:  # noqa: BLE001 (a build without the kernel: recorded)
                                entry["fp8_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                    except Exception as exc:  # noqa: BLE001
                        entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    section.add(entry)
                    torch.cuda.empty_cache()


def _quantisers():
    fp8 = torch.float8_e4m3fn
    fmax = torch.finfo(fp8).max

    def current(x):
        scale = fmax / x.abs().amax().float().clamp(min=1e-12)
        return (x.float() * scale).to(fp8), scale

    def current_transpose(x):
        scale = fmax / x.abs().amax().float().clamp(min=1e-12)
        y = (x.float() * scale).to(fp8)
        return y, y.t().contiguous(), scale

    def block128(x):
        m, k = x.shape
        xb = x.view(m, k // 128, 128).float()
        scale = fmax / xb.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12)
        return (xb * scale).to(fp8).view(m, k), scale

    def hadamard16(x, h16):
        return (x.view(-1, 16) @ h16).view_as(x)

    # (name, function, bytes written per element besides the 2-byte read)
    return [
        ("fp8_current", current, 1.0),
        ("fp8_current_transpose", current_transpose, 2.0),
        ("fp8_block128", block128, 1.0),
        ("hadamard16", hadamard16, 2.0),
    ]


def quantise(timer: Timer, section: Section, peak_hbm_gbps: float, quick: bool) -> None:
    dev = "cuda"
    shapes = [(8192, 4096)] if quick else [(8192, 4096), (16384, 8192), (16384, 12288)]
    h16 = torch.tensor(_hadamard(16), device=dev, dtype=torch.bfloat16) / 4.0
    for mode in ("eager", "compiled"):
        for name, fn, written in _quantisers():
            call = fn
            if mode == "compiled":
                try:
                    call = torch.compile(fn, dynamic=False)
                except Exception as exc:  # noqa: BLE001
                    section.add({"op": name, "mode": mode, "error": f"{type(exc).__name__}: {str(exc)[:160]}"})
                    continue
            for m, k in shapes if mode == "eager" or quick else shapes[1:2]:
                if not section.ok():
                    continue
                entry = {"op": name, "mode": mode, "m": m, "k": k}
                try:
                    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                    args = (x, h16) if name == "hadamard16" else (x,)
                    t = timer.bench(lambda: call(*args))["seconds"]
                    nbytes = m * k * (2.0 + written)
                    entry.update(seconds=num(t), bytes=num(nbytes), hbm_efficiency=num(nbytes / t / (peak_hbm_gbps * 1e9), 4))
                except Exception as exc:  # noqa: BLE001
                    entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                section.add(entry)
                torch.cuda.empty_cache()


def _hadamard(n: int) -> list:
    h = [[1.0]]
    while len(h) < n:
        h = [row + row for row in h] + [row + [-v for v in row] for row in h]
    return h


def permute(timer: Timer, section: Section, peak_hbm_gbps: float, quick: bool) -> None:
    dev = "cuda"
    cases = [(4096, 2048, 8)] if quick else [(16384, 2048, 8), (8192, 4096, 8), (4096, 7168, 8), (8192, 4096, 2)]
    for tokens, h, top_k in cases:
        if not section.ok():
            continue
        rows = tokens * top_k
        entry = {"tokens": tokens, "hidden": h, "top_k": top_k}
        try:
            x = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16)
            idx = torch.randperm(rows, device=dev) % tokens
            y = torch.randn(rows, h, device=dev, dtype=torch.bfloat16)
            out = torch.zeros(tokens, h, device=dev, dtype=torch.bfloat16)
            t_sel = timer.bench(lambda: x.index_select(0, idx))["seconds"]
            t_add = timer.bench(lambda: out.index_add_(0, idx, y))["seconds"]
            moved = rows * h * 2.0 * 2  # read a row, write a row (gather); read a row, read-modify-write (scatter-add, at least)
            entry.update(
                permute_seconds=num(t_sel),
                unpermute_seconds=num(t_add),
                permute_hbm_efficiency=num(moved / t_sel / (peak_hbm_gbps * 1e9), 4),
                unpermute_hbm_efficiency=num(moved / t_add / (peak_hbm_gbps * 1e9), 4),
            )
        except Exception as exc:  # noqa: BLE001
            entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        section.add(entry)
        torch.cuda.empty_cache()


def summarise(result: dict) -> dict:
    """Medians the device files can take: grouped-GEMM efficiency against dense by rows per expert."""
    out = {}
    gg = [e for e in result.get("grouped_gemm", {}).get("entries", []) if "efficiency_vs_dense" in e]
    by_rows = {}
    for e in gg:
        by_rows.setdefault(e["rows_per_expert"], []).append(e["efficiency_vs_dense"])
    out["grouped_vs_dense_median_by_rows_per_expert"] = {r: num(statistics.median(v), 4) for r, v in sorted(by_rows.items())}
    eff = {}
    for e in gg:
        eff.setdefault(e["rows_per_expert"], []).append(e["efficiency"])
    out["grouped_efficiency_median_by_rows_per_expert"] = {r: num(statistics.median(v), 4) for r, v in sorted(eff.items())}
    q = {}
    for e in result.get("quantise", {}).get("entries", []):
        if "hbm_efficiency" in e:
            q.setdefault(f"{e['op']} {e['mode']}", []).append(e["hbm_efficiency"])
    out["quantise_hbm_efficiency_median"] = {k: num(statistics.median(v), 4) for k, v in q.items()}
    return out


SECTIONS = (("grouped_gemm", 150.0, 30.0), ("quantise", 120.0, 30.0), ("permute", 20.0, 10.0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--time-budget", type=float, default=None, help="seconds for all sections (default 290; quick 70)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "kernel_microbench.yaml")
    if not torch.cuda.is_available():
        print("CUDA not available", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0)
    peaks = nominal_peaks(name) or {"bf16_tflops": 989.4, "fp8_tflops": 1978.9, "hbm_gbps": 3350.0, "source": "assumed H100 SXM"}
    timer = Timer()
    props = torch.cuda.get_device_properties(0)
    result = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device_name": name,
            "sm_count": props.multi_processor_count,
            "torch_version": str(torch.__version__),
            "cuda_version": str(torch.version.cuda),
            "nominal_peaks": peaks,
            "timer": timer.sleep_note,
            "has_grouped_mm": hasattr(torch, "_grouped_mm"),
            "has_scaled_grouped_mm": hasattr(torch, "_scaled_grouped_mm"),
            "quick": args.quick,
            "section_status": {},
        }
    }
    budgets = [s[2] if args.quick else s[1] for s in SECTIONS]
    scale = (args.time_budget / sum(budgets)) if args.time_budget else 1.0
    for (sec_name, _, _), budget in zip(SECTIONS, budgets):
        print(f"--- {sec_name} (budget {budget * scale:.0f} s)", flush=True)
        section = Section(sec_name, budget * scale)
        if sec_name == "grouped_gemm":
            measure = lambda: grouped_gemm(timer, section, peaks["bf16_tflops"], peaks.get("fp8_tflops"), args.quick)  # noqa: E731
        elif sec_name == "quantise":
            measure = lambda: quantise(timer, section, peaks["hbm_gbps"], args.quick)  # noqa: E731
        else:
            measure = lambda: permute(timer, section, peaks["hbm_gbps"], args.quick)  # noqa: E731
        run_section(result, section, measure, summarise, path)
    return finish(result, path)


def save(result: dict, path: str) -> None:
    with open(path, "w") as fh:
        yaml.safe_dump(result, fh, sort_keys=False, width=120)


def run_section(result: dict, section: Section, measure, summarise, path: str, keep: bool = True) -> None:
    """Run ``measure()``; record its status and seconds in ``result["meta"]["section_status"]``, the section's
    entries (``keep``) and the summary, and rewrite ``path``: a section that fails leaves the others' results."""
    t0 = time.time()
    try:
        measure()
        status = "ok"
    except Exception as exc:  # noqa: BLE001
        status = f"error: {type(exc).__name__}: {str(exc)[:200]}"
        traceback.print_exc()
    if keep:
        result[section.name] = section.result()
    result["meta"]["section_status"][section.name] = f"{status}, {time.time() - t0:.1f} s"
    result["summary"] = summarise(result)
    save(result, path)


def finish(result: dict, path: str) -> int:
    """Print the summary and where the file is; exit status 0."""
    print(yaml.safe_dump(result["summary"], sort_keys=False), flush=True)
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
