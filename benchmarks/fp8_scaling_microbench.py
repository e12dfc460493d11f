#!/usr/bin/env python3
"""What FP8 scaling granularity and sustained load cost a Hopper GEMM, on one GPU.

Usage:
    python3 benchmarks/fp8_scaling_microbench.py --out DIR [--quick] [--sustain-s S] [--sustain-shapes cube|all]
                                                 [--sections layouts,scaling,sustained]
    python3 benchmarks/fp8_scaling_microbench.py --summarise FILE

Writes DIR/fp8_scaling_microbench.yaml (rewritten after each section) and prints one line per
measurement. Needs torch with a CUDA device; timing is ``gpu_microbench.Timer`` (CUDA events, GPU
pre-filled by a spin kernel, median of repetitions).

Sections
--------
scaling
    ``torch._scaled_mm`` of the same e4m3 operands under four scalings, beside the bf16 ``torch.mm``:
    ``tensorwise`` (one fp32 scale per operand: Transformer Engine's delayed and current scaling; split
    accumulation, ``use_fast_accum`` False, and again with fast accumulation as ``tensorwise_fast``, the
    accumulation the device files' FP8 curves were measured with),
    ``rowwise`` (a scale per row of A and per column of B), ``block_1x128_128x128`` (a scale per 1x128
    run of A's K and per 128x128 tile of B: Float8BlockScaling's forward and data-gradient GEMMs, the
    DeepSeek-V3 recipe) and ``block_1x128_1x128`` (a scale per 128 along K on both: its weight-gradient
    GEMMs). Shapes: the linear layers of DeepSeek-V3 (tp 1, 4,096 tokens; routed experts at 256 to 8,192
    rows), Qwen3-235B-A22B's experts and Llama 3 70B at tp 4 (8,192 tokens), each pass as it runs:
    ``fprop`` (tokens x in -> out), ``dgrad`` (tokens x out -> in) and ``wgrad`` (out x tokens -> in).
    Before timing, each block layout is checked against a dequantised fp32 product on a small problem
    with random scales, so a layout the build reads otherwise is not timed as blockwise
    (``meta.block_layouts``). ``share_vs_tensorwise`` = tensorwise time / that scaling's time.
sustained
    One 8192^3 GEMM back to back for ``--sustain-s`` seconds, bf16 then FP8 tensorwise, timed in
    one-second windows, with nvidia-smi's SM clock, power and temperature sampled each second:
    the rate of the first window, the median and the last. With ``--sustain-shapes all``, each of
    ``SUSTAIN_SHAPES`` so, FP8 with fast accumulation too, beside its short-burst rate (``Timer.bench``,
    as the device curves were measured): ``median_over_burst``. ``--sections sustained`` runs it alone.

Summary (``--summarise`` prints it again from a stored file): the median share of each block
scaling over the shapes, by pass, what ``block_fp8_gemm_efficiency`` in the Hopper device files is.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

BLOCK = 128
SCALINGS = ("tensorwise", "rowwise", "block_1x128_128x128", "block_1x128_1x128")
# the block scaling Float8BlockScaling runs each pass of a linear with (its weight gradient scales both operands 1x128)
BLOCK_PASS_SCALING = {"fprop": "block_1x128_128x128", "dgrad": "block_1x128_128x128", "wgrad": "block_1x128_1x128"}

# (model, layer, tokens m, in k, out n): the forward GEMM; dgrad and wgrad follow from it.
LINEARS = (
    ("deepseek-v3", "q_down", 4096, 7168, 1536),
    ("deepseek-v3", "q_up", 4096, 1536, 24576),
    ("deepseek-v3", "kv_up", 4096, 512, 32768),
    ("deepseek-v3", "attn_out", 4096, 16384, 7168),
    ("deepseek-v3", "shared_up", 4096, 7168, 4096),
    ("deepseek-v3", "shared_down", 4096, 2048, 7168),
    ("deepseek-v3", "expert_up r256", 256, 7168, 4096),
    ("deepseek-v3", "expert_up r1024", 1024, 7168, 4096),
    ("deepseek-v3", "expert_up r4096", 4096, 7168, 4096),
    ("deepseek-v3", "expert_up r8192", 8192, 7168, 4096),
    ("deepseek-v3", "expert_down r1024", 1024, 2048, 7168),
    ("deepseek-v3", "expert_down r4096", 4096, 2048, 7168),
    ("qwen3-235b-a22b", "expert_up r1024", 1024, 4096, 3072),
    ("qwen3-235b-a22b", "expert_down r4096", 4096, 1536, 4096),
    ("llama3-70b tp4", "qkv", 8192, 8192, 2560),
    ("llama3-70b tp4", "attn_out", 8192, 2048, 8192),
    ("llama3-70b tp4", "mlp_up", 8192, 8192, 14336),
    ("llama3-70b tp4", "mlp_down", 8192, 7168, 8192),
    ("square", "8192", 8192, 8192, 8192),
)
QUICK = {"q_up", "expert_up r1024", "mlp_up", "8192"}


def passes(m: int, k: int, n: int) -> list[tuple[str, int, int, int]]:
    """(pass, M, K, N) of the three GEMMs of a linear whose forward is (m x k) @ (k x n)."""
    return [("fprop", m, k, n), ("dgrad", m, n, k), ("wgrad", n, m, k)]


def _outer_major(t):
    """The same 2-D tensor with stride(0) == 1 (the layout cuBLAS's block scales are read in)."""
    return t.t().contiguous().t()


def _expand(scale, rows_per: int, cols_per: int):
    return scale.repeat_interleave(rows_per, 0).repeat_interleave(cols_per, 1)


def _scales(torch, scaling: str, m: int, k: int, n: int, dev, random: bool):
    """(scale_a, scale_b, dense_a, dense_b): the scale tensors in the logical shapes, and each expanded
    to its operand's shape for the reference."""
    make = (lambda *s: torch.rand(*s, device=dev) + 0.5) if random else (lambda *s: torch.ones(*s, device=dev))
    if scaling == "tensorwise":
        sa, sb = make(()), make(())
        return sa, sb, sa.expand(m, k), sb.expand(k, n)
    if scaling == "rowwise":
        sa, sb = make(m, 1), make(1, n)
        return sa, sb, sa.expand(m, k), sb.expand(k, n)
    sa = make(m, k // BLOCK)
    if scaling == "block_1x128_128x128":
        sb = make(k // BLOCK, n // BLOCK)
        return sa, sb, _expand(sa, 1, BLOCK), _expand(sb, BLOCK, BLOCK)
    sb = make(k // BLOCK, n)
    return sa, sb, _expand(sa, 1, BLOCK), _expand(sb, BLOCK, 1)


# Layouts tried for the block scales, in order: (scale_a layout, scale_b layout).
LAYOUTS = (("outer", "outer"), ("outer", "contiguous"), ("contiguous", "contiguous"), ("contiguous", "outer"))


def _laid_out(t, layout: str):
    return _outer_major(t) if layout == "outer" and t.dim() == 2 else t.contiguous()


def make_gemm(torch, scaling: str, layout, a8, b8, sa, sb):
    """A callable of one scaled GEMM (bf16 out) with the scales laid out as ``layout`` says."""
    if scaling in ("tensorwise", "rowwise"):
        sa_l, sb_l = sa.contiguous(), sb.contiguous()
    else:
        sa_l, sb_l = _laid_out(sa, layout[0]), _laid_out(sb, layout[1])
    return lambda: torch._scaled_mm(a8, b8, scale_a=sa_l, scale_b=sb_l, out_dtype=torch.bfloat16)


def operands(torch, m: int, k: int, n: int, dev):
    """e4m3 A (m x k, row-major) and B (k x n, column-major, as cuBLAS's FP8 GEMM takes it)."""
    a8 = (torch.randn(m, k, device=dev) * 2).to(torch.float8_e4m3fn)
    b8 = (torch.randn(n, k, device=dev) * 2).to(torch.float8_e4m3fn).t()
    return a8, b8


def find_layouts(torch, dev) -> dict:
    """For each scaling, the first layout whose product matches the dequantised fp32 product
    (relative Frobenius error below 2 %), with the errors of those tried."""
    m, k, n = 256, 512, 384
    a8, b8 = operands(torch, m, k, n, dev)
    found = {}
    for scaling in SCALINGS:
        sa, sb, da, db = _scales(torch, scaling, m, k, n, dev, random=True)
        refs = {"multiplied": (a8.float() * da) @ (b8.float() * db), "divided": (a8.float() / da) @ (b8.float() / db)}
        tried, ran = [], None
        for layout in LAYOUTS if scaling.startswith("block") else (("-", "-"),):
            try:
                out = make_gemm(torch, scaling, layout, a8, b8, sa, sb)().float()
                ran = ran or list(layout)
                errs = {how: float((out - ref).norm() / ref.norm()) for how, ref in refs.items()}
                how = min(errs, key=errs.get)
                tried.append(f"{layout[0]}/{layout[1]}: rel err {errs[how]:.2e} (scales {how})")
                if errs[how] < 0.02:
                    found[scaling] = {"layout": list(layout), "checked": True, "scales": how, "rel_err": round(errs[how], 6)}
                    found[scaling]["tried"] = tried
                    break
            except Exception as exc:  # noqa: BLE001 (a build without the kernel or layout: recorded)
                tried.append(f"{layout[0]}/{layout[1]}: {type(exc).__name__}: {str(exc)[:200]}")
        else:  # none matched: time the first layout that ran, marked unchecked (the summary leaves it out)
            found[scaling] = {"layout": ran, "checked": False, "tried": tried}
        print(f"  layout {scaling}: {found[scaling]}", flush=True)
    return found


def scaling_section(torch, timer, section, layouts: dict, peak_fp8: float, quick: bool) -> None:
    from gpu_microbench import num

    dev = "cuda"
    for model, layer, m0, k0, n0 in LINEARS:
        if quick and layer not in QUICK:
            continue
        for pass_, m, k, n in passes(m0, k0, n0):
            if not section.ok():
                continue
            entry = {"model": model, "layer": layer, "pass": pass_, "m": m, "k": k, "n": n}
            flops = 2.0 * m * k * n
            try:
                a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
                b = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()
                entry["bf16_seconds"] = num(timer.bench(lambda: torch.mm(a, b))["seconds"])
                del a, b
                a8, b8 = operands(torch, m, k, n, dev)
                for scaling in SCALINGS:
                    layout = layouts[scaling]["layout"]
                    if layout is None or (scaling.startswith("block") and scaling != BLOCK_PASS_SCALING[pass_]):
                        continue
                    sa, sb, _, _ = _scales(torch, scaling, m, k, n, dev, random=False)
                    try:
                        t = timer.bench(make_gemm(torch, scaling, layout, a8, b8, sa, sb))["seconds"]
                        entry[f"{scaling}_seconds"] = num(t)
                    except Exception as exc:  # noqa: BLE001
                        entry[f"{scaling}_error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
                if "tensorwise_seconds" in entry:  # the same GEMM with fast accumulation (the device curve's)
                    one = torch.ones((), device=dev)
                    fast = timer.bench(lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16, use_fast_accum=True))
                    entry["tensorwise_fast_seconds"] = num(fast["seconds"])
                    for scaling in SCALINGS[2:]:
                        if f"{scaling}_seconds" in entry:
                            entry[f"{scaling}_share_vs_fast"] = num(fast["seconds"] / entry[f"{scaling}_seconds"], 4)
                tw = entry.get("tensorwise_seconds")
                if tw:
                    entry["tensorwise_efficiency"] = num(flops / tw / (peak_fp8 * 1e12), 4)
                    entry["tensorwise_vs_bf16"] = num(entry["bf16_seconds"] / tw, 4)
                    for scaling in SCALINGS[1:]:
                        if f"{scaling}_seconds" in entry:
                            entry[f"{scaling}_share_vs_tensorwise"] = num(tw / entry[f"{scaling}_seconds"], 4)
            except Exception as exc:  # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            section.add(entry)
            torch.cuda.empty_cache()


SUSTAIN_SHAPES = {  # name: (m, k, n) of a GEMM held back to back; --sustain-shapes all takes every one
    "8192^3": (8192, 8192, 8192),
    "llama3-70b tp4 mlp_up": (8192, 8192, 14336),
    "llama3-70b tp4 qkv": (8192, 8192, 2560),
    "deepseek-v3 attn_out": (4096, 16384, 7168),
    "deepseek-v3 expert_up r4096": (4096, 7168, 4096),
    "deepseek-v3 expert_down r1024": (1024, 2048, 7168),
}


def sustained_section(torch, timer, section, sustain_s: float, smi_id, shapes: tuple = ("8192^3",)) -> None:
    """Each of ``shapes`` held back to back for ``sustain_s`` seconds in bf16, FP8 per-tensor (split accumulation)
    and, with more than one shape, FP8 with fast accumulation (the device curves' GEMMs), beside its short-burst rate
    (``Timer.bench``, what the curves were measured with), in one-second windows with nvidia-smi sampled."""
    from gpu_microbench import SmiSampler, num

    dev = "cuda"
    for shape in shapes:
        m, k, n = SUSTAIN_SHAPES[shape]
        flops = 2.0 * m * k * n
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(n, k, device=dev, dtype=torch.bfloat16).t()
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=dev)
        kinds = {
            "bf16": lambda: torch.mm(a, b),
            "fp8_tensorwise": lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16),
        }
        if len(shapes) > 1:
            kinds["fp8_fast"] = lambda: torch._scaled_mm(a8, b8, one, one, out_dtype=torch.bfloat16, use_fast_accum=True)
        for kind, fn in kinds.items():
            if not section.ok():
                continue
            burst = flops / timer.bench(fn)["seconds"] / 1e12 if len(shapes) > 1 else None
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            per_window = max(1, int(1.0 / max(time.perf_counter() - t1, 1e-5)))
            rates = []
            start = time.perf_counter()
            with SmiSampler(smi_id, period_s=1.0) as sampler:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                while time.perf_counter() - start < sustain_s:
                    s.record()
                    for _ in range(per_window):
                        fn()
                    e.record()
                    e.synchronize()
                    rates.append(flops * per_window / (s.elapsed_time(e) * 1e-3) / 1e12)
            entry = {"kind": kind, "size": m} if len(shapes) == 1 and shape == "8192^3" else {"shape": shape, "kind": kind}
            if "shape" in entry:
                entry.update(m=m, k=k, n=n)
            entry.update(
                seconds=num(time.perf_counter() - start, 4),
                windows=len(rates),
                calls_per_window=per_window,
                tflops_first=num(rates[0], 5),
                tflops_median=num(statistics.median(rates), 5),
                tflops_last=num(rates[-1], 5),
                tflops_min=num(min(rates), 5),
                last_over_first=num(rates[-1] / rates[0], 4),
                nvidia_smi=sampler.summary(),
            )
            if burst is not None:
                entry.update(tflops_burst=num(burst, 5), median_over_burst=num(statistics.median(rates) / burst, 4))
            section.add(entry)
            torch.cuda.synchronize()
        del a, b, a8, b8
        torch.cuda.empty_cache()


def summarise(result: dict) -> dict:
    """Median share of tensorwise FP8 rate each scaling reaches, by pass, over the shapes that ran (a block
    layout not checked against the dequantised product is left out)."""
    out = {}
    entries = result.get("scaling", {}).get("entries", [])
    layouts = result.get("meta", {}).get("block_layouts", {})
    checked = [s for s in SCALINGS[1:] if layouts.get(s, {}).get("checked")]
    for scaling in checked:
        by_pass = {}
        for e in entries:
            v = e.get(f"{scaling}_share_vs_tensorwise")
            if v is not None:
                by_pass.setdefault(e["pass"], []).append(v)
        if by_pass:
            out[f"{scaling}_share_median"] = {p: round(statistics.median(v), 4) for p, v in by_pass.items()}
            out[f"{scaling}_share_range"] = {p: [round(min(v), 4), round(max(v), 4)] for p, v in by_pass.items()}
    block = [
        e[f"{s}_share_vs_tensorwise"]
        for e in entries
        for s in ("block_1x128_128x128", "block_1x128_1x128")
        if s in checked and f"{s}_share_vs_tensorwise" in e
    ]
    if block:
        out["block_fp8_share_median_all_passes"] = round(statistics.median(block), 4)
    fast = [e[f"{s}_share_vs_fast"] for e in entries for s in SCALINGS[2:] if s in checked and f"{s}_share_vs_fast" in e]
    if fast:
        out["block_fp8_share_vs_fast_accum_median_all_passes"] = round(statistics.median(fast), 4)
    tvb = [e["tensorwise_vs_bf16"] for e in entries if "tensorwise_vs_bf16" in e]
    if tvb:
        out["tensorwise_over_bf16_rate_median"] = round(statistics.median(tvb), 4)
    for e in result.get("sustained", {}).get("entries", []):
        if "shape" in e:
            out[f"sustained {e['shape']} {e['kind']}: median over burst"] = e.get("median_over_burst")
        else:
            out[f"sustained_{e['kind']}_last_over_first"] = e["last_over_first"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for fp8_scaling_microbench.yaml")
    ap.add_argument("--quick", action="store_true", help="four linears, 5 s of sustained load")
    ap.add_argument("--sustain-s", type=float, default=20.0, help="seconds of each sustained GEMM (default 20)")
    ap.add_argument("--sustain-shapes", choices=("cube", "all"), default="cube", help="8192^3 alone (default), or SUSTAIN_SHAPES")
    ap.add_argument("--sections", default="layouts,scaling,sustained", help="comma-separated sections to run (default all)")
    ap.add_argument("--summarise", metavar="FILE", help="print the summary of a stored result and exit")
    args = ap.parse_args()
    if args.summarise:
        with open(args.summarise) as fh:
            print(yaml.safe_dump(summarise(yaml.safe_load(fh)), sort_keys=False), end="")
        return 0
    if not args.out:
        ap.error("--out is required (or --summarise FILE)")
    import torch
    from gpu_microbench import Timer, nominal_peaks, smi_id, smi_query, smi_resolve_id
    from kernel_microbench import Section, finish, run_section, save

    if not torch.cuda.is_available():
        print("CUDA not available", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "fp8_scaling_microbench.yaml")
    torch.manual_seed(0)
    name = torch.cuda.get_device_name(0)
    peaks = nominal_peaks(name) or {"bf16_tflops": 989.4, "fp8_tflops": 1978.9, "hbm_gbps": 3350.0, "source": "assumed H100 SXM"}
    gpu = smi_resolve_id(smi_id())
    timer = Timer()
    result = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device_name": name,
            "torch_version": str(torch.__version__),
            "cuda_version": str(torch.version.cuda),
            "cublas_lt": str(getattr(torch.backends.cuda, "preferred_blas_library", lambda: "?")()),
            "nominal_peaks": peaks,
            "timer": timer.sleep_note,
            "quick": args.quick,
            "nvidia_smi_start": smi_query(gpu),
            "section_status": {},
        }
    }
    shapes = tuple(SUSTAIN_SHAPES) if args.sustain_shapes == "all" else ("8192^3",)
    held = (5.0 if args.quick else args.sustain_s) * len(shapes) * (3 if len(shapes) > 1 else 2)
    sections = (("layouts", 30.0), ("scaling", 150.0), ("sustained", 1.25 * held + 20 * len(shapes)))
    sections = tuple(s for s in sections if s[0] in args.sections.split(","))
    layouts = {s: {"layout": None} for s in SCALINGS}

    def find():
        layouts.update(find_layouts(torch, "cuda"))
        result["meta"]["block_layouts"] = layouts

    for sec_name, budget in sections:
        print(f"--- {sec_name} (budget {budget:.0f} s)", flush=True)
        section = Section(sec_name, budget)
        if sec_name == "layouts":
            measure = find
        elif sec_name == "scaling":
            measure = lambda: scaling_section(torch, timer, section, layouts, peaks["fp8_tflops"], args.quick)  # noqa: E731
        else:
            measure = lambda: sustained_section(torch, timer, section, 5.0 if args.quick else args.sustain_s, gpu, shapes)  # noqa: E731
        run_section(result, section, measure, summarise, path, keep=sec_name != "layouts")
    result["meta"]["nvidia_smi_end"] = smi_query(gpu)
    save(result, path)
    return finish(result, path)


if __name__ == "__main__":
    sys.exit(main())
