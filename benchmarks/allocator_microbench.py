#!/usr/bin/env python3
"""What a training step costs in GPU memory beyond the tensors it allocates: the CUDA context and
the caching allocator's reserve, measured on one GPU.

Usage:
    python3 benchmarks/allocator_microbench.py --out DIR [--quick]
    python3 benchmarks/allocator_microbench.py --summarise FILE   (no GPU: the summary of a written YAML)
    python3 benchmarks/allocator_microbench.py --compare FILE     (no GPU: parasol's bytes beside the measured)

Writes DIR/allocator_microbench.yaml (rewritten after every case) and prints one line per case.
Needs torch with a CUDA device; ``--quick`` shrinks every shape (a syntax check, CPU or GPU).

Sections
--------
context
    Device memory in use (``cudaMemGetInfo``: total - free) that PyTorch's allocator does not hold
    (``torch.cuda.memory_reserved``): after the CUDA context is created, after the first cuBLAS
    bf16 GEMM (handle and workspace), after the first scaled-dot-product attention and after a
    one-rank NCCL all-reduce (its communicator; a one-rank communicator sets up no peer buffers,
    so this is a floor for a real one).
stage
    One pipeline stage of a training step, emulated with torch on one GPU at a published run's
    per-GPU shapes (tensor parallelism divides heads and the FFN; its communication is left out):
    ``layers`` transformer blocks (LayerNorm, fused QKV, attention, projection, LayerNorm, GeLU
    MLP, residuals, biases), run 1F1B as the first stage does (``in_flight`` micro-batches forward
    before the first backward, then one forward and one backward each), every block recomputed
    in the backward pass where ``recompute`` is full (``torch.utils.checkpoint``). The stage's output
    after its send is freed (Megatron's deallocate_output_tensor) or, under DeepSpeed with tensor
    parallelism, cut to a 1/tp partition until the backward gathers it (PartitionedTensor). Attention is
    ``explicit`` (ALiBi bias + QK^T by baddbmm, masked softmax, PV by bmm: Megatron-DeepSpeed's
    path for BLOOM, scores materialised) or ``flash`` (``F.scaled_dot_product_attention``).
    Gradients and optimizer as the framework keeps them:
      deepspeed-bf16  DeepSpeed's BF16_Optimizer (BLOOM): bf16 weights in one flat buffer, bf16
                      ``.grad`` per parameter kept across steps, a full fp32 gradient buffer they
                      are accumulated into, fp32 master weights and Adam moments of a 1/dp shard;
      megatron        Megatron-Core's distributed optimizer: bf16 weights in one flat buffer, fp32
                      ``main_grad`` buffer filled by a post-accumulate hook (``.grad`` freed), fp32
                      master weights and Adam moments of a 1/dp shard.
    The data-parallel reduce and gather are left out (one GPU). Each case runs under PyTorch's
    default caching allocator and with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` (as
    Megatron-Bridge's DGX Cloud performance executor sets it), each in a fresh process, ``steps`` steps of
    ``microbatches`` micro-batches; reported per step: peak allocated and peak reserved bytes, the
    persistent bytes after the step, device memory in use, the allocator's retries. The
    allocator's overhead is (peak reserved - peak allocated) / (peak allocated - persistent): the
    reserve over the step's transient peak, which is where blocks of different sizes come and go.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import time
from typing import NamedTuple

HEAD_DIM = 128  # every case's head dimension: 14336 / 112 (BLOOM), 8192 / 64, 12288 / 96


class Case(NamedTuple):
    """One emulated stage: its per-GPU shapes, schedule, recomputation, attention kernel and framework."""

    hidden: int
    heads_per_gpu: int
    ffn_per_gpu: int
    layers: int  # on the stage
    in_flight: int  # micro-batches the stage holds before its first backward
    micro_batch: int
    seq: int
    dp: int  # shards of the optimizer states
    recompute: str  # full | none
    attention: str  # explicit (materialised scores) | flash
    framework: str  # deepspeed-bf16 | megatron
    microbatches_per_step: int

    @property
    def tp(self) -> int:
        """The tensor-parallel degree the per-GPU heads stand for."""
        return self.hidden // (self.heads_per_gpu * HEAD_DIM)


CASES = {
    # BLOOM 176B as BigScience ran it: tp 4, pp 12 (6 of 70 layers on a middle stage, the first
    # holds 12 micro-batches), dp 8, ZeRO-1, full recompute, bf16 (tr11 chronicles; our
    # training_runs.yaml bloom176b-bench-dp8-tp4-pp12-*); nh112 = 28 heads per GPU.
    "bloom-176b tp4 pp12 mbs2": Case(14336, 28, 14336, 6, 12, 2, 2048, 8, "full", "explicit", "deepspeed-bf16", 16),
    "bloom-176b tp4 pp12 mbs4": Case(14336, 28, 14336, 6, 12, 4, 2048, 8, "full", "explicit", "deepspeed-bf16", 16),
    # A Megatron-Core GPT stage without recompute: hidden 8192 at tp 8 (8 heads, ffn 4096 per GPU),
    # 10 layers on the first of 8 stages, micro-batch 1 of 4096 tokens, dp 8.
    "gpt-h8192 tp8 pp8 mbs1": Case(8192, 8, 4096, 10, 8, 1, 4096, 8, "none", "flash", "megatron", 12),
    # The same with every block recomputed, and at micro-batch 1 BLOOM's stage.
    "gpt-h8192 tp8 pp8 mbs1 recompute": Case(8192, 8, 4096, 10, 8, 1, 4096, 8, "full", "flash", "megatron", 12),
    "bloom-176b tp4 pp12 mbs1": Case(14336, 28, 14336, 6, 12, 1, 2048, 8, "full", "explicit", "deepspeed-bf16", 16),
    # GPT-3 175B's stage as Megatron SC'21 ran it: tp 8, pp 8 (12 of 96 layers), micro-batch 1 of 2048 tokens,
    # without recompute (flash attention keeps no scores).
    "gpt3-175b tp8 pp8 mbs1": Case(12288, 12, 6144, 12, 8, 1, 2048, 8, "none", "flash", "megatron", 12),
}
ALLOCATORS = {"caching": None, "expandable": "expandable_segments:True"}  # parasol's choices.Allocator
STEPS = 2  # the second step's figures (a first step allocates the gradients; a third repeated the second)


def device_used(torch) -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def context_child(quick: bool) -> dict:
    import torch
    import torch.nn.functional as F

    out = {}
    torch.cuda.init()
    x = torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    out["after_context"] = device_used(torch) - torch.cuda.memory_reserved()
    n = 256 if quick else 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    out["after_cublas_bf16_gemm"] = device_used(torch) - torch.cuda.memory_reserved()
    q = torch.randn(1, 8, 1024, 128, device="cuda", dtype=torch.bfloat16)
    F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().item()
    out["after_sdpa"] = device_used(torch) - torch.cuda.memory_reserved()
    try:
        import torch.distributed as dist

        store = torch.distributed.HashStore()
        dist.init_process_group("nccl", store=store, rank=0, world_size=1, device_id=torch.device("cuda:0"))
        t = torch.ones(1 << 20, device="cuda")
        dist.all_reduce(t)
        torch.cuda.synchronize()
        out["after_nccl_one_rank"] = device_used(torch) - torch.cuda.memory_reserved()
        dist.destroy_process_group()
    except Exception as exc:  # noqa: BLE001 - a measurement that could not be taken is reported, not fatal
        out["nccl_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del x
    return out


def stage_child(name: str, quick: bool) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.utils.checkpoint import checkpoint

    h, heads, ffn, layers, in_flight, mbs, seq, dp, recompute, attention, framework, micro = CASES[name]
    if quick:
        h, heads, ffn, layers, in_flight, mbs, seq, micro = 256, 4, 256, 2, 3, 2, 128, 5
    dev = "cuda"
    bf16 = torch.bfloat16
    hd = 64 if quick else HEAD_DIM
    proj = heads * hd  # attention width per GPU (h / tp)
    torch.manual_seed(0)
    context = device_used(torch) - torch.cuda.memory_reserved() if dev == "cuda" else 0

    shapes = []  # (name, shape) of one block's parameters, Megatron's per-GPU shards
    for i in range(layers):
        shapes += [
            (f"{i}.ln1.w", (h,)), (f"{i}.ln1.b", (h,)),
            (f"{i}.qkv.w", (3 * proj, h)), (f"{i}.qkv.b", (3 * proj,)),
            (f"{i}.proj.w", (h, proj)), (f"{i}.proj.b", (h,)),
            (f"{i}.ln2.w", (h,)), (f"{i}.ln2.b", (h,)),
            (f"{i}.fc1.w", (ffn, h)), (f"{i}.fc1.b", (ffn,)),
            (f"{i}.fc2.w", (h, ffn)), (f"{i}.fc2.b", (h,)),
        ]  # fmt: skip
    numel = sum(math.prod(s) for _, s in shapes)
    flat = torch.empty(numel, device=dev, dtype=bf16)
    params, offset = {}, 0
    for pname, shape in shapes:
        n = math.prod(shape)
        p = flat[offset : offset + n].view(shape)
        with torch.no_grad():
            p.normal_(0.0, 0.02) if len(shape) == 2 else p.fill_(1.0 if pname.endswith(".w") else 0.0)
        p.requires_grad_(True)
        params[pname] = (p, offset, n)
        offset += n
    shard = (numel + dp - 1) // dp
    master = flat[:shard].float()  # fp32 master weights of this rank's 1/dp shard
    exp_avg, exp_avg_sq = torch.zeros_like(master), torch.zeros_like(master)
    grads32 = torch.zeros(numel, device=dev, dtype=torch.float32)
    if framework == "megatron":

        def accumulate(p, off=0, n=0):
            grads32[off : off + n].view_as(p).add_(p.grad)
            p.grad = None

        for p, off, n in params.values():
            p.register_post_accumulate_grad_hook(lambda p, off=off, n=n: accumulate(p, off, n))

    alibi = None
    if attention == "explicit":
        slopes = torch.tensor([2 ** (-8 * (i + 1) / heads) for i in range(heads)], device=dev)
        pos = torch.arange(seq, device=dev)
        alibi = (slopes[:, None] * pos[None, :]).to(bf16).repeat(mbs, 1)[:, None, :]  # (b*np, 1, s)
        causal = torch.ones(seq, seq, device=dev, dtype=torch.bool).triu_(1)

    def block(x, i):
        P = {k.split(".", 1)[1]: v[0] for k, v in params.items() if k.startswith(f"{i}.")}
        y = F.layer_norm(x, (h,), P["ln1.w"], P["ln1.b"])
        qkv = F.linear(y, P["qkv.w"], P["qkv.b"]).view(seq, mbs, heads, 3 * hd)
        q, k, v = qkv.split(hd, dim=-1)
        if attention == "explicit":
            q = q.reshape(seq, mbs * heads, hd).transpose(0, 1)
            k = k.reshape(seq, mbs * heads, hd).transpose(0, 1)
            v = v.reshape(seq, mbs * heads, hd).transpose(0, 1)
            scores = torch.baddbmm(alibi, q, k.transpose(1, 2), beta=1.0, alpha=hd**-0.5)
            probs = torch.softmax(scores.masked_fill_(causal, float("-inf")), dim=-1)  # in place, as the fused kernel
            ctx = torch.bmm(probs, v).transpose(0, 1).reshape(seq, mbs, proj)
        else:
            q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # (b, np, s, hd)
            ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True).permute(2, 0, 1, 3).reshape(seq, mbs, proj)
        x = x + F.linear(ctx, P["proj.w"], P["proj.b"])
        y = F.layer_norm(x, (h,), P["ln2.w"], P["ln2.b"])
        return x + F.linear(F.gelu(F.linear(y, P["fc1.w"], P["fc1.b"])), P["fc2.w"], P["fc2.b"])

    tp = h // proj  # the case's tensor-parallel degree (attention width per GPU = h / tp)

    def forward(x):
        for i in range(layers):
            x = checkpoint(block, x, i, use_reentrant=False) if recompute == "full" else block(x, i)
        # The stage's output once sent: Megatron frees its data and keeps its graph (deallocate_output_tensor);
        # DeepSpeed's pipeline engine keeps a 1/tp partition under tensor parallelism (PartitionedTensor) and
        # gathers it back before the backward, the whole output without it.
        part = None
        if framework == "megatron" or tp > 1:
            if framework != "megatron":
                part = x.detach().reshape(-1)[: x.numel() // tp].clone()
            x.untyped_storage().resize_(0)
        return x, part

    def backward(item):
        x, (y, part) = item
        if framework != "megatron" and part is not None:
            y.untyped_storage().resize_(y.numel() * y.element_size())  # the gathered output
        y.backward(torch.randn(y.shape, device=dev, dtype=bf16))  # the gradient the next stage sends back
        x.grad = None  # sent to the previous stage

    def optimizer_step():
        if framework == "deepspeed-bf16":
            for p, off, n in params.values():
                grads32[off : off + n].add_(p.grad.reshape(-1))  # bf16 .grad into the fp32 buffer
                p.grad.zero_()  # kept allocated, as BF16_Optimizer's clear_lp_grads leaves it
        g = grads32[:shard]
        exp_avg.mul_(0.9).add_(g, alpha=0.1)
        exp_avg_sq.mul_(0.999).addcmul_(g, g, value=0.001)
        master.addcdiv_(exp_avg, exp_avg_sq.sqrt().add_(1e-8), value=-1e-4)
        with torch.no_grad():
            flat[:shard].copy_(master)
        grads32.zero_()

    def train_step():
        live = []
        for _ in range(in_flight - 1):
            x = torch.randn(seq, mbs, h, device=dev, dtype=bf16, requires_grad=True)
            live.append((x, forward(x)))
        for _ in range(micro - (in_flight - 1)):
            x = torch.randn(seq, mbs, h, device=dev, dtype=bf16, requires_grad=True)
            live.append((x, forward(x)))
            backward(live.pop(0))
        while live:
            backward(live.pop(0))
        optimizer_step()

    out = {
        "case": name,
        "allocator_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "parameters_per_gpu": numel,
        "context_bytes_before_model": context,
        "stage_output": "freed after the send" if framework == "megatron" else ("1/tp partition" if tp > 1 else "kept"),
        "steps": [],
    }
    for _ in range(1 if quick else STEPS):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        train_step()
        torch.cuda.synchronize()
        stats = torch.cuda.memory_stats()
        out["steps"].append(
            {
                "seconds": round(time.perf_counter() - t0, 3),
                "peak_allocated_bytes": torch.cuda.max_memory_allocated(),
                "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
                "persistent_bytes": torch.cuda.memory_allocated(),
                "reserved_after_bytes": torch.cuda.memory_reserved(),
                "device_used_bytes": device_used(torch),
                "alloc_retries": stats.get("num_alloc_retries", 0),
                "ooms": stats.get("num_ooms", 0),
                "inactive_split_peak_bytes": stats.get("inactive_split_bytes.all.peak", 0),
            }
        )
    last = out["steps"][-1]
    transient = last["peak_allocated_bytes"] - last["persistent_bytes"]
    out["allocator_overhead"] = (
        round((last["peak_reserved_bytes"] - last["peak_allocated_bytes"]) / transient, 4) if transient > 0 else None
    )
    return out


def summarise(doc: dict) -> dict:
    """Per allocator setting (``ALLOCATORS``), the mean allocator overhead over the cases that recompute
    every block with materialised attention scores (``recompute_full_scores``), with flash attention
    (``recompute_full``), and over the others (``otherwise``): parasol's ``model.specs.AllocatorOverhead``
    rows (problems/measurements/h200-allocator-microbench.yaml)."""
    out = {}
    for alloc in ALLOCATORS:
        groups = {"recompute_full_scores": [], "recompute_full": [], "otherwise": []}
        for key, res in doc["stage"].items():
            name, setting = key.rsplit(" / ", 1)
            if setting == alloc and res.get("allocator_overhead") is not None:
                case = doc["cases"][name]
                group = "otherwise"
                if case["recompute"] == "full":
                    group = "recompute_full_scores" if case["attention"] == "explicit" else "recompute_full"
                groups[group].append(res["allocator_overhead"])
        out[alloc] = {group: round(sum(v) / len(v), 4) for group, v in groups.items() if v}
    return out


def parasol_stage(name: str) -> dict:
    """parasol's bytes for the stage a case emulates: a pipeline of in_flight + 1 stages whose second stage
    holds the case's layers at in_flight micro-batches (1F1B: pp - 1), the same per-GPU shapes, framework
    buffers and recompute; ``states`` (weights, gradients, optimizer) and ``transient`` (its activations,
    working set and buffers: ``activations_bytes``) of that stage, on an H200 system."""
    from parasol.model.training_step import evaluate_training
    from parasol.solver.problem import mapping_with_defaults, parse_problem

    h, heads, ffn, layers, in_flight, mbs, seq, dp, recompute, attention, framework, micro = CASES[name]
    tp, pp = CASES[name].tp, in_flight + 1
    problem = parse_problem(
        {
            "model": {"name": name, "layers": layers * pp, "hidden": h, "heads": heads * tp, "ffn": ffn * tp, "vocab": 51200,
                      "activation": "gelu", "bias": True, "norm": "layernorm", "max_seq_len": seq, "dropout": False,
                      "position_embedding": "alibi" if attention == "explicit" else "rope"},
            "system": {"name": "hgx-h200", "num_gpus": tp * pp * dp},
            "workload": {"kind": "training", "seq_len": seq, "global_batch": micro * mbs * dp, "precision": "bf16",
                         "attention": "standard" if attention == "explicit" else "flash",
                         "lowp_grad_bytes": 2 if framework == "deepspeed-bf16" else 0},
            "mapping": {"tp": tp, "pp": pp, "dp": dp, "micro_batch": mbs, "recompute": recompute, "zero": 1, "sp": False},
        },
        source=f"allocator case {name}",
    )  # fmt: skip
    mapping = mapping_with_defaults({key: values[0] for key, values in problem.mapping.items()})
    ev = evaluate_training(problem.model, problem.system(), problem.workload, mapping)
    stage = ev.stages[1]
    return {"layers": stage["layers"], "states": sum(stage["state"].values()), "transient": stage["activations_bytes"]}


def compare(doc: dict) -> list[dict]:
    """For each case under the caching allocator: the persistent and transient bytes measured (last step)
    beside parasol's states and transient for the same stage (``parasol_stage``)."""
    rows = []
    for name in CASES:
        res = doc["stage"].get(f"{name} / caching", {})
        if "steps" not in res:
            continue
        last = res["steps"][-1]
        model = parasol_stage(name)
        transient = last["peak_allocated_bytes"] - last["persistent_bytes"]
        rows.append(
            {
                "case": name,
                "measured_persistent": last["persistent_bytes"],
                "parasol_states": model["states"],
                "measured_transient": transient,
                "parasol_transient": model["transient"],
            }
        )
    return rows


def run_child(args: list[str], env_conf: str | None, timeout: float) -> dict:
    env = dict(os.environ)
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if env_conf:
        env["PYTORCH_CUDA_ALLOC_CONF"] = env_conf
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr or proc.stdout)[-1500:], "returncode": proc.returncode}
    return json.loads(lines[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="folder for allocator_microbench.yaml (required unless --summarise)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--timeout", type=float, default=240.0, help="seconds per child process")
    ap.add_argument("--summarise", metavar="FILE", help="print the allocator-overhead summary of a written YAML")
    ap.add_argument("--compare", metavar="FILE", help="print parasol's states and transient bytes beside a written YAML's")
    args = ap.parse_args()
    if args.compare:
        import yaml

        with open(args.compare) as f:
            rows = compare(yaml.safe_load(f))
        print(f"{'case':36} {'persistent GiB':>15} {'parasol':>8} {'err':>7} {'transient GiB':>14} {'parasol':>8} {'err':>7}")
        for r in rows:
            states_err = r["parasol_states"] / r["measured_persistent"] - 1
            transient_err = r["parasol_transient"] / r["measured_transient"] - 1
            print(
                f"{r['case']:36} {r['measured_persistent'] / 2**30:15.2f} {r['parasol_states'] / 2**30:8.2f} {states_err:+7.1%} "
                f"{r['measured_transient'] / 2**30:14.2f} {r['parasol_transient'] / 2**30:8.2f} {transient_err:+7.1%}"
            )
        return 0
    if args.summarise:
        import yaml

        with open(args.summarise) as f:
            print(yaml.safe_dump({"allocator_overhead": summarise(yaml.safe_load(f))}, sort_keys=False), end="")
        return 0
    if args.child == "context":
        print(json.dumps(context_child(args.quick)))
        return 0
    if args.child:
        print(json.dumps(stage_child(args.child, args.quick)))
        return 0
    if not args.out:
        ap.error("--out is required to measure (or give --summarise FILE or --compare FILE)")
    import torch
    import yaml

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "allocator_microbench.yaml")
    doc = {
        "meta": {
            "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "device_name": torch.cuda.get_device_name(0),
            "gpu_memory_bytes": torch.cuda.get_device_properties(0).total_memory,
            "torch_version": str(torch.__version__),
            "cuda_version": str(torch.version.cuda),
            "quick": args.quick,
            "steps": STEPS,
        },
        "cases": {name: case._asdict() for name, case in CASES.items()},
        "context": None,
        "stage": {},
    }  # fmt: skip
    quick = ["--quick"] if args.quick else []
    flag = ["--timeout", str(args.timeout)]
    doc["context"] = run_child(["--child", "context", *quick, *flag], None, args.timeout)
    print("context", json.dumps(doc["context"]), flush=True)
    for name in CASES:
        for alloc, conf in ALLOCATORS.items():
            t0 = time.time()
            res = run_child(["--child", name, *quick, *flag], conf, args.timeout)
            doc["stage"][f"{name} / {alloc}"] = res
            with open(path, "w") as f:
                yaml.safe_dump(doc, f, sort_keys=False, width=120)
            if "error" in res:
                print(f"{name} / {alloc}: ERROR {res['error'][-400:]}", flush=True)
                continue
            s = res["steps"][-1]
            print(
                f"{name} / {alloc}: {time.time() - t0:.0f} s, step {s['seconds']} s, peak alloc "
                f"{s['peak_allocated_bytes'] / 2**30:.2f} GiB, reserved {s['peak_reserved_bytes'] / 2**30:.2f}, "
                f"persistent {s['persistent_bytes'] / 2**30:.2f}, device {s['device_used_bytes'] / 2**30:.2f}, "
                f"overhead {res['allocator_overhead']}, retries {s['alloc_retries']}",
                flush=True,
            )
    doc["summary"] = {"allocator_overhead": summarise(doc)}
    print("summary", json.dumps(doc["summary"]), flush=True)
    with open(path, "w") as f:
        yaml.safe_dump(doc, f, sort_keys=False, width=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
