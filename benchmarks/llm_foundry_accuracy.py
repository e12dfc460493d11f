"""LLM Foundry's MPT runs by table, timed with the kernel they ran and with the model's flash attention.

    python benchmarks/llm_foundry_accuracy.py

Reads problems/validation/llm_foundry_runs.yaml (benchmarks/llm_foundry_runs.py) and prints, per table of the
README and for all runs, the mean |error| of the step time, its signed mean and the worst run: once with the runs'
own kernel (workload.attention triton, FlashAttention's Triton port) and once as if they had run the model's
flash attention, to show what the kernel explains. Then the signed mean by sequence length and GPU. Out of sample:
nothing is fitted on these runs.
"""

from __future__ import annotations

import statistics
import sys

from parasol.solver.report import text_table
from parasol.solver.validation import evaluate_all, load_runs

FILE = "llm_foundry_runs.yaml"
LENGTHS = ((0, 4096, "up to 4K"), (8192, 8192, "8K"), (16384, 65536, "16K-64K"))


def table_of(entry: dict) -> str:
    """The README table a run comes from (its source names it in quotes)."""
    return entry["source"].split('"')[1]


def with_kernel(entries: list[dict], kernel: str) -> list[dict]:
    """The runs as they would be with attention kernel ``kernel`` (``choices.AttentionKernel``)."""
    return [dict(e, workload=dict(e["workload"], attention=kernel)) for e in entries]


def summary(errors: list[float], ids: list[str]) -> list[str]:
    worst = max(range(len(errors)), key=lambda i: abs(errors[i]))
    return [
        str(len(errors)),
        f"{100 * statistics.fmean(abs(x) for x in errors):.1f} %",
        f"{100 * statistics.fmean(errors):+.1f} %",
        f"{100 * errors[worst]:+.1f} % ({ids[worst]})",
    ]


def main() -> int:
    runs = load_runs(name=FILE)
    ids = [e["id"] for e in runs]
    errors = {kernel: [r.error for r in evaluate_all(with_kernel(runs, kernel))] for kernel in ("triton", "flash")}
    tables = list(dict.fromkeys(table_of(e) for e in runs))
    rows = []
    for kernel, errs in errors.items():
        for name in (*tables, "all"):
            picked = [i for i, e in enumerate(runs) if name in ("all", table_of(e))]
            rows.append([kernel, name, *summary([errs[i] for i in picked], [ids[i] for i in picked])])
    print(text_table(["kernel", "table", "runs", "mean |error|", "mean", "worst"], rows, markdown=False))
    print()
    rows = []
    for lo, hi, label in LENGTHS:
        for gpu in ("A100", "H100"):
            picked = [i for i, e in enumerate(runs) if lo <= e["workload"]["seq_len"] <= hi and gpu in table_of(e)]
            rows.append([label, gpu, str(len(picked)), f"{100 * statistics.fmean(errors['triton'][i] for i in picked):+.1f} %"])
    print(text_table(["sequence", "GPU", "runs", "mean error (triton)"], rows, markdown=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
