"""benchmarks/reserved_accuracy.py on made-up tables: the reserved rows themselves are read by no test (issue 13).

The pages below are invented in Megatron-Bridge's layout (numbers included); they check that only the
pre-training rows of releases after 25.11 are taken, that a row becomes the entry the table states, and that
the script refuses to replace a file or read a column it does not know."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import reserved_accuracy  # noqa: E402  benchmarks/reserved_accuracy.py

HEADER = (
    "| System | #-GPUs | Precision | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | Tokens / sec / GPU "
    "| Model TFLOP / sec / GPU |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)
PAGE = (
    "# Performance\n\n## 26.02 NeMo Container\n\n### Pre-Training Performance\n\n#### Model: LLAMA3_70B\n\n"
    + HEADER
    + "| DGX-H100 | 64 | FP8 | 128 | 1 | 8192 | 0 | 4 | 4 | 1 | 5 | n/a | 1000 | 500 |\n"
    "| DGX-GB200 | 64 | MXFP8 | 128 | 2 | 8192 | 64 | 1 | 1 | 1 | n/a | n/a | 2000 | 900 |\n\n"
    "#### Model: Nemotron_3_Nano\n\n"
    + HEADER
    + "| DGX-GB300 | 8 | MXFP8 | 512 | 4 | 8192 | 0 | 1 | 1 | 1 | n/a | 8 | 4000 | 900 |\n\n"
    "#### Model: Qwen3_30B_a3B\n\n"
    + HEADER
    + "| DGX-B300 | 8 | NVFP4 | 512 | 4 | 4096 | 0 | 1 | 1 | 1 | n/a | 8 | 30000 | 700 |\n\n"
    "### SFT Performance\n\n#### Model: LLAMA3_70B\n\n"
    + HEADER
    + "| DGX-H100 | 32 | FP8 | 32 | 1 | 4096 | 0 | 4 | 1 | 1 | n/a | n/a | 900 | 400 |\n\n"
    "## 25.11 NeMo Container\n\n### Pre-Training Performance\n\n#### Model: LLAMA3_70B\n\n"
    + HEADER
    + "| DGX-H100 | 64 | FP8 | 128 | 1 | 8192 | 0 | 4 | 4 | 1 | 5 | n/a | 900 | 450 |\n"
)


def test_only_pretraining_rows_after_25_11_are_read():
    rows = reserved_accuracy.parse_summary(PAGE, "page")
    assert [(r["release"], r["model"], r["system"]) for r in rows] == [
        ("26.02", "LLAMA3_70B", "DGX-H100"),
        ("26.02", "LLAMA3_70B", "DGX-GB200"),
        ("26.02", "Nemotron_3_Nano", "DGX-GB300"),
        ("26.02", "Qwen3_30B_a3B", "DGX-B300"),
    ]
    assert rows[0]["vp"] == 5 and rows[1]["vp"] is None and rows[0]["origin"] == "page, line 11"


def test_a_row_becomes_the_entry_the_table_states():
    h100, gb200, nano, qwen = (reserved_accuracy.entry(r) for r in reserved_accuracy.parse_summary(PAGE, "page"))
    assert h100["mapping"] == {
        "tp": 4,
        "pp": 4,
        "dp": 4,
        "cp": 1,
        "micro_batch": 1,
        "vpp": 5,
        "sp": True,
        "recompute": ["none", "selective", "full"],
        "zero": 1,
        "uneven_chunks": [False, True],
    }
    assert h100["workload"]["low_precision_recipe"] == "tensorwise" and h100["system"] == "dgx-h100"
    assert h100["measured"]["step_time_s"] == pytest.approx(128 * 8192 / (64 * 1000), abs=1e-4)
    assert gb200["mapping"]["zero"] == 3 and gb200["workload"]["low_precision_recipe"] == "mxfp8"
    assert "uneven_chunks" not in gb200["mapping"]
    assert nano["not_expressible"] == "not in the library: model 'Nemotron_3_Nano'"
    assert qwen["workload"]["precision"] == "fp4" and qwen["mapping"]["ep"] == 8 and qwen["system"] == "dgx-b300"
    assert len({e["id"] for e in (h100, gb200, nano, qwen)}) == 4


def test_the_entries_evaluate(tmp_path, capsys):
    out = tmp_path / "reserved.yaml"
    page = tmp_path / "performance-summary.md"
    page.write_text(PAGE)
    assert reserved_accuracy.import_tables([page], out, "abc") == 0
    assert reserved_accuracy.report(out) == 0
    text = capsys.readouterr().out
    assert "all reserved rows: 3 runs" in text and "dense: 2 runs" in text and "MoE: 1 runs" in text
    assert "not evaluated (not in the library): 1 rows (Nemotron_3_Nano)" in text
    assert "predicted not to fit, though they ran: 0 of 3" in text


def test_refuses_to_replace_a_file_or_read_an_unknown_column(tmp_path, capsys):
    out = tmp_path / "reserved.yaml"
    out.write_text("mine\n")
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert reserved_accuracy.import_tables([page], out, "abc") == 2
    assert out.read_text() == "mine\n" and "not replaced" in capsys.readouterr().err
    page.write_text(PAGE.replace("| GBS |", "| Batch |", 1))
    assert reserved_accuracy.import_tables([page], tmp_path / "new.yaml", "abc") == 2
    assert "unknown column(s) ['Batch']" in capsys.readouterr().err


def test_no_fit_reads_the_reserved_file():
    """calibrate.py and accuracy.py read problems/validation/training_runs.yaml, never the reserved file."""
    root = Path(__file__).resolve().parent.parent
    for script in ("calibrate.py", "accuracy.py"):
        assert "reserved_training_runs" not in (root / "benchmarks" / script).read_text()


def test_recipes_add_the_25_11_settings_of_the_same_model_gpu_and_precision():
    _, gb200, _, qwen = (reserved_accuracy.entry(r) for r in reserved_accuracy.parse_summary(PAGE, "page"))
    # Llama 3 70B on GB200: the 25.11 recipe's activation offloading belongs to its own FSDP row, not carried over
    same, note = reserved_accuracy.with_recipe(gb200)
    assert same == gb200 and note == ""
    h100_qwen = {**qwen, "system": "dgx-h100", "workload": {**qwen["workload"], "low_precision_recipe": "tensorwise"}}
    taken, note = reserved_accuracy.with_recipe(h100_qwen)
    assert taken["workload"]["moe_a2a_overlap"] is True and note == "25.11 recipe: moe_a2a_overlap"
    assert "moe_a2a_overlap" not in h100_qwen["workload"]  # the entry itself is left as it was
