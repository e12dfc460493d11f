"""The KV cache of serving: bytes per token for MHA, GQA, MQA and MLA, paged allocation.

Attention keeps every past token's keys and values so that each generated token attends to them
without recomputation (Pope et al., "Efficiently Scaling Transformer Inference", MLSys 2023,
Sec. 2). Per layer and token that is 2·kv_heads·head_dim elements: MHA has kv_heads = heads, GQA
fewer (Ainslie et al. 2023), MQA one (Shazeer 2019). Multi-head latent attention caches the
compressed latent and the shared RoPE key instead, kv_lora_rank + d_rope elements (DeepSeek-V2,
arXiv 2405.04434, Sec. 2.1.2 and Table 1). Memory is allocated in fixed blocks of tokens
(PagedAttention; Kwon et al., SOSP 2023).
"""

from __future__ import annotations

import math

from .precision import stored_bytes_per_element
from .specs import ModelSpec


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> float:
    """KV heads one tensor-parallel rank holds: kv_heads/tp, at least one; when tp exceeds the KV
    heads each head is replicated on tp/kv_heads ranks (TensorRT-LLM and vLLM shard GQA/MQA this
    way; Megatron-Core likewise), heads."""
    return max(model.kv_heads / tp, 1.0)


def kv_elements_per_token(model: ModelSpec, tp: int) -> float:
    """Cached elements per token and layer on one tensor-parallel rank.

    MHA/GQA/MQA: keys and values of the rank's KV heads, 2·(kv_heads/tp)·head_dim. MLA: the
    latent c_KV (kv_lora_rank) and the decoupled RoPE key (d_rope), shared by all heads and so
    held whole by every rank (DeepSeek-V2 Sec. 2.1.2: (d_c + d_h^R)·l elements per token)."""
    if model.mla is not None:
        return float(model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
    return 2.0 * kv_heads_per_gpu(model, tp) * model.head_dim


def kv_bytes_per_token(model: ModelSpec, kv_precision: str, tp: int = 1) -> float:
    """KV-cache bytes per token and layer on one tensor-parallel rank at ``kv_precision`` (block
    scales of FP4 included, ``precision.stored_bytes_per_element``), bytes."""
    return kv_elements_per_token(model, tp) * stored_bytes_per_element(kv_precision)


def paged_tokens(tokens: float, block_tokens: int) -> int:
    """Tokens of cache allocated for a sequence of ``tokens``: whole blocks of ``block_tokens``
    (PagedAttention, Kwon et al. 2023, Sec. 4.1), tokens."""
    return int(math.ceil(tokens / block_tokens - 1e-9)) * block_tokens


def kv_bytes_per_sequence(model: ModelSpec, kv_precision: str, tp: int, layers: int, tokens: float, block_tokens: int) -> float:
    """KV cache one sequence of ``tokens`` holds on one GPU that runs ``layers`` layers with
    tensor parallelism ``tp``, paged in blocks, bytes. A local-attention layer keeps only its window
    (plus the block being filled: vLLM's sliding-window manager frees the blocks behind it,
    TensorRT-LLM's cyclic cache reuses them)."""
    held = paged_tokens(tokens, block_tokens)
    if model.sliding_window:
        local = paged_tokens(min(tokens, model.sliding_window + block_tokens), block_tokens)
        held = (1.0 - model.sliding_window_share) * held + model.sliding_window_share * local
    return held * layers * kv_bytes_per_token(model, kv_precision, tp)


def kv_pool_bytes(kv_bytes: float, free_memory_fraction: float) -> float:
    """Free memory a KV-cache pool that holds ``kv_bytes`` takes, bytes: an engine sizes its pool as a
    fraction of the memory left free after the weights and activations and leaves the rest
    unallocated, so holding ``kv_bytes`` needs kv_bytes/fraction of free memory.

    Source: TensorRT-LLM ``KvCacheConfig.free_gpu_memory_fraction`` (trtllm-bench
    ``--kv_cache_free_gpu_mem_fraction``), default 0.9: "TensorRT-LLM tries to allocate 90% of free GPU
    memory (after loading weights) for KV cache" (TensorRT-LLM docs/source/examples/kvcacheconfig.md;
    docs/source/performance/perf-overview.md: "the default setting of 0.90", "in many cases ... 0.95").
    vLLM's ``gpu_memory_utilization`` (0.9) is a fraction of the TOTAL memory instead, not this rule."""
    return kv_bytes / free_memory_fraction


def kv_transfer_bytes_per_gpu(model: ModelSpec, kv_precision: str, tp: int, pp: int, tokens: float) -> float:
    """Bytes of one request's KV cache that each GPU of a tp·pp prefill replica sends to the decode
    pool in disaggregated serving (DistServe, Zhong et al., OSDI 2024, Sec. 3.3): its layers' share
    of ``tokens`` tokens, bytes. The last stage holds at most ceil(L/pp) layers; ranks send in
    parallel."""
    return tokens * math.ceil(model.layers / pp) * kv_bytes_per_token(model, kv_precision, tp)
