"""Parameter counts and FLOP counts against published numbers and closed forms.

Sources:
- Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
  Megatron-LM", SC'21: eq. 2 (parameters), eq. 3 (FLOPs per iteration), Table 1 (model sizes).
- Brown et al. 2020 (GPT-3 175B); BigScience BLOOM (176,247,271,424 parameters, model card);
  Touvron et al. 2023 / Hugging Face checkpoints for Llama 2 (exact counts); Llama 3 herd paper
  and checkpoints; EleutherAI GPT-J model card (6,053,381,344); Smith et al. 2022 (MT-NLG 530B).
- Chowdhery et al. 2022 (PaLM), Appendix B: model FLOPs per token = 6N + 12·L·H·Q·T.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import rel_close, training_problem

from parasol.model import params
from parasol.model.specs import ModelSpec
from parasol.model.training_step import evaluate_training
from parasol.solver import library
from parasol.solver.problem import parse_problem

# Published total parameter counts (independent of the library files), billions.
PUBLISHED_B = {
    "gpt3-175b": 175.0,  # Brown et al. 2020, Table 2.1
    "opt-175b": 175.0,  # Zhang et al. 2022
    "bloom-176b": 176.247271424,  # BigScience BLOOM model card
    "mt-nlg-530b": 530.0,  # Smith et al. 2022
    "gpt-j-6b": 6.053381344,  # EleutherAI model card
    "llama2-7b": 6.738415616,  # Hugging Face meta-llama/Llama-2-7b-hf
    "llama2-13b": 13.015864320,  # meta-llama/Llama-2-13b-hf
    "llama2-70b": 68.976648192,  # meta-llama/Llama-2-70b-hf
    "llama3-8b": 8.030261248,  # meta-llama/Meta-Llama-3-8B
    "llama3-70b": 70.553706496,  # meta-llama/Meta-Llama-3-70B
    "llama3.1-405b": 405.853388800,  # meta-llama/Llama-3.1-405B
    # Megatron-LM SC'21 Table 1 (the paper's own rounding of eq. 2)
    "megatron-gpt-1.7b": 1.7,
    "megatron-gpt-3.6b": 3.6,
    "megatron-gpt-7.5b": 7.5,
    "megatron-gpt-18.4b": 18.4,
    "megatron-gpt-39.1b": 39.1,
    "megatron-gpt-76.1b": 76.1,
    "megatron-gpt-145.6b": 145.6,
    "megatron-gpt-310.1b": 310.1,
    "megatron-gpt-529.6b": 529.6,
    "megatron-gpt-1t": 1008.0,
}

MEGATRON_FAMILY = sorted(n for n in PUBLISHED_B if n.startswith("megatron-gpt-")) + ["gpt3-175b"]


@pytest.mark.parametrize("name", sorted(PUBLISHED_B))
def test_total_params_match_published(name):
    model = library.load_model(name)
    got = params.total_params(model) / 1e9
    assert rel_close(got, PUBLISHED_B[name], 0.03), f"{name}: model counts {got:.3f} B, published {PUBLISHED_B[name]} B"


@pytest.mark.parametrize("name", library.names("models"))
def test_library_params_b_within_3_percent(name):
    """Every library model that states params_b is counted within 3 % of it."""
    model = library.load_model(name)
    if model.params_b is None:
        pytest.skip("no params_b in the file")
    got = params.total_params(model) / 1e9
    assert rel_close(got, model.params_b, 0.03), f"{name}: {got:.3f} B vs params_b {model.params_b}"


@pytest.mark.parametrize(
    "name", ["llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3.1-405b", "bloom-176b", "gpt-j-6b"]
)
def test_exact_checkpoint_counts_within_0_1_percent(name):
    """Checkpoints with an exact published count are matched much more tightly than 3 %."""
    got = params.total_params(library.load_model(name)) / 1e9
    assert rel_close(got, PUBLISHED_B[name], 1e-3), f"{name}: {got:.6f} B vs {PUBLISHED_B[name]} B"


def megatron_eq2(layers: int, hidden: int, vocab: int, seq: int) -> int:
    """Narayanan SC'21 eq. 2, P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)), expanded to integers:
    12lh² + 13lh + (V+s)h."""
    return 12 * layers * hidden**2 + 13 * layers * hidden + (vocab + seq) * hidden


def gpt_shape(layers=96, hidden=12288, heads=96, vocab=51200, seq=2048, tied=True) -> ModelSpec:
    return ModelSpec(
        name="gpt-shape",
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn=4 * hidden,
        vocab=vocab,
        activation="gelu",
        tied_embeddings=tied,
        position_embedding="learned",
        max_seq_len=seq,
        norm="layernorm",
        bias=True,
    )


@pytest.mark.parametrize("name", MEGATRON_FAMILY)
def test_megatron_eq2_closed_form(name):
    """eq. 2 counts the shared embedding once and omits the final LayerNorm (2h parameters)."""
    m = library.load_model(name)
    assert (m.activation, m.norm, m.bias, m.position_embedding, m.ffn, m.kv_heads) == (
        "gelu",
        "layernorm",
        True,
        "learned",
        4 * m.hidden,
        m.heads,
    ), "not a Megatron GPT shape"
    closed = megatron_eq2(m.layers, m.hidden, m.vocab, m.max_seq_len)
    total = params.total_params(m)
    assert rel_close(total, closed, 1e-3)
    if m.tied_embeddings:
        assert total == closed + 2 * m.hidden


@pytest.mark.parametrize("tied", [True, False])
def test_megatron_eq2_gpt3_shape_tied_and_untied(tied):
    m = gpt_shape(tied=tied)
    closed = megatron_eq2(96, 12288, 51200, 2048)
    untied_output = 0 if tied else 51200 * 12288
    assert params.total_params(m) == closed + 2 * 12288 + untied_output
    if tied:
        assert rel_close(params.total_params(m), closed, 1e-3)


def test_param_components_sum_to_total():
    for name in ("gpt3-175b", "llama3.1-405b", "falcon-180b"):
        m = library.load_model(name)
        total = m.layers * params.layer_params(m) + params.input_embedding_params(m) + params.output_layer_params(m)
        assert total == params.total_params(m)
        assert params.layer_params(m) == (
            params.attention_params_per_layer(m) + params.mlp_params_per_layer(m) + params.norm_params_per_layer(m)
        )


def test_gqa_and_swiglu_counts():
    """Hand count for Llama 2 70B's layer: GQA K/V with 8 of 64 heads, SwiGLU 3 matrices, 2 RMSNorms."""
    m = library.load_model("llama2-70b")
    h, f, kv = 8192, 28672, 8 * 128
    assert params.attention_params_per_layer(m) == 2 * h * h + 2 * h * kv
    assert params.mlp_params_per_layer(m) == 3 * h * f
    assert params.norm_params_per_layer(m) == 2 * h
    mha = dataclasses.replace(m, kv_heads=64)
    assert params.attention_params_per_layer(mha) - params.attention_params_per_layer(m) == 2 * h * (h - kv)


def megatron_eq3_per_token(m: ModelSpec, seq: int, recompute: bool) -> float:
    """Narayanan SC'21 eq. 3 divided by the B·s tokens of an iteration."""
    l, h, v, s = m.layers, m.hidden, m.vocab, seq
    if recompute:
        return 96.0 * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h)) / s
    return 72.0 * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)) / s


@pytest.mark.parametrize("name", MEGATRON_FAMILY)
@pytest.mark.parametrize("seq", [2048, 4096])
def test_model_flops_per_token_equals_megatron_eq3_without_recompute(name, seq):
    m = library.load_model(name)
    got = params.model_flops_per_token(m, seq)
    want = megatron_eq3_per_token(m, seq, recompute=False)
    assert rel_close(got, want, 1e-9), f"{got} vs {want}"


@pytest.mark.parametrize("recompute", [False, True])
def test_megatron_flops_per_iteration(recompute):
    m = gpt_shape()
    b, s = 1536, 2048
    got = params.megatron_flops_per_iteration(m, s, b, recompute)
    want = megatron_eq3_per_token(m, s, recompute) * b * s
    assert rel_close(got, want, 1e-12)


def test_megatron_recompute_ratio_is_four_thirds_on_layers():
    """eq. 3 with full recomputation adds one forward (2 of 6 units of work) on the layers only."""
    m = gpt_shape(vocab=1)  # make the logit term negligible
    s = 2048
    r = params.megatron_flops_per_iteration(m, s, 1, True) / params.megatron_flops_per_iteration(m, s, 1, False)
    assert rel_close(r, 4 / 3, 1e-4)


def test_palm_model_flops_per_token_from_published_count():
    """PaLM Appendix B: 6N + 12·L·H·Q·T, N = matmul weights incl. the output layer. Llama 2 7B has
    no biases, RMSNorm (h per norm, 2L+1 norms) and an untied V×h input embedding, so N follows from
    the published checkpoint count 6,738,415,616."""
    m = library.load_model("llama2-7b")
    seq = 4096
    h, L, V = 4096, 32, 32000
    n = 6_738_415_616 - V * h - (2 * L + 1) * h
    want = 6 * n + 12 * L * 32 * 128 * seq
    assert rel_close(params.model_flops_per_token(m, seq), want, 1e-12)


# Mixture-of-experts models: total and activated parameters against the publishers' figures.
# (name, published total B, published active B, whether the active figure leaves out the input
# embedding table: the gpt-oss model card counts 5.1B "active" without the 0.58B embedding lookup)
MOE_PUBLISHED = [
    ("deepseek-v3", 671.0, 37.0, False),  # arXiv 2412.19437 abstract (main model, MTP excluded)
    ("qwen3-30b-a3b", 30.5, 3.3, False),  # Qwen3 model card
    ("qwen3-235b-a22b", 235.0, 22.0, False),  # Qwen3 model card
    ("mixtral-8x7b", 46.7, 12.9, False),  # arXiv 2401.04088 / model card
    ("mixtral-8x22b", 141.0, 39.0, False),  # Mistral AI announcement
    ("gpt-oss-120b", 116.8, 5.1, True),  # OpenAI gpt-oss model card
]


@pytest.mark.parametrize("name,total_b,active_b,no_embedding", MOE_PUBLISHED)
def test_moe_total_and_active_params_match_published(name, total_b, active_b, no_embedding):
    from parasol.model import params
    from parasol.solver.library import load_model

    model = load_model(name)
    assert params.total_params(model) / 1e9 == pytest.approx(total_b, rel=0.02)
    active = params.total_params(model, active=True) - (params.input_embedding_params(model) if no_embedding else 0)
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)
    assert params.total_params(model, active=True) < params.total_params(model)


def test_mla_attention_params_of_deepseek_v3():
    """DeepSeek-V3 MLA per layer (config dims): q 7168·1536 + 1536 + 1536·128·192, kv 7168·576 + 512
    + 512·128·256, o 128·128·7168."""
    from parasol.model import params
    from parasol.solver.library import load_model

    expected = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert params.attention_params_per_layer(load_model("deepseek-v3")) == expected


@pytest.mark.parametrize("model", ["megatron-gpt-1.7b", "llama3-8b"])
@pytest.mark.parametrize("mtp", [0, 1])
def test_the_last_stage_keeps_the_mtp_embedding_and_a_tied_output_weight(model, mtp):
    """Megatron-Core's last stage builds the input embedding for the MTP modules (word and position tables) and,
    for tied embeddings, the output layer's own V x h weight (only a first stage skips allocating it): with both,
    both. What that stage's data-parallel traffic and optimizer step count (its parameters) and what its memory
    holds (its weights, 2 bytes each) are the same count: its layers, the MTP modules as layers, the output
    layer and those tables."""
    mapping = {"tp": 1, "pp": 2, "dp": 4, "micro_batch": 1, "zero": 1, "recompute": "none"}
    data = training_problem(model, "dgx-h100", 8, seq_len=2048, global_batch=32, mapping=mapping, mtp_layers=mtp)
    problem = parse_problem(data, "t.yaml")
    system = library.load_system("dgx-h100", 8)
    last = evaluate_training(problem.model, system, problem.workload, problem.fixed_mapping()).as_dict()["stages"][-1]
    spec = problem.model
    words = spec.vocab * spec.hidden
    embedding = (params.input_embedding_params(spec) if mtp else 0) + (words if spec.tied_embeddings else 0)
    expected = (last["layers"] + mtp) * params.layer_params(spec) + params.output_layer_params(spec) + embedding
    assert last["params"] == pytest.approx(expected, rel=1e-12)
    assert last["state"]["weights"] == pytest.approx(2 * expected, rel=1e-12)
    if spec.tied_embeddings and mtp:  # GPT's learned positions: the MTP embedding is more than V x h, and two tables
        assert params.input_embedding_params(spec) > words
        assert expected - (last["layers"] + mtp) * params.layer_params(spec) > 2 * words
