"""The model's error on the reserved sets it can read: a measurement, never a fit.

    python benchmarks/reserved_accuracy.py [--recipes]      # evaluate both reserved files
    python benchmarks/reserved_accuracy.py --import SUMMARY.md [ARCHIVE.md ...] [--out FILE] [--commit C]
    python benchmarks/reserved_accuracy.py --import-trtllm PERF_OVERVIEW.md [--azure ND_GB200_v6_results.md]
        [--out-serving FILE] [--commit C] [--azure-commit C]
    python benchmarks/reserved_accuracy.py --budgets [--time-limit S]   # the whole-run totals only

Training: Megatron-Bridge's performance tables of the releases after 25.11 (step time). Serving: TensorRT-LLM's
perf-overview throughput tables of B200, GB200 and B300 and the Azure AI benchmarking guide's GB200 TensorRT-LLM
tables (``reserved_serving``: tokens/s per GPU at the planner's best batch). Whole runs: the published GPU-hours of Llama 1, 2 and 3
(problems/validation/reserved_budgets.yaml, written by hand with each total's source; ``reserved_budgets``: the
planner's best plan and its run's GPU-hours).

Issue 13 reserves Megatron-Bridge's performance tables of the releases after 25.11 to keep an honest
measure of the model: no fit (benchmarks/calibrate.py) and no test reads them. This script is their only
reader. ``--import`` copies the pre-training rows of those releases from Megatron-Bridge's
docs/performance-summary.md and docs/performance-summary-archive.md into a validation file (it refuses to
replace an existing one); without it, every row is evaluated with the table's own mapping and the model's
defaults for everything the table does not print - no release's recipe settings are read in, so that the
figure measures what a user of parasol would get from the table alone:

- the distributed optimizer (ZeRO-1), or ZeRO-3 where the row's FSDP column is set; gradients in bf16;
  no offloading, flash attention; sequence parallelism with tp > 1; recomputation, which the table does not
  print, listed (none, selective, full: ``solver.validation`` takes the fastest that fits, as for every
  published run that leaves a setting out);
- "FP8" and "FP8-CS" are Transformer Engine's per-tensor current scaling, "MXFP8"/"FP8-MX" MXFP8, "NVFP4"
  NVFP4 (its default recipe, with the random Hadamard transform; tensor-parallel overlap off, as
  Megatron-Bridge's NVFP4 recipes set it);
- MoE rows: the table's footnote (routing force-balanced, dropless), expert tensor parallelism 1, the
  all-to-all dispatcher;
- with interleaving, chunks of equal or unequal size listed (``mapping.uneven_chunks``: a pipeline layout,
  which a layer count that pp x vp does not split needs); DeepSeek-V3 without its MTP layer (as 25.11's
  table says; the later ones do not).

Rows of models the library lacks (Nemotron 3, Kimi K2, DeepSeek-V4) are counted and named, not evaluated.
``--recipes`` adds, where Megatron-Bridge 25.11's recipe of the same model, GPU and precision set them, that
recipe's dispatcher, recomputation, Adam moments, all-to-all overlap and tensor-parallel overlap
(``import_mbridge_runs.RECIPES``, read for the in-sample 25.11 rows): what a user who knew those recipes would
give, assuming the later releases kept them.
"""

from __future__ import annotations

import argparse
import functools
import re
import statistics
import sys
from pathlib import Path

import import_mbridge_runs  # benchmarks/import_mbridge_runs.py: the 25.11 recipes' settings (--recipes)
import reserved_budgets  # benchmarks/reserved_budgets.py: the published whole-run totals
import reserved_serving  # benchmarks/reserved_serving.py: TensorRT-LLM's reserved tables
import yaml

from parasol.model.errors import ProblemError
from parasol.model.pipeline import a2a_overlap_problem
from parasol.solver.inference_validation import evaluate_planned_run
from parasol.solver.validation import evaluate_run, load_runs

ROOT = Path(__file__).resolve().parent.parent
RESERVED = ROOT / "problems" / "validation" / "reserved_training_runs.yaml"
RESERVED_SERVING = ROOT / "problems" / "validation" / "reserved_inference_runs.yaml"
RESERVED_BUDGETS = ROOT / "problems" / "validation" / "reserved_budgets.yaml"
SOURCE = "https://github.com/NVIDIA-NeMo/Megatron-Bridge/blob/{commit}/docs/{name}"
TRTLLM_SOURCE = "https://github.com/NVIDIA/TensorRT-LLM/blob/{commit}/docs/source/performance/perf-overview.md"
AZURE_SOURCE = "https://github.com/Azure/AI-benchmarking-guide/blob/{commit}/Azure_Results/ND_GB200_v6_results.md"
HEADER = (
    "# RESERVED by issue 13: {what}. No fit and no test reads this file;\n"
    "# benchmarks/reserved_accuracy.py (which wrote it, {flag}) is its only reader.\n"
)
FIRST_RESERVED = (25, 11)  # releases after this one are reserved (issue 13)
RECOMPUTE = ("none", "selective", "full")  # not printed: listed, the model takes the fastest that fits

MODELS = import_mbridge_runs.MODELS  # the tables name models as 25.11's does
SYSTEMS = {
    "DGX-GB300": "gb300-nvl72",
    "DGX-GB200": "gb200-nvl72",
    "DGX-B300": "dgx-b300",
    "DGX-B200": "dgx-b200",
    "DGX-H100": "dgx-h100",
}
# the table's precision -> (workload.precision, workload.low_precision_recipe or None, what it is)
PRECISIONS = {
    "BF16": ("bf16", None, "bf16 GEMMs and attention"),
    "FP8": ("fp8", "tensorwise", "FP8 GEMMs with per-tensor current scaling (the 25.11 table's FP8-CS) [assumption]"),
    "FP8-CS": ("fp8", "tensorwise", "FP8 GEMMs with per-tensor current scaling"),
    "MXFP8": ("fp8", "mxfp8", "MXFP8 GEMMs (1x32 blocks, E8M0 scales)"),
    "FP8-MX": ("fp8", "mxfp8", "MXFP8 GEMMs (1x32 blocks, E8M0 scales)"),
    "NVFP4": ("fp4", "nvfp4", "NVFP4 GEMMs, Transformer Engine's default recipe; tensor-parallel overlap off"),
}
COLUMNS = {  # the table's header -> the row's key
    "System": "system",
    "#-GPUs": "num_gpus",
    "Precision": "precision",
    "GBS": "global_batch",
    "MBS": "micro_batch",
    "Sequence Length": "seq_len",
    "FSDP": "fsdp",
    "TP": "tp",
    "PP": "pp",
    "CP": "cp",
    "VP": "vp",
    "EP": "ep",
    "Tokens / sec / GPU": "tokens_per_s_per_gpu",
    "Model TFLOP / sec / GPU": "model_tflops_per_gpu",
}


TableError = reserved_serving.TableError  # a table row an importer cannot read


def release_key(name: str) -> tuple:
    """'26.04.01' -> (26, 4, 1)."""
    return tuple(int(part) for part in name.split("."))


TEXT_COLUMNS = ("system", "precision")
OPTIONAL_COLUMNS = ("fsdp", "cp", "vp", "ep", "model_tflops_per_gpu")  # may read n/a


def _cell(value: str, column: str, where: str):
    """A table cell: text for ``TEXT_COLUMNS``, else a whole number (positive, but 0 allowed for FSDP), or None
    for n/a where ``OPTIONAL_COLUMNS`` allow it; anything else is a ``TableError`` naming the cell."""
    value = re.sub(r"\[\^[^\]]*\]", "", value).strip()  # a footnote marker ([^gpt-oss-note]) is not the value
    if column in TEXT_COLUMNS:
        if not value:
            raise TableError(f"{where}: column {column!r} is empty")
        return value
    if value in ("n/a", "", "-") and column in OPTIONAL_COLUMNS:
        return None
    if re.fullmatch(r"\d+", value) and (int(value) > 0 or column == "fsdp"):
        return int(value)
    allowed = "a positive whole number" + (" or n/a" if column in OPTIONAL_COLUMNS else "")
    raise TableError(f"{where}: column {column!r} reads {value!r}; allowed: {allowed}")


def parse_summary(text: str, origin: str) -> list[dict]:
    """The pre-training rows of every release after 25.11 in one of Megatron-Bridge's performance-summary
    pages: dicts of ``COLUMNS``' keys plus release, model and origin (the page and its line)."""
    rows, release, model, pretraining, header = [], None, None, False, None
    for number, line in enumerate(text.splitlines(), 1):
        if m := re.match(r"## (\d+\.\d+(?:\.\d+)?) NeMo Container", line):
            release, pretraining, model = m.group(1), False, None
        elif line.startswith("### "):
            pretraining = line.strip() == "### Pre-Training Performance"
        elif m := re.match(r"#### Model: (.+)", line):
            model, header = m.group(1).strip(), None
        elif line.startswith("|") and release and pretraining and model:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] == "System":
                unknown = [c for c in cells if c not in COLUMNS]
                if unknown:
                    raise TableError(f"{origin}:{number}: unknown column(s) {unknown}; known: {list(COLUMNS)}")
                header = [COLUMNS[c] for c in cells]
                absent = [c for c, key in COLUMNS.items() if key not in header and key not in OPTIONAL_COLUMNS]
                if absent:
                    raise TableError(f"{origin}:{number}: the header lacks {absent}")
            elif header and not set(cells[0]) <= set("-: "):
                if len(cells) != len(header):
                    raise TableError(f"{origin}:{number}: {len(cells)} cells under a header of {len(header)}")
                if release_key(release) <= FIRST_RESERVED:
                    continue
                row = {key: _cell(c, key, f"{origin}:{number}") for key, c in zip(header, cells)}
                rows.append({"release": release, "model": model, **row, "origin": f"{origin}, line {number}"})
    return rows


def run_id(row: dict) -> str:
    system = row["system"].lower().removeprefix("dgx-")
    model = row["model"].lower().replace(" ", "_")
    fsdp = "-fsdp" if row.get("fsdp") else ""
    shape = (
        f"tp{row['tp']}pp{row['pp']}cp{row.get('cp') or 1}vp{row.get('vp') or 1}ep{row.get('ep') or 1}mbs{row['micro_batch']}"
        f"-gbs{row['global_batch']}-seq{row['seq_len']}"
    )
    return (
        f"mbridge{row['release'].replace('.', '')}-{model}-{system}-{row['num_gpus']}gpu-{row['precision'].lower()}-{shape}{fsdp}"
    )


def entry(row: dict) -> dict:
    """The validation entry of one table row (``solver.validation``'s format); ``not_expressible`` where the
    library lacks the model, the system or the precision."""
    model, system = MODELS.get(row["model"]), SYSTEMS.get(row["system"])
    precision = PRECISIONS.get(row["precision"])
    tp, pp, cp, vp, ep = row["tp"], row["pp"], row.get("cp") or 1, row.get("vp") or 1, row.get("ep") or 1
    n = row["num_gpus"]
    tokens = row["global_batch"] * row["seq_len"]
    base = {
        "id": run_id(row),
        "source": f"Megatron-Bridge performance summary, NeMo container {row['release']} ({row['origin']})",
        "verification": "primary_text",
        "measured": {
            "step_time_s": round(tokens / (n * row["tokens_per_s_per_gpu"]), 4),
            "derived_from": f"global_batch x seq_len / (num_gpus x tokens_per_s_per_gpu {row['tokens_per_s_per_gpu']})",
        },
    }
    named = (("model", model, row["model"]), ("system", system, row["system"]), ("precision", precision, row["precision"]))
    missing = [f"{what} {given!r}" for what, value, given in named if value is None]
    if missing:
        return {
            **base,
            "model": model or row["model"],
            "system": system or row["system"],
            "num_gpus": n,
            "not_expressible": "not in the library: " + ", ".join(missing),
        }
    dtype, low, note = precision
    workload = {
        "kind": "training",
        "seq_len": row["seq_len"],
        "global_batch": row["global_batch"],
        "precision": dtype,
        "attention": "flash",
        "grad_bytes": 2,
    }
    if low:
        workload["low_precision_recipe"] = low
    mapping = import_mbridge_runs.table_mapping(n, tp, pp, cp, row["micro_batch"], vp, bool(row.get("fsdp")), list(RECOMPUTE))
    if ep > 1:
        mapping["ep"] = ep
    if pp > 1 and vp > 1:
        mapping["uneven_chunks"] = [False, True]
    assumptions = [
        note,
        "gradients held and reduced in bf16, no offloading; recomputation not printed: the listed choices",
        "Megatron FSDP (ZeRO-3 sharding)" if row.get("fsdp") else "distributed optimizer (ZeRO-1)",
    ]
    if model == "deepseek-v3":
        assumptions.append("no MTP layer (the 25.11 table's 'w/o MTP'; later tables do not say) [assumption]")
    if ep > 1:
        assumptions.append("MoE: routing force-balanced and dropless (the table's footnote), expert tensor parallelism 1")
    return {
        **base,
        "model": model,
        "system": system,
        "num_gpus": n,
        "workload": workload,
        "mapping": mapping,
        "assumptions": assumptions,
    }


def one_line_errors(command):
    """``command`` with its ``TableError`` (or the library's ``ProblemError``) printed as one line on stderr and exit
    status 2."""

    @functools.wraps(command)
    def run_(*args, **kwargs) -> int:
        try:
            return command(*args, **kwargs)
        except (TableError, ProblemError) as err:
            print(err, file=sys.stderr)
            return 2

    return run_


def refuse_existing(out: Path) -> None:
    if out.exists():
        raise TableError(f"{out}: exists; not replaced (remove it first)")


@one_line_errors
def import_tables(paths: list[Path], out: Path, commit: str) -> int:
    refuse_existing(out)
    rows = []
    for path in paths:
        rows += in_file(path, lambda text, p=path: parse_summary(text, SOURCE.format(commit=commit, name=p.name)))
    if not rows:
        raise TableError(f"{', '.join(map(str, paths))}: no pre-training row of a release after 25.11")
    entries, seen, repeated = [], {}, 0
    for row in rows:
        e = entry(row)
        same = {k: v for k, v in row.items() if k != "origin"}
        if e["id"] in seen:
            if seen[e["id"]] != same:
                raise TableError(f"{row['origin']}: two rows of {e['id']} differ: {seen[e['id']]} and {same}")
            repeated += 1  # a release that prints the very same row twice
            continue
        seen[e["id"]] = same
        entries.append(e)
    if repeated:
        print(f"{repeated} rows printed twice in a release were read once")
    return write(out, entries, "Megatron-Bridge performance tables of the releases after 25.11", "--import")


def in_file(path: Path, parse):
    """``parse`` of the page at ``path``; its ``TableError`` (or one for an unreadable page) names the file."""
    try:
        return parse(read_page(path))
    except TableError as err:
        raise TableError(f"{path}: {err}") from None


def read_page(path: Path) -> str:
    """A page's text; a ``TableError`` where it cannot be read as UTF-8 text."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TableError(f"cannot be read: {err}") from None


def write(out: Path, entries: list, what: str, flag: str) -> int:
    header = HEADER.format(what=what, flag=flag)
    if not out.parent.is_dir():
        raise TableError(f"{out}: its folder {out.parent} does not exist")
    out.write_text(header + yaml.safe_dump({"runs": entries}, sort_keys=False, width=140, allow_unicode=True))
    print(f"{len(entries)} rows written to {out}")
    return 0


@one_line_errors
def import_trtllm(page: Path, out: Path, commit: str, azure: Path | None = None, azure_commit: str = "main") -> int:
    """TensorRT-LLM's perf-overview ``page`` and, with ``azure``, the Azure guide's ND GB200 v6 page, into ``out``."""
    refuse_existing(out)
    source = TRTLLM_SOURCE.format(commit=commit)

    def cells(text):
        requests = reserved_serving.parse_requests(text)
        return [reserved_serving.entry(r, requests, source) for r in reserved_serving.parse_page(text)]

    entries = in_file(page, cells)
    if not entries:
        raise TableError(f"{page}: no B200, GB200 or B300 throughput column found")
    what = "TensorRT-LLM perf-overview tables of B200, GB200 and B300"
    if azure:
        rows = in_file(azure, reserved_serving.parse_azure)
        if not rows:
            raise TableError(f"{azure}: no 'End-to-End Inference Workloads - TensorRT-LLM' table found")
        entries += [reserved_serving.azure_entry(r, AZURE_SOURCE.format(commit=azure_commit)) for r in rows]
        what += " and the Azure AI benchmarking guide's GB200 TensorRT-LLM tables"
    return write(out, entries, what, "--import-trtllm")


def load_entries(path: Path) -> list[dict]:
    """A reserved validation file's runs; a ``TableError`` naming the file where it is missing or has no runs list."""
    try:
        data = yaml.safe_load(read_page(path))
    except yaml.YAMLError as err:
        raise TableError(f"not YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise TableError("no 'runs' list (write it with --import or --import-trtllm)")
    return data["runs"]


def report_serving(path: Path) -> int:
    entries = load_entries(path)
    lacking = [e for e in entries if "not_expressible" in e]
    results = []
    for e in entries:
        if "not_expressible" in e:
            continue
        try:
            results.append(evaluate_planned_run(e))
        except (ProblemError, ValueError) as err:
            print(f"{e['id']}: not evaluated: {err}")
    print(f"{'run':58s} {'measured tok/s/GPU':>18s} {'model':>9s} {'error':>8s}")
    for r in results:
        print(f"{r.run_id:58s} {r.measured:18.1f} {r.predicted:9.1f} {100 * r.error:+7.1f}%")
    print()
    for label, chosen in [("all reserved serving rows", results)] + [
        (f"  {fam}", [r for r in results if r.family == fam]) for fam in sorted({r.family for r in results})
    ]:
        if chosen:
            worst = max(chosen, key=lambda r: abs(r.error))
            faster = sum(r.error > 0 for r in chosen)
            print(
                f"{label}: {len(chosen)} runs, mean |error| {100 * statistics.mean(abs(r.error) for r in chosen):.1f} %, "
                f"worst {100 * worst.error:+.1f} % ({worst.run_id}), {faster} predicted faster"
            )
    reasons = sorted({e["not_expressible"] for e in lacking})
    print(f"not evaluated: {len(lacking)} cells ({'; '.join(reasons)})")
    return 0


GPUS = {system: name.removeprefix("DGX-") for name, system in SYSTEMS.items()}
RECIPE_LABELS = {None: "BF16", "tensorwise": "FP8-CS", "mxfp8": "FP8-MX", "nvfp4": "NVFP4"}  # 25.11's precision labels
RECIPE_MAPPING_KEYS = ("recompute", "tp_comm_overlap")  # what of a 25.11 recipe's mapping settings is carried over


def with_recipe(entry_: dict) -> tuple[dict, str]:
    """The entry with the settings Megatron-Bridge 25.11's recipe of the same model, GPU and precision sets
    (``import_mbridge_runs.recipe``): its workload settings (dispatcher, recomputed modules, Adam moments, the
    all-to-all overlap) and its recomputation and tensor-parallel overlap; not its layouts, micro-batch or
    offloading, which belong to the 25.11 row's own mapping. A note of what was taken."""
    low = entry_["workload"].get("low_precision_recipe")
    settings = import_mbridge_runs.recipe(entry_["model"], GPUS[entry_["system"]], RECIPE_LABELS[low])
    workload = {**entry_["workload"], **settings.get("workload", {})}
    mapping = dict(entry_["mapping"])
    for key in RECIPE_MAPPING_KEYS:
        if key in settings.get("mapping", {}):
            mapping[key] = settings["mapping"][key]
    if low == "nvfp4" or not mapping.get("sp"):
        mapping.pop("tp_comm_overlap", None)  # off under NVFP4; userbuffers need sequence parallelism
    overlap_problem = a2a_overlap_problem(
        mapping.get("pp", 1),
        mapping.get("vpp", 1),
        bool(mapping.get("dualpipe", False)),
        mapping.get("recompute", "none"),
        workload.get("recompute_modules", ["core_attn"]),
        workload.get("mtp_layers", 0),
    )
    if workload.get("moe_a2a_overlap") and overlap_problem is not None:
        workload["moe_a2a_overlap"] = False  # the recipe's overlap where the row's schedule cannot merge passes: off
    taken = sorted(
        set(settings.get("workload", {})) | {k for k in RECIPE_MAPPING_KEYS if k in mapping and k in settings.get("mapping", {})}
    )
    return {**entry_, "workload": workload, "mapping": mapping}, ("25.11 recipe: " + ", ".join(taken)) if taken else ""


def report(path: Path, recipes: bool = False) -> int:
    load_entries(path)  # a missing or malformed file named before the validation reader sees it
    expressible = load_runs(path)
    lacking = load_runs(path, expressible=False)
    results = []
    for e in expressible:
        e, note = with_recipe(e) if recipes else (e, "")
        try:
            r = evaluate_run(e)
        except ProblemError as err:
            print(f"{e['id']}: not evaluated: {err}")
            continue
        results.append((e, r, note))
    print(f"{'run':78s} {'measured s':>10s} {'model s':>9s} {'error':>8s}  fits  note")
    for e, r, note in results:
        fits = "yes" if r.evaluation.metrics.get("fits", True) else "NO"
        print(f"{e['id']:78s} {r.measured_step_s:10.3f} {r.predicted_step_s:9.3f} {100 * r.error:+7.1f}%  {fits:4s}  {note}")

    def summary(label, chosen):
        if not chosen:
            return
        errors = [abs(r.error) for _, r, _ in chosen]
        worst = max(chosen, key=lambda t: abs(t[1].error))
        print(
            f"{label}: {len(chosen)} runs, mean |error| {100 * statistics.mean(errors):.1f} %, "
            f"worst {100 * worst[1].error:+.1f} % ({worst[0]['id']})"
        )

    print()
    summary("all reserved rows", results)
    summary("dense", [t for t in results if "ep" not in t[0]["mapping"]])
    summary("MoE", [t for t in results if "ep" in t[0]["mapping"]])
    for release in sorted({e["source"].split("container ")[1].split(" ")[0] for e, _, _ in results}, key=release_key):
        summary(f"  release {release}", [t for t in results if f"container {release} " in t[0]["source"]])
    misfits = [e["id"] for e, r, _ in results if not r.evaluation.metrics.get("fits", True)]
    print(
        f"predicted not to fit, though they ran: {len(misfits)} of {len(results)}"
        + (": " + ", ".join(misfits) if misfits else "")
    )
    models = sorted({e["model"] for e in lacking})
    print(f"not evaluated (not in the library): {len(lacking)} rows ({', '.join(models)})")
    return 0


def report_budgets(path: Path, time_limit: float) -> int:
    results = []
    for row in load_entries(path):
        try:
            results.append(reserved_budgets.evaluate(row, time_limit))
        except (ProblemError, ValueError) as err:
            print(f"{row['id']}: not evaluated: {err}")
    print(f"{'run':16s} {'published GPU-h':>16s} {'planned GPU-h':>14s} {'error':>8s} {'plan MFU':>9s}  solve")
    for r in results:
        print(
            f"{r.run_id:16s} {r.published_gpu_hours:16,.0f} {r.predicted_gpu_hours:14,.0f} {100 * r.error:+7.1f}% "
            f"{100 * r.mfu:8.1f}%  {r.status}"
        )
    if results:
        worst = max(results, key=lambda r: abs(r.error))
        print(
            f"\n{len(results)} whole runs: mean |error| {100 * statistics.mean(abs(r.error) for r in results):.1f} %, "
            f"worst {100 * worst.error:+.1f} % ({worst.run_id}), {sum(r.error < 0 for r in results)} predicted cheaper"
        )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--import", dest="pages", nargs="+", type=Path, help="Megatron-Bridge performance-summary pages")
    parser.add_argument("--out", type=Path, default=RESERVED, help="the training validation file --import writes")
    parser.add_argument("--import-trtllm", dest="trtllm", type=Path, help="TensorRT-LLM's perf-overview.md")
    parser.add_argument("--azure", type=Path, help="with --import-trtllm: the Azure guide's ND_GB200_v6_results.md")
    parser.add_argument("--azure-commit", default="main", help="the Azure guide's commit (for the source)")
    parser.add_argument("--budgets", action="store_true", help="only the whole-run GPU-hours")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per whole-run solve")
    parser.add_argument("--out-serving", type=Path, default=RESERVED_SERVING, help="the serving file --import-trtllm writes")
    parser.add_argument("--commit", default="main", help="the commit the pages were read at (for the source)")
    parser.add_argument(
        "--recipes",
        action="store_true",
        help="add the settings Megatron-Bridge 25.11's recipe of the same model, GPU and precision sets",
    )
    args = parser.parse_args()
    if args.azure and not args.trtllm:
        parser.error("--azure goes with --import-trtllm")
    return run(args)


@one_line_errors
def run(args) -> int:
    if args.pages:
        return import_tables(args.pages, args.out, args.commit)
    if args.trtllm:
        return import_trtllm(args.trtllm, args.out_serving, args.commit, args.azure, args.azure_commit)
    if args.budgets:
        return report_budgets(RESERVED_BUDGETS, args.time_limit)
    try:
        status = report(args.out, args.recipes)
    except TableError as err:
        raise TableError(f"{args.out}: {err}") from None
    if not args.out_serving.exists():
        print(f"\n{args.out_serving}: no reserved serving file (write it with --import-trtllm)")
    else:
        print(
            "\nServing ("
            + str(args.out_serving.relative_to(ROOT) if args.out_serving.is_relative_to(ROOT) else args.out_serving)
            + ")"
        )
        try:
            status = status or report_serving(args.out_serving)
        except TableError as err:
            raise TableError(f"{args.out_serving}: {err}") from None
    print(f"\nWhole runs ({RESERVED_BUDGETS.relative_to(ROOT)})")
    return status or report_budgets(RESERVED_BUDGETS, args.time_limit)


if __name__ == "__main__":
    raise SystemExit(main())
