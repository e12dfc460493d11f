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
