"""workload.fp8_param_gather: the data-parallel parameter all-gather in FP8 (Megatron-LM --fp8-param-gather,
the FP8_PARAMS / FP8_PARAM_GATHER of NVIDIA's MLPerf Training configs)."""

from __future__ import annotations

import pytest
from conftest import solved_as_enumerated, training_problem

from parasol.model import training
from parasol.model.errors import ProblemError
from parasol.solver import library
from parasol.solver.launch import emit
from parasol.solver.problem import parse_problem
from parasol.solver.validation import evaluate_run, load_runs

MAPPING = {"tp": 4, "pp": 2, "dp": 8, "micro_batch": 1, "zero": 1, "vpp": 1}


def _problem(**workload):
    data = training_problem("llama3-70b", "dgx-h100", 64, global_batch=64, precision="fp8", mapping=MAPPING, **workload)
    return parse_problem(data, source="t.yaml")


def test_the_gather_moves_one_byte_a_parameter_and_the_reduction_is_unchanged():
    plain, fp8 = _problem().workload, _problem(fp8_param_gather=True).workload
    system = library.load_system("dgx-h100", 64)
    group = training.layout(system, training.Group.of((8, 8)))
    grads, gather = training.dp_comm_times_s(system, plain, 1, 1e9, group)
    grads8, gather8 = training.dp_comm_times_s(system, fp8, 1, 1e9, group)
    assert grads8 == grads and gather8 < gather
    assert training.param_gather_bytes(fp8) == 1.0 and training.param_gather_bytes(plain) == training.WEIGHT_BYTES


def test_it_needs_fp8_and_says_so_in_one_line():
    data = training_problem("llama3-70b", "dgx-h100", 64, global_batch=64, precision="bf16", fp8_param_gather=True)
    with pytest.raises(ProblemError) as err:
        parse_problem(data, source="t.yaml")
    assert err.value.field == "workload.fp8_param_gather" and "fp8" in str(err.value) and "\n" not in str(err.value)


def test_megatron_emits_the_flag_with_the_distributed_optimizer_only():
    problem = _problem(fp8_param_gather=True, framework="megatron-lm")
    assert "--fp8-param-gather" in emit(problem, 64, problem.fixed_mapping())
    assert "--fp8-param-gather" not in emit(_problem(framework="megatron-lm"), 64, _problem().fixed_mapping())
    # without the distributed optimizer nothing is gathered: no flag, and no refusal
    data = training_problem(
        "llama3-70b",
        "dgx-h100",
        64,
        global_batch=64,
        precision="fp8",
        fp8_param_gather=True,
        framework="megatron-lm",
        mapping={**MAPPING, "zero": 0},
    )
    zero0 = parse_problem(data, source="t.yaml")
    assert "--fp8-param-gather" not in emit(zero0, 64, zero0.fixed_mapping())


def test_solver_equals_the_enumerator_with_it():
    data = training_problem(
        "llama3-70b", "dgx-h100", 256, global_batch=256, precision="fp8", fp8_param_gather=True, mapping={"zero": [0, 1]}
    )
    solved_as_enumerated(parse_problem(data, source="t.yaml"))


def test_the_10752_gpu_mlperf_run_gathers_fp8_parameters_behind_the_warm_up():
    """MLPerf Training v4.0's GPT-3 175B on 10,752 H100 (six micro-batches a step, eight chunks a rank) gathers FP8
    parameters. While the model hid the gather behind the first micro-batch's forward alone, the flag decided the
    run: +6.7 % with it, +20.6 % with a 16-bit gather (measured 2026-11-27). Since Megatron's chunk-by-chunk
    overlap is modelled (pipeline.exposed_dp_traffic, 2026-11-28) the warm-up's forwards hide most of either
    gather: -16.3 % with it, -14.1 % without (-15.6 and -13.8 % once the embedding's share is the first chunk's alone).
    The FP8 gather still moves half the bytes, so its step is the shorter,
    and both stay within the MLPerf family's worst."""
    entry = next(e for e in load_runs() if e["id"] == "mlperf-v40-gpt3-175b-dgx-h100-10752gpu-fp8")
    assert entry["workload"]["fp8_param_gather"] is True
    plain = {**entry, "workload": {**entry["workload"], "fp8_param_gather": False}}
    with_, without = evaluate_run(entry), evaluate_run(plain)
    step = [r.evaluation.metrics["step_time_s"] for r in (with_, without)]
    assert step[0] < step[1] and max(abs(with_.error), abs(without.error)) <= 0.174
    assert with_.mapping == without.mapping
