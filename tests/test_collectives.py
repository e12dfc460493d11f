"""Topologies and collective algorithms (model/topology.py, model/collectives.py) and the
`parasol collective` contract (issue 5, first part).

Hand-computed alpha-beta values on small synthetic topologies, the properties the issue names
(ring busbw -> link bandwidth, tree beats ring at small sizes, NVLS busbw, torus phases, the 1:7
taper), the equivalence with comm.py on the topology derived from a file's tiers, bad topology
YAML, and the accuracy against published nccl-tests measurements.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from conftest import run_cli

from parasol.model import comm
from parasol.model.collectives import (
    ALGORITHMS,
    busbw_factor,
    collective_time,
    direct_alltoall_time_s,
    ring_time_s,
)
from parasol.model.errors import ProblemError
from parasol.model.topology import InNetworkReduction, Level, Link, Placement, Tier, Topology, ring_count_full_mesh
from parasol.solver import library
from parasol.solver.collective import JSON_KEYS, compare_measurements
from parasol.solver.library import topology_from_dict

S = 1.0e9  # bytes
A0, A1 = 2e-6, 10e-6  # latencies of the two synthetic levels
B0, B1 = 100e9, 10e9  # their per-rank bandwidth after efficiency


def two_level(in_network=None, sharp=None, oversubscription=1.0) -> Topology:
    """8 GPUs per switch (2 links x 100 GB/s x 0.5 = 100 GB/s), 4 nodes per leaf, 2 leaves (10 GB/s NIC)."""
    up = Level("nv", "switch", 8, Link(100e9, A0, 2), 0.5, in_network=in_network)
    out = Level(
        "net", "fat_tree", 8, Link(10e9, A1), 1.0, in_network=sharp, tiers=(Tier("leaf", 4, oversubscription), Tier("spine", 2))
    )
    return Topology((up, out))


def t(op, n, topo, algorithm, nbytes=S):
    return collective_time(op, nbytes, n, topo, algorithm).time_s


# ---- hand-computed alpha-beta values ----------------------------------------------------------


def test_ring_inside_one_switch():
    assert t("allreduce", 8, two_level(), "ring") == pytest.approx(14 * A0 + 2 * 7 / 8 * S / B0)
    assert t("reducescatter", 8, two_level(), "ring") == pytest.approx(7 * A0 + 7 / 8 * S / B0)
    assert t("allgather", 4, two_level(), "ring") == pytest.approx(3 * A0 + 3 / 4 * S / B0)


def test_ring_across_nodes_runs_one_ring_per_nic():
    """32 GPUs = 4 nodes of 8: 8 rings, one per NIC, so the network level gives 8 x 10 GB/s per rank;
    every step pays the farthest hop's latency."""
    expected = 62 * A1 + 2 * 31 / 32 * S / min(B0, 8 * B1)
    assert t("allreduce", 32, two_level(), "ring") == pytest.approx(expected)


def test_double_binary_tree():
    assert t("allreduce", 8, two_level(), "double_binary_tree") == pytest.approx(2 * 3 * A0 + 2 * S / B0)
    assert t("allreduce", 32, two_level(), "double_binary_tree") == pytest.approx(2 * 5 * A1 + 2 * S / min(B0, 8 * B1))


def test_halving_doubling_power_of_two_and_not():
    pieces = (1 / 2 + 1 / 4 + 1 / 8) * S
    assert t("reducescatter", 8, two_level(), "halving_doubling") == pytest.approx(3 * A0 + pieces / B0)
    assert t("allreduce", 8, two_level(), "halving_doubling") == pytest.approx(2 * (3 * A0 + pieces / B0))
    # 6 ranks: recursive halving-doubling over 4, plus folding the 2 extra ranks in and out (Thakur et al. 2005)
    expected = 2 * (2 * A0 + (1 / 2 + 1 / 4) * S / B0) + 2 * (A0 + S / B0)
    assert t("allreduce", 6, two_level(), "halving_doubling") == pytest.approx(expected)
    with pytest.raises(ProblemError, match="power-of-two"):
        t("reducescatter", 6, two_level(), "halving_doubling")


def test_halving_doubling_sends_the_small_pieces_through_the_nics():
    """16 GPUs on 2 nodes: steps 1, 2, 4 inside the node carry S/2, S/4, S/8; step 8 crosses the network with S/16."""
    inside = 3 * A0 + (1 / 2 + 1 / 4 + 1 / 8) * S / B0
    across = A1 + S / 16 / B1
    assert t("allreduce", 16, two_level(), "halving_doubling") == pytest.approx(2 * (inside + across))


def test_hierarchical_is_reduce_scatter_inside_allreduce_across_allgather_inside():
    inside = 7 * A0 + 7 / 8 * S / B0
    across = 2 * 3 * A1 + 2 * 3 / 4 * (S / 8) / B1  # ring over 4 nodes on each GPU's 1/8 slice, its own NIC
    assert t("allreduce", 32, two_level(), "hierarchical") == pytest.approx(2 * inside + across)
    assert t("reducescatter", 32, two_level(), "hierarchical") == pytest.approx(inside + across / 2)


def test_in_network_nvls_and_sharp():
    nvls = two_level(in_network=InNetworkReduction(0.5, 5e-6))
    assert t("allreduce", 8, nvls, "in_network") == pytest.approx(2 * 5e-6 + (1 + 1 / 8) * S / (200e9 * 0.5))
    sharp = two_level(sharp=InNetworkReduction(0.9, 4e-6))
    inside = 7 * A0 + 7 / 8 * S / B0
    assert t("allreduce", 32, sharp, "in_network") == pytest.approx(2 * inside + 2 * 4e-6 + (S / 8) / (10e9 * 0.9))
    with pytest.raises(ProblemError, match="does not reduce"):
        t("allreduce", 8, two_level(), "in_network")


def test_alltoall_direct_pairwise_and_p2p():
    direct = 31 * A1 + max(S * 7 / 32 / B0, S * 24 / 32 / B1)
    assert t("alltoall", 32, two_level(), "direct") == pytest.approx(direct)
    pairwise = 7 * (A0 + S / 32 / B0) + 24 * (A1 + S / 32 / B1)
    assert t("alltoall", 32, two_level(), "pairwise") == pytest.approx(pairwise)
    assert t("p2p", 2, two_level(), "direct") == pytest.approx(A0 + S / B0)
    assert t("p2p", 16, two_level(), "direct") == pytest.approx(A1 + S / B1)


def torus(dims=(4, 4), wrap=(True, True), wrap_multiple=0) -> Topology:
    return Topology(
        (Level("ici", "torus", math.prod(dims), Link(10e9, 1e-6), 1.0, dims=dims, wrap=wrap, wrap_multiple=wrap_multiple),)
    )


def test_torus_one_phase_per_dimension():
    """4x4 torus with wrap-around: reduce-scatter along x (S), then y (S/4), two rings (directions) each."""
    phase_x = 3 * 1e-6 + 3 / 4 * S / 20e9
    phase_y = 3 * 1e-6 + 3 / 4 * (S / 4) / 20e9
    assert t("allreduce", 16, torus(), "torus") == pytest.approx(2 * (phase_x + phase_y))
    assert t("allgather", 16, torus(), "torus") == pytest.approx(phase_x + phase_y)
    # open lines (no wrap-around) run one ring: half the bandwidth
    line_x = 3 * 1e-6 + 3 / 4 * S / 10e9
    line_y = 3 * 1e-6 + 3 / 4 * (S / 4) / 10e9
    assert t("allreduce", 16, torus(wrap=(False, False)), "torus") == pytest.approx(2 * (line_x + line_y))


def test_torus_slices_and_wrap_around_on_tpu_v5p():
    topo = library.load_system("tpu-v5p-torus", 64).network_topology()
    assert topo.size == 8960
    cube = topo.place(64)
    assert cube.shapes[0] == (4, 4, 4)
    assert all(topo.levels[0].wrapped(d, 4) for d in range(3))  # full 3D torus from one 4x4x4 cube
    assert not topo.levels[0].wrapped(0, 2)  # a 2x2x2 slice has no wrap-around
    link = 100e9 * 0.8
    piece, expected = S, 0.0
    for _ in range(3):
        expected += 3 * 1e-6 + 3 / 4 * piece / (2 * link)
        piece /= 4
    assert t("allreduce", 64, topo, "torus") == pytest.approx(2 * expected)
    with pytest.raises(ProblemError, match="not placeable"):
        topo.place(31)  # prime, larger than every dimension


def test_full_mesh_rings_follow_tillson():
    assert [ring_count_full_mesh(m) for m in (2, 3, 4, 5, 6, 7, 8)] == [1, 2, 2, 4, 4, 6, 7]
    mesh = library.load_system("mi300x", 8).network_topology()
    per_link = 64e9 * 0.75
    assert t("allreduce", 8, mesh, "ring") == pytest.approx(14 * 3e-6 + 2 * 7 / 8 * S / (7 * per_link))
    assert t("allreduce", 4, mesh, "ring") == pytest.approx(6 * 3e-6 + 2 * 3 / 4 * S / (2 * per_link))
    # halving-doubling and trees exchange with one peer at a time: one link
    assert t("allreduce", 8, mesh, "double_binary_tree") == pytest.approx(2 * 3 * 3e-6 + 2 * S / per_link)


# ---- the properties the issue names ----------------------------------------------------------


@pytest.mark.parametrize("system,line_rate", [("dgx-h100", 450e9), ("dgx-a100", 300e9), ("gb200-nvl72", 900e9)])
def test_ring_busbw_tends_to_the_link_bandwidth(system, line_rate):
    topo = library.load_system(system, 8).network_topology()
    result = collective_time("allreduce", 64 * 2**30, 8, topo, "ring")
    efficiency = topo.levels[0].efficiency
    assert result.busbw_bytes_per_s == pytest.approx(line_rate * efficiency, rel=2e-3)
    assert result.busbw_bytes_per_s < line_rate * efficiency


@pytest.mark.parametrize("system,n", [("dgx-a100", 8), ("dgx-a100", 64), ("dgx-h100", 256), ("slingshot-a100-dragonfly", 64)])
def test_tree_beats_ring_at_small_sizes(system, n):
    """log2 n latencies against 2(n-1); at large sizes the ring's 2(n-1)/n S beats the tree's 2S
    while n is small enough that 2(n-1) latencies stay below S/n of bandwidth time."""
    topo = library.load_system(system, n).network_topology()
    assert t("allreduce", n, topo, "double_binary_tree", 1024) < t("allreduce", n, topo, "ring", 1024)
    if n <= 64:
        assert t("allreduce", n, topo, "double_binary_tree", 2**33) > t("allreduce", n, topo, "ring", 2**33)


def test_nvls_busbw_formula():
    """NVLS moves S(1 + 1/n) per link: algbw = B e n/(n+1). nccl-tests prints busbw = algbw x 2(n-1)/n
    by default and algbw x (n-1)/(n+1) when NCCL_ALGO names NVLS (src/all_reduce.cu)."""
    topo = library.load_system("dgx-h100", 8).network_topology()
    rate = 450e9 * 0.69
    big = 2**40
    auto = collective_time("allreduce", big, 8, topo)
    assert auto.algorithm == "in_network" and not auto.fixed
    assert auto.algbw_bytes_per_s == pytest.approx(rate * 8 / 9, rel=1e-4)
    assert auto.busbw_bytes_per_s == pytest.approx(rate * 8 / 9 * 2 * 7 / 8, rel=1e-4)
    fixed = collective_time("allreduce", big, 8, topo, "in_network")
    assert fixed.busbw_bytes_per_s == pytest.approx(rate * 8 / 9 * 7 / 9, rel=1e-4)
    assert busbw_factor("allreduce", 8, in_network=True) == pytest.approx(7 / 9)
    assert busbw_factor("allgather", 8) == busbw_factor("alltoall", 8) == pytest.approx(7 / 8)
    assert busbw_factor("p2p", 8) == 1.0
    # A100 has no NVLS: the best algorithm there is a point-to-point one
    a100 = library.load_system("dgx-a100", 8).network_topology()
    assert collective_time("allreduce", big, 8, a100).algorithm != "in_network"


def llama(oversubscription: float) -> Topology:
    topo = library.load_system("llama3-h100-cluster", 8).network_topology()
    net = topo.levels[1]
    tiers = tuple(
        dataclasses.replace(tier, oversubscription=oversubscription) if tier.name == "pod" else tier for tier in net.tiers
    )
    return dataclasses.replace(topo, levels=(topo.levels[0], dataclasses.replace(net, tiers=tiers)))


def test_llama3_cluster_shape():
    topo = library.load_system("llama3-h100-cluster", 8).network_topology()
    assert topo.size == 24576
    assert [tier.size for tier in topo.levels[1].tiers] == [2, 192, 8]
    assert [tier.oversubscription for tier in topo.levels[1].tiers][1] == 7.0
    assert topo.gpus_per_unit(1) * 2 * 192 == 3072


def test_oversubscription_slows_cross_pod_steps_by_the_stated_factor():
    """Pairwise all-to-all over two pods: the 3,072 steps whose partner is in the other pod run at
    1/7 of the NIC rate (every GPU of the pod sends at once through 1:7 uplinks); the others do not change."""
    n, piece, nic = 6144, S / 6144, 50e9 * 0.94
    tapered, full = llama(7.0), llama(1.0)
    slow = t("alltoall", n, tapered, "pairwise")
    fast = t("alltoall", n, full, "pairwise")
    assert slow - fast == pytest.approx(3072 * (7 - 1) * piece / nic, rel=1e-6)
    # direct all-to-all: half the traffic leaves the pod, at 1/7 of the pod's injection bandwidth
    lat = (n - 1) * (5e-6 + 1e-6 + 1e-6)
    assert t("alltoall", n, tapered, "direct") - lat == pytest.approx(7 * (S / 2) / nic, rel=1e-6)
    # inside one pod nothing crosses the taper
    assert t("alltoall", 3072, tapered, "direct") == pytest.approx(t("alltoall", 3072, full, "direct"))


def test_concurrent_groups_share_the_taper_but_rings_barely_load_it():
    """A ring exports one rank's volume per subtree: one 2-pod ring is NIC-bound even at 1:7, but
    enough concurrent rings (other DP groups) saturate the pod uplinks."""
    topo = llama(7.0)
    one = Placement((1, 768), ((), ()), 1)  # one GPU per node over two pods (a DP group)
    crowd = dataclasses.replace(one, concurrent=8)  # the 8 DP groups of the same nodes
    assert ring_time_s("allreduce", S, topo, one) == pytest.approx(ring_time_s("allreduce", S, llama(1.0), one))
    volume = 2 * 767 / 768 * S
    assert ring_time_s("allreduce", S, topo, crowd) >= ring_time_s("allreduce", S, topo, one)
    expected_taper = 8 * volume / (3072 * 50e9 * 0.94 / 7)
    assert ring_time_s("allreduce", S, topo, crowd) == pytest.approx(
        2 * 767 * (5e-6 + 1e-6 + 1e-6) + max(volume / (50e9 * 0.94), expected_taper)
    )


def test_dragonfly_global_links_taper_all_to_all_across_groups():
    topo = library.load_system("slingshot-a100-dragonfly", 8).network_topology()
    level = topo.levels[1]
    assert topo.size == 6144 and level.size == 12 * 32 * 4
    inside = topo.place(512)  # one group: 128 nodes of 4
    assert topo.boundaries(inside, 1) == []
    across = topo.place(2048)  # four groups
    (boundary,) = topo.boundaries(across, 1)
    # 512 NICs x 25 GB/s inject; minimal routing to 3 groups has 3 x 512/11 links, Valiant half of 512
    usable = max(3 * 512 / 11, 512 / 2) * 25e9
    assert boundary.oversubscription == pytest.approx(512 * 25e9 / usable)
    assert direct_alltoall_time_s("alltoall", S, topo, across) > direct_alltoall_time_s("alltoall", S, topo, inside)


# ---- the topology derived from scale_up/scale_out is comm.py --------------------------------


@pytest.mark.parametrize("system", library.names("systems"))
def test_default_topology_gives_comm_py_numbers(system):
    spec = dataclasses.replace(library.load_system(system, 64), topology=None)
    domain = spec.scale_up_domain
    for n in sorted({2, domain, 2 * domain, 4 * domain}):
        spec_n = dataclasses.replace(spec, num_gpus=n)
        topo = spec_n.network_topology()
        flat = "ring" if n <= domain else "hierarchical"
        for nbytes in (1e3, 1e6, 3e9):
            assert t("allreduce", n, topo, flat, nbytes) == pytest.approx(comm.allreduce_time_s(nbytes, n, 1, spec_n), rel=1e-12)
            assert t("reducescatter", n, topo, flat, nbytes) == pytest.approx(
                comm.reduce_scatter_time_s(nbytes, n, 1, spec_n), rel=1e-12
            )
            assert t("alltoall", n, topo, "direct", nbytes) == pytest.approx(
                comm.alltoall_time_s(nbytes, n, 1, spec_n), rel=1e-12
            )


def test_library_topologies_hold_the_validation_runs():
    """When the training model adopts topologies, every published run must still fit its system."""
    for system, gpus in (("dgx-a100", 3360), ("dgx-h100", 1024), ("jean-zay-a100", 384), ("dgx-h800", 2048)):
        assert library.load_system(system, gpus).network_topology().size >= gpus


# ---- placement and selection --------------------------------------------------------------------


def test_placement_is_compact_and_checked():
    topo = two_level()
    assert topo.place(4).extents == (4, 1)
    assert topo.place(24).extents == (8, 3)
    with pytest.raises(ProblemError, match="multiple of 8"):
        topo.place(12)
    with pytest.raises(ProblemError, match="exceed the 64 GPUs"):
        topo.place(65)


def test_best_algorithm_unless_fixed():
    topo = two_level()
    best = collective_time("allreduce", S, 32, topo)
    assert best.time_s == min(seconds for _, seconds in best.candidates)
    fixed = dataclasses.replace(topo, algorithms=(("allreduce", "hierarchical"),))
    assert collective_time("allreduce", S, 32, fixed).algorithm == "hierarchical"
    assert collective_time("allreduce", S, 8, fixed).algorithm != "hierarchical"  # not applicable there: the fastest
    assert collective_time("allreduce", S, 32, fixed, algorithm="ring").algorithm == "ring"  # the caller wins
    with pytest.raises(ProblemError, match="allowed: ring"):
        collective_time("allgather", S, 8, topo, algorithm="in_network")
    assert set(ALGORITHMS) == {"allreduce", "allgather", "reducescatter", "alltoall", "p2p"}


# ---- accuracy against published nccl-tests ---------------------------------------------------


@pytest.fixture(scope="module")
def measured():
    """nccl-tests' points (XLA's table is checked in tests/test_xla_collectives.py)."""
    return compare_measurements(("nccl_tests.yaml",))


def test_8gpu_allreduce_large_buffers_on_dgx_hgx_within_20_percent(measured):
    """The issue's target, on the validation points (calibration points are reported, not counted; the
    Azure AI benchmarking guide's curves are not used: issue 13 reserves that guide)."""
    target = [
        r
        for r in measured
        if r["op"] == "allreduce"
        and r["gpus"] == 8
        and r["bytes"] >= 2**30
        and r["system"].startswith(("dgx-", "hgx-"))
        and r["role"] == "validation"
    ]
    assert len(target) >= 4
    worst = max(target, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= 0.20, worst


def test_every_large_buffer_measurement_within_20_percent(measured):
    large = [r for r in measured if r["bytes"] >= 2**30]
    assert {r["system"] for r in large} >= {"dgx-a100", "dgx-h100", "hgx-h200", "dgx-h800", "dgx-b200"}
    assert all(abs(r["error"]) <= 0.20 for r in large), [(r["id"], round(r["error"], 3)) for r in large if abs(r["error"]) > 0.2]


def test_measurements_carry_sources_and_roles(measured):
    assert all(r["source"].startswith("https://") for r in measured)
    assert {r["role"] for r in measured} == {"calibration", "validation"}


# ---- bad topology YAML ----------------------------------------------------------------------------

LINK = {"bandwidth_bytes_per_s": 25e9, "latency_s": 3e-6, "count": 18}
SWITCH = {"name": "nv", "kind": "switch", "size": 8, "link": LINK, "efficiency": 0.8}
FAT = {
    "name": "ib",
    "kind": "fat_tree",
    "link": {"bandwidth_bytes_per_s": 50e9, "latency_s": 5e-6},
    "efficiency": 0.9,
    "tiers": [{"name": "leaf", "size": 32, "radix": 64}, {"name": "spine", "size": 4}],
}


def bad(level=None, **top):
    return {"levels": [SWITCH, {**FAT, **(level or {})}], **top}


@pytest.mark.parametrize(
    "data,field,allowed",
    [
        ({"levels": []}, "topology.levels", "non-empty list"),
        ({"levels": [SWITCH], "extra": 1}, "topology.extra", "allowed: levels, algorithms"),
        (bad({"kind": "hypercube"}), "topology.levels[1].kind", "allowed: switch, fat_tree, torus, ring, dragonfly, full_mesh"),
        (bad({"efficiency": 1.5}), "topology.levels[1].efficiency", "(0, 1]"),
        (bad({"link": {"latency_s": 1e-6}}), "topology.levels[1].link.bandwidth_bytes_per_s", "is required"),
        (bad({"link": {**LINK, "count": 0}}), "topology.levels[1].link.count", "positive integer"),
        (bad({"tiers": "leaf"}), "topology.levels[1].tiers", "non-empty list"),
        (
            bad({"tiers": [{"name": "leaf", "size": 32, "oversubscription": -7}]}),
            "topology.levels[1].tiers[0].oversubscription",
            "1:7",
        ),
        (bad({"tiers": [{"name": "leaf", "size": 80, "radix": 64}]}), "topology.levels[1].tiers", "radix 64"),
        (bad({"size": 100}), "topology.levels[1].size", "joins 128 units"),
        (bad({"rail_optimized": "yes"}), "topology.levels[1].rail_optimized", "true or false"),
        (bad({"dims": [4, 4]}), "topology.levels[1].dims", "allowed: name, kind, size, link, efficiency, tiers"),
        ({"levels": [{**SWITCH, "kind": "torus", "size": None, "dims": [4, 0]}]}, "topology.levels[0].dims", "positive integer"),
        (
            {"levels": [{**SWITCH, "kind": "torus", "size": 16, "dims": [4, 4], "wrap": [True]}]},
            "topology.levels[0].wrap",
            "one per dimension",
        ),
        (
            {"levels": [{**SWITCH, "kind": "ring", "in_network_reduction": {"efficiency": 0.5, "latency_s": 1e-6}}]},
            "topology.levels[0].in_network_reduction",
            "allowed: name, kind, size, link, efficiency",
        ),
        (
            {"levels": [{**SWITCH, "in_network_reduction": {"efficiency": 0.5}}]},
            "topology.levels[0].in_network_reduction.latency_s",
            "is required",
        ),
        (
            {
                "levels": [
                    {
                        "name": "df",
                        "kind": "dragonfly",
                        "link": LINK,
                        "efficiency": 0.9,
                        "groups": 4,
                        "routers_per_group": 8,
                        "units_per_router": 4,
                        "global_links_per_router": 4,
                    }
                ]
            },
            "topology.levels[0].global_link",
            "must be a mapping",
        ),
        ({"levels": [SWITCH], "algorithms": {"bcast": "ring"}}, "topology.algorithms", "allowed: allreduce"),
        ({"levels": [SWITCH], "algorithms": {"allgather": "in_network"}}, "topology.algorithms.allgather", "allowed: ring"),
    ],
)
def test_bad_topology_yaml(data, field, allowed):
    with pytest.raises(ProblemError) as info:
        topology_from_dict(data, "systems/x.yaml")
    message = str(info.value)
    assert message.startswith(f"systems/x.yaml: {field}: "), message
    assert allowed in message, message
    assert "\n" not in message


def test_good_topology_yaml_round_trip():
    topo = topology_from_dict(bad(), "systems/x.yaml")
    assert topo.size == 8 * 128 and topo.levels[1].tiers[0].radix == 64
    ring = topology_from_dict({"levels": [{**SWITCH, "kind": "ring"}]}, "x")
    assert ring.levels[0].dims == (8,) and ring.levels[0].wrap == (True,)


# ---- the CLI contract ------------------------------------------------------------------------------


def cli(args, capsys):
    from parasol.solver.cli import main

    try:
        code = main(["collective", *args])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.slow
def test_cli_json_has_exactly_the_contract_keys():
    proc = run_cli(["collective", "--system", "dgx-h100", "--op", "allreduce", "--bytes", "8589934592", "--gpus", "8", "--json"])
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert tuple(data) == JSON_KEYS
    assert data["algorithm"] == "in_network"
    assert data["busbw_gbps"] == pytest.approx(data["algbw_gbps"] * 2 * 7 / 8)
    assert data["algbw_gbps"] == pytest.approx(8589934592 / data["time_s"] / 1e9)


@pytest.mark.parametrize(
    "op,gpus,algorithm",
    [
        ("allgather", 16, "ring"),
        ("reducescatter", 64, None),
        ("alltoall", 64, "pairwise"),
        ("p2p", 2, None),
        ("allreduce", 72, "in_network"),
    ],
)
def test_cli_json_every_op(op, gpus, algorithm, capsys):
    args = ["--system", "gb200-nvl72", "--op", op, "--bytes", "1G", "--gpus", str(gpus), "--json"]
    code, out, err = cli(args + (["--algorithm", algorithm] if algorithm else []), capsys)
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == set(JSON_KEYS) and data["time_s"] > 0
    if algorithm:
        assert data["algorithm"] == algorithm


def test_cli_table(capsys):
    code, out, err = cli(["--system", "llama3-h100-cluster", "--op", "allreduce", "--bytes", "1G", "--gpus", "6144"], capsys)
    assert code == 0, err
    assert "<-" in out and "busbw GB/s" in out and "6144 GPUs" in out and "1e9 B/s" in out


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--system", "dgx-z9", "--op", "allreduce", "--bytes", "1G", "--gpus", "8"],
            "--system: unknown name 'dgx-z9'; allowed: dgx-a100",
        ),
        (["--system", "dgx-h100", "--op", "bcast", "--bytes", "1G", "--gpus", "8"], "--op"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "8", "--algorithm", "magic"], "--algorithm"),
        (
            ["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "8", "--algorithm", "torus"],
            "--algorithm: 'torus' cannot run",
        ),
        (
            ["--system", "dgx-h100", "--op", "alltoall", "--bytes", "1G", "--gpus", "8", "--algorithm", "ring"],
            "allowed: direct, pairwise",
        ),
        (
            ["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "9999"],
            "--gpus: 9999 GPUs exceed the 4608 GPUs",
        ),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "12"], "--gpus: 12 GPUs are not placeable"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "1"], "at least 2 GPUs"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "0", "--gpus", "8"], "--bytes"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "-5", "--gpus", "8"], "--bytes"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "lots", "--gpus", "8"], "--bytes"),
        (["--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "0"], "--gpus"),
        (["--system", "tpu-v5p-torus", "--op", "allreduce", "--bytes", "1G", "--gpus", "31"], "not placeable"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, needle, capsys):
    code, out, err = cli(args, capsys)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("parasol: ") and "Traceback" not in err, err
    assert needle in lines[0], lines[0]


@pytest.mark.slow
def test_cli_bad_input_through_a_subprocess():
    proc = run_cli(["collective", "--system", "dgx-h100", "--op", "allreduce", "--bytes", "1G", "--gpus", "12", "--json"])
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("parasol: --gpus:") and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_cost_lines_give_every_algorithms_time_on_every_topology_system():
    """The planner times a group's collectives from one line per algorithm in the message size
    (collectives.cost_lines: every algorithm is per-step latencies plus byte terms proportional to
    the message). On every system whose topology the model follows, for the groups of mappings laid
    by every placement (strided groups included), the lines give collective_time_on's time from 1 B
    to 10 GB, for every op."""
    from parasol.model.collectives import collective_time_on, cost_lines, lines_time_s
    from parasol.model.placement import PLACEMENTS, group_layouts, topology_decides, training_topology
    from parasol.model.specs import Mapping

    checked = 0
    for name in library.names("systems"):
        system = library.load_system(name, 64)
        if not topology_decides(system.topology):
            continue
        topo = training_topology(system)
        for tp, cp, dp, pp in ((2, 2, 4, 4), (4, 1, 8, 2), (8, 2, 2, 2), (1, 4, 16, 1)):
            for placement in PLACEMENTS[::3]:
                mapping = Mapping(tp=tp, pp=pp, dp=dp, cp=cp, ep=1, micro_batch=1, placement=placement)
                for layout in group_layouts(system, mapping).values():
                    if layout.placement is None or layout.n < 2:
                        continue
                    for op in ALGORITHMS:
                        lines = cost_lines(op, topo, layout.placement)
                        assert lines is not None, (name, placement, op)
                        for nbytes in (1.0, 4.0e3, 1.0e6, 3.0e8, 1.0e10):
                            exact = collective_time_on(op, nbytes, topo, layout.placement).time_s
                            assert lines_time_s(lines, nbytes) == pytest.approx(exact, rel=1e-9), (name, placement, op, nbytes)
                            checked += 1
    assert checked > 1000
