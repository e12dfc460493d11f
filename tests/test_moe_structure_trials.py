"""benchmarks/moe_structure_trials.py's trial device: at the stored values it is the stored model, and its costs per
local expert and per MoE layer reach the routed-expert time exactly as the trials state (E/ep x the overhead, and the
overhead once, per layer forward)."""

import sys

import pytest
from conftest import REPO

from parasol.model import compute
from parasol.solver import library
from parasol.solver.validation import evaluate_all, load_all_runs

sys.path.insert(0, str(REPO / "benchmarks"))
import moe_structure_trials as trials  # noqa: E402

RUNS = ("mbridge2511-qwen3_30b_a3b-dgx-gb200-8gpu-fp8-mx", "mbridge2511-deepseekv3-dgx-gb300-256gpu-fp8-mx")


@pytest.fixture
def wrapped(monkeypatch):
    monkeypatch.setattr(compute, "moe_routed_forward_time_s", trials.with_trial_overheads(compute.moe_routed_forward_time_s))


def test_the_trial_device_at_the_stored_values_is_the_stored_model(wrapped):
    entries = [e for e in load_all_runs() if e["id"] in RUNS]
    stored = library.load_device("gb200").moe_expert_efficiency
    assert len(entries) == 2
    assert trials.errors(entries, stored) == {r.run_id: r.error for r in evaluate_all(entries)}


def test_the_overhead_adds_one_cost_per_local_expert_to_the_routed_forward(wrapped):
    model = library.load_model("qwen3-30b-a3b")
    device = library.load_device("gb200")
    base = compute.moe_routed_forward_time_s(model, trials.trial_device(device, 0.63, 0.0), "fp8", 4096.0, 1, 8)
    more = compute.moe_routed_forward_time_s(model, trials.trial_device(device, 0.63, 90e-6), "fp8", 4096.0, 1, 8)
    assert more - base == pytest.approx(128 / 8 * 90e-6)  # 16 local experts
    slower = trials.errors([e for e in load_all_runs() if e["id"] == RUNS[0]], 0.63, 90e-6)[RUNS[0]]
    assert slower > trials.errors([e for e in load_all_runs() if e["id"] == RUNS[0]], 0.63)[RUNS[0]]


def test_the_layer_overhead_adds_one_cost_per_moe_layer_forward_whatever_the_experts(wrapped):
    model = library.load_model("qwen3-30b-a3b")
    device = library.load_device("gb200")
    for ep in (8, 32):
        base = compute.moe_routed_forward_time_s(model, trials.trial_device(device, 0.63, 0.0), "fp8", 4096.0, 1, ep)
        more = compute.moe_routed_forward_time_s(model, trials.trial_device(device, 0.63, 0.0, 900e-6), "fp8", 4096.0, 1, ep)
        assert more - base == pytest.approx(900e-6)
