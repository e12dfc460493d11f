"""Attention data parallelism's wait for the busiest replica (workload.attention_dp_balance): where the experts span
ep/tp > 1 replicas, each MoE layer's exchange synchronises them, so a replica's own work (attention, projections,
norms, the embedding and output layer) runs at the pace of the replica that brought the most tokens: the mean's
time over the balance (mean / max tokens; TensorRT-LLM tech blog 10 measured 0.877 with its ADP balance scheduler,
0.541 without, DeepSeek-V3 on 8 GB200). The routed experts and the exchange are shared and do not wait."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from conftest import REPO, run_main, solved_as_enumerated, write_yaml

from parasol.model import inference
from parasol.solver.library import load_model, load_system
from parasol.solver.planner import enumerate_space
from parasol.solver.problem import parse_problem

EXAMPLE = REPO / "problems" / "examples" / "deepseek-r1-offline-b200.yaml"


def _setting():
    problem = parse_problem(yaml.safe_load(EXAMPLE.read_text()), str(EXAMPLE))
    return load_model("deepseek-v3"), load_system("dgx-b200", 8), dataclasses.replace(problem.workload, attention_dp_balance=1.0)


def test_replicas_sharing_experts_wait_for_the_busiest_by_one_over_the_balance():
    """At tp 1, ep 8 (8 replicas share each MoE layer) and a balance of 0.5, a dense layer, the embedding and the
    output layer take twice as long, an MoE layer's own work twice as long and its routed experts and exchange the
    same."""
    model, system, wl = _setting()
    half = dataclasses.replace(wl, attention_dp_balance=0.5)
    p = inference.mixed_pass(wl, 356)
    dense = [inference.layer_time(model, system, w, 1, 8, p) for w in (wl, half)]
    assert dense[1].total == pytest.approx(2 * dense[0].total)
    moe = [inference.layer_time(model, system, w, 1, 8, p, True) for w in (wl, half)]
    routed = inference.routed_experts_time_s(inference.serving_model(model), system.device, wl, p.tokens, 1, 8)
    assert moe[1].ep_comm == moe[0].ep_comm > 0
    own = moe[0].total - routed - moe[0].ep_comm
    assert own > 0 and moe[1].total == pytest.approx(moe[0].total + own)
    edges = [inference.edge_times(model, system, w, 1, p, 8) for w in (wl, half)]
    assert edges[1] == pytest.approx(tuple(2 * e for e in edges[0]))


def test_replicas_that_hold_their_own_experts_do_not_wait():
    """Where the experts stay inside a replica (ep <= tp) nothing synchronises the replicas: the balance changes
    nothing."""
    model, system, wl = _setting()
    half = dataclasses.replace(wl, attention_dp_balance=0.5)
    p = inference.decode_pass(wl, 64)
    for tp, ep in ((8, 8), (8, 1), (4, 2)):
        assert inference.layer_time(model, system, half, tp, ep, p, True) == inference.layer_time(
            model, system, wl, tp, ep, p, True
        )
        assert inference.replica_wait(half, tp, ep) == 1.0
    assert inference.replica_wait(half, 2, 8) == 2.0


def test_an_unbalanced_set_serves_fewer_tokens_and_the_solver_agrees_with_the_enumerator(tmp_path):
    """The shipped DeepSeek-R1 example (balance 0.877, as MLPerf's runs) serves fewer tokens than the same set
    balanced; at 0.5 the solver still finds the enumerator's optimum."""
    data = yaml.safe_load(EXAMPLE.read_text())
    rates = {}
    for balance in (1.0, 0.877, 0.5):
        data["workload"]["attention_dp_balance"] = balance
        problem = parse_problem(data, f"balance {balance}")
        plan = solved_as_enumerated(problem) if balance == 0.5 else enumerate_space(problem).plans[0]
        rates[balance] = plan.evaluation.metrics["tokens_per_s"]
    assert rates[1.0] > rates[0.877] > rates[0.5]


@pytest.mark.parametrize("value", [0, 1.5, "half"])
def test_a_balance_outside_0_to_1_is_refused_in_one_line(tmp_path, value):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["workload"]["attention_dp_balance"] = value
    path = write_yaml(tmp_path / "p.yaml", data)
    proc = run_main(["solve", str(path)])
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    for needle in (str(path), "workload.attention_dp_balance", "(0, 1]"):
        assert needle in proc.stderr, proc.stderr


@pytest.mark.parametrize("framework", ["trtllm", "sglang"])
def test_a_plan_whose_replicas_share_experts_launches_one_server_per_expert_group(tmp_path, framework):
    """tp 1, ep 8 on 16 GPUs: two servers of 8 GPUs, each running its 8 replicas as attention data-parallel ranks
    (TensorRT-LLM: --tp_size 8 --ep_size 8 and enable_attention_dp in the LLM API options file, max_batch_size per
    rank; SGLang: --tp-size 8 --enable-dp-attention --dp-size 8, max-running-requests the server's whole), with the
    balance the plan assumed in a comment."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["system"]["num_gpus"] = 16
    data["mapping"] = {"tp": 1, "pp": 1, "ep": 8, "dp": 16}
    data["workload"].update(framework=framework, requests=None)
    data["workload"] = {
        k: v for k, v in data["workload"].items() if v is not None and k not in ("output_len_max", "cuda_graph_min_batch")
    }
    proc = run_main(["solve", str(write_yaml(tmp_path / "p.yaml", data)), "--emit"])
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    batch = int(text.split("--max_batch_size " if framework == "trtllm" else "--max-running-requests ")[1].split()[0])
    assert "2 copies of this server" in text and "groups of 8 attention data-parallel ranks" in text
    assert "balanced to 0.877" in text
    if framework == "trtllm":
        assert "--tp_size 8" in text and "--ep_size 8" in text and "enable_attention_dp: true" in text
        assert "--extra_llm_api_options attention_dp.yaml" in text and 100 < batch <= 512
    else:
        assert "--tp-size 8" in text and "--enable-dp-attention" in text and "--dp-size 8" in text
        assert batch % 8 == 0 and 800 < batch <= 8 * 512
