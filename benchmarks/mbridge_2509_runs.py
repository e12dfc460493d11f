"""Import Megatron-Bridge 25.09's Blackwell pre-training rows into problems/validation/mbridge_2509_runs.yaml.

    python benchmarks/mbridge_2509_runs.py SUMMARY [--write]

Megatron-Bridge published the NeMo 25.09 container's pre-training throughput on DGX-GB200, DGX-B200 and DGX-H100
(docs/performance-summary.md, "25.09 NeMo Container", since moved to docs/performance-summary-archive.md). The
calibration set (../shared/reference) holds its six H100 rows; this script imports the other eleven table rows, on
GB200 and B200, and their parenthesised MXFP8 variants: dense Llama 3 8B, 70B and 3.1 405B, and MoE DeepSeek-V3,
Qwen3-30B-A3B and Qwen3-235B-A22B. They are out of sample: nothing is fitted on them (benchmarks/calibrate.py lists
their two families among its checks; benchmarks/accuracy.py reports them). Issue 13 reserves the releases after
25.11, not this one.

What each row becomes (``entries``):
- the table has no precision column. Its footnote says the numbers in parentheses use "different quantization
  granularities ... 32x32 for both weights and activations" on GB200 and B200: the MXFP8 recipe (low_precision_recipe
  mxfp8), as the 25.11 table, laid out the same way, labels them "FP8-MX". The plain numbers are FP8 with per-tensor
  scales, taken as current scaling (tensorwise), which the 25.11 table names "FP8-CS" [assumption: the 25.09 scripts'
  fp8_recipe default is delayed scaling; the two differ in the model by one read of each quantised input];
- a cell "a (b)" holds the plain run's value a and the MXFP8 run's b; a cell without parentheses holds both;
- the mapping as benchmarks/import_mbridge_runs.py reads the 25.11 table (``table_mapping``: dp the rest of the GPUs,
  sequence parallelism with tp > 1, FSDP 1 as ZeRO-3, the distributed optimizer otherwise). Where the printed MBS
  contradicts GA (GBS / (dp x MBS) != GA) the micro-batch is GBS / (dp x GA), with a note;
- the MoE rows marked "(tokendrop)": Megatron-Bridge's apply_moe_token_drop (capacity factor 1.0, inputs padded to
  the capacity, the alltoall dispatcher; scripts/performance/run_script.py at v0.1.0rc3 applies it on B200 and GB200):
  every expert computes exactly its capacity, which the model's balanced routing (load_imbalance 1) equals;
- what the table does not print comes from the release's performance recipes (``RECIPES``: Megatron-Bridge v0.1.0rc3,
  2025-10-08, the tag before the table's commit; scripts/performance/configs/*/*.yaml perf_matrix, run_script.py and
  src/megatron/bridge/recipes). CUDA graphs, which several rows enable, are not modelled.

The table read is the one at NVIDIA-NeMo/Megatron-Bridge fa0315ae2 (2025-10-10, "update 25.09 performance summary");
get it with ``git show fa0315ae2:docs/performance-summary.md`` (the archive file of later commits holds the same
rows). Without ``--write`` it prints what it would write and exits 1 where the stored file differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

import yaml
from import_mbridge_runs import (  # benchmarks/import_mbridge_runs.py: the 25.11 table's translation
    BF16_MOMENTS,
    LOW_PRECISION_RECIPES,
    MODELS,
    RECIPE_NOTE,
    SELECTIVE,
    TP_OVERLAP,
    recipe,
    table_entry,
    table_mapping,
)
from table_import import run_import  # benchmarks/table_import.py

OUT = Path(__file__).resolve().parent.parent / "problems" / "validation" / "mbridge_2509_runs.yaml"
PREFIX = "mbridge2509bw"  # solver/validation.family reports these ids as their own out-of-sample families
COMMIT = "fa0315ae2"
SOURCE = f"https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{COMMIT}/docs/performance-summary.md"
SECTION = "## 25.09 NeMo Container"
SYSTEM_HEADINGS = {"#### System: DGX-GB200": "GB200", "#### System: DGX-B200": "B200"}  # the H100 rows: calibration set
COLUMNS = ("Model", "#-GPUs", "GBS", "MBS", "Sequence Length", "FSDP", "TP", "PP", "CP", "VP", "EP", "GA", "Tokens / sec / GPU")
PLAIN, MX = "FP8-CS", "FP8-MX"
TAG = "Megatron-Bridge v0.1.0rc3"
PERF = f"{TAG} scripts/performance"
TOKEN_DROP = (
    f"{PERF}/run_script.py: token drop (apply_moe_token_drop: capacity factor 1.0, inputs padded to the capacity, alltoall "
    "dispatcher), as the table's '(tokendrop)' says: every expert computes its capacity, modelled as balanced routing"
)
CUDA_GRAPHS = "CUDA graphs (perf_matrix cuda_graphs true; not modelled)"

# (model[, gpu[, precision]]) -> settings the table does not print, read in Megatron-Bridge v0.1.0rc3 (``PERF``).
RECIPES: dict[tuple, dict] = {
    ("llama3-8b",): {"assumptions": [f"{PERF}/configs/llama3/llama3_8b_llm_pretrain.yaml: {CUDA_GRAPHS}, no recompute"]},
    ("llama3-70b", "GB200", PLAIN): {
        "mapping": {"offload_layers": 40},
        "assumptions": [
            f"{PERF}/configs/llama3/llama3_70b_llm_pretrain.yaml (gb200 fp8_cs): Megatron FSDP, mbs 2, "
            "cpu_offloading_num_layers 40 (activations)"
        ],
    },
    ("llama3-70b", "GB200", MX): {
        "mapping": {"micro_batch": 1, **TP_OVERLAP},
        "assumptions": [
            f"{PERF}/configs/llama3/llama3_70b_llm_pretrain.yaml (gb200 fp8_mx): tp 2, pp 4, vp 5, mbs 1, no FSDP; "
            "recipes/llama/llama3_70b.py: tp_comm_overlap on (userbuffers)"
        ],
    },
    ("llama3.1-405b", "GB200", PLAIN): {
        "mapping": {"offload_layers": 95, **TP_OVERLAP},
        "assumptions": [
            f"{PERF}/configs/llama31/llama31_405b_llm_pretrain.yaml (gb200 fp8_cs): Megatron FSDP with tp 2, "
            "cpu_offloading_num_layers 95 (activations); recipes/llama/llama31_405b.py: tp_comm_overlap on (userbuffers)"
        ],
    },
    ("llama3.1-405b",): {
        "mapping": TP_OVERLAP,
        "assumptions": [
            f"{TAG} recipes/llama/llama31_405b.py: tp_comm_overlap on (userbuffers), account_for_embedding/loss_in_pipeline_"
            "split (the default split)"
        ],
    },
    ("deepseek-v3",): {
        "workload": {"mtp_layers": 1, **BF16_MOMENTS, "recompute_modules": ["mla_up_proj"]},
        "mapping": {"recompute": SELECTIVE, "pipeline_layout": "Et*4|(t*4|)*14tmL"},
        "assumptions": [
            f"{TAG} recipes/deepseek/deepseek_v3.py: mtp_num_layers 1, exp_avg and exp_avg_sq in bf16, the layout its "
            "map_pp_vp_to_layout gives pp 4 x vp 4, pp 8 x vp 2 and pp 16 x vp 1 alike: [embedding + 4 layers] + "
            "14 x [4 layers] + [1 layer + MTP + loss]",
            f"{PERF}/run_script.py: recompute_modules mla_up_proj on B200 and GB200 with token drop, shared experts "
            "overlapped, no expert-parallel A2A overlap, no CUDA graphs",
            TOKEN_DROP,
        ],
    },
    ("qwen3-30b-a3b",): {
        "assumptions": [
            f"{PERF}/configs/qwen3/qwen3_30b_a3b_llm_pretrain.yaml: {CUDA_GRAPHS}; recompute_granularity null over the "
            "recipe's full recomputation: no recompute",
            TOKEN_DROP,
        ],
    },
    ("qwen3-235b-a22b", "GB200"): {
        "mapping": TP_OVERLAP,
        "assumptions": [
            f"{PERF}/configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml (gb200): {CUDA_GRAPHS}, no recompute; run_script.py: "
            "CommOverlapConfig(tp_comm_overlap=True)",
            TOKEN_DROP,
        ],
    },
    ("qwen3-235b-a22b", "B200"): {
        "assumptions": [
            f"{PERF}/configs/qwen3/qwen3_235b_a22b_llm_pretrain.yaml (b200): no CUDA graphs, no recompute (the table's "
            "vp 2 where the yaml has 12)",
            TOKEN_DROP,
        ],
    },
}


class TableRow(NamedTuple):
    """One run the table prints: its system's GPU, the row's cells for this precision, and the precision."""

    gpu: str
    cells: dict
    precision: str


def split_cell(cell: str) -> tuple[str, str]:
    """A cell's (plain run's, MXFP8 run's) values: "a (b)" gives (a, b), a cell without parentheses (a, a)."""
    match = re.fullmatch(r"\s*([^()]*?)\s*\(\s*([^()]*?)\s*\)\s*", cell)
    return (match.group(1), match.group(2)) if match else (cell.strip(), cell.strip())


def table_rows(text: str, path: str) -> list[TableRow] | None:
    """Every run of the 25.09 section's GB200 and B200 tables, the MXFP8 variants after their plain rows; None, after
    one line on stderr naming the file and what it lacks, where the section or a table's columns are missing."""
    start = text.find(SECTION)
    if start < 0:
        print(f"{path}: no '{SECTION}' section", file=sys.stderr)
        return None
    end = text.find("\n## ", start + len(SECTION))
    lines = text[start : end if end > 0 else len(text)].splitlines()
    rows, gpu, header = [], None, None
    for line in lines:
        if line.startswith("#### "):
            gpu, header = SYSTEM_HEADINGS.get(line.strip()), None
        elif gpu and line.startswith("|") and not set(line) <= set("|- "):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
                missing = [c for c in COLUMNS if c not in header]
                if missing:
                    print(f"{path}: the {gpu} table lacks the columns {', '.join(missing)}", file=sys.stderr)
                    return None
                continue
            named = dict(zip(header, cells))
            if named["Model"].split("(")[0].strip() not in MODELS:
                print(f"{path}: the {gpu} table's model {named['Model']!r} is none of {', '.join(MODELS)}", file=sys.stderr)
                return None
            pairs = {c: split_cell(named[c]) if c != "Model" else (named[c], named[c]) for c in COLUMNS}
            bad = next(((c, v) for c in COLUMNS[1:] for v in pairs[c] if not whole(c, v)), None)
            if bad:
                print(
                    f"{path}: the {gpu} table's {named['Model']} row has {bad[0]} {bad[1]!r}; allowed: a positive whole "
                    "number (FSDP 0 or 1, VP n/a)",
                    file=sys.stderr,
                )
                return None
            runs = [TableRow(gpu, {c: v[0] for c, v in pairs.items()}, PLAIN)]
            if "(" in named.get("Tokens / sec / GPU", ""):
                runs.append(TableRow(gpu, {c: v[1] for c, v in pairs.items()}, MX))
            for run in runs:
                n, split = int(run.cells["#-GPUs"]), [int(run.cells[c]) for c in ("TP", "PP", "CP")]
                if n % (split[0] * split[1] * split[2]):
                    print(
                        f"{path}: the {gpu} table's {named['Model']} row: {n} GPUs are no multiple of TP x PP x CP {split}",
                        file=sys.stderr,
                    )
                    return None
            rows += runs
    if not rows:
        print(f"{path}: no GB200 or B200 rows in '{SECTION}'", file=sys.stderr)
        return None
    return rows


def whole(column: str, value: str) -> bool:
    """Whether a cell holds what ``number`` reads in its column: a positive whole number, FSDP's 0 or 1, VP's n/a."""
    if column == "VP" and value.lower() == "n/a":
        return True
    if not value.isdigit():
        return False
    return int(value) in (0, 1) if column == "FSDP" else int(value) > 0


def number(value: str) -> int:
    return 1 if value.strip().lower() == "n/a" else int(value)


def entry(row: TableRow) -> dict:
    """The validation entry of one table run (the module docstring says how)."""
    c, gpu = row.cells, row.gpu
    name = c["Model"].split("(")[0].strip()
    tokendrop = "tokendrop" in c["Model"]
    model = MODELS[name]
    n, gbs, mbs, ga = number(c["#-GPUs"]), number(c["GBS"]), number(c["MBS"]), number(c["GA"])
    tp, pp, cp = number(c["TP"]), number(c["PP"]), number(c["CP"])
    dp = n // (tp * pp * cp)
    notes = []
    if gbs != dp * mbs * ga and gbs % (dp * ga) == 0:
        notes.append(f"micro-batch {gbs // (dp * ga)}: the table's MBS {mbs} contradicts its GA {ga} ({gbs} / (dp {dp} x {mbs}))")
        mbs = gbs // (dp * ga)
    mapping = table_mapping(n, tp, pp, cp, mbs, number(c["VP"]), bool(number(c["FSDP"])))
    ep = number(c["EP"])
    if ep > 1:
        mapping["ep"] = ep
    seq = number(c["Sequence Length"])
    workload = {
        "kind": "training",
        "seq_len": seq,
        "global_batch": gbs,
        "precision": "fp8",
        "low_precision_recipe": LOW_PRECISION_RECIPES[row.precision],
        "attention": "flash",
        "grad_bytes": 2,  # the perf yamls' mixed_precision.grad_reduce_in_fp32 false
    }
    settings = recipe(model, gpu, row.precision, RECIPES)
    workload.update(settings.get("workload", {}))
    mapping.update(settings.get("mapping", {}))
    assumptions = [
        RECIPE_NOTE[row.precision] + (" [assumption: the table prints no precision]" if row.precision == PLAIN else ""),
        "gradients held and reduced in bf16 (the perf yamls' grad_reduce_in_fp32 false)",
        *notes,
        *settings.get("assumptions", []),
        "Megatron FSDP (ZeRO-3 sharding)" if mapping["zero"] == 3 else "distributed optimizer (ZeRO-1), the recipes' default",
    ]
    if ep > 1:
        assumptions.append("MoE: expert tensor parallelism 1 (the perf yamls' etp 1)" + ("" if tokendrop else ", dropless"))
    # Megatron-Core carves the expert-parallel group out of tp x dp x cp: a row whose EP does not divide it did not run
    # as printed (the variant's own EP is not published)
    reason = None
    if ep > 1 and (tp * dp * cp) % ep != 0:
        reason = f"the table's EP {ep} does not divide tp x dp x cp = {tp * dp * cp}, of which Megatron-Core forms it"
    run_id = f"{PREFIX}-{name.lower().replace(' ', '_')}-dgx-{gpu.lower()}-{n}gpu-fp8-{row.precision[-2:].lower()}"
    source = f"NVIDIA Megatron-Bridge performance summary, 25.09 NeMo container, DGX-{gpu} pre-training table ({SOURCE})"
    rate = number(c["Tokens / sec / GPU"])
    return table_entry(run_id, source, "primary_text", model, gpu, n, workload, mapping, rate, assumptions, reason)


HEADER = f"""# Megatron-Bridge 25.09's pre-training runs on DGX-GB200 and DGX-B200 (benchmarks/mbridge_2509_runs.py, which writes
# this file; its docstring says what each row becomes). Out of sample: nothing is fitted on them; benchmarks/accuracy.py
# reports them. The same release's H100 rows are in the calibration set (training_runs.yaml, mbridge2509-*).
# source: {SOURCE}
# recipes: https://github.com/NVIDIA-NeMo/Megatron-Bridge/tree/v0.1.0rc3/scripts/performance
"""


def build(text: str, path: str) -> tuple[str, str] | None:
    rows = table_rows(text, path)
    if rows is None:
        return None
    entries = [entry(r) for r in rows]
    body = HEADER + yaml.safe_dump({"runs": entries}, sort_keys=False, width=140, allow_unicode=True)
    return body, f"{len(entries)} runs"


def main(argv=None) -> int:
    return run_import(__doc__, "Megatron-Bridge's docs/performance-summary.md at fa0315ae2", OUT, argv, build)


if __name__ == "__main__":
    sys.exit(main())
