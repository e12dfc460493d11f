"""Hugging Face ``config.json`` files as models: ``model: {hf_config: path/to/config.json}``.

The file is read offline (nothing is downloaded) and translated into the same mapping a model
file of the library holds (problems/models/*.yaml), which ``library.model_from_dict`` then
validates. One ``Family`` row per supported architecture says how its keys read; every key of a
config is either mapped (``MAPPED``, the family's own keys), known and deliberately unused
(``UNUSED``: tokenizer ids, dtypes, initialisation, RoPE frequencies, routing-loss weights...), or
an error: a key we do not understand may change the model, so it is never silently dropped.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path

from parasol.model.errors import ProblemError

from . import read_files

# keys every family reads (a missing one is an error, except those with a default below)
REQUIRED = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
# keys every family maps when present
MAPPED = REQUIRED + (
    "architectures",
    "model_type",
    "num_key_value_heads",
    "head_dim",
    "hidden_act",
    "hidden_activation",
    "rms_norm_eps",
    "tie_word_embeddings",
    "attention_bias",
    "mlp_bias",
    "attention_dropout",
    "hidden_dropout",
    "rope_theta",
    "rope_scaling",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
)
# keys that do not change the shape or the cost the model computes (accepted silently)
UNUSED = (
    "_name_or_path",
    "auto_map",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "initializer_range",
    "use_cache",
    "pretraining_tp",  # a Llama-1 sharding hint of the checkpoint, not a shape
    "rope_type",
    "partial_rotary_factor",
    "original_max_position_embeddings",
    "initial_context_length",  # GPT-OSS: pre-training context before YaRN
    "output_router_logits",
    "router_aux_loss_coef",
    "aux_loss_alpha",
    "seq_aux",
    "norm_topk_prob",
    "routed_scaling_factor",
    "scoring_func",
    "topk_method",
    "ep_size",
    "quantization_config",  # the checkpoint's storage format; workload.precision decides ours
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "query_pre_attn_scalar",
    "cache_implementation",
    "swiglu_limit",
    "num_nextn_predict_layers",  # MTP is a training choice here: workload.mtp_layers
    "rope_local_base_freq",
    "attn_implementation",
    "is_decoder",
)
# hidden_act values of a gated MLP (three matrices: gate, up, down). The model calls any gated
# linear unit "swiglu" (SwiGLU or GeGLU cost the same GEMMs; Shazeer 2020).
GATED_ACTIVATIONS = ("silu", "swish", "gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast")


class Layout(enum.Enum):
    """How a family lays out its feed-forward and attention blocks."""

    DENSE = "dense"
    MIXTRAL = "mixtral"  # every layer MoE; num_local_experts of intermediate_size
    QWEN_MOE = "qwen_moe"  # num_experts of moe_intermediate_size; mlp_only_layers / decoder_sparse_step
    DEEPSEEK = "deepseek"  # MLA + n_routed_experts, shared experts, first_k_dense_replace
    GPT_OSS = "gpt_oss"  # every layer MoE; num_local_experts of intermediate_size; attention biases


@dataclass(frozen=True)
class Family:
    layout: Layout
    tied_default: bool  # tie_word_embeddings when the config omits it (transformers' class default)
    qkv_bias: bool = False  # Qwen2: q/k/v projections always carry biases
    window_share: float = 1.0  # share of local-attention layers when the config has no layer_types
    keys: tuple = ()  # the family's own mapped keys


MOE_MIXTRAL_KEYS = ("num_local_experts", "num_experts_per_tok")
QWEN_MOE_KEYS = ("num_experts", "num_experts_per_tok", "moe_intermediate_size", "mlp_only_layers", "decoder_sparse_step")
DEEPSEEK_KEYS = (
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "n_group",
    "topk_group",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
)
GPT_OSS_KEYS = ("num_local_experts", "num_experts_per_tok", "experts_per_token")
GEMMA_KEYS = ("sliding_window_size", "sliding_window_pattern")

FAMILIES = {
    "LlamaForCausalLM": Family(Layout.DENSE, tied_default=False),
    "MistralForCausalLM": Family(Layout.DENSE, tied_default=False),
    "Qwen2ForCausalLM": Family(Layout.DENSE, tied_default=False, qkv_bias=True),
    "Qwen3ForCausalLM": Family(Layout.DENSE, tied_default=False),
    "MixtralForCausalLM": Family(Layout.MIXTRAL, tied_default=False, keys=MOE_MIXTRAL_KEYS),
    "Qwen3MoeForCausalLM": Family(Layout.QWEN_MOE, tied_default=False, keys=QWEN_MOE_KEYS),
    "DeepseekV3ForCausalLM": Family(Layout.DEEPSEEK, tied_default=False, keys=DEEPSEEK_KEYS),
    "GptOssForCausalLM": Family(Layout.GPT_OSS, tied_default=False, keys=GPT_OSS_KEYS),
    "GemmaForCausalLM": Family(Layout.DENSE, tied_default=True, keys=GEMMA_KEYS),
    # Gemma 2 alternates local and global layers (Gemma Team 2024, arXiv 2408.00118, Sec. 2)
    "Gemma2ForCausalLM": Family(Layout.DENSE, tied_default=True, window_share=0.5, keys=GEMMA_KEYS),
    # Gemma 3: five local layers per global one (arXiv 2503.19786, Sec. 2) unless layer_types says
    "Gemma3ForCausalLM": Family(Layout.DENSE, tied_default=True, window_share=5 / 6, keys=GEMMA_KEYS),
}
# model_type of each architecture, for configs that give only model_type
MODEL_TYPES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "mixtral": "MixtralForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v3": "DeepseekV3ForCausalLM",
    "gpt_oss": "GptOssForCausalLM",
    "gemma": "GemmaForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
}


def read_config(path: Path) -> dict:
    """The JSON mapping of a config.json; ProblemError naming the file when it is missing or bad."""
    src = str(path)
    try:
        text = path.read_text()
        read_files.note(path)
    except FileNotFoundError:
        raise ProblemError("Hugging Face config not found", source=src) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise ProblemError(f"cannot read Hugging Face config: {exc.__class__.__name__}", source=src) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProblemError(f"not JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=src) from None
    if not isinstance(data, dict):
        raise ProblemError(f"must be a JSON object, got {type(data).__name__}", source=src)
    return data


def architecture(data: dict, src: str) -> str:
    """The supported architecture a config names (``architectures[0]``, else ``model_type``)."""
    archs = data.get("architectures")
    if isinstance(archs, list) and archs:
        if len(archs) != 1 or not isinstance(archs[0], str):
            raise ProblemError(f"must name one architecture, got {archs!r}", source=src, field="architectures")
        name, field = archs[0], "architectures"
    elif isinstance(data.get("model_type"), str):
        name, field = MODEL_TYPES.get(data["model_type"], data["model_type"]), "model_type"
    else:
        raise ProblemError(f"is required (or model_type); supported: {', '.join(FAMILIES)}", source=src, field="architectures")
    if name not in FAMILIES:
        raise ProblemError(f"unsupported architecture {name!r}; supported: {', '.join(FAMILIES)}", source=src, field=field)
    return name


def _int(data: dict, key: str, src: str, default=None) -> int:
    value = data.get(key, default)
    if value is None:
        raise ProblemError("is required", source=src, field=key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProblemError(f"must be a non-negative integer, got {value!r}", source=src, field=key)
    return value


def _bool(data: dict, key: str, src: str, default: bool) -> bool:
    value = data.get(key, default)
    if not isinstance(value, bool):
        raise ProblemError(f"must be true or false, got {value!r}", source=src, field=key)
    return value


def _activation(data: dict, src: str) -> str:
    key = "hidden_activation" if "hidden_activation" in data else "hidden_act"
    value = data.get(key, "silu")
    if value not in GATED_ACTIVATIONS:
        raise ProblemError(f"unsupported activation {value!r}; allowed: {', '.join(GATED_ACTIVATIONS)}", source=src, field=key)
    return "swiglu"


def _window(data: dict, family: Family, src: str, layers: int) -> dict:
    """sliding_window and the share of layers that use it (layer_types, else the family's pattern)."""
    window = data.get("sliding_window", data.get("sliding_window_size"))
    if window is None or not _bool(data, "use_sliding_window", src, True):
        return {}
    window = _int(data, "sliding_window" if "sliding_window" in data else "sliding_window_size", src)
    types = data.get("layer_types")
    if types is not None:
        allowed = ("sliding_attention", "full_attention")
        if not isinstance(types, list) or len(types) != layers or any(t not in allowed for t in types):
            raise ProblemError(f"must list {layers} entries among {', '.join(allowed)}", source=src, field="layer_types")
        share = types.count("sliding_attention") / layers
    elif "max_window_layers" in data:  # Qwen2/Qwen3: layers from max_window_layers on use the window
        share = max(0, layers - _int(data, "max_window_layers", src)) / layers
    elif "sliding_window_pattern" in data:
        pattern = _int(data, "sliding_window_pattern", src)
        share = (pattern - 1) / pattern if pattern else 0.0
    else:
        share = family.window_share
    if share == 0 or window == 0:
        return {}
    return {"sliding_window": window, "sliding_window_share": share}


def _moe(data: dict, layout: Layout, src: str, layers: int) -> dict | None:
    if layout is Layout.DENSE:
        return None
    if layout in (Layout.MIXTRAL, Layout.GPT_OSS):
        top_k = data.get("num_experts_per_tok", data.get("experts_per_token"))
        key = "num_experts_per_tok" if "num_experts_per_tok" in data else "experts_per_token"
        return {
            "experts": _int(data, "num_local_experts", src),
            "top_k": _int(data, key, src, top_k),
            "expert_ffn": _int(data, "intermediate_size", src),
        }
    if layout is Layout.QWEN_MOE:
        step = _int(data, "decoder_sparse_step", src, 1)
        if step < 1:  # transformers takes (i + 1) % step: a positive step
            raise ProblemError(f"must be a positive integer, got {step!r}", source=src, field="decoder_sparse_step")
        dense = data.get("mlp_only_layers", [])
        if not isinstance(dense, list):
            raise ProblemError(f"must be a list of layer indices, got {dense!r}", source=src, field="mlp_only_layers")
        # transformers' Qwen3MoeDecoderLayer: MoE when i not in mlp_only_layers and (i + 1) % step == 0
        moe_layers = [i for i in range(layers) if i not in dense and (i + 1) % step == 0]
        first = layers - len(moe_layers)
        if moe_layers != list(range(first, layers)):
            raise ProblemError(
                "only leading dense layers are modelled (MoE layers must be the last ones)",
                source=src,
                field="mlp_only_layers" if dense else "decoder_sparse_step",
            )
        return {
            "experts": _int(data, "num_experts", src),
            "top_k": _int(data, "num_experts_per_tok", src),
            "expert_ffn": _int(data, "moe_intermediate_size", src),
            "first_dense_layers": first,
        }
    # DeepSeek-V3: leading dense layers, then MoE every moe_layer_freq layers
    if _int(data, "moe_layer_freq", src, 1) != 1:
        raise ProblemError("only 1 (every layer after the dense ones is MoE) is modelled", source=src, field="moe_layer_freq")
    moe = {
        "experts": _int(data, "n_routed_experts", src),
        "top_k": _int(data, "num_experts_per_tok", src),
        "expert_ffn": _int(data, "moe_intermediate_size", src),
        "shared_experts": _int(data, "n_shared_experts", src, 0),
        "first_dense_layers": _int(data, "first_k_dense_replace", src, 0),
    }
    # group-limited routing: a token's experts lie in at most topk_group of n_group groups, one per
    # node in DeepSeek-V3's deployment (paper Sec. 2.1.2, M = 4)
    if _int(data, "n_group", src, 1) > 1:
        moe["max_nodes_per_token"] = _int(data, "topk_group", src)
    return moe


def _mla(data: dict, src: str) -> dict:
    return {
        "q_lora_rank": _int(data, "q_lora_rank", src, 0),
        "kv_lora_rank": _int(data, "kv_lora_rank", src),
        "qk_nope_head_dim": _int(data, "qk_nope_head_dim", src),
        "qk_rope_head_dim": _int(data, "qk_rope_head_dim", src),
        "v_head_dim": _int(data, "v_head_dim", src),
    }


def model_fields(data: dict, src: str) -> dict:
    """The model-file mapping (library.MODEL_KEYS) a parsed config.json describes."""
    arch = architecture(data, src)
    family = FAMILIES[arch]
    known = set(MAPPED) | set(UNUSED) | set(family.keys)
    for key in data:
        if key not in known:
            raise ProblemError(
                f"key not understood for {arch} (it may change the model); mapped keys: "
                f"{', '.join(sorted(set(MAPPED) | set(family.keys)))}",
                source=src,
                field=key,
            )
    for key in REQUIRED:
        _int(data, key, src)
    layers = data["num_hidden_layers"]
    heads = _int(data, "num_attention_heads", src)
    fields = {
        "layers": layers,
        "hidden": data["hidden_size"],
        "heads": heads,
        "kv_heads": _int(data, "num_key_value_heads", src, heads),
        "ffn": data["intermediate_size"],
        "vocab": data["vocab_size"],
        "activation": _activation(data, src),
        "tied_embeddings": _bool(data, "tie_word_embeddings", src, family.tied_default),
        "position_embedding": "rope",  # every supported family rotates q and k (rope_theta, rope_scaling)
        "max_seq_len": data["max_position_embeddings"],
        "norm": "rmsnorm",  # every supported family normalises with RMSNorm (rms_norm_eps)
        "bias": family.qkv_bias
        or _bool(data, "attention_bias", src, family.layout is Layout.GPT_OSS)
        or _bool(data, "mlp_bias", src, False),
        "dropout": any(checks_positive(data, key, src) for key in ("attention_dropout", "hidden_dropout") if key in data),
    }
    if data.get("head_dim") is not None:
        fields["head_dim"] = _int(data, "head_dim", src)
    fields.update(_window(data, family, src, layers))
    moe = _moe(data, family.layout, src, layers)
    if moe is not None:
        fields["moe"] = moe
    if family.layout is Layout.DEEPSEEK:
        fields["mla"] = _mla(data, src)
        # MLA decompresses a K/V per query head; the library's head_dim is v_head_dim
        fields["kv_heads"] = heads
        fields["head_dim"] = fields["mla"]["v_head_dim"]
    return fields


def checks_positive(data: dict, key: str, src: str) -> bool:
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise ProblemError(f"must be a non-negative number, got {value!r}", source=src, field=key)
    return value > 0


def default_name(path: Path) -> str:
    """The model's name: the config file's stem, or its folder's name for a file called config.json."""
    return path.parent.name if path.stem == "config" and path.parent.name else path.stem


def model_dict(block: dict, problem_source: str | None, prefix: str = "model.") -> dict:
    """The model-file mapping of ``{hf_config: PATH, <model-file keys as overrides>}``: the
    config's fields, then the overrides (a ``moe:`` or ``mla:`` override is merged key by key).
    A relative PATH is resolved against the problem file's folder."""
    given = block["hf_config"]
    if not isinstance(given, str) or not given:
        raise ProblemError(f"must be the path of a config.json, got {given!r}", source=problem_source, field=prefix + "hf_config")
    path = Path(given).expanduser()
    if not path.is_absolute() and problem_source and Path(problem_source).exists():
        path = Path(problem_source).parent / path
    fields = {"name": default_name(path), **model_fields(read_config(path), str(path))}
    for key, value in block.items():
        if key == "hf_config":
            continue
        if key in ("moe", "mla") and isinstance(value, dict) and isinstance(fields.get(key), dict):
            fields[key] = {**fields[key], **value}
        else:
            fields[key] = value
    return fields
