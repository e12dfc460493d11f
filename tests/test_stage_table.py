"""The per-stage table of a pipelined plan's text report (``training_report.stage_lines``): every stage once, the
slowest marked, alike stages merged, the numbers those of ``evaluate --json``'s ``stages``."""

import re

import pytest
from conftest import training_problem

from parasol.model.training_step import evaluate_training
from parasol.solver.problem import parse_problem
from parasol.solver.training_report import evaluation_table


def _report(model="llama3-70b", num_gpus=64, mapping=None, **workload):
    data = training_problem(model, num_gpus=num_gpus, seq_len=4096, global_batch=128, mapping=mapping, **workload)
    problem = parse_problem(data, source="t.yaml")
    m = problem.fixed_mapping()
    ev = evaluate_training(problem.model, problem.system(), problem.workload, m)
    return evaluation_table(problem, m, ev), ev


def _rows(table: str) -> list[list[str]]:
    """The table's rows below its title and header, split into cells (the marker '*' kept with its row)."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"(stage|rank)s, per micro-batch", line)) + 2
    rows = []
    for line in lines[start:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def _span(cell: str) -> range:
    first, _, last = cell.partition("-")
    return range(int(first), int(last or first) + 1)


def test_every_stage_is_in_one_row_and_the_slowest_row_is_marked():
    table, ev = _report(mapping={"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "recompute": "full"})
    rows = _rows(table)
    spans = [_span(r[1] if r[0] == "*" else r[0]) for r in rows]
    assert [i for span in spans for i in span] == list(range(8))  # each stage once, in order
    marked = [span for r, span in zip(rows, spans) if r[0] == "*"]
    assert len(marked) == 1 and ev.breakdown["critical_stage"] in marked[0]
    assert len(rows) < 8  # the middle stages, alike, share a row


def test_a_rows_milliseconds_are_its_stages_from_the_evaluation():
    """Forward, backward, sends, head and total of each row are the JSON stages' seconds x 1000, and a merged row's
    memory spans its stages' memory."""
    table, ev = _report(mapping={"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "recompute": "full"})
    for row in _rows(table):
        cells = row[1:] if row[0] == "*" else row
        span = _span(cells[0])
        s = ev.stages[span[0]]
        expected = [s["time_fwd_s"], s["time_bwd_s"], s["sends_s"], s["extra_s"] + s["mtp_s"], s["time_per_microbatch_s"]]
        assert [float(c) for c in cells[2:7]] == pytest.approx([1e3 * x for x in expected], abs=0.006)
        memory = [ev.stages[i]["memory_bytes"] / 2**30 for i in span]
        bounds = [float(x) for x in cells[7].split("-")]
        assert max(bounds) == pytest.approx(max(memory), abs=0.06) and min(bounds) == pytest.approx(min(memory), abs=0.06)


def test_the_last_stage_carries_the_output_layer_as_its_head():
    """Llama 3 70B's output layer (8,192 x 128,256) on the last stage: its head time is positive there and about 0
    in the middle stages."""
    table, _ = _report(mapping={"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "recompute": "full"})
    rows = _rows(table)
    last = rows[-1][1:] if rows[-1][0] == "*" else rows[-1]
    assert _span(last[0])[-1] == 3 and float(last[5]) > 1.0
    middle = next(r for r in rows if 1 in _span(r[1] if r[0] == "*" else r[0]))
    assert float((middle[1:] if middle[0] == "*" else middle)[5]) == 0.0


def test_moe_models_show_their_moe_layers_and_a_single_stage_has_no_table():
    table, _ = _report(
        model="mixtral-8x7b", num_gpus=16, mapping={"tp": 2, "pp": 4, "dp": 2, "ep": 2, "micro_batch": 1, "recompute": "full"}
    )
    assert (
        "MoE layers" in table.splitlines()[next(i for i, x in enumerate(table.splitlines()) if x.startswith("stages, per")) + 1]
    )
    flat, _ = _report(mapping={"tp": 8, "pp": 1, "dp": 8, "micro_batch": 1, "recompute": "full"})
    assert "per micro-batch" not in flat


def test_under_dualpipe_the_rows_are_ranks():
    table, ev = _report(mapping={"tp": 8, "pp": 4, "dp": 2, "micro_batch": 1, "recompute": "full", "dualpipe": True})
    assert "ranks, per micro-batch" in table
    assert sum(len(_span(r[1] if r[0] == "*" else r[0])) for r in _rows(table)) == len(ev.stages) == 4
