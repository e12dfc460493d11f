"""Hierarchical context parallelism (``mapping.cp_comm: a2a+p2p``; Megatron-Core --hierarchical-context-parallel-sizes,
Transformer Engine's a2a+p2p): the all-to-all among the CP ranks of one scale-up domain, the ring across domains."""

import pytest
import yaml
from conftest import run_main, solved_as_enumerated, training_problem

from parasol.model.errors import ProblemError
from parasol.model.placement import Layout, group_layouts
from parasol.model.specs import Mapping
from parasol.model.training import (
    cp_a2a_times_s,
    cp_exposed_forward_time_s,
    cp_hierarchical_times_s,
    cp_ring_backward_time_s,
    hierarchical_cp_sizes,
)
from parasol.model.training_step import evaluate_training
from parasol.solver.problem import parse_problem

# Llama 3.1 8B (32 heads, 8 kv heads) at 16K tokens on 64 H100: cp 16 with tp 2 puts 4 CP ranks in each 8-GPU domain
MAPPING = {"tp": 2, "pp": 1, "dp": 2, "cp": 16, "micro_batch": 1, "recompute": "full", "sp": True}


def _problem(mapping=None, system="dgx-h100", **workload):
    data = training_problem(
        "llama3.1-8b", system=system, num_gpus=64, seq_len=16384, global_batch=16, mapping=mapping, **workload
    )
    return parse_problem(data, source="t.yaml")


def _evaluate(cp_comm: str, **changes):
    problem = _problem({**MAPPING, **changes, "cp_comm": cp_comm})
    return problem, evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping())


def test_the_all_to_all_level_is_the_cp_ranks_a_domain_holds():
    """Consecutive CP ranks in one domain form the all-to-all level, as many as divide the group (its gcd with the
    members per domain: NVL72's 36 members of a 64-rank group give 4); the ring level is the rest."""
    assert hierarchical_cp_sizes(Layout(16, 4)) == (4, 4)
    assert hierarchical_cp_sizes(Layout(8, 8)) == (8, 1)
    assert hierarchical_cp_sizes(Layout(16, 1)) == (1, 16)
    assert hierarchical_cp_sizes(Layout(64, 36)) == (4, 16)
    problem, _ = _evaluate("a2a+p2p")
    assert hierarchical_cp_sizes(group_layouts(problem.system(), problem.fixed_mapping())["cp"]) == (4, 4)


def test_inside_one_domain_it_is_ulysses_and_one_rank_per_domain_a_ring():
    """The two limits: a group that one domain holds exchanges as the flat all-to-all does, a group with one member
    per domain as the flat ring does (the attention times given)."""
    problem = _problem(MAPPING)
    model, system, wl = problem.model, problem.system(), problem.workload
    attention_fwd, attention_bwd = 0.0002, 0.0005
    inside = Layout(8, 8)
    assert cp_hierarchical_times_s(model, system, wl, 1, 8, 1, attention_fwd, attention_bwd, inside) == pytest.approx(
        cp_a2a_times_s(model, system, wl, 1, 8, 1, inside)
    )
    across = Layout(8, 1)
    ring = (
        cp_exposed_forward_time_s(model, system, wl, 1, 8, 1, attention_fwd, across),
        cp_ring_backward_time_s(model, system, wl, 1, 8, 1, attention_bwd, across),
    )
    assert ring[0] > 0  # the ring's transfers exceed this attention: something to compare
    assert cp_hierarchical_times_s(model, system, wl, 1, 8, 1, attention_fwd, attention_bwd, across) == pytest.approx(ring)


def test_across_domains_the_ring_passes_fewer_blocks_than_the_flat_one():
    """With 4 CP ranks per domain the ring level has 4 members, so it passes 3 blocks of the flat ring's size where the
    flat ring passes 15, and the in-domain all-to-all is cheap: less exposed exchange, a faster step."""
    _, ring = _evaluate("ring")
    _, hierarchical = _evaluate("a2a+p2p")
    assert ring.breakdown["time_s"]["comm/cp"] > 0
    assert hierarchical.breakdown["time_s"]["comm/cp"] < ring.breakdown["time_s"]["comm/cp"]
    assert hierarchical.metrics["step_time_s"] < ring.metrics["step_time_s"]


def test_the_heads_must_split_at_the_all_to_all_level():
    """tp·a must divide the 8 kv heads: on 8-GPU domains (a = 4 at tp 2) it does; on an NVL72 rack the 16 CP ranks at
    tp 2 share one domain, a = 16, tp·a = 32, and the mapping is refused naming the field."""
    _evaluate("a2a+p2p")  # a = 4, tp·a = 8
    problem = _problem({**MAPPING, "cp_comm": "a2a+p2p"}, system="gb200-nvl72")
    with pytest.raises(ProblemError, match=r"a2a\+p2p .*tp·a = 32 to divide the 32 heads and the 8 kv_heads") as err:
        evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping())
    assert err.value.field == "mapping.cp_comm"


def test_a_system_whose_topology_places_the_groups_is_refused():
    problem = parse_problem(
        training_problem(
            "llama3.1-8b",
            system="tpu-v5p-torus",
            num_gpus=64,
            seq_len=16384,
            global_batch=16,
            mapping={**MAPPING, "cp_comm": "a2a+p2p"},
        ),
        source="t.yaml",
    )
    with pytest.raises(ProblemError, match="places the groups itself") as err:
        evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping())
    assert err.value.field == "mapping.cp_comm"


def test_the_solver_equals_the_enumerator_over_the_four_exchanges_and_finds_the_hierarchy():
    """With every exchange listed (a2a itself is left out: tp·cp = 32 does not divide 8 kv heads) and recomputation
    free, both searches agree, and the best plan exchanges hierarchically (the fastest here, above)."""
    space = {
        "tp": 2,
        "pp": 1,
        "cp": 16,
        "micro_batch": 1,
        "recompute": ["none", "selective", "full"],
        "zero": 1,
        "vpp": 1,
        "cp_comm": ["ring", "a2a", "allgather", "a2a+p2p"],
    }
    problem = _problem(space)
    plan = solved_as_enumerated(problem, method="cpsat")  # CP-SAT, not the enumeration a space this small gets
    assert plan.mapping.cp_comm == "a2a+p2p"
    # tp and cp free too: CP groups of other sizes and other members per domain, each with the exchanges it allows
    free = _problem({**space, "tp": [1, 2, 4], "cp": [4, 8, 16], "placement": ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"]})
    solved_as_enumerated(free, method="cpsat")


def test_megatron_emits_the_hierarchy_and_torchtitan_refuses(tmp_path):
    data = training_problem("llama3.1-8b", num_gpus=64, seq_len=16384, global_batch=16, mapping={**MAPPING, "cp_comm": "a2a+p2p"})
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({**data, "workload": {**data["workload"], "framework": "megatron-lm"}}))
    out = run_main(["evaluate", str(path), "--emit"])
    assert out.returncode == 0, out.stderr
    assert "--cp-comm-type a2a+p2p" in out.stdout and "--hierarchical-context-parallel-sizes 4 4" in out.stdout
    path.write_text(yaml.safe_dump({**data, "workload": {**data["workload"], "framework": "torchtitan"}}))
    refused = run_main(["evaluate", str(path), "--emit"])
    assert refused.returncode == 2 and "mapping.cp_comm" in refused.stderr and "Traceback" not in refused.stderr


def test_the_report_names_both_levels():
    problem, ev = _evaluate("a2a+p2p")
    from parasol.solver.training_report import evaluation_table  # noqa: PLC0415

    assert "cp_comm a2a+p2p (a2a 4 x ring 4)" in evaluation_table(problem, Mapping(**{**MAPPING, "cp_comm": "a2a+p2p"}), ev)


def test_a_cap_on_the_cp_communicator_leaves_the_hierarchy_alone():
    """MLPerf's configs cap the cp communicator at one thread block; Megatron-Core builds the hierarchy's levels as
    communicators of their own ("hcp"), which that cap does not name: the flat ring slows, the hierarchy does not."""

    def step(cp_comm: str, caps: dict | None) -> float:
        problem = _problem({**MAPPING, "cp_comm": cp_comm}, **({"nccl_max_ctas": caps} if caps else {}))
        return evaluate_training(problem.model, problem.system(), problem.workload, problem.fixed_mapping()).metrics[
            "step_time_s"
        ]

    assert step("ring", {"cp": 1}) > step("ring", None)
    assert step("a2a+p2p", {"cp": 1}) == pytest.approx(step("a2a+p2p", None), rel=1e-12)
