"""Parameter counts of a decoder-only transformer (dense, MoE, MLA).

Per layer: attention Q, K, V, O projections (GQA: K and V have kv_heads x head_dim columns;
Ainslie et al. 2023), the MLP (two matrices for GeLU, three for SwiGLU; Shazeer 2020), two
norms. Embeddings: token table V x h, a learned position table max_seq_len x h (GPT-2/3), the
output projection unless tied. Megatron's closed form P = 12lh^2(1 + 13/(12h) + (V+s)/(12lh))
(Narayanan et al. SC'21, eq. 2) is the special case MHA + GeLU + biases + learned positions.
"""

from .specs import ModelSpec


def attention_params_per_layer(model: ModelSpec) -> int:
    """Q, K, V and output projection weights (and biases), in parameters.

    MLA (DeepSeek-V2 Sec. 2.1): query down/up projections (or a plain h x a·d_qk one without query
    compression), a joint KV down-projection to kv_lora_rank plus the shared RoPE key, the KV
    up-projection to a·(d_nope + d_v), the output projection a·d_v x h, and the RMSNorms of the
    two latent vectors.
    """
    if model.mla is not None:
        m, h, a = model.mla, model.hidden, model.heads
        if m.q_lora_rank:
            q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * a * m.qk_head_dim
        else:
            q = h * a * m.qk_head_dim
        kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank + m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim)
        return q + kv + a * m.v_head_dim * h
    h, q, kv = model.hidden, model.q_width, model.kv_width
    weights = h * q + 2 * h * kv + q * h
    biases = (q + 2 * kv + h) if model.bias else 0
    return weights + biases


def mlp_params_per_layer(model: ModelSpec) -> int:
    """FFN weights (and biases): 2·h·f for GeLU, 3·h·f for SwiGLU (gate, up, down)."""
    h, f = model.hidden, model.ffn
    matrices = 3 if model.activation == "swiglu" else 2
    biases = (f * (matrices - 1) + h) if model.bias else 0
    return matrices * h * f + biases


def _ffn_params(model: ModelSpec, width: int) -> int:
    """One FFN block of intermediate ``width``: 2 (GeLU) or 3 (SwiGLU) matrices, biases if any."""
    h = model.hidden
    matrices = 3 if model.activation == "swiglu" else 2
    biases = (width * (matrices - 1) + h) if model.bias else 0
    return matrices * h * width + biases


def moe_params_per_layer(model: ModelSpec, active: bool = False) -> int:
    """A mixture-of-experts FFN: router (h x E), routed experts, shared experts. ``active``
    counts what one token uses: the router, top_k routed experts and the shared ones."""
    moe = model.moe
    routed = moe.top_k if active else moe.experts
    return (
        model.hidden * moe.experts
        + routed * _ffn_params(model, moe.expert_ffn)
        + moe.shared_experts * _ffn_params(model, moe.shared_expert_ffn)
    )


def layer_module_params(model: ModelSpec) -> tuple[list[int], list[int]]:
    """Weights of a transformer layer's single modules, in parameters, as (those besides routed experts,
    a routed expert's): the fused QKV projection (h x (q + 2·kv)), the output projection, the MLP's first
    linear (h x 2f for SwiGLU, gate and up fused; h x f for GeLU), a shared expert's, the MLA
    projections; a routed expert's first linear. An MLP's second linear (f x h) is never larger."""
    h = model.hidden
    gated = 2 if model.activation == "swiglu" else 1
    widths, routed = [model.ffn], []
    if model.moe is not None:
        widths.append(model.moe.shared_experts * model.moe.shared_expert_ffn)
        routed.append(h * model.moe.expert_ffn * gated)
    if model.mla is not None:
        m, a = model.mla, model.heads
        attention = [
            h * (m.q_lora_rank or a * m.qk_head_dim),
            m.q_lora_rank * a * m.qk_head_dim,
            h * (m.kv_lora_rank + m.qk_rope_head_dim),
            m.kv_lora_rank * a * (m.qk_nope_head_dim + m.v_head_dim),
            a * m.v_head_dim * h,
        ]
    else:
        attention = [h * (model.q_width + 2 * model.kv_width), model.q_width * h]
    return attention + [h * w * gated for w in widths], routed


def largest_module_params_per_gpu(model: ModelSpec, tables: bool, tp: int, etp: int = 1) -> float:
    """Weights of the largest single module (one nn.Linear or nn.Embedding as Megatron builds it) one GPU
    holds, in parameters: a layer's modules split over tp (Megatron's column and row parallel linears), a
    routed expert's over etp (expert tensor parallelism), and where the GPU holds ``tables`` (the first and
    the last pipeline stage) the token embedding or output layer (V x h; an untied output layer is as
    large), vocab-parallel over tp. What DeepSpeed ZeRO-3 gathers at once (``memory.zero3_gather_buffer_bytes``)
    and the largest gradient a framework converts (``memory.accumulate_copy_bytes``)."""
    dense, routed = layer_module_params(model)
    held = [m / tp for m in dense] + [m / etp for m in routed]
    if tables:
        held.append(model.vocab * model.hidden / tp)
    return max(held)


def norm_params_per_layer(model: ModelSpec) -> int:
    """Two norms per layer: LayerNorm has a scale and a shift (2h each), RMSNorm a scale (h)."""
    per_norm = 2 * model.hidden if model.norm == "layernorm" else model.hidden
    return 2 * per_norm


def layer_params(model: ModelSpec, moe_layer: bool = False, active: bool = False) -> int:
    """All parameters of one transformer block (a dense one, or an MoE one with ``moe_layer``)."""
    ffn = moe_params_per_layer(model, active) if moe_layer else mlp_params_per_layer(model)
    return attention_params_per_layer(model) + ffn + norm_params_per_layer(model)


def input_embedding_params(model: ModelSpec) -> int:
    """Token embedding table (V x h) plus a learned position table (max_seq_len x h)."""
    positions = model.max_seq_len * model.hidden if model.position_embedding == "learned" else 0
    return model.vocab * model.hidden + positions


def output_layer_params(model: ModelSpec) -> int:
    """Final norm plus the output projection (h x V) unless tied to the input embedding."""
    final_norm = 2 * model.hidden if model.norm == "layernorm" else model.hidden
    return final_norm + (0 if model.tied_embeddings else model.vocab * model.hidden)


def total_params(model: ModelSpec, active: bool = False) -> int:
    """Every parameter of the model, counted once; ``active``: those one token uses (MoE)."""
    dense = model.layers - model.moe_layers
    body = (
        dense * layer_params(model) + model.moe_layers * layer_params(model, True, active)
        if model.moe
        else model.layers * layer_params(model)
    )
    return body + input_embedding_params(model) + output_layer_params(model)


def expert_params_per_layer(model: ModelSpec) -> int:
    """Routed experts' parameters in one MoE layer (sharded by expert parallelism)."""
    return model.moe.experts * _ffn_params(model, model.moe.expert_ffn) if model.moe else 0


def matmul_params_per_layer(model: ModelSpec, moe_layer: bool = False) -> int:
    """Weights one token meets in GEMMs in one layer (no biases, no norms): the attention
    projections, then the dense FFN, or the router, top_k routed and the shared experts."""
    h = model.hidden
    matrices = 3 if model.activation == "swiglu" else 2
    if model.mla is not None:
        attention = attention_params_per_layer(model) - (model.mla.q_lora_rank + model.mla.kv_lora_rank)
    else:
        attention = 2 * h * model.q_width + 2 * h * model.kv_width
    if not moe_layer:
        return attention + matrices * h * model.ffn
    moe = model.moe
    return (
        attention
        + h * moe.experts
        + moe.top_k * matrices * h * moe.expert_ffn
        + moe.shared_experts * matrices * h * moe.shared_expert_ffn
    )


def model_flops_per_token(model: ModelSpec, seq_len: int, causal: bool = False) -> float:
    """Model FLOPs per trained token, PaLM convention (Chowdhery et al. 2022, Appendix B).

    6N for the matmul weights a token meets (forward 2N, backward 4N; for MoE the activated
    experts only) including the logit layer (V x h), plus 12·L·H·Q·T for attention scores (H heads
    of size Q, sequence T, no causal discount; Q = (d_qk + d_v)/2 for MLA). No recomputation is
    counted: this is the numerator of MFU. ``causal`` halves the attention term, as Megatron-LM's
    throughput counts it (the convention the Megatron MoE Model Zoo's TFLOPS imply:
    tests/test_accuracy.py).
    """
    dense = model.layers - model.moe_layers
    moe = model.moe_layers * matmul_params_per_layer(model, True) if model.moe else 0
    n = dense * matmul_params_per_layer(model) + moe + model.vocab * model.hidden
    d_qk, d_v = (model.mla.qk_head_dim, model.mla.v_head_dim) if model.mla else (model.head_dim, model.head_dim)
    attention = 6.0 * model.layers * model.heads * (d_qk + d_v) * seq_len
    return 6.0 * n + (attention / 2.0 if causal else attention)


def megatron_flops_per_iteration(model: ModelSpec, seq_len: int, global_batch: int, recompute: bool) -> float:
    """FLOPs per iteration as Megatron-LM reports them (Narayanan et al. SC'21, eq. 3).

    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with full recomputation (4 passes over the layers,
    3 over the logit layer); without recomputation 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)).
    Valid for MHA + GeLU with ffn = 4h, the models that paper trains.
    """
    b, s, l, h, v = global_batch, seq_len, model.layers, model.hidden, model.vocab
    if recompute:
        return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))
