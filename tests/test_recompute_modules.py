"""Megatron-Core's selective recomputation of listed modules (issue 13): ``workload.recompute_modules``.

``recompute: selective`` recomputes what the list names (the attention core by default, Korthikanti's
selective recomputation): each module's saved tensors leave the activations, and its forward is redone
in the backward. Also the precision-aware optimizer's master weights kept as 16-bit remainders.
"""

import dataclasses

import pytest

from parasol.model import compute, memory
from parasol.model.errors import ProblemError
from parasol.model.specs import Workload
from parasol.model.training import layer_times, selective_recompute_time_s
from parasol.solver import library
from parasol.solver.problem import parse_problem

BF16 = memory.ACT_BYTES


def _act(model, modules, moe_layer=True, recompute="selective", tp=1, sp=False):
    return memory.activation_bytes_per_layer(model, 1, 4096, tp, 1, sp, recompute, "flash", BF16, moe_layer, 1, modules)


def test_the_default_list_is_korthikantis_selective_recomputation():
    model = library.load_model("llama3-70b")
    default = memory.activation_bytes_per_layer(model, 1, 4096, 8, 1, True, "selective", "standard")
    assert default == memory.activation_bytes_per_layer(
        model, 1, 4096, 8, 1, True, "selective", "standard", modules=("core_attn",)
    )
    assert default < memory.activation_bytes_per_layer(model, 1, 4096, 8, 1, True, "none", "standard")  # no score tensors
    # without the attention core in the list the score tensors stay
    kept = memory.activation_bytes_per_layer(model, 1, 4096, 8, 1, True, "selective", "standard", modules=("mlp",))
    assert kept > default


def test_moe_act_drops_the_routed_experts_activation_output():
    model = library.load_model("qwen3-235b-a22b")
    rows = compute.routed_rows_per_gpu(model, 4096, 1)
    saved = _act(model, ("core_attn",)) - _act(model, ("core_attn", "moe_act"))
    assert saved == pytest.approx(rows * model.moe.expert_ffn * BF16)


def test_layernorm_drops_only_the_norms_not_fused_into_a_linear():
    model = library.load_model("qwen3-235b-a22b")
    assert _act(model, ("core_attn",)) - _act(model, ("core_attn", "layernorm")) == pytest.approx(4096 * model.hidden * BF16)
    assert _act(model, ("core_attn", "layernorm"), moe_layer=False) == _act(model, ("core_attn",), moe_layer=False)


def test_mla_up_proj_keeps_the_compressed_latents_instead_of_q_k_v():
    model = library.load_model("deepseek-v3")
    m = model.mla
    saved = _act(model, ("core_attn",)) - _act(model, ("core_attn", "mla_up_proj"))
    qkv = 4096 * model.heads * (2 * m.qk_head_dim + m.v_head_dim) * BF16
    assert saved == pytest.approx(qkv - 4096 * (m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim) * BF16)


def test_moe_and_mlp_drop_their_whole_block():
    model = library.load_model("deepseek-v3")
    ffn = memory.ffn_activation_bytes(model, 4096, 1, BF16, True)
    assert _act(model, ("core_attn",)) - _act(model, ("core_attn", "moe")) == pytest.approx(ffn)
    # moe covers moe_act and shared_experts: nothing is taken twice
    assert _act(model, ("moe", "moe_act", "shared_experts")) == _act(model, ("moe",))
    dense = memory.ffn_activation_bytes(model, 4096, 1, BF16)
    assert _act(model, ("core_attn",), False) - _act(model, ("core_attn", "mlp"), False) == pytest.approx(dense)


def test_recomputing_costs_the_modules_forward_in_the_backward():
    model, system = library.load_model("qwen3-235b-a22b"), library.load_system("dgx-h100", 64)
    base = Workload(kind="training", seq_len=4096, global_batch=64)

    def redo(*modules):
        wl = dataclasses.replace(base, recompute_modules=modules)
        return layer_times(model, system, wl, 2, 1, 1, True, "selective", 8, True).recompute

    attention = layer_times(model, system, base, 2, 1, 1, True, "selective", 8, True).attention_fwd
    assert redo("core_attn") == pytest.approx(attention)
    assert redo("core_attn", "moe_act") > redo("core_attn") > 0
    plain = layer_times(model, system, base, 2, 1, 1, True, "none", 8, True)
    whole = redo("moe")  # the routed experts and the dispatch and combine again
    routed = compute.moe_routed_forward_time_s(model, system.device, "bf16", 4096, 2, 8)
    assert whole > routed
    assert plain.recompute == 0.0
    # a dense GQA layer has no separate norm: recomputing layernorm costs it nothing
    norms = dataclasses.replace(base, recompute_modules=("layernorm",))
    assert selective_recompute_time_s(model, system.device, norms, 2, 1, 1, True, 8, 1, False, 1.0, 1.0) == 0.0
    assert selective_recompute_time_s(model, system.device, norms, 2, 1, 1, True, 8, 1, True, 1.0, 1.0) > 0.0


def test_master_weights_as_remainders_cost_two_bytes():
    assert memory.adam_state_bytes(4.0, 2.0) == 10.0 and memory.adam_state_bytes(2.0, 2.0) == 6.0
    assert memory.state_bytes_per_param(1, 8, 2.0, 2.0, 4.0, 2.0) == pytest.approx(2.0 + 2.0 + 10.0 / 8)


@pytest.mark.parametrize(
    "workload, field",
    [
        ({"recompute_modules": ["attention"]}, "workload.recompute_modules"),
        ({"recompute_modules": []}, "workload.recompute_modules"),
        ({"master_weight_bytes": 3}, "workload.master_weight_bytes"),
    ],
)
def test_bad_values_name_the_field(workload, field):
    data = {
        "model": "llama3.1-8b",
        "system": {"name": "dgx-h100", "num_gpus": 8},
        "workload": {"kind": "training", "seq_len": 4096, "global_batch": 32, **workload},
    }
    with pytest.raises(ProblemError) as info:
        parse_problem(data, source="t")
    assert info.value.field == field and "allowed" in str(info.value)
