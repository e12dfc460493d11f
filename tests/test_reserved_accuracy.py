"""benchmarks/reserved_accuracy.py on made-up tables: the reserved rows themselves are read by no test (issue 13).

The pages below are invented in Megatron-Bridge's layout (numbers included); they check that only the
pre-training rows of releases after 25.11 are taken, that a row becomes the entry the table states, and that
the script refuses to replace a file or read a column it does not know."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from parasol.model.params import model_flops_per_token
from parasol.solver import library

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


def globs_unfiltered(text: str) -> bool:
    """Whether a module globs the validation folder without leaving the reserved_* files out."""
    return bool(re.search(r"validation\W+\)?\.r?glob", text)) and 'startswith("reserved_")' not in text


def test_no_fit_reads_the_reserved_file():
    """Only the reserved sets' own scripts (benchmarks/reserved_*.py) and this file name the reserved files: no fit,
    no other benchmark or test, nothing in model/ or solver/ reads them; and nothing globs the validation folder,
    which would read them unnamed, without leaving them out (tests/test_device_curves.py does, to hold every other
    file to the Azure rule)."""
    root = Path(__file__).resolve().parent.parent
    names = ("reserved_training_runs", "reserved_inference_runs", "reserved_budgets.yaml", "RESERVED")
    readers = [
        str(path.relative_to(root))
        for folder in ("model", "solver", "benchmarks", "tests")
        for path in (root / folder).glob("*.py")
        if not path.name.startswith("reserved_")
        and path.name != Path(__file__).name
        and (any(n in path.read_text() for n in names) or globs_unfiltered(path.read_text()))
    ]
    assert readers == []


def test_recipes_add_the_25_11_settings_of_the_same_model_gpu_and_precision():
    _, gb200, _, qwen = (reserved_accuracy.entry(r) for r in reserved_accuracy.parse_summary(PAGE, "page"))
    # Llama 3 70B on GB200: the 25.11 recipe's activation offloading belongs to its own FSDP row, not carried over
    same, note = reserved_accuracy.with_recipe(gb200)
    assert same == gb200 and note == ""
    h100_qwen = {**qwen, "system": "dgx-h100", "workload": {**qwen["workload"], "low_precision_recipe": "tensorwise"}}
    taken, note = reserved_accuracy.with_recipe(h100_qwen)
    assert taken["workload"]["moe_a2a_overlap"] is True and note == "25.11 recipe: moe_a2a_overlap"
    assert "moe_a2a_overlap" not in h100_qwen["workload"]  # the entry itself is left as it was
    # a row pipelined without interleaving cannot merge passes: the recipe's overlap is off there (Megatron-Core asserts)
    piped = {**h100_qwen, "mapping": {**h100_qwen["mapping"], "pp": 2, "dp": 4}}
    assert reserved_accuracy.with_recipe(piped)[0]["workload"]["moe_a2a_overlap"] is False
    assert reserved_accuracy.with_recipe({**piped, "mapping": {**piped["mapping"], "vpp": 2}})[0]["workload"]["moe_a2a_overlap"]


TRTLLM_PAGE = """## Throughput Measurements

#### Llama 3.3 70B

| Sequence Length (ISL/OSL) | B200<br/>TP1 (FP4) | GB200<br/>TP1 (FP4) | H100<br/>TP2 (FP8) |
|---|---|---|---|
| 1000/1000 | 5,000 | | 3,000 |
| 20000/2000 | 500 | 600 | 300 |

RTX 6000 Pro Blackwell Server Edition
| Sequence Length (ISL/OSL) | **4 GPUs**<br/>TP2,PP2 (FP4) |
|---|---|
| 1000/1000 | 9,000 |

#### Qwen3-235B-A22B

| Sequence Length (ISL/OSL) | B200<br/>TP8 (FP4) |
|---|---|
| 1000/1000 | 16,000 |

#### Llama 4 Maverick

| Sequence Length (ISL/OSL) | B200<br/>TP8 (FP4) |
|---|---|
| 1000/1000 | 80,000 |

## Reproducing Benchmarked Results

| Input Length | Output Length |  $seq_len  | $num_requests      |
| ------------ | ------------- | ---------- | ------------------ |
| 1000         | 1000          | 2000       | 3000               |
| 20000        | 2000          | 22000      | 1000               |
"""


def test_serving_reads_only_the_reserved_columns_of_the_throughput_tables():
    import reserved_serving  # noqa: PLC0415  benchmarks/reserved_serving.py

    rows = reserved_serving.parse_page(TRTLLM_PAGE)
    assert [(r["model"], r["gpu"], r["tp"], r["isl"], r["total_tokens_per_s"]) for r in rows] == [
        ("Llama 3.3 70B", "B200", 1, 1000, 5000),
        ("Llama 3.3 70B", "B200", 1, 20000, 500),
        ("Llama 3.3 70B", "GB200", 1, 20000, 600),
        ("Qwen3-235B-A22B", "B200", 8, 1000, 16000),
        ("Llama 4 Maverick", "B200", 8, 1000, 80000),
    ]
    requests = reserved_serving.parse_requests(TRTLLM_PAGE)
    assert requests == {(1000, 1000): 3000, (20000, 2000): 1000}
    llama, long, _, qwen, maverick = (reserved_serving.entry(r, requests, "src") for r in rows)
    assert llama["workload"]["requests"] == 3000 and llama["workload"]["precision"] == "fp4"
    assert llama["mapping"] == {"tp": 1, "pp": 1, "dp": 1, "ep": 1} and llama["system"] == "dgx-b200"
    assert qwen["mapping"]["ep"] == [1, 8] and qwen["measured"]["tokens_per_s_per_gpu"] == 2000.0
    assert "left out" in long["not_expressible"] and "not in the library" in maverick["not_expressible"]


def test_serving_import_and_report(tmp_path, capsys):
    page, out = tmp_path / "perf-overview.md", tmp_path / "serving.yaml"
    page.write_text(TRTLLM_PAGE)
    assert reserved_accuracy.import_trtllm(page, out, "abc") == 0
    assert reserved_accuracy.import_trtllm(page, out, "abc") == 2  # not replaced
    assert reserved_accuracy.report_serving(out) == 0
    text = capsys.readouterr().out
    assert "all reserved serving rows: 2 runs" in text and "not evaluated: 3 cells" in text


def test_budgets_plan_each_row_and_compare_its_gpu_hours(tmp_path, capsys):
    """An invented whole run (not a reserved total): the planner's plan, its run's GPU-hours, the signed error."""
    import reserved_budgets  # noqa: PLC0415  benchmarks/reserved_budgets.py

    row = {
        "id": "invented",
        "model": "llama3-8b",
        "system": "dgx-h100",
        "num_gpus": 64,
        "workload": {"seq_len": 4096, "global_batch": 256, "precision": "bf16", "train_tokens": 1.0e11},
        "published_gpu_hours": 10000,
    }
    r = reserved_budgets.evaluate(row, time_limit=30)
    assert r.status == "OPTIMAL" and 0.2 < r.mfu < 0.9
    # GPU-hours are the tokens at the plan's throughput (its MFU of the H100's 989 TFLOP/s), stretched by the run's
    # goodput: at least the hours at full goodput, and not twice them on 64 GPUs
    flops = model_flops_per_token(library.load_model("llama3-8b"), 4096)
    at_full_goodput = 1.0e11 * flops / (r.mfu * 989e12) / 3600
    assert at_full_goodput * 0.999 <= r.predicted_gpu_hours < 2 * at_full_goodput
    assert r.error == r.predicted_gpu_hours / 10000 - 1.0
    path = tmp_path / "budgets.yaml"
    import yaml  # noqa: PLC0415

    path.write_text(yaml.safe_dump({"runs": [row]}))
    assert reserved_accuracy.report_budgets(path, 30) == 0
    assert "1 whole runs: mean |error|" in capsys.readouterr().out


AZURE_PAGE = """# Azure ND GB200 v6 Benchmark Results

### NCCL Bandwidth

| Message Size (Bytes) | ND GB200 v6 (GB/s) |
| 1K          | 0.10            |

## End-to-End Inference Workloads - TensorRT-LLM

### LLAMA 3.1 (8B)

| tp size | input len | output len | throughput(tokens/sec) |
|---------|-----------|------------|------------------------|
| 1       | 128       | 128        | 10000                  |

### Mistral (7B)

| tp size | input len | output len | throughput(tokens/sec) |
|---------|-----------|------------|------------------------|
| 2       | 128       | 128        | 9000                  |

## End-to-End Pretraining Workloads - Single Node

| 1 | 2 | 3 | 4 |
"""


def test_azure_rows_are_the_tensorrt_llm_section_only(tmp_path):
    import reserved_serving  # noqa: PLC0415  benchmarks/reserved_serving.py

    rows = reserved_serving.parse_azure(AZURE_PAGE)
    assert [(r["model"], r["tp"], r["total_tokens_per_s"]) for r in rows] == [
        ("LLAMA 3.1 (8B)", 1, 10000),
        ("Mistral (7B)", 2, 9000),
    ]
    llama, mistral = (reserved_serving.azure_entry(r, "src") for r in rows)
    assert llama["workload"]["kv_cache_memory_fraction"] == 0.83 and llama["workload"]["requests"] == 1000
    assert llama["system"] == "gb200-nvl72" and llama["model"] == "llama3.1-8b"
    assert mistral["measured"]["tokens_per_s_per_gpu"] == 4500.0 and "not in the library" in mistral["not_expressible"]
    assert reserved_serving.parse_azure("# no such section") == []
    page, azure = tmp_path / "perf.md", tmp_path / "azure.md"
    page.write_text(TRTLLM_PAGE)
    azure.write_text("# nothing")
    assert reserved_accuracy.import_trtllm(page, tmp_path / "a.yaml", "c", azure) == 2  # names the missing table
    azure.write_text(AZURE_PAGE)
    assert reserved_accuracy.import_trtllm(page, tmp_path / "b.yaml", "c", azure) == 0
    assert "azure-reserved-gb200-llama3.1-8b-tp1-128-128" in (tmp_path / "b.yaml").read_text()


def test_rows_differing_only_in_batch_are_both_kept_and_a_repeated_row_is_read_once(tmp_path, capsys):
    row = "| DGX-H100 | 64 | FP8 | 128 | 1 | 8192 | 0 | 4 | 4 | 1 | 5 | n/a | 1000 | 500 |\n"
    other = row.replace("| 128 |", "| 256 |", 1).replace("1000", "1100")
    page = tmp_path / "page.md"
    page.write_text(PAGE.split("#### Model: Nemotron")[0] + row + other + "\n")
    out = tmp_path / "out.yaml"
    assert reserved_accuracy.import_tables([page], out, "c") == 0
    assert "1 rows printed twice in a release were read once" in capsys.readouterr().out
    ids = [e["id"] for e in yaml.safe_load(out.read_text())["runs"]]
    assert len(ids) == 3 and any("gbs256" in i for i in ids)
    page.write_text(PAGE.split("#### Model: Nemotron")[0] + row.replace("1000", "999") + "\n")
    assert reserved_accuracy.import_tables([page], tmp_path / "clash.yaml", "c") == 2
    assert "differ" in capsys.readouterr().err and not (tmp_path / "clash.yaml").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("| 1000 | 500 |", "| 1,000 | 500 |"), "column 'tokens_per_s_per_gpu' reads '1,000'; allowed: a positive whole number"),
        (("| 1000 | 500 |", "| 0 | 500 |"), "reads '0'"),
        (("| 4 | 4 | 1 | 5 |", "| n/a | 4 | 1 | 5 |"), "column 'tp' reads 'n/a'"),
        (("| GBS |", "| Batch |"), "unknown column(s) ['Batch']"),
    ],
)
def test_a_malformed_training_table_is_one_line_and_exit_2(tmp_path, change, message):
    page, out = tmp_path / "page.md", tmp_path / "out.yaml"
    page.write_text(PAGE.replace(*change, 1))
    done = _cli(["--import", str(page), "--out", str(out)])
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not out.exists()


def test_a_header_without_the_throughput_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace(" Tokens / sec / GPU |", "", 1).replace("| 1000 | 500 |", "| 500 |", 1))
    assert reserved_accuracy.import_tables([page], tmp_path / "o.yaml", "c") == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--import", "{tmp}/none.md", "--out", "{tmp}/o.yaml"], "cannot be read"),
        (["--import", "{tmp}/empty.md", "--out", "{tmp}/o.yaml"], "no pre-training row of a release after 25.11"),
        (["--import", "{tmp}/page.md", "--out", "{tmp}/no/such/out.yaml"], "does not exist"),
        (["--out", "{tmp}/none.yaml"], "cannot be read"),
        (["--out", "{tmp}/empty.md"], "no 'runs' list"),
        (["--import-trtllm", "{tmp}/bad-trt.md", "--out-serving", "{tmp}/s.yaml"], "'11.1k' is not a positive whole number"),
        (["--import-trtllm", "{tmp}/tp0.md", "--out-serving", "{tmp}/s.yaml"], "TP0 is not a tensor-parallel degree"),
        (["--azure", "{tmp}/page.md"], "--azure goes with --import-trtllm"),
    ],
)
def test_bad_input_to_the_cli_is_one_line_and_exit_2(tmp_path, argv, message):
    (tmp_path / "page.md").write_text(PAGE)
    (tmp_path / "empty.md").write_text("# nothing\n")
    (tmp_path / "bad-trt.md").write_text(TRTLLM_PAGE.replace("5,000", "11.1k"))
    (tmp_path / "tp0.md").write_text(TRTLLM_PAGE.replace("B200<br/>TP8", "B200<br/>TP0"))
    done = _cli([a.format(tmp=tmp_path) for a in argv])
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "s.yaml").exists() and not (tmp_path / "o.yaml").exists()


def test_a_precision_the_importer_does_not_read_is_named_not_guessed():
    import reserved_serving  # noqa: PLC0415  benchmarks/reserved_serving.py

    (row,) = reserved_serving.parse_page(TRTLLM_PAGE.replace("TP1 (FP4) | GB200", "TP1 (BF16) | GB200").split("| 20000")[0])
    entry = reserved_serving.entry(row, {(1000, 1000): 3000}, "src")
    assert entry["not_expressible"] == "precision 'BF16' not read (only FP4, FP8)"


def _cli(argv):
    import subprocess  # noqa: PLC0415

    script = Path(__file__).resolve().parent.parent / "benchmarks" / "reserved_accuracy.py"
    return subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=120)
