"""The reserved serving tables: TensorRT-LLM's perf-overview (B200, GB200, B300) and the Azure AI benchmarking guide.

Issue 13 reserves them for measuring the model; ``reserved_accuracy.py --import-trtllm`` is the only writer of
problems/validation/reserved_inference_runs.yaml and ``reserved_accuracy.py`` its only reader. Each row is
read as the out-of-sample H100/H200 rows of the same page are (problems/validation/inference_runs_oos.yaml): the
published "Total Output Throughput" of a tp-GPU engine divided by tp; the batch is the planner's best (the engine
chooses it); the finite request set of the page's ``$num_requests`` table; FP4 checkpoints (nvidia/*-FP4: NVFP4
weights and GEMMs) with an FP8 KV cache [assumption: the page does not state it]. MoE models: the page's command
takes an expert-parallel size it does not print, so ep is listed as 1 or tp and the planner takes the faster.
The 20000/2000 rows are left out as in the out-of-sample file (prompts beyond the default 8,192-token prefill
chunk), and so are the RTX 6000 tables (no such system in the library).

The Azure AI benchmarking guide's ND GB200 v6 results (Azure_Results/ND_GB200_v6_results.md, "End-to-End Inference
Workloads - TensorRT-LLM") are read the same way (``parse_azure``): its Benchmarks/NVIDIA/LLMBenchmark.py runs
``trtllm-bench throughput`` on 1,000 requests of fixed lengths with ``--kv_cache_free_gpu_mem_fraction 0.83`` on an
FP8-quantised engine and tabulates trtllm-bench's "Token Throughput (tokens/sec)", read as the engine's output
tokens/s [assumption: trtllm-bench's throughput report of that time counts output tokens]. Its H100, H200 and A100
pages time a batch of 128-token prompts and 8 output tokens with another harness and are not read."""

from __future__ import annotations

import re

SYSTEMS = {"B200": "dgx-b200", "GB200": "gb200-nvl72", "B300": "dgx-b300"}  # the reserved columns
MODELS = {
    "Llama 3.3 70B": "llama3.3-70b",
    "Llama 3.1 405B": "llama3.1-405b",
    "Llama 3.1 8B": "llama3.1-8b",
    "Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen3-30B-A3B": "qwen3-30b-a3b",
}
MOE = {"qwen3-235b-a22b", "qwen3-30b-a3b"}
AZURE_MODELS = {"LLAMA 3.1 (8B)": "llama3.1-8b", "LLAMA 3 (70B)": "llama3-70b"}
AZURE_SYSTEM = "gb200-nvl72"
AZURE_REQUESTS = 1000  # "with FP8 quantization, 1000 requests"
AZURE_KV_FRACTION = 0.83  # LLMBenchmark.py: --kv_cache_free_gpu_mem_fraction 0.83
PRECISIONS = {"FP4": "fp4", "FP8": "fp8"}
LEFT_OUT = {(20000, 2000)}


class TableError(ValueError):
    """A table cell or row a reserved-set importer cannot read: its message names the line and the value."""


def count(value: str, where: str) -> int:
    """A published count ('6,288' or '6288'), positive; a ``TableError`` naming ``where`` otherwise."""
    text = value.strip()
    if not re.fullmatch(r"\d{1,3}(,\d{3})+|\d+", text) or int(text.replace(",", "")) <= 0:
        raise TableError(f"{where}: {text!r} is not a positive whole number")
    return int(text.replace(",", ""))


def column(header: str) -> tuple | None:
    """'B200<br/>TP4 (FP4)' -> ('B200', 4, 'FP4'); None for a GPU count heading (the RTX tables)."""
    m = re.fullmatch(r"(\w+)<br/>TP(\d+) \((\w+)\)", header.strip())
    return (m.group(1), int(m.group(2)), m.group(3)) if m else None


def parse_requests(text: str) -> dict:
    """The page's ``$num_requests`` per (input, output) length."""
    out = {}
    for m in re.finditer(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*\d+\s*\|\s*(\d+)\s*\|", text, re.MULTILINE):
        out[(int(m.group(1)), int(m.group(2)))] = int(m.group(3))
    return out


def parse_page(text: str) -> list[dict]:
    """Every published cell of a reserved column (``SYSTEMS``) under a model heading of the throughput section."""
    rows, model, header = [], None, None
    for number, line in enumerate(text.split("## Reproducing")[0].splitlines(), 1):
        if line.startswith("#### "):
            model, header = line[5:].strip(), None
        elif line.startswith("| Sequence Length"):
            header = [column(c) for c in line.strip().strip("|").split("|")[1:]]
        elif not line.startswith("|"):
            header = None if line.strip() else header  # a table ends at its first non-table line
        elif header and model and re.match(r"\|\s*\d+/\d+", line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            isl, osl = (int(x) for x in cells[0].split("/"))
            for spec, value in zip(header, cells[1:]):
                if spec and spec[0] in SYSTEMS and value:
                    gpu, tp, precision = spec
                    if tp <= 0:
                        raise TableError(f"line {number}: TP{tp} is not a tensor-parallel degree")
                    total = count(value, f"line {number}, {gpu} TP{tp}")
                    rows.append(
                        {
                            "model": model,
                            "gpu": gpu,
                            "tp": tp,
                            "precision": precision,
                            "isl": isl,
                            "osl": osl,
                            "total_tokens_per_s": total,
                        }
                    )
    return rows


def entry(row: dict, requests: dict, source: str) -> dict:
    """The validation entry of one cell (``solver.inference_validation``'s format); ``not_expressible`` where the
    library lacks the model or the length pair is left out."""
    model = MODELS.get(row["model"])
    tp, pair = row["tp"], (row["isl"], row["osl"])
    ident = (
        f"trtllm-reserved-{row['gpu'].lower()}-{model or row['model'].lower().replace(' ', '-')}-tp{tp}-{row['isl']}-{row['osl']}"
    )
    base = {
        "id": ident,
        "family": f"TensorRT-LLM max throughput (reserved), {row['gpu']} {row['precision']}",
        "source": f"TensorRT-LLM perf-overview.md, Throughput Measurements, {row['model']}, {row['gpu']} TP{tp} "
        f"({row['precision']}), ISL/OSL {row['isl']}/{row['osl']} ({source})",
        "verification": "primary_text",
        "model": model or row["model"],
        "system": SYSTEMS[row["gpu"]],
        "num_gpus": tp,
        "published_total_tokens_per_s": row["total_tokens_per_s"],
        "measured": {"tokens_per_s_per_gpu": round(row["total_tokens_per_s"] / tp, 1)},
    }
    if model is None:
        return {**base, "not_expressible": f"not in the library: model {row['model']!r}"}
    if pair in LEFT_OUT or pair not in requests:
        return {**base, "not_expressible": f"input/output {pair[0]}/{pair[1]} left out (prompts beyond one prefill chunk)"}
    if row["precision"] not in PRECISIONS:
        return {**base, "not_expressible": f"precision {row['precision']!r} not read (only {', '.join(PRECISIONS)})"}
    precision = PRECISIONS[row["precision"]]
    return {
        **base,
        "workload": {
            "kind": "inference",
            "input_len": row["isl"],
            "output_len": row["osl"],
            "precision": precision,
            "kv_precision": "fp8",
            "weight_precision": precision,
            "serving": "continuous",
            "requests": requests[pair],
        },
        "mapping": {"tp": tp, "pp": 1, "dp": 1, "ep": [1, tp] if model in MOE and tp > 1 else 1},
    }


def parse_azure(text: str) -> list[dict]:
    """The TensorRT-LLM rows of the Azure guide's ND GB200 v6 page: model heading, tp, input and output lengths,
    the engine's tokens/s."""
    rows, model = [], None
    section = text.split("End-to-End Inference Workloads - TensorRT-LLM", 1)
    if len(section) < 2:
        return rows
    for number, line in enumerate(section[1].split("End-to-End Pretraining", 1)[0].splitlines(), 1):
        if line.startswith("### "):
            model = line[4:].strip()
        elif model and re.match(r"\|\s*\d", line):  # a data row: tp, input, output, tokens/s
            cells = line.strip().strip("|").split("|")
            where = f"TensorRT-LLM section, line {number}"
            if len(cells) != 4:
                raise TableError(f"{where}: {len(cells)} cells, expected tp, input, output, tokens/s")
            tp, isl, osl, total = (count(c, where) for c in cells)
            rows.append({"model": model, "tp": tp, "isl": isl, "osl": osl, "total_tokens_per_s": total})
    return rows


def azure_entry(row: dict, source: str) -> dict:
    """The validation entry of one Azure row (FP8 weights, GEMMs and KV cache; the guide's KV fraction)."""
    model, tp = AZURE_MODELS.get(row["model"]), row["tp"]
    ident = f"azure-reserved-gb200-{model or row['model'].lower()}-tp{tp}-{row['isl']}-{row['osl']}"
    base = {
        "id": ident,
        "family": "Azure AI benchmarking guide, TensorRT-LLM (reserved), GB200 FP8",
        "source": f"Azure AI benchmarking guide, ND GB200 v6 results, {row['model']}, tp {tp}, "
        f"ISL/OSL {row['isl']}/{row['osl']} ({source})",
        "verification": "primary_text",
        "model": model or row["model"],
        "system": AZURE_SYSTEM,
        "num_gpus": tp,
        "published_total_tokens_per_s": row["total_tokens_per_s"],
        "measured": {"tokens_per_s_per_gpu": round(row["total_tokens_per_s"] / tp, 1)},
    }
    if model is None:
        return {**base, "not_expressible": f"not in the library: model {row['model']!r}"}
    return {
        **base,
        "workload": {
            "kind": "inference",
            "input_len": row["isl"],
            "output_len": row["osl"],
            "precision": "fp8",
            "kv_precision": "fp8",
            "weight_precision": "fp8",
            "serving": "continuous",
            "requests": AZURE_REQUESTS,
            "kv_cache_memory_fraction": AZURE_KV_FRACTION,
        },
        "mapping": {"tp": tp, "pp": 1, "dp": 1, "ep": 1},
    }
