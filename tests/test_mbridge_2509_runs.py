"""Megatron-Bridge 25.09's Blackwell pre-training runs (problems/validation/mbridge_2509_runs.yaml, written by
benchmarks/mbridge_2509_runs.py): the import of the table, the stored entries, and their out-of-sample families."""

import statistics
import sys
from pathlib import Path

import pytest
import yaml

from parasol.model.errors import ProblemError
from parasol.solver.validation import evaluate_all, evaluate_run, family, load_runs, out_of_sample

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import mbridge_2509_runs  # noqa: E402  (benchmarks/mbridge_2509_runs.py)
from calibrate import DENSE_CHECK, MOE_CALIBRATION, MOE_CHECK  # noqa: E402

NAME = "mbridge_2509_runs.yaml"
DENSE, MOE = "Megatron-Bridge 25.09 Blackwell (out of sample)", "Megatron-Bridge 25.09 Blackwell MoE (out of sample)"
HEAD = (
    "| Model | #-GPUs | GBS | MBS | Sequence Length | FSDP | TP | PP | CP | VP | EP | GA | Tokens / sec / GPU | "
    "Model TFLOP / sec / GPU |\n|-------|--------|-----|-----|-----|------|----|----|----|----|----|----|-----|-----|"
)
# rows as the 25.09 section prints them (fa0315ae2): a plain/MXFP8 pair, a variant with its own mapping whose printed
# MBS contradicts its GA, a token-drop MoE row whose variant's EP cannot divide its GPUs, and a row with no variant
SUMMARY = f"""# Performance

## 25.09 NeMo Container

#### System: DGX-GB200

{HEAD}
| LLAMA3_8B | 8 | 128 | 2 | 8192 | 0 | 1 | 1 | 1 | n/a | 1 | 8 | 31357 (29925) | 1614 (1540) |
| LLAMA3_70B | 64 | 128 | 2 | 8192 | 1 (0) | 1 (2) | 1 (4) | 1 | 1 (5) | 1 | 1 (16) | 3986 (3546) | 1791 (1593) |
| DeepSeekV3 (tokendrop) | 256 | 2048 | 1 | 4096 | 0 | 1 | 4 (8) | 1 | 4 (2) | 64 | 32 (64) | 3454 (2835) | 899 (738) |

#### System: DGX-B200

{HEAD}
| Qwen3_30B_a3B (tokendrop) | 8 | 512 | 1 | 4096 | 0 | 1 | 1 | 1 | 1 | 8 | 64 | 18066 | 416 |

#### System: DGX-H100

{HEAD}
| LLAMA3_8B | 8 | 128 | 1 | 8192 | 1 | 1 | 1 | 1 | n/a | 1 | 16 | 14079 | 725 |

## 25.08 NeMo Container
"""


@pytest.fixture(scope="module")
def runs():
    return load_runs(name=NAME)


@pytest.fixture(scope="module")
def imported():
    body, counted = mbridge_2509_runs.build(SUMMARY, "performance-summary.md")
    return counted, {e["id"]: e for e in yaml.safe_load(body)["runs"]}


def test_the_import_reads_each_run_and_its_mxfp8_variant(imported):
    counted, entries = imported
    assert counted == "7 runs" and not any("h100" in key for key in entries)  # the H100 rows: the calibration set's
    plain, mx = entries["mbridge2509bw-llama3_8b-dgx-gb200-8gpu-fp8-cs"], entries["mbridge2509bw-llama3_8b-dgx-gb200-8gpu-fp8-mx"]
    assert plain["workload"]["low_precision_recipe"] == "tensorwise" and mx["workload"]["low_precision_recipe"] == "mxfp8"
    assert plain["mapping"] == mx["mapping"] and plain["mapping"]["micro_batch"] == 2 and plain["mapping"]["vpp"] == 1
    assert plain["measured"]["step_time_s"] == round(128 * 8192 / (8 * 31357), 4)
    assert mx["measured"]["step_time_s"] == round(128 * 8192 / (8 * 29925), 4)


def test_a_variant_takes_its_own_cells_and_a_contradicted_micro_batch_follows_the_accumulation(imported):
    _, entries = imported
    fsdp, mx = (
        entries["mbridge2509bw-llama3_70b-dgx-gb200-64gpu-fp8-cs"],
        entries["mbridge2509bw-llama3_70b-dgx-gb200-64gpu-fp8-mx"],
    )
    assert fsdp["mapping"]["zero"] == 3 and fsdp["mapping"]["micro_batch"] == 2 and fsdp["mapping"]["offload_layers"] == 40
    assert (mx["mapping"]["tp"], mx["mapping"]["pp"], mx["mapping"]["vpp"], mx["mapping"]["zero"]) == (2, 4, 5, 1)
    # printed MBS 2 with GA 16 on dp 8 would be 256 sequences, not the GBS 128
    assert mx["mapping"]["micro_batch"] == 1 and any("contradicts its GA 16" in a for a in mx["assumptions"])


def test_token_drop_rows_are_moe_and_an_impossible_expert_group_is_marked(imported):
    _, entries = imported
    qwen = entries["mbridge2509bw-qwen3_30b_a3b-dgx-b200-8gpu-fp8-cs"]
    assert qwen["mapping"]["ep"] == 8 and qwen["system"] == "dgx-b200" and family(qwen["id"]) == MOE
    assert any("token drop" in a for a in qwen["assumptions"]) and "not_expressible" not in qwen
    dsv3 = entries["mbridge2509bw-deepseekv3-dgx-gb200-256gpu-fp8-mx"]
    assert dsv3["mapping"]["pp"] == 8 and dsv3["mapping"]["ep"] == 64 and "does not divide" in dsv3["not_expressible"]
    assert "not_expressible" not in entries["mbridge2509bw-deepseekv3-dgx-gb200-256gpu-fp8-cs"]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda s: s.replace("## 25.09 NeMo Container", "## 25.10 NeMo Container"), "no '## 25.09 NeMo Container' section"),
        (lambda s: s.replace("| Qwen3_30B_a3B (tokendrop) |", "| Qwen9_1T (tokendrop) |"), "'Qwen9_1T (tokendrop)' is none of"),
        (lambda s: s.replace("| GA |", "| G.A. |"), "lacks the columns GA"),
        (lambda s: s.replace("| 64 | 18066 |", "| 64 | 18k |"), "row has Tokens / sec / GPU '18k'; allowed"),
        (lambda s: s.replace("| 1 (2) | 1 (4) |", "| 0 (2) | 1 (4) |"), "row has TP '0'; allowed"),
        (
            lambda s: s.replace("| 64 | 128 | 2 | 8192 |", "| 60 | 128 | 2 | 8192 |"),
            "60 GPUs are no multiple of TP x PP x CP [2, 4, 1]",
        ),
    ],
)
def test_a_table_the_import_cannot_read_is_named_in_one_line(tmp_path, capsys, edit, says):
    table = tmp_path / "performance-summary.md"
    table.write_text(edit(SUMMARY))
    assert mbridge_2509_runs.main([str(table)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(table) in err and says in err


def test_the_stored_runs_are_the_tables_gb200_and_b200_rows(runs):
    marked = load_runs(name=NAME, expressible=False)
    assert len(runs) == 20 and len(marked) == 1  # 11 rows, 10 with an MXFP8 variant; one variant's EP cannot run
    for e in runs:
        wl = e["workload"]
        rate = float(e["measured"]["derived_from"].rsplit(" ", 1)[1].rstrip(")"))
        assert e["measured"]["step_time_s"] == pytest.approx(
            wl["global_batch"] * wl["seq_len"] / (e["num_gpus"] * rate), rel=1e-4
        )
        assert e["mapping"]["dp"] * e["mapping"]["tp"] * e["mapping"]["pp"] * e["mapping"]["cp"] == e["num_gpus"]
    for entry in marked:
        with pytest.raises(ProblemError):
            evaluate_run(entry)


def test_the_families_are_out_of_sample_and_never_fitted(runs):
    families = {family(e["id"]) for e in runs}
    assert families == {DENSE, MOE} and all(out_of_sample(f) for f in families)
    assert DENSE in DENSE_CHECK and MOE in MOE_CHECK and not families & set(MOE_CALIBRATION)


def test_every_run_fits_and_the_families_stay_within_their_measured_error(runs):
    """Out of sample, python benchmarks/accuracy.py: dense 15.5 % mean |error| (10 runs), 28.2 % worst, when added;
    12.2 %, 21.8 % worst, with MXFP8's GEMM share (2026-11-29); MoE 18.2 % (10), 28.3 % worst, then 19.5 %, 29.4 % worst
    (the routed-expert efficiency refitted 0.68 -> 0.74). Every run predicted too fast. With Blackwell's training GEMM
    share (efficiency.training_gemm 0.88 on B200 and GB200, fitted on 25.11's runs; moe_expert refitted 0.74 -> 0.63;
    2026-11-29): dense 5.2 %, 15.0 % worst, every run still too fast; MoE 12.1 %, 22.4 % worst, all but DeepSeek-V3 on
    GB200 (+4.2 %) too fast. With the alltoall dispatcher's second sort of the routed rows (2026-11-29,
    ``expert_parallel.local_sort_bytes``): MoE 9.5 %, 18.7 % worst, three runs too slow. With moe_expert refitted
    0.63 -> 0.71 once 25.09's DeepSeek-V3 H100 run had its script's layout (2026-11-29): MoE 10.9 %, 20.6 % worst, one
    run (DeepSeek-V3 on GB200) too slow; at 0.90, once 25.09's Qwen3 rows had their script's dispatcher too (the same
    day): MoE 14.5 %, 25.3 % worst, every run too fast. A point of slack."""
    results = evaluate_all(runs)
    assert all(r.evaluation.metrics["fits"] for r in results)
    for name, mean, worst, slower in ((DENSE, 0.062, 0.16, 0), (MOE, 0.155, 0.263, 0)):
        errors = [r.error for r in results if r.family == name]
        assert len(errors) == 10 and statistics.fmean(abs(e) for e in errors) <= mean and max(map(abs, errors)) <= worst
        assert sum(e > 0 for e in errors) == slower  # the rest too fast
