#!/usr/bin/env python3
"""GPU microbenchmarks for calibrating parasol's analytical LLM-training model.

Usage:
    python3 benchmarks/gpu_microbench.py --out DIR [--quick] [--time-budget S] [--sections a,b]

Writes DIR/gpu_microbench.yaml (a plain ``yaml.safe_dump`` of dicts/lists of numbers and
strings; it is rewritten after every section, so a partial run leaves partial results) and
prints a human-readable summary.  Only torch, pyyaml and the standard library are needed.
The default run is sized to finish in about 3.5 minutes on one H100/H200; ``--quick`` is a
smoke test of well under a minute.

What is measured
----------------
gemm_bf16
    ``torch.mm(a, b, out=c)`` with bf16 row-major a (m,k) and b (k,n) filled with random
    normal data.  Transformer shapes: tokens m in {1024..16384}; for hidden h the four
    GEMMs of a layer, QKV (k=h, n=3h), proj (k=h, n=h), fc1 (k=h, n=4h), fc2 (k=4h, n=h),
    each split for tensor parallel t in {1,2,4,8} (n/t for QKV and fc1, k/t for proj and
    fc2).  Core set h in {4096, 8192, 12288}, then square sizes 512..16384, then the extra
    hidden sizes 2048 and 16384 while the section's time budget lasts.
    FLOPs = 2*m*n*k.  Derived: median efficiency (fraction of nominal peak) per half decade
    of FLOPs, the form parasol's device files use (``efficiency.gemm``).
gemm_fp8
    ``torch._scaled_mm`` with float8_e4m3fn inputs (a row-major (m,k); b = b_t.t() with b_t
    an (n,k) contiguous tensor, i.e. column-major, as _scaled_mm requires), per-tensor
    scales ``torch.tensor(1.0)``, bf16 output, with use_fast_accum False and True.
    Square sizes 1024..16384 and transformer shapes (m in {2048, 8192, 16384},
    h in {4096, 8192, 12288}, t in {1, 2, 4, 8}).
attention
    ``F.scaled_dot_product_attention`` on bf16 q,k,v of shape (batch, heads, seq, head_dim),
    causal and not, head_dim 64/128, seq 1024..8192, heads*head_dim in {4096, 8192},
    batch*seq = 16384 tokens.  Backend forced with ``sdpa_kernel(FLASH_ATTENTION)`` (falls
    back to the default choice if that errors); then the same sweep with CUDNN_ATTENTION
    when time allows.  The kernel that actually ran is recorded (the autograd node name).
    Forward is timed with grad enabled (as in training); forward+backward is
    ``torch.autograd.grad(out, (q,k,v), grad_out)`` with a random grad_out.
    FLOPs (FlashAttention-2 convention): fwd = 4*b*heads*s*s*d, halved for causal;
    bwd = 2.5 * fwd; fwd+bwd = 3.5 * fwd.
memory
    Device-to-device ``copy_`` (1 and 4 GiB), fused elementwise ``torch.addcmul(z, x, y,
    out=o)`` (o = z + x*y; 3 reads + 1 write) and ``torch.add(x, y, out=o)`` with 1, 2 and
    4 GiB per tensor, a read-only reduction ``x.sum()``, a write-only ``fill_``, and
    layer_norm / rms_norm / softmax / gelu forward on (16384, 8192) bf16.  Bandwidth =
    bytes read + bytes written (minimal, i.e. each tensor touched once) / time, GB/s = 1e9 B/s.
gemm_bf16_linear_layouts (extra, runs last)
    The three GEMMs of an nn.Linear step with PyTorch's weight layout W (n,k):
    fprop X @ W.t(), dgrad dY @ W, wgrad dY.t() @ X, for a few transformer shapes, to see
    whether backward layouts (and the contraction over tokens in wgrad) run as fast as fprop.
host_overhead
    CPU cost per eager launch: 1000 x ``x.add_(1)`` on a 1-element tensor, 1000 tiny
    matmuls, and the round trip of launch + ``torch.cuda.synchronize``.

How it is timed
---------------
Per measured op: 3 warm-up calls; one call timed with CUDA events to estimate its length;
``n_inner`` = enough back-to-back calls for ~2 ms of GPU time (1..256); one untimed
calibration repetition that also measures the host's enqueue time; then ``reps``
repetitions (10, or 20 when one call is under 100 us), each = a GPU spin kernel
(``torch.cuda._sleep``, long enough for the CPU to enqueue the whole repetition ahead of
the GPU), a start event, n_inner calls, an end event.  The recorded time per call is the
median over repetitions of (end - start) / n_inner, so it is GPU execution time without
launch gaps (the ``host_enqueue_per_call_s`` field shows what the CPU needed; where that
exceeds the GPU time an eager program would be launch-bound).  Inputs are reused across
calls, so L2 is warm for shapes that fit in it (50 MB on H100; see l2_cache_bytes).  Every section has a
time budget; shapes left when it runs out are counted as ``skipped_for_time``.  Clocks and
power are sampled with nvidia-smi (when present) during the compute sections.
"""

import argparse
import contextlib
import datetime
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback

import yaml

try:
    import torch
    import torch.nn.functional as F
except Exception as exc:  # pragma: no cover - the script is useless without torch
    print(f"cannot import torch: {exc}", file=sys.stderr)
    raise

GIB = 1 << 30
BF16 = torch.bfloat16


def num(x, digits=6):
    """A plain Python float (rounded to `digits` significant digits) for yaml.safe_dump."""
    if x is None:
        return None
    x = float(x)
    if not math.isfinite(x) or x == 0.0:
        return x
    return float(f"{x:.{digits}g}")


def short_err(exc):
    s = f"{type(exc).__name__}: {exc}"
    return s if len(s) <= 800 else s[:800] + " ..."


def free_cuda():
    try:
        torch.cuda.synchronize()
    except Exception:
        pass
    torch.cuda.empty_cache()


# --------------------------------------------------------------------------------------
# nvidia-smi (optional)
# --------------------------------------------------------------------------------------

SMI_FIELDS = [  # asked together; supported by any recent driver
    "name",
    "driver_version",
    "pstate",
    "clocks.sm",
    "clocks.max.sm",
    "clocks.mem",
    "clocks.max.mem",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "memory.total",
]
SMI_OPTIONAL = [  # asked together, then one at a time if that fails
    "clocks.applications.graphics",
    "enforced.power.limit",
    "ecc.mode.current",
    "clocks_event_reasons.active",
    "mig.mode.current",
]


def smi_id():
    """PCI bus id of the CUDA device, for `nvidia-smi -i` (None if unknown)."""
    try:
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        dom, bus, dev = (getattr(p, a, None) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id"))
        if None in (dom, bus, dev):
            return None
        return f"{int(dom):08X}:{int(bus):02X}:{int(dev):02X}.0"
    except Exception:
        return None


def _smi_call(fields, gpu_id, timeout):
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise RuntimeError("nvidia-smi not found")
    cmd = [exe, "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits"]
    if gpu_id:
        cmd += ["-i", gpu_id]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError((r.stdout + r.stderr).strip()[:300])
    line = r.stdout.strip().splitlines()[0]
    vals = [v.strip() for v in line.split(",")]
    if len(vals) != len(fields):
        raise RuntimeError("unexpected nvidia-smi output: " + line)
    return dict(zip(fields, vals))


def smi_resolve_id(gpu_id):
    """The -i argument that works (gpu_id or None), or False when nvidia-smi is unusable."""
    if shutil.which("nvidia-smi") is None:
        return False
    for cand in [gpu_id, None] if gpu_id else [None]:
        try:
            _smi_call(["name"], cand, 10)
            return cand
        except Exception:
            continue
    return False


def smi_query(gpu_id, optional=True, timeout=10):
    """{field: value string} from nvidia-smi; {} when it is unusable (gpu_id False)."""
    if gpu_id is False:
        return {}
    out = {}
    try:
        out.update(_smi_call(SMI_FIELDS, gpu_id, timeout))
    except Exception as exc:
        out["error"] = short_err(exc)
    if optional:
        try:
            out.update(_smi_call(SMI_OPTIONAL, gpu_id, timeout))
        except Exception:
            for f in SMI_OPTIONAL:
                try:
                    out.update(_smi_call([f], gpu_id, timeout))
                except Exception:
                    pass
    return out


class SmiSampler:
    """Background nvidia-smi sampling of SM clock, memory clock, power and temperature."""

    FIELDS = ["clocks.sm", "clocks.mem", "power.draw", "temperature.gpu"]

    def __init__(self, gpu_id, period_s=2.0):
        self.gpu_id = gpu_id
        self.period_s = period_s
        self.enabled = gpu_id is not False
        self.samples = []
        self._stop = threading.Event()
        self._thread = None

    def _loop(self):
        while not self._stop.wait(self.period_s):
            try:
                d = _smi_call(self.FIELDS, self.gpu_id, 4)
                s = {}
                for f in self.FIELDS:
                    try:
                        s[f] = float(d[f])
                    except Exception:
                        pass
                if s:
                    self.samples.append(s)
            except Exception:
                pass

    def __enter__(self):
        self.samples = []
        if self.enabled:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=6)
            self._thread = None
        return False

    def summary(self):
        if not self.samples:
            return None
        out = {"n_samples": len(self.samples), "period_s": self.period_s}
        for f in self.FIELDS:
            v = [s[f] for s in self.samples if f in s]
            if v:
                out[f.replace(".", "_")] = {"min": num(min(v)), "median": num(statistics.median(v)), "max": num(max(v))}
        return out


# --------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------


class Timer:
    def __init__(self):
        self.cycles_per_s = None
        self.sleep_note = "torch.cuda._sleep unavailable: no GPU-side pre-fill"
        if hasattr(torch.cuda, "_sleep"):
            try:
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                rates = []
                for cycles in (1_000_000, 10_000_000, 10_000_000):
                    torch.cuda.synchronize()
                    s.record()
                    torch.cuda._sleep(cycles)
                    e.record()
                    e.synchronize()
                    rates.append(cycles / max(s.elapsed_time(e) * 1e-3, 1e-9))
                self.cycles_per_s = statistics.median(rates[1:])
                self.sleep_note = f"torch.cuda._sleep calibrated at {self.cycles_per_s / 1e9:.3f} Gcycles/s"
            except Exception as exc:
                self.cycles_per_s = None
                self.sleep_note = "torch.cuda._sleep failed: " + short_err(exc)

    def gpu_sleep(self, seconds):
        if self.cycles_per_s and seconds > 0:
            torch.cuda._sleep(int(seconds * self.cycles_per_s))

    def bench(self, fn, warmup=3, reps=10, small_reps=20, small_s=1e-4, target_rep_s=2e-3, max_inner=256):
        """Median GPU seconds per call of fn(); see the module docstring."""
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        s = torch.cuda.Event(enable_timing=True)
        e = torch.cuda.Event(enable_timing=True)
        # one call, GPU pre-filled so the start event does not count the launch gap
        self.gpu_sleep(5e-4)
        s.record()
        fn()
        e.record()
        e.synchronize()
        t0 = max(s.elapsed_time(e) * 1e-3, 1e-7)
        n_inner = int(min(max_inner, max(1, round(target_rep_s / t0))))
        nreps = small_reps if t0 < small_s else reps
        # calibration repetition: how long does the host need to enqueue n_inner calls?
        torch.cuda.synchronize()
        self.gpu_sleep(min(0.05, n_inner * 60e-6 + 2e-4))
        h0 = time.perf_counter()
        for _ in range(n_inner):
            fn()
        enqueue = time.perf_counter() - h0
        torch.cuda.synchronize()
        sleep_s = min(0.05, 1.3 * enqueue + 1e-4)
        times = []
        for _ in range(nreps):
            self.gpu_sleep(sleep_s)
            s.record()
            for _ in range(n_inner):
                fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e) * 1e-3 / n_inner)
        med = statistics.median(times)
        return {
            "seconds": med,
            "seconds_min": min(times),
            "seconds_max": max(times),
            "n_inner": n_inner,
            "reps": nreps,
            "host_enqueue_per_call_s": enqueue / n_inner,
        }


def timing_fields(r):
    return {
        "seconds": num(r["seconds"]),
        "seconds_min": num(r["seconds_min"]),
        "rel_spread": num((r["seconds_max"] - r["seconds_min"]) / r["seconds"], 3),
        "n_inner": int(r["n_inner"]),
        "reps": int(r["reps"]),
        "host_enqueue_per_call_s": num(r["host_enqueue_per_call_s"], 4),
        "eager_launch_bound": bool(r["host_enqueue_per_call_s"] > r["seconds"]),
    }


class Budget:
    def __init__(self, seconds, hard_deadline):
        self.t0 = time.time()
        self.deadline = min(self.t0 + seconds, hard_deadline)

    def left(self):
        return self.deadline - time.time()

    def ok(self):
        return time.time() < self.deadline


# --------------------------------------------------------------------------------------
# Reference peaks
# --------------------------------------------------------------------------------------


def nominal_peaks(name):
    """Dense datasheet peaks (TFLOP/s, GB/s) for known devices, else None."""
    n = name.lower()
    if "h200" in n:
        if "nvl" in n:
            return {
                "bf16_tflops": 835.5,
                "fp8_tflops": 1670.5,
                "hbm_gbps": 4800.0,
                "source": "NVIDIA H200 NVL datasheet (dense = sparse / 2)",
            }
        return {
            "bf16_tflops": 989.4,
            "fp8_tflops": 1978.9,
            "hbm_gbps": 4800.0,
            "source": "NVIDIA H200 SXM datasheet (dense = sparse / 2)",
        }
    if "h100" in n:
        if "pcie" in n:
            return {
                "bf16_tflops": 756.5,
                "fp8_tflops": 1513.0,
                "hbm_gbps": 2000.0,
                "source": "NVIDIA H100 PCIe datasheet (dense = sparse / 2)",
            }
        if "nvl" in n:
            return {
                "bf16_tflops": 835.5,
                "fp8_tflops": 1670.5,
                "hbm_gbps": 3900.0,
                "source": "NVIDIA H100 NVL datasheet (dense = sparse / 2)",
            }
        return {
            "bf16_tflops": 989.4,
            "fp8_tflops": 1978.9,
            "hbm_gbps": 3350.0,
            "source": "NVIDIA H100 SXM datasheet (dense = sparse / 2)",
        }
    if "a100" in n:
        return {
            "bf16_tflops": 312.0,
            "fp8_tflops": None,
            "hbm_gbps": 2039.0 if "80" in n else 1555.0,
            "source": "NVIDIA A100 datasheet",
        }
    return None


def frac(value, peak):
    if value is None or not peak:
        return None
    return num(value / peak, 4)


# --------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------

LAYERS = {  # (k, n) of the GEMM for hidden h and tensor-parallel degree t
    "qkv": lambda h, t: (h, 3 * h // t),
    "proj": lambda h, t: (h // t, h),
    "fc1": lambda h, t: (h, 4 * h // t),
    "fc2": lambda h, t: (4 * h // t, h),
}


def efficiency_by_flops(entries, key="efficiency"):
    """Median efficiency per half decade of FLOPs (bins centred on 1e9, 3.16e9, 1e10, ...)."""
    bins = {}
    for e in entries:
        if e.get(key) is None or "flops" not in e:
            continue
        d = round(2 * math.log10(e["flops"])) / 2
        bins.setdefault(d, []).append(e[key])
    rows = []
    for d in sorted(bins):
        v = bins[d]
        rows.append(
            {
                "flops": num(10.0**d),
                "median_efficiency": num(statistics.median(v), 4),
                "min": num(min(v), 4),
                "max": num(max(v), 4),
                "n": len(v),
            }
        )
    return rows


def sec_gemm_bf16(ctx):
    timer, budget, peak, quick = ctx["timer"], ctx["budget"], ctx["peak_bf16"], ctx["quick"]
    dev = "cuda"
    plan = []
    if quick:
        ms, hs, ts, squares, extra_hs = [1024, 4096], [4096], [1, 8], [1024, 4096], []
    else:
        ms, hs, ts = [1024, 2048, 4096, 8192, 16384], [4096, 8192, 12288], [1, 2, 4, 8]
        squares, extra_hs = [512, 1024, 2048, 4096, 8192, 16384], [2048, 16384]
    for h in hs:
        for t in ts:
            for layer, kn in LAYERS.items():
                for m in ms:
                    k, n = kn(h, t)
                    plan.append(("transformer", layer, h, t, m, n, k))
    for s in squares:
        plan.append(("square", "square", None, None, s, s, s))
    for h in extra_hs:
        for t in ts:
            for layer, kn in LAYERS.items():
                for m in ms:
                    k, n = kn(h, t)
                    plan.append(("transformer", layer, h, t, m, n, k))
    entries, skipped = [], 0
    for kind, layer, h, t, m, n, k in plan:
        if not budget.ok():
            skipped += 1
            continue
        ent = {"kind": kind, "layer": layer, "m": m, "n": n, "k": k}
        if h is not None:
            ent.update({"h": h, "t": t})
        flops = 2 * m * n * k
        ent["flops"] = float(flops)
        try:
            a = torch.randn(m, k, device=dev, dtype=BF16)
            b = torch.randn(k, n, device=dev, dtype=BF16)
            c = torch.empty(m, n, device=dev, dtype=BF16)
            r = timer.bench(lambda: torch.mm(a, b, out=c))
            ent.update(timing_fields(r))
            ent["tflops"] = num(flops / r["seconds"] / 1e12, 5)
            ent["efficiency"] = frac(ent["tflops"], peak)
            del a, b, c
        except Exception as exc:
            ent["error"] = short_err(exc)
            free_cuda()
        entries.append(ent)
        _progress("gemm_bf16", ent)
    out = {"entries": entries, "skipped_for_time": skipped, "efficiency_by_flops": efficiency_by_flops(entries)}
    free_cuda()
    return out


def sec_gemm_fp8(ctx):
    timer, budget, peak, quick = ctx["timer"], ctx["budget"], ctx["peak_fp8"], ctx["quick"]
    dev = "cuda"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return {"error": "torch._scaled_mm or float8_e4m3fn not available", "entries": []}
    if quick:
        squares, ms, hs, ts = [4096], [4096], [4096], [1]
    else:
        squares, ms, hs, ts = [1024, 2048, 4096, 8192, 16384], [2048, 8192, 16384], [4096, 8192, 12288], [1, 2, 4, 8]
    plan = [("square", "square", None, None, s, s, s) for s in squares]
    for h in hs:
        for t in ts:
            for layer, kn in LAYERS.items():
                for m in ms:
                    k, n = kn(h, t)
                    plan.append(("transformer", layer, h, t, m, n, k))
    fp8 = torch.float8_e4m3fn
    sa = torch.tensor(1.0, device=dev)
    sb = torch.tensor(1.0, device=dev)

    def call(a, b, fast):
        out = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=BF16, use_fast_accum=fast)
        return out[0] if isinstance(out, tuple) else out

    entries, skipped, first_error = [], 0, None
    for kind, layer, h, t, m, n, k in plan:
        if not budget.ok():
            skipped += 2
            continue
        try:
            a = torch.randn(m, k, device=dev, dtype=BF16).to(fp8)
            b_t = torch.randn(n, k, device=dev, dtype=BF16).to(fp8)
            b = b_t.t()  # (k, n), column-major
        except Exception as exc:
            entries.append({"kind": kind, "layer": layer, "m": m, "n": n, "k": k, "error": short_err(exc)})
            free_cuda()
            continue
        for fast in (False, True):
            ent = {"kind": kind, "layer": layer, "m": m, "n": n, "k": k}
            if h is not None:
                ent.update({"h": h, "t": t})
            ent["use_fast_accum"] = fast
            flops = 2 * m * n * k
            ent["flops"] = float(flops)
            try:
                r = timer.bench(lambda: call(a, b, fast))
                ent.update(timing_fields(r))
                ent["tflops"] = num(flops / r["seconds"] / 1e12, 5)
                ent["efficiency"] = frac(ent["tflops"], peak)
            except Exception as exc:
                ent["error"] = short_err(exc)
                first_error = first_error or ent["error"]
                free_cuda()
            entries.append(ent)
            _progress("gemm_fp8", ent)
        del a, b, b_t
        if first_error and not any("tflops" in e for e in entries):
            # _scaled_mm does not work here at all: record it and stop
            return {"error": first_error, "entries": entries}
    out = {
        "entries": entries,
        "skipped_for_time": skipped,
        "efficiency_by_flops_no_fast_accum": efficiency_by_flops([e for e in entries if not e.get("use_fast_accum")]),
        "efficiency_by_flops_fast_accum": efficiency_by_flops([e for e in entries if e.get("use_fast_accum")]),
    }
    free_cuda()
    return out


def sec_attention(ctx):
    timer, budget, peak, quick = ctx["timer"], ctx["budget"], ctx["peak_bf16"], ctx["quick"]
    dev = "cuda"
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except Exception as exc:
        SDPBackend, sdpa_kernel = None, None
        import_err = short_err(exc)
    else:
        import_err = None
    tokens = 16384
    if quick:
        seqs, dims, hiddens, backends = [2048], [128], [4096], ["flash"]
    else:
        seqs, dims, hiddens, backends = [1024, 2048, 4096, 8192], [64, 128], [4096, 8192], ["flash", "cudnn"]
    plan = []
    for be in backends:
        for d in dims:
            for hid in hiddens:
                for s in seqs:
                    for causal in (False, True):
                        plan.append((be, d, hid, s, causal))

    def ctx_for(be):
        if sdpa_kernel is None or be == "default":
            return contextlib.nullcontext()
        return sdpa_kernel([{"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[be]])

    entries, skipped = [], 0
    for be, d, hid, s, causal in plan:
        if not budget.ok():
            skipped += 1
            continue
        heads = hid // d
        b = max(1, tokens // s)
        fwd_flops = 4.0 * b * heads * s * s * d * (0.5 if causal else 1.0)
        ent = {
            "backend_requested": be,
            "batch": b,
            "heads": heads,
            "seq": s,
            "head_dim": d,
            "hidden": hid,
            "causal": causal,
            "fwd_flops": fwd_flops,
            "bwd_flops": 2.5 * fwd_flops,
            "fwd_bwd_flops": 3.5 * fwd_flops,
        }
        try:
            q = torch.randn(b, heads, s, d, device=dev, dtype=BF16, requires_grad=True)
            k = torch.randn(b, heads, s, d, device=dev, dtype=BF16, requires_grad=True)
            v = torch.randn(b, heads, s, d, device=dev, dtype=BF16, requires_grad=True)
            go = torch.randn(b, heads, s, d, device=dev, dtype=BF16)

            def fwd():
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

            def fwd_bwd():
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                torch.autograd.grad(o, (q, k, v), go)

            used = be
            try:
                with ctx_for(be):
                    o = fwd()
                    torch.autograd.grad(o, (q, k, v), go)
            except Exception as exc:
                if be != "flash":
                    raise
                ent["forced_backend_error"] = short_err(exc)
                used = "default"
                with ctx_for(used):
                    o = fwd()
            ent["backend_used"] = used
            ent["kernel"] = type(o.grad_fn).__name__ if o.grad_fn is not None else "none"
            del o
            with ctx_for(used):
                rf = timer.bench(fwd)
                rfb = timer.bench(fwd_bwd)
            tf, tfb = rf["seconds"], rfb["seconds"]
            ent["fwd"] = timing_fields(rf)
            ent["fwd_bwd"] = timing_fields(rfb)
            ent["fwd_s"] = num(tf)
            ent["fwd_bwd_s"] = num(tfb)
            ent["fwd_tflops"] = num(fwd_flops / tf / 1e12, 5)
            ent["fwd_bwd_tflops"] = num(3.5 * fwd_flops / tfb / 1e12, 5)
            if tfb > tf:
                ent["bwd_s"] = num(tfb - tf)
                ent["bwd_tflops"] = num(2.5 * fwd_flops / (tfb - tf) / 1e12, 5)
            ent["fwd_efficiency"] = frac(ent["fwd_tflops"], peak)
            ent["fwd_bwd_efficiency"] = frac(ent["fwd_bwd_tflops"], peak)
            ent["bwd_efficiency"] = frac(ent.get("bwd_tflops"), peak)
            del q, k, v, go
        except Exception as exc:
            ent["error"] = short_err(exc)
            free_cuda()
        entries.append(ent)
        _progress("attention", ent)
    out = {
        "entries": entries,
        "skipped_for_time": skipped,
        "flops_convention": "fwd = 4*b*heads*s^2*d (x0.5 causal); bwd = 2.5*fwd; fwd_bwd = 3.5*fwd",
    }
    if import_err:
        out["sdpa_kernel_import_error"] = import_err
    summ = {}
    for be in backends:
        for causal in (False, True):
            v = [
                e
                for e in entries
                if e.get("backend_requested") == be and e.get("causal") == causal and e.get("fwd_efficiency") is not None
            ]
            if v:
                summ[f"{be}_{'causal' if causal else 'full'}"] = {
                    "median_fwd_efficiency": num(statistics.median(e["fwd_efficiency"] for e in v), 4),
                    "median_bwd_efficiency": num(
                        statistics.median(e["bwd_efficiency"] for e in v if e.get("bwd_efficiency") is not None), 4
                    )
                    if any(e.get("bwd_efficiency") is not None for e in v)
                    else None,
                    "median_fwd_bwd_efficiency": num(statistics.median(e["fwd_bwd_efficiency"] for e in v), 4),
                    "n": len(v),
                }
    out["summary"] = summ
    free_cuda()
    return out


def sec_memory(ctx):
    timer, budget, peak, quick = ctx["timer"], ctx["budget"], ctx["peak_hbm_gbps"], ctx["quick"]
    dev = "cuda"
    entries, skipped = [], 0

    def record(name, nbytes, fn, **extra):
        nonlocal skipped
        if not budget.ok():
            skipped += 1
            return
        ent = {"op": name, "bytes_moved": float(nbytes)}
        ent.update(extra)
        try:
            r = timer.bench(fn)
            ent.update(timing_fields(r))
            ent["gbps"] = num(nbytes / r["seconds"] / 1e9, 5)
            ent["efficiency"] = frac(ent["gbps"], peak)
        except Exception as exc:
            ent["error"] = short_err(exc)
            free_cuda()
        entries.append(ent)
        _progress("memory", ent)

    def buf(nbytes):
        return torch.ones(nbytes // 2, device=dev, dtype=BF16)

    copy_sizes = [1] if quick else [1, 4]
    ew_sizes = [1] if quick else [1, 2, 4]
    for g in copy_sizes:
        try:
            src, dst = buf(g * GIB), torch.empty(g * GIB // 2, device=dev, dtype=BF16)
            record("copy_", 2 * g * GIB, lambda: dst.copy_(src), tensor_gib=g)
            del src, dst
        except Exception as exc:
            entries.append({"op": "copy_", "tensor_gib": g, "error": short_err(exc)})
        free_cuda()
    for g in ew_sizes:
        try:
            x, y, z, o = buf(g * GIB), buf(g * GIB), buf(g * GIB), buf(g * GIB)
            record("addcmul z+x*y", 4 * g * GIB, lambda: torch.addcmul(z, x, y, out=o), tensor_gib=g)
            record("add x+y", 3 * g * GIB, lambda: torch.add(x, y, out=o), tensor_gib=g)
            if g == ew_sizes[-1]:
                record("sum (read only)", g * GIB, lambda: x.sum(), tensor_gib=g)
                record("fill_ (write only)", g * GIB, lambda: o.fill_(2.0), tensor_gib=g)
            del x, y, z, o
        except Exception as exc:
            entries.append({"op": "elementwise", "tensor_gib": g, "error": short_err(exc)})
        free_cuda()
    rows, cols = 16384, 8192
    try:
        x = torch.randn(rows, cols, device=dev, dtype=BF16)
        w = torch.randn(cols, device=dev, dtype=BF16)
        bias = torch.randn(cols, device=dev, dtype=BF16)
        nb = rows * cols * 2
        shape = [rows, cols]
        record("layer_norm fwd", 2 * nb, lambda: F.layer_norm(x, (cols,), w, bias), shape=shape)
        if hasattr(F, "rms_norm"):
            record("rms_norm fwd", 2 * nb, lambda: F.rms_norm(x, (cols,), w), shape=shape)
        record("softmax fwd", 2 * nb, lambda: torch.softmax(x, dim=-1), shape=shape)
        if not quick:
            record("gelu fwd", 2 * nb, lambda: F.gelu(x), shape=shape)
        del x, w, bias
    except Exception as exc:
        entries.append({"op": "norm/softmax", "error": short_err(exc)})
    free_cuda()
    big = [e for e in entries if e.get("efficiency") is not None]
    out = {
        "entries": entries,
        "skipped_for_time": skipped,
        "bytes_convention": "minimal bytes: each input read once + each output written once",
    }
    if big:
        out["median_efficiency"] = num(statistics.median(e["efficiency"] for e in big), 4)
    return out


def sec_host_overhead(ctx):
    dev = "cuda"
    out = {}
    x = torch.zeros(1, device=dev)
    a = torch.randn(64, 64, device=dev, dtype=BF16)
    n = 1000
    for name, fn in (("add_1elem", lambda: x.add_(1)), ("mm_64x64_bf16", lambda: torch.mm(a, a))):
        try:
            for _ in range(50):
                fn()
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            h0 = time.perf_counter()
            for _ in range(n):
                fn()
            h1 = time.perf_counter()
            e.record()
            e.synchronize()
            out[name] = {
                "launches": n,
                "host_s_per_launch": num((h1 - h0) / n, 4),
                "gpu_span_s_per_launch": num(s.elapsed_time(e) * 1e-3 / n, 4),
            }
        except Exception as exc:
            out[name] = {"error": short_err(exc)}
    try:
        torch.cuda.synchronize()
        m = 200
        h0 = time.perf_counter()
        for _ in range(m):
            x.add_(1)
            torch.cuda.synchronize()
        out["launch_plus_sync_s"] = num((time.perf_counter() - h0) / m, 4)
    except Exception as exc:
        out["launch_plus_sync_error"] = short_err(exc)
    return out


def sec_gemm_linear_layouts(ctx):
    timer, budget, peak, quick = ctx["timer"], ctx["budget"], ctx["peak_bf16"], ctx["quick"]
    dev = "cuda"
    if quick:
        ms, hs, ts = [4096], [4096], [1]
    else:
        ms, hs, ts = [4096, 16384], [4096, 8192], [1, 8]
    entries, skipped = [], 0
    for h in hs:
        for t in ts:
            for layer, kn in LAYERS.items():
                for m in ms:
                    k, n = kn(h, t)
                    if not budget.ok():
                        skipped += 3
                        continue
                    try:
                        X = torch.randn(m, k, device=dev, dtype=BF16)
                        W = torch.randn(n, k, device=dev, dtype=BF16)
                        dY = torch.randn(m, n, device=dev, dtype=BF16)
                        Y = torch.empty(m, n, device=dev, dtype=BF16)
                        dX = torch.empty(m, k, device=dev, dtype=BF16)
                        dW = torch.empty(n, k, device=dev, dtype=BF16)
                    except Exception as exc:
                        entries.append({"layer": layer, "h": h, "t": t, "m": m, "error": short_err(exc)})
                        free_cuda()
                        continue
                    ops = (
                        ("fprop", lambda: torch.mm(X, W.t(), out=Y)),
                        ("dgrad", lambda: torch.mm(dY, W, out=dX)),
                        ("wgrad", lambda: torch.mm(dY.t(), X, out=dW)),
                    )
                    for op, fn in ops:
                        flops = 2 * m * n * k
                        ent = {"layer": layer, "op": op, "h": h, "t": t, "m": m, "n": n, "k": k, "flops": float(flops)}
                        try:
                            r = timer.bench(fn)
                            ent.update(timing_fields(r))
                            ent["tflops"] = num(flops / r["seconds"] / 1e12, 5)
                            ent["efficiency"] = frac(ent["tflops"], peak)
                        except Exception as exc:
                            ent["error"] = short_err(exc)
                            free_cuda()
                        entries.append(ent)
                        _progress("gemm_bf16_linear_layouts", ent)
                    del X, W, dY, Y, dX, dW
    free_cuda()
    return {
        "entries": entries,
        "skipped_for_time": skipped,
        "layouts": "W is (n,k) row-major like nn.Linear.weight; fprop X@W.t(), dgrad dY@W, wgrad dY.t()@X",
    }


# --------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------

_VERBOSE = True


def _progress(section, e):
    if not _VERBOSE:
        return
    if "error" in e:
        print(f"  [{section}] {_label(e)}  ERROR {e['error'][:160]}", flush=True)
        return
    if "tflops" in e:
        msg = f"{e['tflops']:8.1f} TFLOP/s"
    elif "fwd_tflops" in e:
        msg = (
            f"fwd {e['fwd_tflops']:6.1f}  bwd {e.get('bwd_tflops') or float('nan'):6.1f}  "
            f"fwd+bwd {e['fwd_bwd_tflops']:6.1f} TFLOP/s  [{e.get('kernel')}]"
        )
    elif "gbps" in e:
        msg = f"{e['gbps']:8.1f} GB/s"
    else:
        msg = ""
    eff = e.get("efficiency", e.get("fwd_bwd_efficiency"))
    effs = f"  ({eff:.2f} of peak)" if eff is not None else ""
    print(f"  [{section}] {_label(e):58s} {msg}{effs}", flush=True)


def _label(e):
    if "seq" in e:
        return (
            f"{e.get('backend_requested')} b={e['batch']} heads={e['heads']} s={e['seq']} "
            f"d={e['head_dim']} {'causal' if e['causal'] else 'full'}"
        )
    if "op" in e and "m" in e:
        return f"{e['op']:5s} {e['layer']:5s} h={e['h']} t={e['t']} m={e['m']} n={e['n']} k={e['k']}"
    if "op" in e:
        extra = f" {e['tensor_gib']} GiB" if "tensor_gib" in e else (f" {e['shape']}" if "shape" in e else "")
        return f"{e['op']}{extra}"
    fa = ""
    if "use_fast_accum" in e:
        fa = " fast_accum" if e["use_fast_accum"] else " exact_accum"
    if e.get("kind") == "square":
        return f"square {e['m']}^3{fa}"
    return f"{e.get('layer')} h={e.get('h')} t={e.get('t')} m={e['m']} n={e['n']} k={e['k']}{fa}"


def write_yaml(result, out_dir):
    path = os.path.join(out_dir, "gpu_microbench.yaml")
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        yaml.safe_dump(result, f, sort_keys=False, default_flow_style=None, width=120)
    os.replace(tmp, path)
    return path


def print_summary(result):
    meta = result.get("meta", {})
    print("\n" + "=" * 100)
    print(
        f"GPU microbenchmark summary: {meta.get('device_name')}  torch {meta.get('torch_version')}  "
        f"CUDA {meta.get('cuda_version')}  SMs {meta.get('sm_count')}"
    )
    pk = meta.get("nominal_peaks") or {}
    print(
        f"nominal peaks: bf16 {pk.get('bf16_tflops')} TFLOP/s, fp8 {pk.get('fp8_tflops')} TFLOP/s, HBM {pk.get('hbm_gbps')} GB/s"
    )
    print("=" * 100)

    for sec in ("gemm_bf16", "gemm_fp8"):
        d = result.get(sec) or {}
        if d.get("error"):
            print(f"\n{sec}: ERROR {d['error']}")
        ents = [e for e in d.get("entries", []) if "tflops" in e]
        if not ents:
            continue
        fa_vals = [None] if sec == "gemm_bf16" else [False, True]
        for fa in fa_vals:
            sub = [e for e in ents if e.get("use_fast_accum") == fa]
            ms = sorted({e["m"] for e in sub if e["kind"] == "transformer"})
            title = sec + ("" if fa is None else (" use_fast_accum=" + str(fa)))
            print(f"\n{title}: TFLOP/s by token count m (rows: hidden, layer, TP split)")
            print(f"  {'h':>6s} {'layer':5s} {'t':>2s} | " + " ".join(f"{m:>8d}" for m in ms))
            table = {}
            for e in sub:
                if e["kind"] == "transformer":
                    table.setdefault((e["h"], e["layer"], e["t"]), {})[e["m"]] = e["tflops"]
            for (h, layer, t), row in table.items():
                print(f"  {h:>6d} {layer:5s} {t:>2d} | " + " ".join(f"{row[m]:8.1f}" if m in row else f"{'-':>8s}" for m in ms))
            sq = [e for e in sub if e["kind"] == "square"]
            if sq:
                print("  square: " + "  ".join(f"{e['m']}: {e['tflops']:.1f}" for e in sq))
        key = "efficiency_by_flops" if sec == "gemm_bf16" else "efficiency_by_flops_no_fast_accum"
        if d.get(key):
            print(f"  {key}: " + "  ".join(f"{r['flops']:.0e}: {r['median_efficiency']:.3f} (n={r['n']})" for r in d[key]))
        if d.get("skipped_for_time"):
            print(f"  skipped for time: {d['skipped_for_time']}")

    d = result.get("gemm_bf16_linear_layouts") or {}
    ents = [e for e in d.get("entries", []) if "tflops" in e]
    if ents:
        print("\ngemm_bf16_linear_layouts: TFLOP/s fprop / dgrad / wgrad")
        table = {}
        for e in ents:
            table.setdefault((e["h"], e["layer"], e["t"], e["m"]), {})[e["op"]] = e["tflops"]
        for (h, layer, t, m), row in table.items():
            print(
                f"  h={h:<6d} {layer:5s} t={t} m={m:<6d} "
                + " / ".join(f"{row.get(op, float('nan')):7.1f}" for op in ("fprop", "dgrad", "wgrad"))
            )

    d = result.get("attention") or {}
    if d.get("error"):
        print(f"\nattention: ERROR {d['error']}")
    ents = [e for e in d.get("entries", []) if "fwd_tflops" in e]
    if ents:
        print("\nattention (TFLOP/s; FA2 convention bwd = 2.5 fwd):")
        print(
            f"  {'backend':8s} {'kernel':42s} {'d':>4s} {'hid':>5s} {'seq':>5s} {'mask':6s} "
            f"{'fwd':>7s} {'bwd':>7s} {'fwd+bwd':>8s}"
        )
        for e in ents:
            print(
                f"  {e['backend_used']:8s} {e['kernel'][:42]:42s} {e['head_dim']:>4d} {e['hidden']:>5d} "
                f"{e['seq']:>5d} {'causal' if e['causal'] else 'full':6s} {e['fwd_tflops']:7.1f} "
                f"{e.get('bwd_tflops') or float('nan'):7.1f} {e['fwd_bwd_tflops']:8.1f}"
            )
        for k, v in (d.get("summary") or {}).items():
            print(
                f"  {k}: median efficiency fwd {v['median_fwd_efficiency']}, bwd {v['median_bwd_efficiency']}, "
                f"fwd+bwd {v['median_fwd_bwd_efficiency']} (n={v['n']})"
            )
    errs = [e for e in d.get("entries", []) if "error" in e]
    if errs:
        print(f"  {len(errs)} attention configs failed, first: {errs[0]['error'][:200]}")

    d = result.get("memory") or {}
    ents = [e for e in d.get("entries", []) if "gbps" in e]
    if ents:
        print("\nmemory (GB/s, minimal bytes read+written):")
        for e in ents:
            eff = f"  ({e['efficiency']:.2f} of peak)" if e.get("efficiency") is not None else ""
            print(f"  {_label(e):40s} {e['gbps']:8.1f}{eff}")

    d = result.get("host_overhead") or {}
    if d:
        print("\nhost_overhead:")
        for k, v in d.items():
            print(f"  {k}: {v}")

    print("\nsection status:")
    for k, v in (result.get("meta", {}).get("section_status") or {}).items():
        print(f"  {k:26s} {v}")
        smi = (result.get(k) or {}).get("nvidia_smi_during") if isinstance(result.get(k), dict) else None
        if smi:
            parts = []
            for f, unit in (("clocks_sm", "MHz SM"), ("clocks_mem", "MHz mem"), ("power_draw", "W"), ("temperature_gpu", "C")):
                if f in smi:
                    parts.append(f"{smi[f]['min']:.0f}/{smi[f]['median']:.0f}/{smi[f]['max']:.0f} {unit}")
            print(f"  {'':26s} nvidia-smi min/median/max: " + ", ".join(parts))
    print("=" * 100)


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------

SECTIONS = [  # name, function, budget seconds (full run), budget seconds (--quick)
    ("gemm_bf16", sec_gemm_bf16, 85.0, 15.0),
    ("gemm_fp8", sec_gemm_fp8, 30.0, 8.0),
    ("attention", sec_attention, 45.0, 10.0),
    ("memory", sec_memory, 15.0, 8.0),
    ("host_overhead", sec_host_overhead, 5.0, 5.0),
    ("gemm_bf16_linear_layouts", sec_gemm_linear_layouts, 15.0, 5.0),
]


def collect_meta(args, timer):
    dev = torch.cuda.current_device()
    p = torch.cuda.get_device_properties(dev)
    name = torch.cuda.get_device_name(dev)
    meta = {
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "torch_version": str(torch.__version__),
        "cuda_version": str(torch.version.cuda),
        "cudnn_version": None,
        "device_name": name,
        "compute_capability": ".".join(str(x) for x in torch.cuda.get_device_capability(dev)),
        "sm_count": int(p.multi_processor_count),
        "gpu_memory_bytes": int(p.total_memory),
        "l2_cache_bytes": int(getattr(p, "L2_cache_size", 0) or 0) or None,
        "quick": bool(args.quick),
        "time_budget_s": float(args.time_budget),
        "matmul_allow_bf16_reduced_precision_reduction": bool(
            getattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False)
        ),
        "method": (
            "CUDA events on the default stream. Per op: 3 warm-up calls; one timed call to size an "
            "inner loop of n_inner back-to-back calls (~2 ms of GPU time, 1..256); one untimed "
            "calibration repetition measuring host enqueue time; then 10 timed repetitions (20 when a "
            "call is < 100 us), each preceded by a torch.cuda._sleep spin kernel long enough that the "
            "CPU enqueues the whole repetition while the GPU is busy, so the events bracket GPU execution "
            "only (no launch gaps). Reported seconds = median over repetitions of elapsed/n_inner. "
            "Inputs are reused (warm L2 for small shapes), random normal bf16 data. "
            "TFLOP/s = FLOPs/seconds/1e12, GB/s = minimal bytes/seconds/1e9; efficiency = value / "
            "nominal dense datasheet peak. " + timer.sleep_note
        ),
    }
    try:
        meta["cudnn_version"] = int(torch.backends.cudnn.version())
    except Exception:
        pass
    peaks = nominal_peaks(name)
    meta["nominal_peaks"] = peaks
    gid = smi_resolve_id(smi_id())
    meta["nvidia_smi_id"] = gid if gid else None
    smi = smi_query(gid)
    meta["nvidia_smi_start"] = smi or "nvidia-smi not reachable"
    # clock-based bf16 peak for Hopper: 4096 dense bf16 FLOP/clk/SM (x2 for fp8)
    try:
        maxclk = float(smi.get("clocks.max.sm")) * 1e6 if smi else None
    except Exception:
        maxclk = None
    if maxclk and meta["compute_capability"] == "9.0":
        meta["clock_based_bf16_peak_tflops_at_max_sm_clock"] = num(meta["sm_count"] * 4096 * maxclk / 1e12, 5)
        meta["clock_based_note"] = (
            "SMs x 4096 FLOP/clk x clocks.max.sm; the datasheet 989.4 TFLOP/s corresponds to 132 SMs at 1830 MHz"
        )
    return meta, gid


def main():
    global _VERBOSE
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--quick", action="store_true", help="tiny smoke-test subset")
    ap.add_argument(
        "--time-budget",
        type=float,
        default=None,
        help="seconds for the chosen sections together (default: the sum of their budgets, "
        "195 s for a full run, 51 s for --quick); section budgets are scaled to it",
    )
    ap.add_argument("--sections", default=None, help="comma-separated subset of: " + ",".join(s[0] for s in SECTIONS))
    ap.add_argument("--quiet", action="store_true", help="no per-measurement lines")
    args = ap.parse_args()
    _VERBOSE = not args.quiet
    t_start = time.time()
    os.makedirs(args.out, exist_ok=True)

    if not torch.cuda.is_available():
        result = {
            "meta": {
                "error": "CUDA not available",
                "torch_version": str(torch.__version__),
                "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            }
        }
        path = write_yaml(result, args.out)
        print(f"CUDA not available; wrote {path}", file=sys.stderr)
        return 1

    wanted = None if args.sections is None else {s.strip() for s in args.sections.split(",") if s.strip()}
    unknown = (wanted or set()) - {s[0] for s in SECTIONS}
    if unknown:
        ap.error("unknown sections: " + ",".join(sorted(unknown)))
    chosen = [s for s in SECTIONS if wanted is None or s[0] in wanted]
    default_total = sum(s[3] if args.quick else s[2] for s in chosen) or 1.0
    if args.time_budget is None:
        args.time_budget = default_total
    scale = args.time_budget / default_total

    torch.manual_seed(0)
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # create the context
    timer = Timer()
    meta, gid = collect_meta(args, timer)
    result = {"meta": meta}
    pk = meta["nominal_peaks"] or {}
    hard_deadline = t_start + args.time_budget + 10.0
    meta["section_status"] = {}
    print(
        f"{meta['device_name']}  SMs={meta['sm_count']}  mem={meta['gpu_memory_bytes'] / GIB:.1f} GiB  "
        f"torch {meta['torch_version']}  CUDA {meta['cuda_version']}",
        flush=True,
    )
    print(f"timer: {timer.sleep_note}; budget {args.time_budget:.0f} s", flush=True)
    path = write_yaml(result, args.out)

    for name, fn, budget_full, budget_quick in SECTIONS:
        if wanted is not None and name not in wanted:
            continue
        budget_s = (budget_quick if args.quick else budget_full) * scale
        print(f"\n--- {name} (budget {budget_s:.0f} s) ---", flush=True)
        ctx = {
            "timer": timer,
            "budget": Budget(budget_s, hard_deadline),
            "quick": args.quick,
            "peak_bf16": pk.get("bf16_tflops"),
            "peak_fp8": pk.get("fp8_tflops"),
            "peak_hbm_gbps": pk.get("hbm_gbps"),
        }
        t0 = time.time()
        sampler = SmiSampler(gid) if name in ("gemm_bf16", "gemm_fp8", "attention") else None
        try:
            with sampler if sampler is not None else contextlib.nullcontext():
                sec = fn(ctx)
            status = "error" if sec.get("error") else "ok"
        except Exception as exc:
            sec = {"error": short_err(exc), "traceback": traceback.format_exc()[-3000:]}
            status = "error"
            print(f"  section {name} failed: {sec['error']}", flush=True)
            try:
                free_cuda()
            except Exception:
                pass
        sec["elapsed_s"] = num(time.time() - t0, 4)
        if sampler is not None and sampler.summary():
            sec["nvidia_smi_during"] = sampler.summary()
        if sec.get("skipped_for_time"):
            status += f" (skipped {sec['skipped_for_time']} for time)"
        errs = sum(1 for e in sec.get("entries", []) if "error" in e)
        if errs:
            status += f" ({errs} entries with errors)"
        meta["section_status"][name] = status + f", {sec['elapsed_s']:.1f} s"
        result[name] = sec
        try:
            path = write_yaml(result, args.out)
        except Exception as exc:
            print(f"  could not write yaml: {short_err(exc)}", file=sys.stderr, flush=True)

    end_smi = smi_query(gid, optional=False)
    meta["nvidia_smi_end"] = end_smi or "nvidia-smi not reachable"
    meta["total_elapsed_s"] = num(time.time() - t_start, 4)
    path = write_yaml(result, args.out)
    try:
        print_summary(result)
    except Exception as exc:
        print(f"(summary printing failed: {short_err(exc)})")
    print(f"\nwrote {path}  (total {meta['total_elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
