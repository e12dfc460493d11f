"""Import LLM Foundry's MPT training benchmarks into problems/validation/llm_foundry_runs.yaml.

    python benchmarks/llm_foundry_runs.py README [--write]

MosaicML's LLM Foundry publishes the training throughput of its MPT configurations (scripts/train/benchmarking/
README.md): 216 runs of nine model sizes (125M to 70B parameters) at sequence lengths 512 to 65,536, on 8 to 512
GPUs, in five tables: H100 80GB BF16 at 128-512 GPUs, H100 80GB BF16, H100 80GB FP8, A100 80GB and A100 40GB (both
with "1600 Gbps node-node interconnect (RoCE)"). Every run is data-parallel under PyTorch FSDP (Composer), with
the micro-batch, gradient accumulation, sharding strategy, mixed-precision mode and activation checkpointing printed
per row; the step time is the global batch in tokens over the measured tokens per second.

The stack is not Megatron's, which the model's efficiencies were fitted on: Composer's FSDP, eager PyTorch layers
(MPT's low_precision_layernorm, GELU, biases) and MPT's attn_impl "triton", FlashAttention's Triton port, which
submit_benchmarks.py uses by default (sweep.sh never sets --attn_impl): workload.attention triton, whose rates
benchmarks/device_curves.py derives from the FlashAttention-2 and -3 papers, not from these runs. The runs are out
of sample: nothing is fitted on them (benchmarks/accuracy.py reports them as their own family and among the dense
out-of-sample runs).

What each row becomes (``entry``):
- the model: the benchmark's MPT configuration (scripts/train/yamls/pretrain/mpt-<size>.yaml: d_model, n_heads,
  n_layers, expansion_ratio 4, vocab_size 50368) with MPTConfig's defaults, which these yamls leave as they are:
  learned positions sized to the row's sequence length (learned_pos_emb True, no ALiBi), linear biases (no_bias
  False), GELU, LayerNorm, the output layer tied to the embedding. The table's NumParams holds each row to it
  (tests/test_llm_foundry_runs.py);
- FULL_SHARD is ZeRO-3 gathered per block (Composer wraps each MPTBlock as one FSDP unit), SHARD_GRAD_OP ZeRO-2;
  the backward pass gathers the next block after the current block's gradients (workload.zero3_backward_prefetch
  post): FSDP's BACKWARD_POST, Composer's default (its FSDP setup reads ``fsdp_config.get('backward_prefetch',
  'BACKWARD_POST')``), which neither the mpt-<size>.yaml fsdp_config nor submit_benchmarks.py
  (--fsdp_config_backward_prefetch, default None) overrides;
- mixed precision DEFAULT reduces gradients in fp32 (grad_bytes 4), PURE in bf16 (grad_bytes 2); amp_fp8 is
  Transformer Engine's delayed-scaling FP8;
- activation checkpointing is full recomputation (Composer's checkpoint_wrapper on each MPTBlock, non-reentrant:
  the yamls' activation_checkpointing_reentrant false). From PyTorch 2.1 that recomputation stops once the
  backward's tensors are rebuilt (workload.checkpoint_early_stop true: the MLP's down projection is not redone).
  Which PyTorch ran each table (``TORCH``): the A100 80GB and both H100 BF16/FP8 tables were measured by the
  sweep.sh of b2a43a147 (2023-10-19), which passes --image mosaicml/pytorch:2.1.0_cu121-python3.10-ubuntu20.04,
  and the H100 large-scale table came with 5e85bd62d4 (2024-01-06), whose setup.py pins torch>=2.1,<2.1.1. The
  A100 40GB rows are older: their numbers are the same since the README's first version (2023-05-03, whose
  sweep.sh names mosaicml/pytorch:1.13.1_cu117), before PyTorch 2.1 (2023-10) brought the early stop, so they
  recompute the whole block;
- a100_80gb runs on dgx-a100 (eight 200 Gb/s NICs per node, the table's 1600 Gbps), a100_40gb on dgx-a100-40gb and
  h100_80gb on dgx-h100 [assumption: the H100 tables do not name the network].

The README read is the one at mosaicml/llm-foundry 8c8dd48f72168c5d51e2f7b151595892a8fba43d (2025-07-21; its tables
last changed in 5e85bd62d4, 2024-01-06); get it with ``git show 8c8dd48f72:scripts/train/benchmarking/README.md``.
Without ``--write`` it prints what it would write and exits 1 where the stored file differs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

import yaml
from table_import import run_import  # benchmarks/table_import.py

OUT = Path(__file__).resolve().parent.parent / "problems" / "validation" / "llm_foundry_runs.yaml"
COMMIT = "8c8dd48f72168c5d51e2f7b151595892a8fba43d"
SOURCE = f"https://github.com/mosaicml/llm-foundry/blob/{COMMIT}/scripts/train/benchmarking/README.md"
CONFIGS = f"https://github.com/mosaicml/llm-foundry/tree/{COMMIT}/scripts/train/yamls/pretrain"


class Shape(NamedTuple):
    """One MPT benchmark configuration (scripts/train/yamls/pretrain/mpt-<size>.yaml)."""

    layers: int  # n_layers
    hidden: int  # d_model
    heads: int  # n_heads


SHAPES = {
    "125m": Shape(12, 768, 12),
    "350m": Shape(24, 1024, 16),
    "760m": Shape(24, 1536, 12),
    "1b": Shape(24, 2048, 16),
    "3b": Shape(32, 2560, 20),
    "7b": Shape(32, 4096, 32),
    "13b": Shape(40, 5120, 40),
    "30b": Shape(48, 7168, 56),
    "70b": Shape(80, 8192, 64),
}
VOCAB = 50368  # the yamls' vocab_size
EXPANSION = 4  # the yamls' expansion_ratio
SYSTEMS = {"a100_80gb": "dgx-a100", "a100_40gb": "dgx-a100-40gb", "h100_80gb": "dgx-h100"}
TAGS = {"a100_80gb": "a100-80gb", "a100_40gb": "a100-40gb", "h100_80gb": "h100"}
ZERO = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2}
GRAD_BYTES = {"DEFAULT": 4, "PURE": 2}  # Composer's FSDP mixed precision: reduce_dtype fp32, or the compute dtype
BACKWARD_PREFETCH = "post"  # Composer's FSDP default, BACKWARD_POST (see the module docstring)
TORCH = {"a100_40gb": (1, 13, 1), "a100_80gb": (2, 1, 0), "h100_80gb": (2, 1, 0)}  # the PyTorch each table ran (docstring)
EARLY_STOP_SINCE = (2, 1, 0)  # torch.utils.checkpoint's early stop, default on (pytorch/pytorch#96866)
PRECISIONS = {"amp_bf16": "bf16", "bf16": "bf16", "amp_fp8": "fp8"}
# the columns every row carries; the A100 40GB table's header leaves out "Model TFLOP", which its rows still hold
COLUMNS = (
    "Model",
    "SeqLen (T)",
    "# GPUs",
    "GPU",
    "MFU",
    "HFU",
    "Model TFLOP",
    "MicroBatchSize",
    "GradAccum",
    "GlobalBatchSize",
    "Throughput (S/s)",
    "Throughput (T/s)",
    "Throughput (T/s/GPU)",
    "GlobalBatchSize (T)",
    "Precision",
    "MP Mode",
    "Sharding Strategy",
    "Activation Checkpointing",
    "Activation CPUOffload",
    "NumParams",
)
COMMON = [
    "Composer's PyTorch FSDP, every rank data-parallel (no tensor or pipeline parallelism in these tables)",
    "FSDP backward_prefetch BACKWARD_POST, Composer's default, which the benchmark yamls and submit_benchmarks.py leave: "
    "workload.zero3_backward_prefetch post",
    "activation checkpointing non-reentrant (activation_checkpointing_reentrant false); PyTorch 2.1.0 for the A100 80GB and "
    "H100 tables (sweep.sh at b2a43a147: --image mosaicml/pytorch:2.1.0_cu121; setup.py at 5e85bd62d4: torch>=2.1,<2.1.1), "
    "whose recomputation stops once the backward's tensors are rebuilt (workload.checkpoint_early_stop true); the A100 "
    "40GB rows predate PyTorch 2.1 (unchanged since 2023-05-03, sweep.sh image mosaicml/pytorch:1.13.1_cu117) and "
    "recompute the whole block",
    "attention: MPT's attn_impl triton (submit_benchmarks.py's default; sweep.sh never sets --attn_impl), FlashAttention's "
    "Triton port: workload.attention triton",
    "eager PyTorch layers (MPT's low_precision_layernorm, GELU and biases, unfused), not Megatron's fused kernels",
    "MPTConfig's defaults the benchmark yamls keep: learned positions (no ALiBi), linear biases; dropout 0",
    "optimizer decoupled LionW (one moment), timed and held as the model's Adam",
]


def tables(text: str) -> dict[str, list[dict]]:
    """{section title: rows as {column: cell}} of the README's result tables."""
    out: dict[str, list[dict]] = {}
    section = None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if section is None or not line.startswith("|") or cells[0] in ("Model", "---") or len(cells) != len(COLUMNS):
            continue
        out.setdefault(section, []).append(dict(zip(COLUMNS, cells)))
    return out


def model(size: str, seq: int) -> dict:
    """The row's MPT configuration as the model's fields."""
    s = SHAPES[size]
    return {
        "name": f"llm-foundry-mpt-{size}",
        "layers": s.layers,
        "hidden": s.hidden,
        "heads": s.heads,
        "kv_heads": s.heads,
        "ffn": EXPANSION * s.hidden,
        "vocab": VOCAB,
        "activation": "gelu",
        "position_embedding": "learned",
        "max_seq_len": seq,
        "norm": "layernorm",
        "bias": True,
        "dropout": False,
        "tied_embeddings": True,
    }


def entry(section: str, row: dict) -> dict:
    """One validation entry from one table row."""
    size, gpu = row["Model"], row["GPU"]
    seq, gpus = int(row["SeqLen (T)"]), int(row["# GPUs"])
    micro, accum, batch = int(row["MicroBatchSize"]), int(row["GradAccum"]), int(row["GlobalBatchSize"])
    tokens, rate = int(row["GlobalBatchSize (T)"]), float(row["Throughput (T/s)"])
    precision = PRECISIONS[row["Precision"]]
    workload = {"kind": "training", "seq_len": seq, "global_batch": batch, "precision": precision}
    if precision == "fp8":
        workload["low_precision_recipe"] = "delayed"
    workload |= {"attention": "triton", "zero3_gather": "block", "zero3_backward_prefetch": BACKWARD_PREFETCH}
    workload["grad_bytes"] = GRAD_BYTES[row["MP Mode"]]
    if TORCH[gpu] >= EARLY_STOP_SINCE:
        workload["checkpoint_early_stop"] = True
    recompute = "full" if row["Activation Checkpointing"] == "True" else "none"
    fp8 = "-fp8" if precision == "fp8" else ""
    return {
        "id": f"foundry-{TAGS[gpu]}{fp8}-mpt-{size}-s{seq}-g{gpus}-mb{micro}-gbs{batch}",
        "source": f'LLM Foundry MPT training benchmarks, table "{section}" ({SOURCE})',
        "verification": "primary_text",
        "model": model(size, seq),
        "system": SYSTEMS[gpu],
        "num_gpus": gpus,
        "workload": workload,
        "mapping": {
            "tp": 1,
            "pp": 1,
            "dp": gpus,
            "cp": 1,
            "micro_batch": micro,
            "vpp": 1,
            "sp": False,
            "recompute": recompute,
            "zero": ZERO[row["Sharding Strategy"]],
        },
        "measured": {
            "step_time_s": round(tokens / rate, 4),
            "derived_from": f"GlobalBatchSize (T) {tokens} / Throughput (T/s) {row['Throughput (T/s)']}",
        },
        "published": {"num_params": int(row["NumParams"]), "mfu_percent": float(row["MFU"]), "grad_accum": accum},
        "assumptions": [
            f"sharding {row['Sharding Strategy']}, mixed precision {row['MP Mode']} ({row['Precision']}), "
            f"activation checkpointing {row['Activation Checkpointing']}; and the file's assumptions, common to every run"
        ],
    }


def row_problem(section: str, row: dict) -> str | None:
    """What a row holds that this import cannot express, or None."""
    checks = (
        (row["Model"] in SHAPES, f"model {row['Model']} (known: {', '.join(SHAPES)})"),
        (row["GPU"] in SYSTEMS, f"GPU {row['GPU']} (known: {', '.join(SYSTEMS)})"),
        (row["Sharding Strategy"] in ZERO, f"sharding {row['Sharding Strategy']} (known: {', '.join(ZERO)})"),
        (row["MP Mode"] in GRAD_BYTES, f"mixed precision {row['MP Mode']} (known: {', '.join(GRAD_BYTES)})"),
        (row["Precision"] in PRECISIONS, f"precision {row['Precision']} (known: {', '.join(PRECISIONS)})"),
        (row["Activation CPUOffload"] == "False", "activation CPU offload"),
    )
    bad = [what for ok, what in checks if not ok]
    if bad:
        return f'table "{section}", row {row["Model"]}/{row["SeqLen (T)"]}/{row["# GPUs"]}: ' + "; ".join(bad)
    sizes = (row["MicroBatchSize"], row["GradAccum"], row["# GPUs"], row["GlobalBatchSize"], row["SeqLen (T)"])
    micro, accum, gpus, batch, seq = (int(x) for x in sizes)
    if micro * accum * gpus != batch or batch * seq != int(row["GlobalBatchSize (T)"]):
        return f'table "{section}", row {row["Model"]}/{seq}/{gpus}: micro-batch x accumulation x GPUs is not the global batch'
    return None


HEADER = f"""\
# LLM Foundry's MPT training benchmarks (benchmarks/llm_foundry_runs.py, which writes this file; its docstring says
# what each row becomes). Out of sample: nothing is fitted on them; benchmarks/accuracy.py reports them.
# source: {SOURCE}
# model configurations: {CONFIGS}
"""


def build(text: str, path: str) -> tuple[str, str] | None:
    """The file's body and its count of runs; None, after a line on stderr, where a row cannot be expressed."""
    runs = []
    for section, rows in tables(text).items():
        for row in rows:
            problem = row_problem(section, row)
            if problem:
                print(f"{path}: {problem}", file=sys.stderr)
                return None
            runs.append(entry(section, row))
    ids = [r["id"] for r in runs]
    if not runs or len(set(ids)) != len(ids):
        print(f"{path}: {'no result tables found' if not runs else 'two rows share an id'}", file=sys.stderr)
        return None
    common = yaml.safe_dump({"assumptions": COMMON}, sort_keys=False, width=120)  # every run's
    body = HEADER + common + yaml.safe_dump({"runs": runs}, sort_keys=False, width=120, default_flow_style=None)
    return body, f"{len(runs)} runs"


def main(argv=None) -> int:
    return run_import(__doc__, "scripts/train/benchmarking/README.md (see the docstring for where)", OUT, argv, build)


if __name__ == "__main__":
    sys.exit(main())
