#!/usr/bin/env python3
"""GPU microbenchmarks of the serving (decode) kernels, for parasol's inference model.

Usage:
    python3 benchmarks/gpu_decode_microbench.py --out DIR [--quick]

Writes DIR/decode_microbench.yaml and prints a summary. Needs torch (and triton for the attention
section); nothing else. About two minutes on one H100.

What is measured (every op captured in a CUDA graph and replayed, so the times are GPU time
without launch gaps; operands rotate over enough copies that each call reads HBM, not L2):

stream
    read-only ``x.sum()`` and ``copy_`` of 2 GiB: the HBM bandwidth plain streaming reaches.
gemm_bf16 / gemm_fp8
    the weight GEMMs of a decode step: ``x @ W.t()`` with W (n, k) as nn.Linear stores it, m
    tokens in 1 … 1024 (FP8: ``torch._scaled_mm``, m from 16, per-tensor scales), for the layer
    shapes of Llama 2 7B (and GPT-J's QKV) and Llama 2 70B at tp 4. Reported: time, the weight bytes
    over time as a fraction of the nominal HBM bandwidth (``weight_stream_efficiency``), all
    operand bytes likewise, and FLOP/s as a fraction of the dense peak.
decode_attention
    one decode step of attention (one query per sequence against a cached context, online
    softmax, bf16 K/V), written in Triton two ways: ``grouped`` (one program per sequence and KV
    head computes all the query heads that share it, reading K/V once, as FlashDecoding/XQA do)
    and ``per_query_head`` (one program per sequence and query head, each reading its KV head, as
    TensorRT-LLM's masked MHA did before XQA); MHA and GQA shapes. Reported: time and the K/V
    bytes of the cache over time as a fraction of the HBM bandwidth. The per-query-head form
    pads each program's single query to a 16-row tensor-core tile, so it is bound by that wasted
    work, not by memory (its time is the same on H100 and H200): it does not measure re-reads.
kernel_floor
    200 back-to-back tiny kernels (``x.add_(1)`` on one element) in a CUDA graph: the time one
    dependent kernel costs when it has no work.

The numbers in problems/measurements/decode-microbench.yaml come from a condensed copy of this
script (the same operations, shapes and timing), run on one H100 SXM and one H200.
"""

from __future__ import annotations

import argparse
import datetime
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

PEAK_HBM = {"H100": 3.35e12, "H200": 4.8e12, "A100": 2.039e12}  # nominal datasheet bytes/s
PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12, "A100": 312e12}
PEAK_FP8 = {"H100": 1978.9e12, "H200": 1978.9e12}

# (label, k, n): the weight GEMMs of a decode step
SHAPES = [
    ("qkv-h4096", 4096, 12288),
    ("llama7b-gateup", 4096, 22016),
    ("llama7b-down", 11008, 4096),
    ("llama70b-tp4-qkv", 8192, 2560),
    ("llama70b-tp4-gateup", 8192, 14336),
    ("llama70b-tp4-down", 7168, 8192),
]
TOKENS = [1, 16, 64, 128, 256, 512, 1024]
# (label, query heads, kv heads, head dim): heads on one GPU
ATTENTION = [
    ("gptj-mha", 16, 16, 256),
    ("llama7b-mha", 32, 32, 128),
    ("llama70b-tp4-gqa8", 16, 2, 128),
    ("llama70b-tp8-gqa8", 8, 1, 128),
    ("falcon180b-tp8-gqa29", 29, 1, 64),
]
ROTATE_BYTES = 5.4e8  # operands cycled per graph so that nothing is served from L2 (50 MB on H100)


def graph_time_s(fn, calls: int, reps: int = 7) -> float:
    """Median GPU seconds per call of ``fn(i)`` over ``calls`` calls captured in one CUDA graph."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for i in range(3):
            fn(i)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(i)
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3 / calls)
    del graph
    return statistics.median(times)


def device_key() -> str:
    name = torch.cuda.get_device_name()
    return next((k for k in PEAK_HBM if k in name), "H100")


def sec_stream(res, key):
    x = torch.empty(2**30, dtype=torch.bfloat16, device="cuda").normal_()
    y = torch.empty_like(x)
    out = torch.empty((), dtype=torch.float32, device="cuda")
    t_sum = graph_time_s(lambda i: torch.sum(x, dim=0, dtype=torch.float32, out=out), 8)
    t_copy = graph_time_s(lambda i: y.copy_(x), 8)
    res["stream"] = {
        "bytes": 2**31,
        "sum_s": t_sum,
        "sum_efficiency": 2**31 / t_sum / PEAK_HBM[key],
        "copy_s": t_copy,
        "copy_efficiency": 2**32 / t_copy / PEAK_HBM[key],
    }
    del x, y


def sec_gemm(res, key, fp8: bool, quick: bool):
    rows = []
    elt = 1 if fp8 else 2
    tokens = [m for m in TOKENS if m >= 16] if fp8 else TOKENS
    shapes = SHAPES[::3] if quick else SHAPES
    for label, k, n in shapes:
        copies = max(2, math.ceil(ROTATE_BYTES / (n * k * elt)))
        if fp8:
            ws = [torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn) for _ in range(copies)]
        else:
            ws = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        one = torch.tensor(1.0, device="cuda")
        for m in tokens:
            if fp8:
                x = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)

                def fn(i, x=x):
                    return torch._scaled_mm(
                        x, ws[i % copies].t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
                    )
            else:
                x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
                y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)

                def fn(i, x=x, y=y):
                    return torch.mm(x, ws[i % copies].t(), out=y)

            try:
                t = graph_time_s(fn, 2 * copies)
            except Exception as exc:  # noqa: BLE001 - a shape a backend rejects is recorded, not fatal
                rows.append({"shape": label, "m": m, "k": k, "n": n, "error": str(exc).splitlines()[0][:200]})
                continue
            wbytes = n * k * elt
            allbytes = wbytes + m * k * elt + m * n * 2
            peak = (PEAK_FP8 if fp8 else PEAK_BF16)[key]
            rows.append(
                {
                    "shape": label,
                    "m": m,
                    "k": k,
                    "n": n,
                    "seconds": t,
                    "weight_stream_efficiency": round(wbytes / t / PEAK_HBM[key], 4),
                    "bytes_efficiency": round(allbytes / t / PEAK_HBM[key], 4),
                    "flops_efficiency": round(2 * m * n * k / t / peak, 4),
                }
            )
        del ws
        torch.cuda.empty_cache()
    res["gemm_fp8" if fp8 else "gemm_bf16"] = rows


def _attention_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def decode_kernel(
        Q,
        K,
        V,
        O,
        scale,
        sqb,
        sqh,
        skb,
        skh,
        skt,
        sob,
        soh,
        NQ: tl.constexpr,
        QP: tl.constexpr,
        GROUP: tl.constexpr,
        D: tl.constexpr,
        BLOCK: tl.constexpr,
        CTX: tl.constexpr,
    ):
        q0 = tl.program_id(0) * NQ  # first query head of this program (heads vary fastest, as in
        b = tl.program_id(1)  # TensorRT-LLM's masked MHA grid: dim x = heads, y = batch)
        kh = q0 // GROUP
        rows = tl.arange(0, QP)
        d = tl.arange(0, D)
        rmask = rows < NQ
        q = tl.load(Q + b * sqb + (q0 + rows)[:, None] * sqh + d[None, :], mask=rmask[:, None], other=0.0)
        m = tl.full([QP], float("-inf"), tl.float32)
        lsum = tl.zeros([QP], tl.float32)
        acc = tl.zeros([QP, D], tl.float32)
        t = tl.arange(0, BLOCK)
        kbase = K + b * skb + kh * skh
        vbase = V + b * skb + kh * skh
        for start in range(0, CTX, BLOCK):
            k = tl.load(kbase + (start + t)[:, None] * skt + d[None, :])
            s = tl.dot(q, tl.trans(k)) * scale
            mn = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp(m - mn)
            p = tl.exp(s - mn[:, None])
            lsum = lsum * alpha + tl.sum(p, 1)
            v = tl.load(vbase + (start + t)[:, None] * skt + d[None, :])
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = mn
        out = acc / lsum[:, None]
        tl.store(O + b * sob + (q0 + rows)[:, None] * soh + d[None, :], out.to(O.dtype.element_ty), mask=rmask[:, None])

    return decode_kernel


def decode_attention(kernel, q, k, v, o, group: int, grouped: bool):
    """One decode-attention step: q (b, h, d), k/v (b, kvh, ctx, d) bf16, o like q."""
    b, h, d = q.shape
    ctx = k.shape[2]
    nq = group if grouped else 1
    qp = max(16, 1 << (nq - 1).bit_length())
    grid = (h // nq, b)
    kernel[grid](
        q,
        k,
        v,
        o,
        1.0 / math.sqrt(d),
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        k.stride(2),
        o.stride(0),
        o.stride(1),
        NQ=nq,
        QP=qp,
        GROUP=group,
        D=d,
        BLOCK=64,
        CTX=ctx,
        num_warps=4,
    )


def sec_attention(res, key, quick: bool):
    kernel = _attention_kernel()
    rows = []
    for label, h, kvh, d in ATTENTION[:2] + ATTENTION[3:4] if quick else ATTENTION:
        group = h // kvh
        for ctx in (2048,):
            b = max(64, 2048 // kvh)  # at least ~8 programs per SM in the grouped form
            kv_bytes = 2 * b * kvh * ctx * d * 2
            q = torch.randn(b, h, d, device="cuda", dtype=torch.bfloat16)
            kc = torch.randn(b, kvh, ctx, d, device="cuda", dtype=torch.bfloat16)
            vc = torch.randn_like(kc)
            o = torch.empty_like(q)
            # correctness against PyTorch on the first sequences
            ref = torch.nn.functional.scaled_dot_product_attention(
                q[:2, :, None, :].float(), kc[:2].repeat_interleave(group, 1).float(), vc[:2].repeat_interleave(group, 1).float()
            )[:, :, 0]
            row = {"shape": label, "heads": h, "kv_heads": kvh, "head_dim": d, "batch": b, "context": ctx, "kv_bytes": kv_bytes}
            for mode, grouped in (("grouped", True), ("per_query_head", False)):
                decode_attention(kernel, q, kc, vc, o, group, grouped)
                err = (o[:2].float() - ref).abs().max().item()
                t = graph_time_s(lambda i, grouped=grouped: decode_attention(kernel, q, kc, vc, o, group, grouped), 4)
                row[mode] = {"seconds": t, "kv_stream_efficiency": round(kv_bytes / t / PEAK_HBM[key], 4), "max_abs_error": err}
            rows.append(row)
            del q, kc, vc, o
            torch.cuda.empty_cache()
    res["decode_attention"] = rows


def sec_floor(res):
    x = torch.zeros(1, device="cuda")
    res["kernel_floor"] = {"add_1elem_s": graph_time_s(lambda i: x.add_(1), 200)}


def smi() -> dict:
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout.strip()
    except Exception as exc:  # noqa: BLE001
        out = f"unavailable: {exc}"
    return {"nvidia_smi": out}


def main() -> int:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    key = device_key()
    res = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device_name": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "nominal_hbm_bytes_per_s": PEAK_HBM[key],
            "method": "CUDA graph of back-to-back calls, median of 7 replays "
            "/ calls; operands rotated over >= 512 MiB so that calls read HBM",
            **smi(),
        }
    }
    sections = [
        ("stream", lambda: sec_stream(res, key)),
        ("kernel_floor", lambda: sec_floor(res)),
        ("gemm_bf16", lambda: sec_gemm(res, key, False, args.quick)),
        ("gemm_fp8", lambda: sec_gemm(res, key, True, args.quick)),
        ("decode_attention", lambda: sec_attention(res, key, args.quick)),
    ]
    for name, run in sections:
        start = time.perf_counter()
        try:
            run()
            status = f"ok, {time.perf_counter() - start:.1f} s"
        except Exception as exc:  # noqa: BLE001 - one failing section must not lose the others
            status = f"failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        res.setdefault("meta", {}).setdefault("sections", {})[name] = status
        print(name, status, flush=True)
        (out / "decode_microbench.yaml").write_text(yaml.safe_dump(res, sort_keys=False, width=140))
    print(yaml.safe_dump({k: v for k, v in res.items() if k in ("stream", "kernel_floor")}, sort_keys=False))
    for sec in ("gemm_bf16", "gemm_fp8"):
        for r in res.get(sec, []):
            if "seconds" in r:
                print(
                    f"{sec} {r['shape']:22s} m {r['m']:5d}  {r['seconds'] * 1e6:9.1f} us  weights {r['weight_stream_efficiency']:.3f}  "
                    f"flops {r['flops_efficiency']:.3f}"
                )
            else:
                print(sec, r)
    for r in res.get("decode_attention", []):
        print(
            f"attention {r['shape']:22s} b {r['batch']:5d} ctx {r['context']:5d}  grouped {r['grouped']['kv_stream_efficiency']:.3f} "
            f"({r['grouped']['max_abs_error']:.1e})  per_query_head {r['per_query_head']['kv_stream_efficiency']:.3f} "
            f"slowdown {r['per_query_head']['seconds'] / r['grouped']['seconds']:.2f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
