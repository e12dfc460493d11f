"""The host memory tier's capacity: what a plan offloads (optimizer states, ZeRO-3's weight shard, activations) must
fit in each GPU's share of its node's host DRAM (a system file's host_memory_bytes), as its device memory must fit
in HBM; solve names host memory where it binds."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml
from conftest import REPO, solved_as_enumerated, training_problem

from parasol.model.errors import ProblemError
from parasol.model.evaluation import GIB
from parasol.model.specs import Mapping
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.planner import enumerate_space, planner_for, solve
from parasol.solver.problem import load_problem, parse_problem
from parasol.solver.training_report import evaluation_table

OFFLOADED = {"tp": 8, "pp": 1, "dp": 1, "micro_batch": 1, "zero": 1, "recompute": "full", "optimizer_offload": 1.0}


def _b200_with_host(tmp_path, tib: float) -> dict:
    """A DGX B200 system file whose nodes hold ``tib`` TiB of host DRAM."""
    data = copy.deepcopy(yaml.safe_load((REPO / "problems" / "systems" / "dgx-b200.yaml").read_text()))
    data.update(name=f"b200-host-{tib}", host_memory_bytes=tib * 2**40)
    path = tmp_path / f"b200-host-{tib}.yaml"
    path.write_text(yaml.safe_dump(data))
    return {"file": str(path)}


def test_system_files_give_each_gpu_its_share_of_the_host():
    """DGX H100 and B200: 2 TB of DDR5 over 8 GPUs; GB200 NVL72: two 480 GB Grace CPUs over a tray's 4 GPUs; a
    system file without the figure (MI300X here) gives none, and nothing is checked there."""
    assert library.load_system("dgx-h100", 8).host_memory_per_gpu_bytes == 256 * GIB
    assert library.load_system("dgx-b200", 8).host_memory_per_gpu_bytes == 256 * GIB
    assert library.load_system("gb200-nvl72", 72).host_memory_per_gpu_bytes == pytest.approx(240e9)
    assert library.load_system("mi300x", 8).host_memory_bytes == 0.0


def test_a_plan_that_overfills_the_host_does_not_fit_and_says_so():
    """GPT-3 175B on one DGX B200 with the whole optimizer state on the host: 21.9B parameters per GPU at 16 bytes
    (fp32 master weights, moments and a gradient copy) are 325 GiB, over the 256 GiB each GPU has."""
    data = training_problem("gpt3-175b", "dgx-b200", 8, seq_len=2048, global_batch=16, mapping=dict(OFFLOADED))
    problem = parse_problem(data, source="t.yaml")
    system = library.load_system("dgx-b200", 8)
    ev = evaluate_training(problem.model, system, problem.workload, problem.fixed_mapping())
    met = ev.metrics
    assert met["host_memory_gib"] == pytest.approx(175e9 / 8 * 16 / GIB, rel=0.01)
    assert met["usable_host_memory_gib"] == 256.0 and met["host_fits"] is False
    assert met["fits"] is False and met["peak_memory_gib"] <= met["usable_memory_gib"]  # the device memory alone fits
    table = evaluation_table(problem, problem.fixed_mapping(), ev)
    assert "of 256.0 GiB  ** DOES NOT FIT **" in table  # the host's line says so, the device memory's does not
    assert "GiB usable\n" in table and table.count("DOES NOT FIT") == 1


@pytest.mark.parametrize("method", ["cpsat", "enumerate", "bound"])
def test_solve_names_host_memory_where_it_binds(method):
    """The shipped example (docs/planner.md): the optimizer state may stay, half or all move to the host; only all
    of it leaves the GPUs room, and the host cannot hold it. Each search explains it the same way."""
    problem = load_problem(REPO / "problems" / "examples" / "gpt3-175b-b200-host-infeasible.yaml")
    result = solve(problem, workers=2, time_limit=60, method=method)
    assert result.status == "INFEASIBLE"
    assert result.message.startswith("host memory binds: 325.2 GiB per GPU (offloaded states)")
    assert "256.0 GiB of host DRAM" in result.message and "\n" not in result.message


def test_the_host_decides_how_much_to_offload_and_the_solver_equals_the_enumerator(tmp_path):
    """On 16 B200 (4 pipeline stages, micro-batches of 1, to keep the space small) with 2 TiB per node the fastest plan offloads the whole optimizer state (216 GiB per GPU on the
    host); with 1 TiB it offloads half and stays within 128 GiB; with 0.6 TiB no plan fits either memory."""
    shares, hosts = {}, {}
    for tib in (2.0, 1.0):
        data = training_problem(
            "gpt3-175b",
            "dgx-b200",
            16,
            seq_len=2048,
            global_batch=16,
            mapping={"optimizer_offload": [0, 0.5, 1.0], "pp": [4], "micro_batch": [1]},
        )
        data["system"]["name"] = _b200_with_host(tmp_path, tib)
        problem = parse_problem(data, source="t.yaml")
        plan = solved_as_enumerated(problem)
        if tib == 1.0:  # where the host binds, the bounded search agrees too
            solved_as_enumerated(problem, method="bound")
        shares[tib], hosts[tib] = plan.mapping.optimizer_offload, plan.evaluation.metrics["host_memory_gib"]
        assert hosts[tib] <= tib * 1024 / 8
    assert shares == {2.0: 1.0, 1.0: 0.5} and hosts[2.0] > 128.0
    data["system"]["name"] = _b200_with_host(tmp_path, 0.6)
    result = solve(parse_problem(data, source="t.yaml"), workers=2, time_limit=60)
    assert result.status == "INFEASIBLE" and result.message.startswith("host memory binds")


def test_no_host_limit_is_composed_where_nothing_is_offloaded():
    """The plans of a problem whose mapping lists no offloading keep nothing on the host: no limit, no cost to the
    CP-SAT model; where the system file gives no host DRAM, offloading plans are reported, not checked."""
    plain = parse_problem(training_problem("llama3-70b", "dgx-h100", 64, global_batch=64), source="t.yaml")
    assert planner_for(plain).context(plain).host_limit_bytes is None
    offload = parse_problem(
        training_problem("llama3-70b", "dgx-h100", 64, global_batch=64, mapping={"optimizer_offload": [0, 1.0]}), source="t.yaml"
    )
    assert planner_for(offload).context(offload).host_limit_bytes == 256 * GIB
    unknown = parse_problem(
        training_problem("llama3-70b", "mi300x", 64, global_batch=64, mapping={"optimizer_offload": [0, 1.0]}), source="t.yaml"
    )
    assert planner_for(unknown).context(unknown).host_limit_bytes is None


def test_evaluate_keeps_on_the_host_what_the_enumerator_counts():
    """Every stage's host bytes, composed once (``training_step.stage_host_memory``): evaluate's fullest stage equals
    the numpy enumeration's column on pipelines of 1 to 8 stages, interleaved or not, with the optimizer state, the
    attention core's inputs and whole layers offloaded in turn."""
    pipelines = {"optimizer_offload": [0, 0.5, 1.0], "module_offload": [False, True], "tp": [2], "micro_batch": [1, 2]}
    whole_layers = {"offload_layers": [0, 2, 4], "pp": [1], "tp": [2, 4], "recompute": ["none"]}  # needs pp 1
    fields = {f.name for f in dataclasses.fields(Mapping)}
    for mapping_keys, by in ((pipelines, "pp"), (whole_layers, "offload_layers")):
        data = training_problem("llama2-7b", "dgx-h100", 16, global_batch=32, offload_modules=["core_attn"], mapping=mapping_keys)
        if by == "offload_layers":
            del data["workload"]["offload_modules"]  # not beside whole-layer offloading
        problem = parse_problem(data, source="t.yaml")
        table = enumerate_space(problem, keep_all=True).table
        sample = table.groupby(by).sample(10, random_state=0, replace=True).to_dict("records")
        assert len({row[by] for row in sample}) >= 3 and any(row["host_memory_gib"] > 0 for row in sample)
        for row in sample:
            mapping = Mapping(**{k: v for k, v in row.items() if k in fields})
            ev = evaluate_training(problem.model, problem.system(16), problem.workload, mapping)
            assert ev.metrics.get("host_memory_gib", 0.0) == pytest.approx(row["host_memory_gib"], rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("value", [-1, True, "2 TB"])
def test_a_system_file_with_a_bad_host_memory_is_refused_in_one_line(tmp_path, value):
    data = yaml.safe_load((REPO / "problems" / "systems" / "dgx-b200.yaml").read_text())
    data["host_memory_bytes"] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProblemError) as err:
        library.load_system(str(path), 8)
    assert err.value.field == "host_memory_bytes" and "\n" not in str(err.value)
