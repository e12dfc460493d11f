"""NCCL channel caps (issue 13): a run that caps a communicator's thread blocks (``workload.nccl_max_ctas``,
Megatron-Core's --nccl-communicator-config-path) leaves its collectives that many channels at the rate NCCL's
topology search gives one (model/nccl_channels.py; benchmarks/nccl_channel_rates.py)."""

import dataclasses
import json
import shlex
import sys

import pytest
import yaml
from conftest import REPO, TINY_GQA, rel_close, run_main, write_yaml

from parasol.model.errors import ProblemError
from parasol.model.nccl_channels import channel_floor_s, search_channel_rate, sent_bytes
from parasol.model.placement import Group, collective_time_s, layout
from parasol.model.specs import CommunicatorCtas, Workload
from parasol.model.training import dp_comm_times_s, layer_times
from parasol.solver import frameworks, launch, library
from parasol.solver.planner import enumerate_space, solve
from parasol.solver.problem import parse_problem

sys.path.insert(0, str(REPO / "benchmarks"))
import nccl_channel_rates  # noqa: E402  benchmarks/nccl_channel_rates.py

GB = 1e9
MLPERF_CAPS = CommunicatorCtas(tp=8, cp=1, dp=8, pp=2)  # NVIDIA's MLPerf configs: conf/nccl/custom_communicator_cta.yaml


def test_the_device_files_hold_nccls_search_on_their_nvlink():
    assert nccl_channel_rates.differences(nccl_channel_rates.derive()) == []


def test_the_search_doubles_the_rings_at_half_speed_and_raises_the_speed_where_the_links_allow():
    """H100: 370.8 GB/s takes 6 rings at 60, doubled to 12 at 30 (12 x 40 would not fit); H800: 164.8 GB/s takes
    2 rings at 60, doubled to 4 at 30, then 4 at 40 fit; no doubling under 25 GB/s."""
    sm90 = tuple(s * GB for s in (60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0))
    assert search_channel_rate(370.8 * GB, sm90, 90, 32) == 30 * GB
    assert search_channel_rate(164.8 * GB, sm90, 90, 32) == 40 * GB
    assert search_channel_rate(22 * GB, sm90, 90, 32) == 20 * GB  # one ring at 20: kept, then 24 does not fit


@pytest.mark.parametrize(("op", "share"), [("allreduce", 2 * 7 / 8), ("reducescatter", 7 / 8), ("alltoall", 7 / 8), ("p2p", 1.0)])
def test_a_capped_collective_takes_what_its_channels_move_at_least(op, share):
    system = library.load_system("gb200-nvl72", 72)
    nbytes, ranks = 256e6, 8
    assert sent_bytes(op, nbytes, ranks) == pytest.approx(share * nbytes)
    floor = channel_floor_s(op, nbytes, ranks, 1, system.device)
    rate = 45 * GB / (2 if op == "p2p" else 1)  # an exchange sends and receives on the channel at once
    assert floor == pytest.approx(share * nbytes / rate)
    where = layout(system, Group.of((ranks, 1)))
    free = collective_time_s(op, nbytes, where, system)
    capped = collective_time_s(op, nbytes, where, system, 1)
    assert capped == pytest.approx(max(free, floor)) and capped > free
    assert collective_time_s(op, nbytes, where, system, 64) == free  # 64 channels outrun the links: no floor
    assert channel_floor_s(op, nbytes, ranks, None, system.device) == 0.0


def test_the_caps_slow_the_ring_exchange_and_nccls_tensor_parallel_collectives_not_the_userbuffers():
    """Llama 3.1 8B as MLPerf v5.1 runs it on 512 GB300 (tp 2, cp 4): one channel leaves the ring's K/V blocks
    exposed; the tensor-parallel cap binds only where NCCL carries the collectives (no tp_comm_overlap)."""
    model, system = library.load_model("llama3.1-8b"), library.load_system("gb300-nvl72", 512)
    free = Workload(kind="training", seq_len=8192, global_batch=64, precision="fp8")
    capped = dataclasses.replace(free, nccl_max_ctas=MLPERF_CAPS)

    def times(workload, overlap):
        return layer_times(model, system, workload, 2, 4, 1, True, "none", tp_comm_overlap=overlap)

    assert times(free, True).cp_comm_fwd == 0.0 < times(capped, True).cp_comm_fwd
    assert times(capped, True).cp_comm_bwd > times(free, True).cp_comm_bwd
    assert times(capped, True).tp_comm_fwd == times(free, True).tp_comm_fwd  # userbuffers: not capped
    assert times(capped, False).tp_comm_fwd > times(free, False).tp_comm_fwd


def test_the_data_parallel_cap_binds_inside_an_nvlink_domain():
    """72 GB300 in one NVL72 domain: 8 channels x 45 GB/s under the 855 GB/s the links carry."""
    system = library.load_system("gb300-nvl72", 72)
    wl = Workload(kind="training", seq_len=8192, global_batch=72, grad_bytes=2)
    where = layout(system, Group.of((72, 1)))
    free = dp_comm_times_s(system, wl, 1, 8e9, where)
    capped = dp_comm_times_s(system, wl, 1, 8e9, where, 8)
    assert capped[0] == pytest.approx(8e9 * 2 * 71 / 72 / (8 * 45 * GB)) and capped[0] > free[0]
    assert capped[1] > free[1]


PROBLEM = {
    "model": TINY_GQA,
    "system": {"name": "dgx-h100", "num_gpus": 8},
    "workload": {"kind": "training", "seq_len": 16384, "global_batch": 8, "nccl_max_ctas": {"cp": 1, "dp": 2, "tp": 1, "pp": 1}},
    "mapping": {"cp": [1, 2, 4, 8], "vpp": [1], "zero": [1], "recompute": ["none", "full"]},
}


def test_the_problem_file_carries_the_caps_and_the_solver_equals_the_enumerator_under_them():
    problem = parse_problem(PROBLEM, source="t")
    assert problem.workload.nccl_max_ctas == CommunicatorCtas(tp=1, cp=1, dp=2, pp=1)
    free = parse_problem({**PROBLEM, "workload": {k: v for k, v in PROBLEM["workload"].items() if k != "nccl_max_ctas"}})
    assert free.workload.nccl_max_ctas == CommunicatorCtas() and not free.workload.nccl_max_ctas.any()
    enum, sol = enumerate_space(problem), solve(problem, workers=2, time_limit=60, method="cpsat")
    assert enum.status == sol.status == "OPTIMAL" and rel_close(sol.objective_value, enum.objective_value, 1e-3)


def test_one_channel_for_the_ring_costs_throughput_at_cp_8():
    """The best plan with the ring over all 8 GPUs: one channel at 30 GB/s cannot hide the K/V blocks."""
    ring = {**PROBLEM["mapping"], "cp": [8]}
    capped = enumerate_space(parse_problem({**PROBLEM, "mapping": ring}, source="t"))
    workload = {k: v for k, v in PROBLEM["workload"].items() if k != "nccl_max_ctas"}
    free = enumerate_space(parse_problem({**PROBLEM, "workload": workload, "mapping": ring}, source="t"))
    assert capped.plans[0].mapping.cp == free.plans[0].mapping.cp == 8
    assert capped.objective_value < free.objective_value  # tokens/s: the exposed exchange slows the step


@pytest.mark.parametrize(
    ("caps", "field", "says"),
    [
        ({"ep": 4}, "workload.nccl_max_ctas.ep", "allowed"),
        ({"dp": 0}, "workload.nccl_max_ctas.dp", "from 1 to 64 (NCCL's MAXCHANNELS), got 0"),
        ({"cp": 65}, "workload.nccl_max_ctas.cp", "from 1 to 64"),
        ({"tp": 8.0}, "workload.nccl_max_ctas.tp", "got 8.0"),
        ({"pp": True}, "workload.nccl_max_ctas.pp", "got True"),
        ([8], "workload.nccl_max_ctas", "thread-block counts from 1 to 64, got [8]"),
        (None, "workload.nccl_max_ctas", "got None"),
    ],
)
def test_bad_caps_are_refused_naming_the_field(caps, field, says):
    with pytest.raises(ProblemError) as info:
        parse_problem({**PROBLEM, "workload": {**PROBLEM["workload"], "nccl_max_ctas": caps}}, source="t")
    assert info.value.field == field and says in str(info.value)


def test_a_device_without_a_channel_rate_refuses_caps(tmp_path):
    data = {
        "model": "llama3-8b",
        "system": {"name": "mi300x", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 64, "nccl_max_ctas": {"dp": 8}},
    }
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "workload.nccl_max_ctas" in proc.stderr and "gives no nccl_channel_bytes_per_s" in proc.stderr


WORKLOAD = {"kind": "training", "seq_len": 8192, "global_batch": 128, "framework": "megatron-lm"}
MEGATRON = {
    "model": "llama3-70b",
    "system": {"name": "dgx-h100", "num_gpus": 64},
    "workload": {**WORKLOAD, "nccl_max_ctas": {"dp": 8, "cp": 1, "pp": 2}},
    "mapping": {"tp": 8, "pp": 4, "dp": 1, "cp": 2, "micro_batch": 1},
}


def test_megatrons_launch_writes_the_caps_where_its_communicator_config_path_reads_them(tmp_path):
    proc = run_main(["evaluate", str(write_yaml(tmp_path / "p.yaml", MEGATRON)), "--emit", "--json"])
    assert proc.returncode == 0, proc.stderr
    heredoc, command = json.loads(proc.stdout)["launch"].split("\nEOF\n")
    opening, config = heredoc.split("\n", 1)
    assert opening == f"cat > {launch.NCCL_CONFIG_FILE} <<'EOF'"
    # Megatron-Core's groups: the gradient traffic on dp, or dp_cp under context parallelism
    assert yaml.safe_load(config) == {g: {"max_ctas": n} for g, n in (("dp", 8), ("dp_cp", 8), ("cp", 1), ("pp", 2))}
    words = shlex.split(command.replace("\\\n", " "))
    assert words[words.index("--nccl-communicator-config-path") + 1] == launch.NCCL_CONFIG_FILE
    recorded = frameworks.recorded_flags(frameworks.load("megatron-lm"))
    assert {w for w in words if w.startswith("--")} <= recorded


def test_a_framework_without_per_communicator_options_refuses_caps(tmp_path):
    workload = {"kind": "training", "seq_len": 4096, "global_batch": 8, "framework": "torchtitan", "nccl_max_ctas": {"dp": 8}}
    data = {"model": TINY_GQA, "system": {"name": "dgx-h100", "num_gpus": 8}, "workload": workload}
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "workload.nccl_max_ctas" in proc.stderr and "torchtitan" in proc.stderr
    data["workload"].pop("nccl_max_ctas")
    assert run_main(["solve", str(write_yaml(tmp_path / "q.yaml", data)), "--time-limit", "30"]).returncode == 0


def test_the_floor_refuses_a_device_without_a_channel_rate():
    """Called past the problem parser (the Python API on a device of its own), a cap on a device whose file gives no
    rate is the same one-line refusal, not a division by zero."""
    mi300x = library.load_device("mi300x")
    with pytest.raises(ProblemError, match="gives no nccl_channel_bytes_per_s") as info:
        channel_floor_s("allgather", 1e9, 8, 8, mi300x)
    assert info.value.field == "workload.nccl_max_ctas"
    assert channel_floor_s("allgather", 1e9, 8, None, mi300x) == 0.0  # uncapped: nothing to time
