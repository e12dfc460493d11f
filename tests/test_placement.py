"""Placement as a decision (issue 5, second half): the rank order of the parallel dimensions, where
it puts each group on the network, how the training model times the groups there, and the planner
deciding it (differential tests against the enumerator with the placement free, a torus included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random

import pytest
from conftest import REPO, TINY_GQA, rel_close, training_problem, write_yaml
from test_solver import TIME_LIMIT, WORKERS, differential, random_problem

from parasol.model import comm
from parasol.model.collectives import collective_time_on
from parasol.model.errors import ProblemError
from parasol.model.placement import (
    DEFAULT_PLACEMENT,
    PLACEMENTS,
    Group,
    check_placement,
    collective_time_s,
    group_layouts,
    parallel_groups,
    topology_decides,
    training_topology,
)
from parasol.model.specs import TP_PP_DP_PLACEMENT, Mapping
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.cli import main
from parasol.solver.planner import solve
from parasol.solver.problem import load_problem, parse_problem
from parasol.solver.training_space import build_space, placements_by_point

S = 1.0e8  # bytes
EXAMPLE = REPO / "problems" / "examples" / "torus-placement.yaml"
TINY_MOE = {**TINY_GQA, "name": "tiny-moe", "moe": {"experts": 8, "top_k": 2, "expert_ffn": 1408}}


# ---- the placement string and the groups it builds ---------------------------------------------


def test_placements_are_every_megatron_order_those_with_ep_next_to_dp_first():
    assert len(PLACEMENTS) == 120 == len(set(PLACEMENTS))  # 5! orders
    assert PLACEMENTS[0] == DEFAULT_PLACEMENT == Mapping(tp=1, pp=1, dp=1, micro_batch=1).placement == "tp-cp-ep-dp-pp"
    beside = [abs(p.split("-").index("ep") - p.split("-").index("dp")) == 1 for p in PLACEMENTS]
    assert beside == [True] * 48 + [False] * 72  # 4! orders of (tp, cp, pp, [ep dp]) x 2 orders of the pair, first
    assert all(sorted(p.split("-")) == ["cp", "dp", "ep", "pp", "tp"] for p in PLACEMENTS)
    # for a dense model (ep 1) the first 48 hold every layout: each other order has a twin among them
    twins = {tuple(d for d in p.split("-") if d != "ep") for p in PLACEMENTS[:48]}
    assert twins == {tuple(d for d in p.split("-") if d != "ep") for p in PLACEMENTS}


def test_megatron_tp_pp_dp_mapping_puts_data_parallel_outermost():
    """--use-tp-pp-dp-mapping (order tp-cp-ep-pp-dp): a pipeline in consecutive tp·cp blocks, dp outermost; for
    a dense model the same groups as its twin with ep beside dp."""
    check_placement(TP_PP_DP_PLACEMENT, tp=4, cp=2, dp=8, pp=8, ep=1, moe=False)
    g = parallel_groups(TP_PP_DP_PLACEMENT, tp=4, cp=2, dp=8, pp=8)
    assert g["tp"].factors == ((4, 1),) and g["cp"].factors == ((2, 4),) and g["pp"].factors == ((8, 8),)
    assert g["dp"].factors == ((2, 4), (8, 64)) and g["dp"].size == 16  # dp·cp: cp at stride 4, dp at stride 64
    assert g == parallel_groups("tp-cp-pp-ep-dp", tp=4, cp=2, dp=8, pp=8)
    with pytest.raises(ProblemError, match="does not end with pp"):  # with experts, edp 4 differs from dp 8
        check_placement(TP_PP_DP_PLACEMENT, tp=1, cp=1, dp=8, pp=4, ep=2, moe=True)


def test_the_orders_with_ep_apart_from_dp_add_classes_to_mixtures_of_experts_only(monkeypatch):
    """On the dragonfly (placement a decision), a dense model's space is the same with the 48 orders that put ep
    next to dp as with all 120; a mixture of experts gains placement classes from the other 72."""
    import parasol.solver.training_space as ts  # noqa: PLC0415

    def rows(model: str, placements: tuple) -> tuple:
        monkeypatch.setattr(ts, "PLACEMENTS", placements)
        data = {
            "model": model,
            "system": {"name": "slingshot-a100-dragonfly", "num_gpus": 64},
            "workload": {"kind": "training", "seq_len": 4096, "global_batch": 1024, "precision": "bf16"},
        }
        return placements_by_point(build_space(parse_problem(data, model)))

    assert rows("llama3-8b", PLACEMENTS) == rows("llama3-8b", PLACEMENTS[:48])
    moe, old = rows("mixtral-8x7b", PLACEMENTS), rows("mixtral-8x7b", PLACEMENTS[:48])
    assert moe.keys() == old.keys() and all(set(old[k]) <= set(moe[k]) for k in old)
    assert sum(map(len, moe.values())) > sum(map(len, old.values()))


def test_default_placement_is_the_layout_the_model_always_used():
    """tp consecutive, cp at stride tp, the gradient group dp·cp at stride tp, pp outermost; the
    expert grid: ep consecutive, expert data parallel at stride ep."""
    g = parallel_groups(DEFAULT_PLACEMENT, tp=4, cp=2, dp=8, pp=4, ep=16)
    assert g["tp"].factors == ((4, 1),) and g["cp"].factors == ((2, 4),) and g["dp"].factors == ((16, 4),)
    assert g["pp"].factors == ((4, 64),) and g["ep"].factors == ((16, 1),) and g["edp"].factors == ((4, 16),)


def test_strides_follow_the_order():
    g = parallel_groups("pp-tp-cp-ep-dp", tp=2, cp=1, dp=4, pp=8)
    assert g["pp"].factors == ((8, 1),) and g["tp"].factors == ((2, 8),) and g["dp"].factors == ((4, 16),)
    after_pp = parallel_groups("tp-pp-cp-dp-ep", tp=2, cp=2, dp=4, pp=2)  # cp at stride tp·pp, dp right after it
    assert after_pp["dp"].factors == ((8, 4),)  # one strided group of dp·cp
    apart = parallel_groups("cp-pp-tp-ep-dp", tp=2, cp=2, dp=4, pp=2)
    assert apart["dp"].factors == ((2, 1), (4, 8)) and apart["dp"].size == 8
    assert Group.of((1, 5), (3, 2), (2, 6)).factors == ((6, 2),)


def test_expert_grid_rules_of_megatron_core():
    check_placement("tp-cp-ep-dp-pp", tp=2, cp=1, dp=8, pp=4, ep=8, moe=True)
    with pytest.raises(ProblemError, match="ending with pp"):  # pp not last and edp 2 != dp 8
        check_placement("tp-cp-pp-ep-dp", tp=2, cp=1, dp=8, pp=4, ep=8, moe=True)
    check_placement("tp-cp-pp-ep-dp", tp=2, cp=1, dp=8, pp=4, ep=8, moe=False)  # no expert grid
    check_placement("tp-cp-pp-ep-dp", tp=2, cp=1, dp=8, pp=1, ep=8, moe=True)  # pp 1: no pipeline groups
    check_placement("tp-ep-dp-pp-cp", tp=2, cp=1, dp=8, pp=4, ep=8, moe=True)  # only size-1 cp after pp
    with pytest.raises(ProblemError, match="pipeline groups"):  # edp = dp (ep = tp), but pp strides 2 and 1
        check_placement("tp-pp-cp-ep-dp", tp=2, cp=1, dp=8, pp=4, ep=2, moe=True)
    with pytest.raises(ProblemError, match="tp-cp-ep-dp-pp"):
        check_placement("tp-cp-dp-pp", tp=1, cp=1, dp=1, pp=1, ep=1, moe=False)


# ---- where the groups sit, and what it costs -----------------------------------------------------


@pytest.mark.parametrize(
    "system,decides",
    [
        ("dgx-a100", False),
        ("dgx-h100", False),
        ("gb200-nvl72", False),
        ("jean-zay-a100", False),
        ("tpu-v5p-torus", True),
        ("llama3-h100-cluster", True),
        ("slingshot-a100-dragonfly", True),
        ("mi300x", True),
    ],
)
def test_which_systems_the_topology_decides(system, decides):
    assert topology_decides(library.load_system(system, 8).topology) == decides


def test_two_tier_layout_is_comm_py():
    """On a DGX the default placement gives comm.py's members per domain; moving tp outside dp puts
    the TP group across nodes, and evaluate's TP time grows accordingly."""
    a100 = library.load_system("dgx-a100", 64)
    default = group_layouts(a100, Mapping(tp=8, pp=2, dp=4, micro_batch=1))
    assert default["tp"].local == 8 and not default["tp"].crosses and default["dp"].local == 1 and default["pp"].crosses
    assert collective_time_s("allreduce", S, default["tp"], a100) == comm.allreduce_time_s(S, 8, 1, a100)
    assert collective_time_s("reducescatter", S, default["dp"], a100) == comm.reduce_scatter_time_s(S, 4, 8, a100)
    moved = group_layouts(a100, Mapping(tp=8, pp=2, dp=4, micro_batch=1, placement="cp-ep-dp-tp-pp"))
    assert moved["tp"].local == 2 and moved["dp"].local == 4  # dp innermost: 4 per node; tp at stride 4: 2 per node
    assert collective_time_s("allreduce", S, moved["tp"], a100) == comm.allreduce_time_s(S, 8, 4, a100)
    p = parse_problem(
        training_problem(
            model="gpt3-20b",
            system="dgx-a100",
            num_gpus=64,
            seq_len=2048,
            global_batch=64,
            mapping={"tp": 8, "pp": 2, "dp": 4, "micro_batch": 1},
        ),
        "t",
    )
    base = evaluate_training(p.model, p.system(), p.workload, p.fixed_mapping())
    worse = evaluate_training(p.model, p.system(), p.workload, dataclasses.replace(p.fixed_mapping(), placement="cp-ep-dp-tp-pp"))
    assert worse.breakdown["time_s"]["comm/tp"] > 2 * base.breakdown["time_s"]["comm/tp"]
    assert (
        base.metrics
        == evaluate_training(
            p.model, p.system(), p.workload, dataclasses.replace(p.fixed_mapping(), placement=DEFAULT_PLACEMENT)
        ).metrics
    )


def test_training_topology_takes_the_calibrated_efficiencies():
    system = library.load_system("llama3-h100-cluster", 64)
    topo = training_topology(system)
    nvswitch = system.topology.levels[0]
    assert topo.levels[0].efficiency == system.scale_up.efficiency
    assert topo.levels[1].efficiency == system.scale_out.efficiency
    assert topo.levels[0].in_network.efficiency == pytest.approx(
        nvswitch.in_network.efficiency * system.scale_up.efficiency / nvswitch.efficiency
    )


def tpu(n):
    return library.load_system("tpu-v5p-torus", n)


def test_torus_default_tp_sits_on_open_lines_moved_tp_on_a_wrapped_ring():
    """32 chips are a 2x4x4 slice (x fastest). Default: tp 4 takes x (2) and half of y, no
    wrap-around: two open-line phases. Laid after dp 8 (which fills x and y), tp takes the whole z
    dimension, a ring closed by wrap-around: two directions at once."""
    system = tpu(32)
    link, lat = 100e9 * system.scale_up.efficiency, 1e-6
    default = group_layouts(system, Mapping(tp=4, pp=1, dp=8, micro_batch=1))["tp"]
    assert default.placement.shapes == ((2, 2, 1),) and default.placement.wraps == ((False, False, False),)
    moved = group_layouts(system, Mapping(tp=4, pp=1, dp=8, micro_batch=1, placement="cp-ep-dp-tp-pp"))["tp"]
    assert moved.placement.shapes == ((1, 1, 4),) and moved.placement.wraps == ((False, False, True),)
    open_lines = 2 * ((lat + S / 2 / link) + (lat + (S / 2) / 2 / link))
    ring = 2 * (3 * lat + 3 / 4 * S / (2 * link))
    assert collective_time_s("allreduce", S, default, system) == pytest.approx(open_lines)
    assert collective_time_s("allreduce", S, moved, system) == pytest.approx(ring)
    # one dimension: the torus algorithm is the ring along it (equal times; the ring is listed first)
    assert collective_time_on("allreduce", S, training_topology(system), moved.placement).algorithm in ("ring", "torus")


def test_torus_members_apart_share_links_and_take_more_hops():
    """128 chips are 4x4x8. Default order, tp 8, dp 4, pp 4: pp sits on z with its stages two chips
    apart, so each send crosses two links and shares them with the interleaved pipeline."""
    system = tpu(128)
    where = group_layouts(system, Mapping(tp=8, pp=4, dp=4, micro_batch=1))
    pp = where["pp"].placement
    assert pp.shapes == ((1, 1, 4),) and pp.spacing[0] == (1, 1, 2) and pp.wraps == ((False, False, True),)
    link, lat = 100e9 * system.scale_up.efficiency, 1e-6
    assert collective_time_s("p2p", S, where["pp"], system) == pytest.approx(2 * lat + S / (link / 2))
    packed = group_layouts(system, Mapping(tp=8, pp=4, dp=4, micro_batch=1, placement="pp-tp-cp-ep-dp"))["pp"]
    assert packed.placement.shapes == ((4, 1, 1),) and packed.placement.spacing[0] == (1, 1, 1)
    assert collective_time_s("p2p", S, packed, system) == pytest.approx(lat + S / link)


def test_fat_tree_taper_depends_on_where_a_group_sits():
    """6,144 GPUs of the Llama 3 cluster are two 3,072-GPU pods, 1:7 above them. Default: pp 2 is
    outermost, each DP group stays in its pod. pp innermost across nodes (after tp) spreads every
    DP group over both pods, every other node: 192 of its members in each pod, and the 16 such
    groups share the pod's uplinks. An all-to-all over it pays the taper; a ring exports one rank's
    volume per pod and pays only the longer climb."""
    system = library.load_system("llama3-h100-cluster", 6144)
    inside = group_layouts(system, Mapping(tp=8, pp=2, dp=384, micro_batch=1))["dp"]
    spread = group_layouts(system, Mapping(tp=8, pp=2, dp=384, micro_batch=1, placement="tp-cp-pp-ep-dp"))["dp"]
    topo = training_topology(system)
    assert topo.boundaries(inside.placement, 1) == []
    (pod,) = topo.boundaries(spread.placement, 1)
    assert pod.name == "pod" and spread.placement.spacing[1] == (2,) and pod.members == 192
    assert spread.placement.concurrent == 16
    assert collective_time_s("alltoall", 1e9, spread, system) > 3 * collective_time_s("alltoall", 1e9, inside, system)
    assert collective_time_s("reducescatter", 1e9, spread, system) > collective_time_s("reducescatter", 1e9, inside, system)


# ---- the planner decides it ----------------------------------------------------------------------


def _data(model, system, n, seq, gb, mapping, objective="throughput"):
    return training_problem(
        model=model, system=system, num_gpus=n, seq_len=seq, global_batch=gb, mapping=mapping, objective=objective
    )


SPLIT = {"first_stage_layers": 0, "last_stage_layers": 0}
FREE = [  # placement absent: a decision on these systems (their topology decides)
    ("torus-16", _data("llama2-7b", "tpu-v5p-torus", 16, 4096, 32, {"vpp": [1], "recompute": ["full"], "zero": [1], **SPLIT})),
    (
        "torus-32-placement-wins",
        _data(
            "llama3-70b",
            "tpu-v5p-torus",
            32,
            8192,
            64,
            {"zero": [3], "cp": [1], "recompute": ["none", "selective"], "vpp": [1], "micro_batch": [1], **SPLIT},
        ),
    ),
    (
        "torus-moe",
        _data(
            TINY_MOE,
            "tpu-v5p-torus",
            16,
            4096,
            32,
            {"vpp": [1], "recompute": ["selective"], "zero": [1], "micro_batch": [2], **SPLIT},
        ),
    ),
    (
        "torus-memory",
        _data(
            "llama2-7b",
            "tpu-v5p-torus",
            16,
            4096,
            32,
            {"vpp": [1], "recompute": ["full"], "zero": [0, 1], "micro_batch": [1, 2], **SPLIT},
            objective="memory",
        ),
    ),
    (
        "dragonfly",
        _data(
            "gpt-j-6b",
            "slingshot-a100-dragonfly",
            16,
            2048,
            32,
            {"vpp": [1, 2], "recompute": ["selective"], "zero": [1], **SPLIT},
        ),
    ),
    (
        "dgx-listed",
        _data(
            "llama2-7b",
            "dgx-h100",
            32,
            4096,
            32,
            {"vpp": [1], "recompute": ["selective"], "zero": [1], "micro_batch": [1, 2], "placement": list(PLACEMENTS), **SPLIT},
        ),
    ),
    (
        "torus-infeasible",
        _data("gpt3-175b", "tpu-v5p-torus", 8, 2048, 16, {"vpp": [1], "recompute": ["full"], "zero": [1, 3], **SPLIT}),
    ),
]


@pytest.mark.parametrize("case", FREE, ids=[c[0] for c in FREE])
@pytest.mark.slow
def test_differential_placement_free(case):
    """CP-SAT optimum == the enumerator's best (INFEASIBLE together), with the placement decided."""
    name, data = case
    problem = parse_problem(data, source=name)
    space = build_space(problem)
    assert max(len(v) for v in placements_by_point(space).values()) > 1  # the placement is really free
    enum, sol = differential(data, source=name)
    if name == "torus-infeasible":
        assert enum.status == sol.status == "INFEASIBLE"
    if name == "torus-32-placement-wins":
        assert enum.plans[0].mapping.placement != DEFAULT_PLACEMENT
        assert (
            sol.plans[0].evaluation.metrics["step_time_s"]
            < 0.95
            * evaluate_training(
                problem.model,
                problem.system(),
                problem.workload,
                dataclasses.replace(sol.plans[0].mapping, placement=DEFAULT_PLACEMENT),
            ).metrics["step_time_s"]
        )


TOPOLOGY_SYSTEMS = ["tpu-v5p-torus", "slingshot-a100-dragonfly", "mi300x", "llama3-h100-cluster"]


@pytest.mark.parametrize("seed", [3, 8, 24, 51, 59])
@pytest.mark.slow
def test_differential_random_on_topology_systems(seed):
    """test_solver's random problems moved onto the systems whose topology decides (placement free):
    device-count lists, every objective, an infeasible one (seed 8)."""
    data = random_problem(seed)
    data["system"]["name"] = random.Random(seed).choice(TOPOLOGY_SYSTEMS)
    differential(data, source=f"random problem seed {seed} on {data['system']['name']}")


def test_symmetric_placements_are_tried_once():
    """On 8 GPUs of one DGX every group sits in the NVLink domain wherever it is placed: one class.
    A dense model ignores where ep sits: never more classes than the 24 orders without it."""
    one_node = parse_problem(_data("llama2-7b", "dgx-h100", 8, 4096, 32, {"placement": list(PLACEMENTS)}), "t")
    assert all(v == (DEFAULT_PLACEMENT,) for v in placements_by_point(build_space(one_node)).values())
    torus = build_space(parse_problem(_data("llama2-7b", "tpu-v5p-torus", 64, 4096, 64, {}), "t"))
    assert all(len(v) <= 24 for v in placements_by_point(torus).values())
    assert all(v[0] == DEFAULT_PLACEMENT for v in placements_by_point(torus).values())  # the default leads its class
    for (_n, tp, pp, _dp, cp, _ep, _etp), v in placements_by_point(torus).items():
        if tp == pp == cp == 1:  # only dp > 1: one group, one layout
            assert v == (DEFAULT_PLACEMENT,)


def test_two_tier_systems_keep_the_default_unless_listed():
    space = build_space(parse_problem(_data("llama2-7b", "dgx-h100", 32, 4096, 32, {}), "t"))
    assert all(v == (DEFAULT_PLACEMENT,) for v in placements_by_point(space).values())


def test_fixing_a_placement_returns_it():
    data = _data(
        "llama3-70b",
        "tpu-v5p-torus",
        32,
        8192,
        64,
        {
            "tp": 4,
            "pp": 1,
            "dp": 8,
            "micro_batch": 1,
            "zero": 3,
            "recompute": "none",
            "vpp": 1,
            "sp": True,
            "placement": "pp-tp-cp-ep-dp",
            **SPLIT,
        },
    )
    p = parse_problem(data, "t")
    sol = solve(p, workers=WORKERS, time_limit=TIME_LIMIT)
    assert sol.status == "OPTIMAL" and sol.space_size == 1 and sol.plans[0].mapping.placement == "pp-tp-cp-ep-dp"
    assert sol.plans[0].evaluation.metrics == evaluate_training(p.model, p.system(), p.workload, p.fixed_mapping()).metrics


# ---- the example and the command line --------------------------------------------------------------


def _cli_json(args) -> dict:
    """The command line run in-process (solver.cli.main, what `parasol` calls): exit 0 and its JSON."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(args) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def example_round_trip(tmp_path_factory):
    doc = _cli_json(["solve", str(EXAMPLE), "--json", "--time-limit", "60"])
    problem = load_problem(EXAMPLE)
    data = {
        "model": problem.model.name,
        "system": {"name": problem.system_name, "num_gpus": doc["mapping"]["num_gpus"]},
        "workload": {
            "kind": "training",
            "seq_len": problem.workload.seq_len,
            "global_batch": problem.workload.global_batch,
            "precision": problem.workload.precision,
        },
        "mapping": doc["mapping"],
    }
    plan = write_yaml(tmp_path_factory.mktemp("torus") / "plan.yaml", data)
    evaluated = _cli_json(["evaluate", str(plan), "--json"])
    naive = _cli_json(["evaluate", str(REPO / "problems" / "examples" / "torus-placement-naive.yaml"), "--json"])
    return doc, evaluated, naive


@pytest.mark.slow
def test_example_plan_round_trips_through_evaluate(example_round_trip):
    doc, again, _ = example_round_trip
    assert doc["status"] == "OPTIMAL" and doc["mapping"]["placement"] != DEFAULT_PLACEMENT
    assert again["mapping"] == doc["mapping"]
    assert rel_close(again["metrics"]["step_time_s"], doc["metrics"]["step_time_s"], 1e-12)


def test_example_naive_placement_is_slower(example_round_trip):
    """The README's two numbers: the plan, and the same mapping with Megatron's default order (both
    commands as the README gives them; test_cli.py runs the command line in subprocesses)."""
    doc, _, slow = example_round_trip
    assert {k: v for k, v in slow["mapping"].items() if k != "placement"} == {
        k: v for k, v in doc["mapping"].items() if k != "placement"
    }
    assert slow["mapping"]["placement"] == DEFAULT_PLACEMENT
    assert slow["metrics"]["step_time_s"] > 1.05 * doc["metrics"]["step_time_s"]


PARTITIONS = [  # the first stage's layer count a decision, off the default split, on topology systems
    (
        "torus-first-stage",
        _data(
            "llama2-7b",
            "tpu-v5p-torus",
            16,
            4096,
            32,
            {
                "vpp": [1],
                "recompute": ["full"],
                "zero": [0, 1, 3],
                "micro_batch": [1],
                "pp": [2, 4],
                "placement": "tp-cp-ep-dp-pp",
                "first_stage_layers": [6, 10, 12],
            },
        ),
    ),
    (
        "dragonfly-first-stage",
        _data(
            "gpt-j-6b",
            "slingshot-a100-dragonfly",
            16,
            2048,
            32,
            {
                "vpp": [1],
                "recompute": ["selective"],
                "zero": [0, 1],
                "micro_batch": [1],
                "pp": [2, 4],
                "first_stage_layers": [5, 9, 11],
            },
        ),
    ),
]


@pytest.mark.parametrize("case", PARTITIONS, ids=[c[0] for c in PARTITIONS])
@pytest.mark.slow
def test_differential_first_stage_layers_on_topology_systems(case):
    """The solver tabulates the first stage's data-parallel and optimizer terms per body-layer
    count; on torus and dragonfly collectives (algorithm chosen per size) CP-SAT still equals the
    enumerator, and the plan it returns, an uneven split, passes the round trip."""
    name, data = case
    enum, sol = differential(data, source=name)
    assert enum.status == sol.status == "OPTIMAL"
    plan = sol.plans[0].mapping
    assert plan.first_stage_layers in data["mapping"]["first_stage_layers"]
