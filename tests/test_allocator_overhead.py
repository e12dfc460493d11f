"""The caching allocator's reserve (workload.allocator): the measurement it comes from, the model's
term, the problem field, and parasol's memory against the emulated stages that were measured."""

import subprocess
import sys
from dataclasses import replace

import pytest
import yaml
from conftest import REPO

from parasol.model import memory
from parasol.model.choices import Allocator, Recompute
from parasol.model.errors import ProblemError
from parasol.model.specs import AllocatorOverhead
from parasol.model.training_step import evaluate_training
from parasol.solver import library, validation
from parasol.solver.problem import parse_problem

sys.path.insert(0, str(REPO / "benchmarks"))
import allocator_microbench  # noqa: E402  benchmarks/allocator_microbench.py

MEASURED = REPO / "problems" / library.ALLOCATOR_FILE


@pytest.fixture(scope="module")
def measured() -> dict:
    return yaml.safe_load(MEASURED.read_text())


def test_summary_is_the_script_summary_of_the_cases(measured):
    assert measured["summary"]["allocator_overhead"] == allocator_microbench.summarise(measured)
    assert set(measured["summary"]["allocator_overhead"]) == {a.value for a in Allocator}


def test_each_overhead_is_reserved_over_allocated_above_persistent(measured):
    for key, res in measured["stage"].items():
        last = res["steps"][-1]
        above = last["peak_allocated_bytes"] - last["persistent_bytes"]
        overhead = (last["peak_reserved_bytes"] - last["peak_allocated_bytes"]) / above
        assert res["allocator_overhead"] == pytest.approx(overhead, abs=1e-4), key
        assert last["alloc_retries"] == 0 and last["ooms"] == 0, key  # not capped by the device's capacity


def test_expandable_segments_reserve_less_on_every_case(measured):
    for name in measured["cases"]:
        caching = measured["stage"][f"{name} / caching"]["allocator_overhead"]
        expandable = measured["stage"][f"{name} / expandable"]["allocator_overhead"]
        assert expandable < caching, name


def test_library_rows_are_the_summary(measured):
    for allocator in Allocator:
        row = measured["summary"]["allocator_overhead"][allocator.value]
        assert library.load_allocator_overhead(allocator.value) == AllocatorOverhead(**row)


def test_fraction_follows_recomputation_and_the_cache_scales_with_it():
    overhead = AllocatorOverhead(recompute_full=0.2, otherwise=0.05)
    assert memory.allocator_overhead_fraction(overhead, Recompute.FULL) == 0.2
    for recompute in (Recompute.NONE, Recompute.SELECTIVE):
        assert memory.allocator_overhead_fraction(overhead, recompute) == 0.05
    assert memory.allocator_cache_bytes(10e9, 0.2) == pytest.approx(2e9)
    assert memory.allocator_cache_bytes(0.0, 0.2) == 0.0


def test_states_match_the_measured_persistent_bytes(measured):
    """parasol's weights, gradients and optimizer states of each emulated stage against the bytes that
    stayed allocated between its steps (within 1.5 %: the emulation adds ALiBi slopes and masks)."""
    for row in allocator_microbench.compare(measured):
        assert row["parasol_states"] == pytest.approx(row["measured_persistent"], rel=0.015), row["case"]


def bloom_run(allocator: str | None) -> validation.RunResult:
    entry = next(e for e in validation.load_runs() if e["id"] == "bloom176b-bench-dp8-tp4-pp12-mbs2-nh112")
    entry = {**entry, "workload": {**entry["workload"]}}
    if allocator is not None:
        entry["workload"]["allocator"] = allocator
    return validation.evaluate_run(entry)


def test_device_memory_adds_the_cache_and_reserve_but_fits_on_the_live_peak():
    caching, expandable = bloom_run("caching"), bloom_run("expandable")
    assert bloom_run(None).evaluation.metrics == caching.evaluation.metrics  # caching is the default
    met = caching.evaluation.metrics
    stage = caching.evaluation.stages[caching.evaluation.breakdown["peak_memory_stage"]]
    reserve = caching.problem.system().memory_reserve_bytes
    cache = library.load_allocator_overhead("caching").recompute_full * stage["activations_bytes"]  # BLOOM: full
    assert met["device_memory_gib"] * 2**30 == pytest.approx(met["peak_memory_gib"] * 2**30 + cache + reserve)
    assert expandable.evaluation.metrics["device_memory_gib"] < met["device_memory_gib"]
    for key in ("peak_memory_gib", "fits", "step_time_s"):
        assert expandable.evaluation.metrics[key] == met[key]
    assert caching.memory_error > bloom_run_without_cache().memory_error  # the cache closes part of the gap


def bloom_run_without_cache() -> validation.RunResult:
    run = bloom_run("caching")
    workload = replace(run.problem.workload, allocator_overhead=AllocatorOverhead())
    ev = evaluate_training(run.problem.model, run.problem.system(), workload, run.mapping)
    return replace(run, evaluation=ev)


def test_unknown_allocator_is_one_line_naming_the_field(tmp_path):
    with pytest.raises(ProblemError, match="workload.allocator.*caching.*expandable"):
        parse_problem(
            {
                "model": "llama3-8b",
                "system": {"name": "dgx-h100", "num_gpus": 8},
                "workload": {"kind": "training", "seq_len": 4096, "global_batch": 64, "allocator": "cudaMallocAsync"},
            }
        )
    path = tmp_path / "bad.yaml"
    path.write_text(
        "model: llama3-8b\nsystem: {name: dgx-h100, num_gpus: 8}\n"
        "workload: {kind: training, seq_len: 4096, global_batch: 64, allocator: native}\n"
    )
    proc = subprocess.run([sys.executable, "-m", "parasol", "solve", str(path)], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "workload.allocator" in proc.stderr
    assert "Traceback" not in proc.stderr
