"""``device_memory_gib`` (what nvidia-smi shows: ``training_step.device_memory``) in ``enumerate --all``'s table is
the number ``evaluate`` gives each plan: the one composition on numpy arrays and on floats, across the allocator's
fractions (recompute choices), the gradients' copies, DualPipe ranks and a device whose memory PyTorch does not hold."""

import numpy as np
import pandas as pd
import pytest
from conftest import rel_close, training_problem

from parasol.model.training_step import evaluate_training
from parasol.solver.planner import enumerate_space
from parasol.solver.problem import MAPPING_KEYS, mapping_with_defaults, parse_problem
from parasol.solver.validation import load_out_of_memory_runs

BLOOM_184B = next(e["model"] for e in load_out_of_memory_runs() if "-184b-" in e["id"])
DEEPSPEED_2022 = {"lowp_grad_bytes": 2, "grad_accumulate_copy_bytes": 4, "grad_reduce_copy_bytes": 2, "attention": "standard"}


@pytest.mark.parametrize(
    ("data", "by"),
    [
        (training_problem("llama3-70b", num_gpus=64, global_batch=64, mapping={"tp": [4, 8], "pp": [1, 2, 4], "cp": [1]}), "recompute"),
        (training_problem(
            BLOOM_184B, system="jean-zay-a100", num_gpus=384, seq_len=2048, global_batch=2048, **DEEPSPEED_2022,
            mapping={"tp": [4, 8], "pp": [6, 12], "vpp": [1], "zero": [1]},
        ), "pp"),
        (training_problem(
            "qwen3-30b-a3b", num_gpus=64, global_batch=256, moe_dispatcher="deepep", mtp_layers=1,
            mapping={"tp": [1], "pp": [4], "ep": [8], "dualpipe": [False, True], "cp": [1], "vpp": [1]},
        ), "dualpipe"),
        (training_problem("llama3-8b", system="tpu-v5p-torus", num_gpus=64, global_batch=64, mapping={"pp": [1, 2], "cp": [1]}), "pp"),
    ],
    ids=["recompute-choices", "deepspeed-2022-copies", "dualpipe", "tpu"],
)  # fmt: skip
def test_the_tables_device_memory_is_evaluates(data, by):
    """Six plans of each value of ``by`` (the setting the case varies), three that fit and three that do not where
    there are, against ``evaluate``."""
    problem = parse_problem(data, source="t.yaml")
    table = enumerate_space(problem, top=1, keep_all=True).table
    assert "device_memory_gib" in table and table[by].nunique() > 1 and table["fits"].any()
    rng = np.random.default_rng(0)
    picks = [group.iloc[rng.choice(len(group), min(3, len(group)), replace=False)] for _, group in table.groupby([by, "fits"])]
    for row in pd.concat(picks).to_dict("records"):
        mapping = mapping_with_defaults({k: row[k] for k in MAPPING_KEYS if k in row and k != "num_gpus"})
        system = problem.system(int(row["num_gpus"]))
        metrics = evaluate_training(problem.model, system, problem.workload, mapping).metrics
        assert rel_close(row["device_memory_gib"], metrics["device_memory_gib"], 1e-9), mapping
        assert row["device_memory_gib"] <= system.device.hbm_bytes / 2**30 + 1e-9


def _stage_by_stage(problem, evaluation) -> float:
    """What nvidia-smi would show on the fullest GPU, stage by stage (DualPipe ranks as they are): each stage's or
    rank's parts from ``evaluate``'s per-stage detail through ``stage_device_memory``, the largest, GiB."""
    from parasol.model import memory  # noqa: PLC0415
    from parasol.model.choices import Recompute  # noqa: PLC0415
    from parasol.model.ops import FloatOps  # noqa: PLC0415
    from parasol.model.training_step import StageMemory, stage_device_memory  # noqa: PLC0415

    wl, system, mapping = problem.workload, problem.system(), problem.fixed_mapping()
    fraction = memory.allocator_overhead_fraction(wl.allocator_overhead, Recompute(mapping.recompute), wl.attention)
    out = []
    for stage in evaluation.stages:
        held = sum(stage["state"].values())
        copy = wl.grad_reduce_copy_bytes * stage["params"] if wl.grad_reduce_copy_bytes else None
        parts = StageMemory(held, held + stage["activations_bytes"], copy, stage["memory_bytes"])
        out.append(stage_device_memory(FloatOps, system, parts, fraction))
    return max(out) / 2**30


@pytest.mark.parametrize(
    ("model", "system", "gpus", "workload", "mapping"),
    [
        ("llama3-8b", "dgx-h100", 8, {}, {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "recompute": "full"}),
        ("llama3-70b", "dgx-h100", 64, {}, {"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1, "recompute": "selective"}),
        ("gpt3-175b", "dgx-a100", 512, {}, {"tp": 8, "pp": 8, "dp": 8, "micro_batch": 1, "first_stage_layers": 6, "last_stage_layers": 6}),
        ("llama3-8b", "dgx-h100", 8, {}, {"tp": 1, "pp": 1, "dp": 8, "micro_batch": 2, "offload_layers": 8}),
        ("llama3-70b", "dgx-h100", 64, {}, {"tp": 4, "pp": 1, "dp": 16, "micro_batch": 1, "zero": 3}),
        ("qwen3-30b-a3b", "dgx-h100", 64, {"mtp_layers": 1}, {"tp": 1, "pp": 4, "dp": 16, "ep": 8, "micro_batch": 1, "dualpipe": True, "first_stage_layers": 6, "last_stage_layers": 6}),
        ("llama3-8b", "tpu-v5p-torus", 64, {}, {"tp": 4, "pp": 2, "dp": 8, "micro_batch": 1}),
        (BLOOM_184B, "jean-zay-a100", 384, {**DEEPSPEED_2022, "seq_len": 2048, "global_batch": 2048},
         {"tp": 8, "pp": 6, "dp": 8, "micro_batch": 2, "recompute": "full", "zero": 1}),
    ],
    ids=["pp1", "pp2", "middle-stages", "offload", "zero3", "dualpipe", "tpu", "deepspeed-2022-copies"],
)  # fmt: skip
def test_device_memory_is_the_fullest_stages(model, system, gpus, workload, mapping):
    """``evaluate``'s device_memory_gib (``training_step.device_memory``, over ``compose``'s first, middle and last
    stages and DualPipe's ranks) is the largest of every stage's own, each middle stage at its own in-flight count;
    with 6 layers on each edge stage the fullest GPU is a middle stage's (a middle DualPipe rank's)."""
    data = training_problem(model, system=system, num_gpus=gpus, **{"global_batch": 256, **workload}, mapping=mapping)
    problem = parse_problem(data, source="t.yaml")
    evaluation = evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping())
    assert rel_close(evaluation.metrics["device_memory_gib"], _stage_by_stage(problem, evaluation), 1e-9)
