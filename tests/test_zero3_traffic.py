"""benchmarks/zero3_traffic.py: the per-micro-batch traffic of the published ZeRO-3 runs (docs/accuracy.md)."""

from __future__ import annotations

import sys

import pytest
from conftest import REPO

from parasol.model import placement, training
from parasol.solver.validation import best_listed_mapping, load_runs

sys.path.insert(0, str(REPO / "benchmarks"))
import zero3_traffic  # noqa: E402

FSDP_ROW = "moezoo-qwen3_235b-deepep-fsdp-tp2-ep8-pp1-bf16"


def test_the_fsdp_rows_expert_traffic_alone_takes_its_measured_step_at_the_line_rate():
    """The Model Zoo's Megatron-FSDP row: its 28.4B expert parameters per GPU over a 32-rank expert
    data-parallel group with one GPU per node send (31/32) x (2 + 2 + 4) bytes each per micro-batch (two 16-bit
    gathers, an fp32 reduce-scatter): 220 GB, 4.4 s at the 50 GB/s NIC rate, 17.6 s over the step's four
    micro-batches, which is the measured step; at the model's rates longer (6.2 s per micro-batch)."""
    (entry,) = [e for e in load_runs() if e["id"] == FSDP_ROW]
    problem, mapping, _ = best_listed_mapping(entry)
    system = problem.system(mapping.num_gpus)
    layout = placement.group_layouts(system, mapping)["edp"]
    params = training.stage_expert_params(problem.model, problem.model.layers, mapping.ep, mapping.etp)
    sent, model_s, line_s = zero3_traffic.group_traffic(system, problem.workload, params, layout)
    assert (layout.n, layout.local) == (32, 1) and params == pytest.approx(28.39e9, rel=1e-3)
    assert sent == pytest.approx(params * 31 / 32 * 8)
    micro_batches = entry["workload"]["global_batch"] // (mapping.dp * mapping.micro_batch)
    assert micro_batches == 4 and micro_batches * line_s == pytest.approx(entry["measured"]["step_time_s"], rel=0.01)
    assert model_s > line_s  # the model's rates are a share of the line rate


def test_a_group_inside_one_domain_has_no_line_rate_bound():
    (entry,) = [e for e in load_runs() if e["id"] == "mbridge2511-llama3_8b-dgx-h100-8gpu-fp8-cs"]
    problem, mapping, _ = best_listed_mapping(entry)
    system = problem.system(mapping.num_gpus)
    layout = placement.group_layouts(system, mapping)["dp"]
    assert zero3_traffic.group_traffic(system, problem.workload, 8e9, layout)[2] is None


def test_an_unknown_run_is_named_and_exit_2(capsys):
    assert zero3_traffic.main(["no-such-run"]) == 2
    assert "no-such-run" in capsys.readouterr().err
