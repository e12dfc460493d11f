"""The named choices of a problem and a mapping, defined once.

String enums compare equal to their values (``Recompute.FULL == "full"``), so problem files, JSON
and the model's own comparisons read the same; ``plain`` turns a member back into the plain
``str``/``int`` that YAML and JSON writers take.
"""

from __future__ import annotations

from enum import IntEnum, StrEnum


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022): none, the attention core only
    (``selective``), or the whole layer from its input (``full``)."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class RecomputeModule(StrEnum):
    """What ``selective`` recomputation recomputes (Megatron-Core --recompute-modules): the attention
    core (``core_attn``, Korthikanti's selective recomputation, the default), the norms not fused into
    a linear (``layernorm``), the routed experts' activation function (``moe_act``), MLA's
    up-projections (``mla_up_proj``), the dense MLP (``mlp``), the whole MoE block (``moe``), the
    shared experts (``shared_experts``)."""

    CORE_ATTN = "core_attn"
    LAYERNORM = "layernorm"
    MOE_ACT = "moe_act"
    MLA_UP_PROJ = "mla_up_proj"
    MLP = "mlp"
    MOE = "moe"
    SHARED_EXPERTS = "shared_experts"


class OffloadModule(StrEnum):
    """Modules whose saved inputs Megatron-Core's fine-grained activation offloading copies to host memory
    in the forward and back before the backward (--fine-grained-activation-offloading --offload-modules;
    TransformerConfig.offload_modules, from core_v0.16.0): the attention's input norm when it runs apart
    from a linear (``attn_norm``), the QKV projection (``qkv_linear``), the attention core (``core_attn``),
    the output projection (``attn_proj``, only with ``core_attn``), the pre-MLP norm when it runs apart
    (``mlp_norm``), the routed experts' FC1 (``expert_fc1``) and their activation function (``moe_act``)."""

    ATTN_NORM = "attn_norm"
    QKV_LINEAR = "qkv_linear"
    CORE_ATTN = "core_attn"
    ATTN_PROJ = "attn_proj"
    MLP_NORM = "mlp_norm"
    EXPERT_FC1 = "expert_fc1"
    MOE_ACT = "moe_act"


class LayerGemm(StrEnum):
    """The GEMMs of one transformer layer, routed experts aside, as ``compute.layer_gemm_shapes`` names them:
    multi-head/grouped attention's fused ``qkv``; MLA's ``q`` (no query compression), ``q_down``, ``q_up``,
    ``kv_down`` and ``kv_up`` (DeepSeek-V2 Sec. 2.1; decode runs ``kv_up`` absorbed, the same FLOPs and weights);
    the output projection ``attn_out``; the dense or shared-expert FFN's ``mlp_up`` (gate and up fused for
    SwiGLU) and ``mlp_down``."""

    QKV = "qkv"
    Q = "q"
    Q_DOWN = "q_down"
    Q_UP = "q_up"
    KV_DOWN = "kv_down"
    KV_UP = "kv_up"
    ATTN_OUT = "attn_out"
    MLP_UP = "mlp_up"
    MLP_DOWN = "mlp_down"


class ZeroStage(IntEnum):
    """What data parallelism shards (Rajbhandari et al., ZeRO, SC'20): nothing (0), the optimizer
    states (1, = Megatron's distributed optimizer), also the gradients (2), also the weights (3)."""

    REPLICATED = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    WEIGHTS = 3


class Zero3Gather(StrEnum):
    """What ZeRO-3 gathers at once, and so holds unsharded on each GPU (``workload.zero3_gather``).
    ``block``: whole transformer blocks, the current one and the prefetched next (PyTorch FSDP, one
    unit per block as torchtitan wraps it). ``module``: one submodule at a time (DeepSpeed ZeRO-3
    fetches per nn.Module, its live set bounded by stage3_max_live_parameters); the working set is the
    largest module's 16-bit weights and gradients, as DeepSpeed's own estimator counts it."""

    BLOCK = "block"
    MODULE = "module"


class BackwardPrefetch(StrEnum):
    """When ZeRO-3 gathers the next block's weights in the backward pass (``workload.zero3_backward_prefetch``;
    PyTorch's ``torch.distributed.fsdp.BackwardPrefetch``, whose documentation states the overlap of each).
    ``pre``: before the current block's gradient computation, so the gather runs under it (FSDP's
    BACKWARD_PRE; FSDP2's default backward prefetch, DeepSpeed ZeRO-3's prefetch bucket). ``post``: after it
    (FSDP's BACKWARD_POST, Composer's default): the next block's computation waits for its gather, and only
    the current block's gradient reduce-scatter runs under computation."""

    PRE = "pre"
    POST = "post"


class Allocator(StrEnum):
    """How PyTorch's CUDA caching allocator is configured (``workload.allocator``): ``caching``, its
    default (fixed-size segments split into blocks, kept after the tensors in them are freed);
    ``expandable`` (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, PyTorch >= 2.1: segments grow
    by mapping pages, so freed blocks of one size serve requests of another). What each leaves reserved
    beyond the live tensors is measured, not derived (``memory.allocator_cache_bytes``)."""

    CACHING = "caching"
    EXPANDABLE = "expandable"


class MoeDispatcher(StrEnum):
    """How MoE tokens reach their experts (``workload.moe_dispatcher``; ``model/expert_parallel.py``):
    ``alltoall``, Megatron-Core's MoEAlltoAllTokenDispatcher, one NCCL all-to-all sending a copy per
    routed expert (Lepikhin et al., GShard, 2020); ``deepep``, DeepEP or HybridEP (DeepSeek-AI 2025;
    Megatron-Core's flex dispatcher), one copy per destination node over the network, forwarded over
    NVLink inside it (DeepSeek-V3 report Sec. 3.2.2)."""

    ALLTOALL = "alltoall"
    DEEPEP = "deepep"


class AttentionKernel(StrEnum):
    """The attention core's kernel (workload.attention): one fused FlashAttention kernel that keeps no s x s
    scores in HBM (``flash``: cuDNN's, FlashAttention-2 and -3; Dao et al. 2022), the same computation in
    FlashAttention's Triton port (``triton``: flash_attn_triton.py, as MPT's attn_impl triton runs it), or the
    scores materialised between two batched GEMMs (``standard``: pre-2022 Megatron, Korthikanti et al. 2022)."""

    FLASH = "flash"
    STANDARD = "standard"
    TRITON = "triton"


class CpComm(StrEnum):
    """How context parallelism exchanges attention's inputs (Megatron-Core --cp-comm-type): ``ring``
    passes K/V blocks around the group behind the attention compute (p2p; Liu et al., Ring Attention,
    2023); ``a2a`` trades sequence shards for head shards with all-to-alls before and after the
    attention (Jacobs et al., DeepSpeed-Ulysses, 2023); ``allgather`` gathers the whole sequence's K and
    V before the attention and reduce-scatters their gradients after its backward, both exposed (Llama 3's
    long-context training, Dubey et al. 2024 Sec. 3.3.2); ``a2a+p2p`` is both in a hierarchy (Megatron-Core's
    --hierarchical-context-parallel-sizes, Transformer Engine's hierarchical CP): the all-to-all among the CP ranks
    that share a scale-up domain, the ring across the domains (``training.hierarchical_cp_sizes``)."""

    RING = "ring"
    A2A = "a2a"
    ALLGATHER = "allgather"
    A2A_P2P = "a2a+p2p"


class LowPrecisionRecipe(StrEnum):
    """How FP8/FP4 training quantises each GEMM input (Megatron-LM --fp8-recipe / --fp4-recipe, Transformer
    Engine's recipes): ``delayed`` (DelayedScaling: a per-tensor scale from the amax history),
    ``tensorwise`` (Float8CurrentScaling: a per-tensor scale from the tensor's own amax), ``mxfp8``
    (MXFP8BlockScaling: an E8M0 scale per 32 values, Blackwell), ``blockwise`` (Float8BlockScaling:
    fp32 scales per 1x128 and 128x128 blocks, DeepSeek-V3's recipe) and ``nvfp4`` (NVFP4BlockScaling:
    FP4 values, an E4M3 scale per 16 and a per-tensor fp32 scale, random Hadamard transforms on the
    weight-gradient inputs)."""

    DELAYED = "delayed"
    TENSORWISE = "tensorwise"
    MXFP8 = "mxfp8"
    BLOCKWISE = "blockwise"
    NVFP4 = "nvfp4"


class WorkloadKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


class TrainingObjective(StrEnum):
    """What a training plan optimises: tokens/s (throughput, or the step time), the peak memory per
    GPU, tokens/s per GPU, the run's cost (or $ per million tokens), tokens per dollar."""

    THROUGHPUT = "throughput"
    STEP_TIME = "step_time"
    MEMORY = "memory"
    TOKENS_PER_GPU = "tokens_per_gpu"
    COST = "cost"
    TOKENS_PER_USD = "tokens_per_usd"


class ServingObjective(StrEnum):
    """What a serving plan optimises: output tokens/s, time to first token, time per output token,
    a request's end-to-end latency, the fewest GPUs, the least cost per hour (the last two size a
    deployment: with ``workload.request_rate`` the smallest or cheapest one that sustains the load)."""

    THROUGHPUT = "throughput"
    TTFT = "ttft"
    TPOT = "tpot"
    LATENCY = "latency"
    GPUS = "gpus"
    COST = "cost"


COST_OBJECTIVES = (TrainingObjective.COST, TrainingObjective.TOKENS_PER_USD)


class ServingMode(StrEnum):
    """How requests are batched: all together (static), joining and leaving every iteration
    (continuous), or prefill and decode on separate pools (disaggregated)."""

    STATIC = "static"
    CONTINUOUS = "continuous"
    DISAGGREGATED = "disaggregated"


class Architecture(StrEnum):
    """A device's architecture (a device file's ``architecture``): the devices one published run speaks for.
    The accuracy each plan reports is measured on the out-of-sample runs of its architecture
    (``solver/accuracy_bands.py``); Blackwell Ultra (B300, GB300) apart from Blackwell (B200, GB200),
    since its power ceiling, softmax rate and FP4 rate differ."""

    AMPERE = "ampere"
    HOPPER = "hopper"
    BLACKWELL = "blackwell"
    BLACKWELL_ULTRA = "blackwell-ultra"
    CDNA3 = "cdna3"
    TPU_V5 = "tpu-v5"


class ModelKind(StrEnum):
    """A dense model, or a mixture-of-experts one (``ModelSpec.moe`` set): the accuracy a plan reports is
    measured apart for each (``solver/accuracy_bands.py``)."""

    DENSE = "dense"
    MOE = "moe"


def plain(value):
    """A choice as the plain ``str`` or ``int`` value it stands for (other values unchanged)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, StrEnum):
        return str(value.value)
    if isinstance(value, IntEnum):
        return int(value)
    return value


def allowed(enum) -> str:
    """The values of a choice, comma-separated, for error messages."""
    return ", ".join(str(plain(member)) for member in enum)
