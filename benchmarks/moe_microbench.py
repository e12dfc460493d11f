"""Measure the routed-expert block of a MoE layer on one GPU against the dense GEMM roofline.

    python benchmarks/moe_microbench.py --out DIR [--quick]

For the expert shapes of the calibration MoE runs (rows per local expert as Megatron-Core's
alltoall dispatcher delivers them with forced balance), times in bf16, forward + backward:

- ``dense``: the same FLOPs as ONE GEMM chain (rows = all routed rows, the expert's three matrices):
  what the model's dense GEMM roofline assumes;
- ``grouped_loop``: the local experts as a loop of per-expert GEMM chains (Megatron's sequential
  GEMM path);
- ``block``: router GEMM + softmax + top-k, permutation of the tokens by expert (index_select),
  the per-expert SwiGLU MLPs, and the weighted unpermute (index_add) — the routed-expert block as
  ``model.compute.moe_routed_forward_time_s`` accounts it, without communication.

Efficiency = dense time / measured time (1.0 = as fast as the dense roofline); compare with
``efficiency.moe_expert`` in problems/systems/devices/h100-sxm-80gb.yaml (0.30, fitted on FP8 runs).
Writes DIR/moe_microbench.yaml. Needs torch and a CUDA device; falls back to the CPU with --quick
(a syntax check only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

CASES = {  # name: (hidden, expert_ffn, local experts, routed tokens per GPU per micro-batch, top_k, experts)
    "deepseek-v3 tp2 ep64": (7168, 2048, 4, 2048, 8, 256),
    "qwen3-235b tp2 ep32": (4096, 1536, 4, 2048, 8, 128),
    "qwen3-30b tp1 ep8 mb2": (2048, 768, 16, 8192, 8, 128),
    "mixtral-8x7b tp2 ep8": (4096, 14336, 1, 2048, 2, 8),
}


def timed(fn, device, reps: int) -> float:
    import torch

    for _ in range(2):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


def run_case(hidden, ffn, local, tokens, top_k, experts, device, dtype, reps):
    import torch

    rows = tokens * top_k  # routed rows this GPU computes (balanced over the EP group)
    per = rows // local
    x_all = torch.randn(rows, hidden, device=device, dtype=dtype, requires_grad=True)
    w1 = [torch.randn(hidden, 2 * ffn, device=device, dtype=dtype, requires_grad=True) * 0.02 for _ in range(local)]
    w2 = [torch.randn(ffn, hidden, device=device, dtype=dtype, requires_grad=True) * 0.02 for _ in range(local)]
    w1 = [w.detach().requires_grad_() for w in w1]
    w2 = [w.detach().requires_grad_() for w in w2]

    def mlp(x, a, b):
        h = x @ a
        g, u = h.chunk(2, dim=-1)
        return (torch.nn.functional.silu(g) * u) @ b

    wd1 = torch.randn(hidden, 2 * ffn, device=device, dtype=dtype, requires_grad=True)
    wd2 = torch.randn(ffn, hidden, device=device, dtype=dtype, requires_grad=True)

    def dense():
        y = mlp(x_all, wd1, wd2)
        y.sum().backward()

    def grouped_loop():
        outs = [mlp(x_all[i * per : (i + 1) * per], w1[i], w2[i]) for i in range(local)]
        torch.cat(outs).sum().backward()

    # the block: tokens (this GPU's share) -> router -> top-k -> permute -> experts -> unpermute
    x_tok = torch.randn(tokens, hidden, device=device, dtype=dtype, requires_grad=True)
    wr = torch.randn(hidden, experts, device=device, dtype=dtype, requires_grad=True)
    # forced balance: each local expert receives `per` rows, drawn from the tokens round-robin
    idx = torch.arange(rows, device=device) % tokens
    weights = torch.rand(rows, device=device, dtype=dtype)

    def block():
        logits = x_tok @ wr
        probs = torch.softmax(logits.float(), dim=-1)
        torch.topk(probs, top_k, dim=-1)
        xp = x_tok.index_select(0, idx)
        outs = [mlp(xp[i * per : (i + 1) * per], w1[i], w2[i]) for i in range(local)]
        y = torch.cat(outs) * weights[:, None]
        out = torch.zeros_like(x_tok).index_add(0, idx, y)
        (out.sum() + logits.sum()).backward()

    flops = 3 * 2 * rows * hidden * 3 * ffn  # fwd + bwd (3x), three matrices of h x f
    t = {name: timed(fn, device, reps) for name, fn in (("dense", dense), ("grouped_loop", grouped_loop), ("block", block))}
    return {
        "rows": rows,
        "rows_per_expert": per,
        "flops": flops,
        "seconds": t,
        "tflops_dense": flops / t["dense"] / 1e12,
        "efficiency_vs_dense": {k: t["dense"] / v for k, v in t.items() if k != "dense"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true", help="tiny shapes, CPU allowed (syntax check)")
    args = parser.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    results = {
        "device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "dtype": str(dtype),
        "torch": str(torch.__version__),
        "cases": {},
    }
    for name, (h, f, local, tokens, k, e) in CASES.items():
        if args.quick:
            h, f, tokens = h // 32, f // 32, tokens // 32
        results["cases"][name] = run_case(h, f, local, tokens, k, e, device, dtype, reps=3 if args.quick else 10)
        print(
            name,
            json.dumps(results["cases"][name]["efficiency_vs_dense"]),
            f"{results['cases'][name]['tflops_dense']:.0f} TF dense",
            flush=True,
        )
    os.makedirs(args.out, exist_ok=True)
    import yaml

    with open(os.path.join(args.out, "moe_microbench.yaml"), "w") as fh:
        yaml.safe_dump(results, fh, sort_keys=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
