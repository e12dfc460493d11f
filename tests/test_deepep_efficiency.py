"""DeepEP's measured NIC efficiency: derived from its published benchmark, held by the system files,
and used for DeepEP's copies leaving the scale-up domain only."""

import dataclasses
import sys

import pytest
import yaml
from conftest import REPO, solved_as_enumerated, training_problem, write_yaml

from parasol.model.choices import MoeDispatcher
from parasol.model.errors import ProblemError
from parasol.model.placement import topology_decides
from parasol.model.specs import Workload
from parasol.model.training import ep_comm_time_s
from parasol.solver import library
from parasol.solver.problem import parse_problem

sys.path.insert(0, str(REPO / "benchmarks"))
import deepep_efficiency  # noqa: E402  benchmarks/deepep_efficiency.py


def test_system_files_hold_the_derived_efficiency():
    assert deepep_efficiency.main(["--check"]) == 0


def test_only_the_rows_the_nic_binds_are_used_and_their_share_leaves_the_node():
    rows = {r["ep"]: r for r in deepep_efficiency.rows()}
    assert not rows[16]["nic_binds"] and rows[32]["nic_binds"] and rows[64]["nic_binds"]
    # EP 32 spans 4 nodes: 3/4 of the 58 GB/s counted leaves through the 50 GB/s NIC
    assert rows[32]["efficiencies"][0] == pytest.approx(58 * 0.75 / 50)
    assert deepep_efficiency.derive() == round((58 * 0.75 + 57 * 0.75 + 51 * 0.875 + 50 * 0.875) / 4 / 50, 2)


def _ep_time(system, dispatcher: MoeDispatcher) -> float:
    model = library.load_model("qwen3-235b-a22b")
    workload = Workload(kind="training", seq_len=4096, global_batch=256, moe_dispatcher=dispatcher)
    return ep_comm_time_s(model, system, workload, tp=1, cp=1, micro_batch=1, ep=32, direction="forward")


def test_deepep_crosses_nodes_at_its_measured_rate_and_alltoall_at_the_tiers():
    system = library.load_system("dgx-h100", 256)
    out = system.scale_out
    assert out.deepep_efficiency == 0.87 and out.efficiency < out.deepep_efficiency
    without = dataclasses.replace(system, scale_out=dataclasses.replace(out, deepep_efficiency=0.0))
    # ep 32 over 4 nodes: the NIC binds, so the bandwidth term shrinks by the ratio of the efficiencies
    latency = 31 * out.latency_s * 2  # dispatch and combine
    faster = _ep_time(system, MoeDispatcher.DEEPEP) - latency
    slower = _ep_time(without, MoeDispatcher.DEEPEP) - latency
    assert faster == pytest.approx(slower * out.efficiency / out.deepep_efficiency)
    assert _ep_time(system, MoeDispatcher.ALLTOALL) == _ep_time(without, MoeDispatcher.ALLTOALL)  # NCCL's: the tier's


def test_on_a_topology_the_model_follows_deepep_crosses_at_its_rate_too(tmp_path):
    """An oversubscribed spine makes the topology decide the timing (``placement.topology_decides``):
    DeepEP's copies still leave the node at its measured rate, NCCL's at the tier's."""
    data = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    data["device"] = {"file": str(REPO / "problems" / "systems" / "devices" / "h100-sxm-80gb.yaml")}
    data["topology"]["levels"][1]["tiers"][1]["oversubscription"] = 2.0
    system = library.system_from_path(write_yaml(tmp_path / "oversubscribed.yaml", data), 256)
    assert topology_decides(system.topology)
    without = dataclasses.replace(system, scale_out=dataclasses.replace(system.scale_out, deepep_efficiency=0.0))
    assert _ep_time(system, MoeDispatcher.DEEPEP) < _ep_time(without, MoeDispatcher.DEEPEP)
    assert _ep_time(system, MoeDispatcher.ALLTOALL) == _ep_time(without, MoeDispatcher.ALLTOALL)


def test_a_system_file_with_an_impossible_deepep_efficiency_is_refused(tmp_path):
    system = yaml.safe_load((REPO / "problems" / "systems" / "dgx-h100.yaml").read_text())
    system["device"] = {"file": str(REPO / "problems" / "systems" / "devices" / "h100-sxm-80gb.yaml")}
    system["scale_out"]["deepep_efficiency"] = 1.5
    with pytest.raises(ProblemError, match="scale_out.deepep_efficiency"):
        library.system_from_path(write_yaml(tmp_path / "sys.yaml", system), 8)
    system["scale_out"]["deepep_efficiency"] = 0.87
    system["scale_up"]["deepep_efficiency"] = 0.9  # measured through the NIC only: refused on NVLink
    with pytest.raises(ProblemError, match=r"scale_up\.deepep_efficiency"):
        library.system_from_path(write_yaml(tmp_path / "sys2.yaml", system), 8)


def test_solve_equals_the_enumerator_with_deepep_across_nodes():
    problem = training_problem(
        model="qwen3-30b-a3b",
        num_gpus=32,
        global_batch=64,
        moe_dispatcher=MoeDispatcher.DEEPEP.value,
        mapping={"tp": [1, 2], "pp": 1, "ep": [8, 16, 32], "cp": 1, "vpp": 1, "zero": 1, "recompute": ["none", "full"]},
    )
    solved_as_enumerated(parse_problem(problem, source="t.yaml"), method="cpsat")
