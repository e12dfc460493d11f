"""Frozen specifications: what is trained, on what, and how it is mapped.

Calculon's split (application / execution / system, Isaev et al., SC'23) becomes
``ModelSpec`` / ``Mapping`` + ``Workload`` / ``SystemSpec``. Every field is in SI units unless
its name carries the unit. Construction validates values and raises ``ProblemError``.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from . import checks
from .choices import Allocator, Architecture, AttentionKernel, MoeDispatcher
from .errors import ProblemError
from .hashing import hash_once, state_without_hash
from .topology import default_topology

ACTIVATIONS = ("gelu", "swiglu")
MAX_LAYERS = 1024  # transformer layers of a model: 8x the deepest published LLM here (Megatron 1T: 128), a sanity limit
POSITION_EMBEDDINGS = ("learned", "rope", "alibi")
NORMS = ("layernorm", "rmsnorm")
ATTENTION_KERNELS = tuple(AttentionKernel)
# one fused kernel that keeps no s x s scores in HBM: FlashAttention (cuDNN, FlashAttention-2/3) and its Triton port
FUSED_ATTENTION = (AttentionKernel.FLASH, AttentionKernel.TRITON)
# Parallel dimensions in the order Megatron-Core lays them over the ranks, innermost (fastest) first
# (parallel_state.initialize_model_parallel, order="tp-cp-ep-dp-pp"); see model/placement.py.
PLACEMENT_DIMENSIONS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_PLACEMENT = "-".join(PLACEMENT_DIMENSIONS)
# the order Megatron-LM builds with --use-tp-pp-dp-mapping (megatron/training/initialize.py), data parallelism outermost
TP_PP_DP_PLACEMENT = "tp-cp-ep-pp-dp"


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts feed-forward layers (Shazeer et al. 2017; Fedus et al. 2022; DeepSeek-V3)."""

    experts: int  # routed experts per MoE layer
    top_k: int  # routed experts per token
    expert_ffn: int  # intermediate width of one routed expert
    shared_experts: int = 0  # experts every token passes through (DeepSeekMoE)
    shared_expert_ffn: int = 0  # width of one shared expert; 0 = expert_ffn
    first_dense_layers: int = 0  # leading layers with a dense FFN of the model's `ffn` width
    capacity_factor: float | None = None  # None = dropless
    load_imbalance: float = 1.0  # tokens of the busiest expert / the mean (the busiest sets the pace)
    max_nodes_per_token: int = 0  # node-limited routing (DeepSeek-V3 Sec. 2.1.2: M = 4); 0 = no limit

    def __post_init__(self):
        for name in ("experts", "top_k", "expert_ffn"):
            checks.positive_int(getattr(self, name), name)
        if self.top_k > self.experts:
            raise ProblemError(f"top_k {self.top_k} exceeds the {self.experts} experts", field="top_k")
        if self.shared_expert_ffn == 0:
            object.__setattr__(self, "shared_expert_ffn", self.expert_ffn)
        if self.load_imbalance < 1.0:
            raise ProblemError(f"must be >= 1 (busiest expert / mean), got {self.load_imbalance}", field="load_imbalance")


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1): compressed KV (and
    query) through low-rank projections, with a decoupled RoPE part per head."""

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int = 0  # 0 = no query compression

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelSpec:
    """A dense decoder-only transformer."""

    __hash__ = hash_once
    __getstate__ = state_without_hash

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    activation: str = "gelu"
    head_dim: int = 0  # 0 means hidden // heads
    tied_embeddings: bool = False
    position_embedding: str = "learned"
    max_seq_len: int = 2048
    norm: str = "layernorm"
    bias: bool = True
    dropout: bool = True  # trained with hidden/attention dropout (GPT-3, Megatron); Llama-style models are not
    params_b: float | None = None
    active_params_b: float | None = None  # published parameters used per token (MoE)
    moe: MoESpec | None = None
    mla: MLASpec | None = None
    sliding_window: int = 0  # tokens a query of a local-attention layer attends (0: every layer attends all)
    sliding_window_share: float = 1.0  # share of the layers that attend the window (GPT-OSS: every other one)
    parallel_block: bool = False  # attention and MLP read the same input, their outputs summed (GPT-J, PaLM, Falcon)
    source: str | None = field(default=None, compare=False)

    def __post_init__(self):
        src = self.source
        for name in ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "max_seq_len"):
            checks.positive_int(getattr(self, name), name, src, MAX_LAYERS if name == "layers" else checks.MAX_INT)
        checks.non_negative_int(self.sliding_window, "sliding_window", src)
        checks.fraction(self.sliding_window_share, "sliding_window_share", src)
        checks.choice(self.activation, ACTIVATIONS, "activation", src)
        checks.choice(self.position_embedding, POSITION_EMBEDDINGS, "position_embedding", src)
        checks.choice(self.norm, NORMS, "norm", src)
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise ProblemError(
                    f"hidden {self.hidden} is not divisible by heads {self.heads}; give head_dim",
                    source=src,
                    field="head_dim",
                )
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        checks.positive_int(self.head_dim, "head_dim", src)
        if self.kv_heads > self.heads or self.heads % self.kv_heads:
            raise ProblemError(f"kv_heads {self.kv_heads} must divide heads {self.heads}", source=src, field="kv_heads")

    @property
    def tp_reductions_per_layer(self) -> int:
        """Tensor-parallel output reductions of one layer: one after the attention and one after the MLP
        (Shoeybi et al. 2019, Sec. 3); one in a parallel block, which sums both outputs before reducing
        (Chowdhery et al., PaLM, 2022, Sec. 2; Wang & Komatsuzaki, GPT-J, 2021; vLLM's and TensorRT-LLM's Falcon)."""
        return 1 if self.parallel_block else 2

    def attended_share(self, context: float) -> float:
        """Share of a causal context of ``context`` tokens that a layer's queries attend, averaged
        over the layers, against full causal attention (context²/2 query-key pairs): a local layer's
        queries attend at most the ``sliding_window`` tokens before them, c·w - w²/2 pairs when c > w
        (Beltagy et al., Longformer, 2020; Mistral 7B; GPT-OSS alternates local and full layers).
        Dimensionless, 1 without a window."""
        w = self.sliding_window
        if w == 0 or context <= w:
            return 1.0
        local = (context * w - w * w / 2.0) / (context * context / 2.0)
        return 1.0 - self.sliding_window_share + self.sliding_window_share * local

    def attended_context(self, context: float) -> float:
        """Cached tokens one decoding query reads, averaged over the layers: ``context``, or at most
        ``sliding_window`` in a local layer (tokens)."""
        if self.sliding_window == 0:
            return context
        return (1.0 - self.sliding_window_share) * context + self.sliding_window_share * min(context, self.sliding_window)

    def is_moe_layer(self, index: int) -> bool:
        """Whether layer ``index`` (0-based) has a mixture-of-experts FFN."""
        return self.moe is not None and index >= self.moe.first_dense_layers

    @property
    def moe_layers(self) -> int:
        return 0 if self.moe is None else self.layers - self.moe.first_dense_layers

    @property
    def q_width(self) -> int:
        """Width of the query projection output, heads x head_dim."""
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        """Width of the key (or value) projection output, kv_heads x head_dim."""
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class NetworkTier:
    """One level of the interconnect, seen from one GPU (alpha-beta model, Hockney 1994)."""

    name: str
    bandwidth_bytes_per_s: float  # per GPU, per direction
    latency_s: float
    efficiency: float  # achievable fraction of the line rate for large collectives
    deepep_efficiency: float = 0.0  # fraction of the line rate DeepEP's normal kernels reach across this tier; 0: efficiency

    @property
    def effective_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.efficiency


class PassRatios(NamedTuple):
    """FP8 attention's time over the 16-bit kernel's on one device, forward and backward apart, measured at
    calls of ``tokens`` keys (model/fp8_attention.py; device files: efficiency.fp8_attention_grouped)."""

    tokens: tuple
    forward: tuple
    backward: tuple

    def at(self, kv_tokens: float) -> tuple[float, float]:
        """(forward, backward) ratios for calls of ``kv_tokens`` keys: log-linear between the measured lengths,
        held beyond the ends."""
        x = math.log(max(kv_tokens, 1.0))
        return (
            _log_interp(x, *_log_curve(self.tokens, self.forward)),
            _log_interp(x, *_log_curve(self.tokens, self.backward)),
        )


@dataclass(frozen=True)
class DeviceSpec:
    """An accelerator: peak rates, memory and calibrated efficiency curves."""

    __hash__ = hash_once
    __getstate__ = state_without_hash

    name: str
    peak_flops: dict  # precision -> dense FLOP/s
    hbm_bytes: float
    hbm_bytes_per_s: float
    gemm_efficiency_flops: tuple  # GEMM sizes (FLOPs) of the 16-bit efficiency curve's points
    gemm_efficiency: tuple  # achieved fraction of peak at those sizes
    attention_efficiency: float  # flash-attention fraction of peak (serving; training where no curve is given)
    memory_efficiency: float  # achieved fraction of HBM bandwidth
    tdp_w: float = 0.0
    sms: int = 0  # streaming multiprocessors (compute units); 0 = unknown
    moe_expert_efficiency: float = 1.0  # routed-expert block (router, permutation, grouped GEMMs) rate / dense GEMM rate
    moe_overlap_efficiency: float = 1.0  # without an SM count: share of a layer's compute that hides an overlapped all-to-all
    tp_overlap_efficiency: float = 1.0  # share of a GEMM's time that can hide a tensor-parallel collective beside it
    low_precision_gemm: tuple = ()  # ((precision, flops tuple, efficiency tuple), ...): FP8/FP4 curves
    stream_efficiency: float = 0.0  # HBM fraction 16-bit decode GEMMs reach streaming their weights; 0 = memory_efficiency
    stream_fp8_efficiency: float = 0.0  # the same for FP8 (and FP4) scaled GEMMs; 0 = stream_efficiency
    kv_stream_efficiency: float = 0.0  # HBM fraction decode attention reaches streaming the KV cache; 0 = memory_efficiency
    host_bytes_per_s: float = 0.0  # GPU <-> host memory, each direction (PCIe, NVLink-C2C); 0 = unknown
    host_memory_bytes_per_s: float = 0.0  # this GPU's share of its host's DRAM bandwidth (CPU optimizer steps); 0 = unknown
    host_adam_efficiency: float = 1.0  # share of that bandwidth a CPU Adam step streams at (device files: efficiency.host_adam)
    grouped_fp8_efficiency: float = 1.0  # FP8 grouped expert GEMMs' rate / the FP8 dense curve's at the same shapes
    # MXFP8 (block-scaled) dense GEMMs' rate / the FP8 curve's, which per-tensor-scaled GEMMs measured (device files:
    # efficiency.mxfp8_gemm, fitted by benchmarks/calibrate.py --mxfp8; compute.dense_gemm_share)
    mxfp8_gemm_efficiency: float = 1.0
    # Float8BlockScaling (DeepSeek-V3's recipe: a scale per 1x128 of activations and gradients, per 128x128 of weights)
    # on its dense linears: their three GEMMs' rate / the FP8 curve's (device files: efficiency.block_fp8_gemm, derived
    # by benchmarks/device_curves.py from measurements/h200-fp8-scaling-microbench.yaml; compute.dense_gemm_share)
    block_fp8_gemm_efficiency: float = 1.0
    # the same recipe's routed-expert GEMMs: their rate / the row-wise scaled grouped GEMMs grouped_fp8 was measured on
    # (efficiency.block_fp8_grouped; compute.routed_gemm_share)
    block_fp8_grouped_efficiency: float = 1.0
    attention_tokens: tuple = ()  # key lengths (tokens per kernel call) of the training flash-attention curve
    attention_curve: tuple = ()  # its achieved fractions of the 16-bit peak there; empty: attention_efficiency
    gemm_scale: float = 1.0  # share of the GEMM curves' rates a serving engine's kernels reach (its profile's gemm)
    # the gemm_scale a serving problem's device takes when no engine profile sets one (solver.problem.Problem.system):
    # what serving engines' kernels reach of the curves on this device (device files: efficiency.serving_gemm)
    serving_gemm_efficiency: float = 1.0
    # the gemm_scale a training problem's device takes (solver.problem.Problem.system): what a training step sustains of
    # curves taken from short published benchmarks (device files: efficiency.training_gemm, fitted by
    # benchmarks/calibrate.py --training-gemm on the Blackwell devices; 1 where the curves are our sustained measurement)
    training_gemm_efficiency: float = 1.0
    serving_step_overhead_s: float = 0.0  # seconds a serving engine's runtime adds to every pass (scheduling, sampling, launches)
    pytorch_allocator: bool = True  # PyTorch's caching allocator holds its memory (CUDA, HIP); false: XLA (TPU)
    # a softmax exponential's time over the FP8 tensor-core time of its score element's two products at 320-wide
    # heads (model/fp8_attention.py); 0 = unknown: FP8 attention cannot be timed on this device
    softmax_exp_ratio: float = 0.0
    # FP8 attention over 16-bit per pass for grouped-query heads, measured (cuDNN); None: the serial rule's
    fp8_attention_grouped: PassRatios | None = None
    # bytes/s one NCCL channel (one thread block) moves, each direction, as NCCL's own topology search rates a
    # channel on this GPU's NVLink (model/nccl_channels.py); 0 = unknown: a capped communicator cannot be timed
    nccl_channel_bytes_per_s: float = 0.0
    # FlashAttention's Triton port (flash_attn_triton.py, MPT's attn_impl triton), forward + backward, its fraction of
    # the 16-bit peak (device files: efficiency.attention_triton); 0 = unknown: that kernel cannot be timed here
    attention_triton_efficiency: float = 0.0
    # the same by the keys a call attends (efficiency.attention_triton_by_tokens); empty: attention_triton_efficiency
    attention_triton_tokens: tuple = ()
    attention_triton_curve: tuple = ()
    # the training kernels' backward time over their forward's, measured (efficiency.attention_backward: a number, or
    # {tokens, ratio} by the keys a call attends; efficiency.attention_triton_backward); 0 / empty: unknown, the
    # FLOPs ratio at one efficiency (compute.attention_core_backward_factor)
    attention_backward: float = 0.0
    attention_backward_tokens: tuple = ()
    attention_backward_curve: tuple = ()
    attention_triton_backward: float = 0.0
    # the devices whose published runs speak for this one (choices.Architecture); None: a device file without it
    architecture: Architecture | None = field(default=None, compare=False)
    source: str | None = field(default=None, compare=False)

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s at ``precision``; ProblemError if the device lacks it."""
        if precision not in self.peak_flops:
            raise ProblemError(
                f"device {self.name} has no {precision} peak; it supports {', '.join(self.peak_flops)}",
                field="workload.precision",
            )
        return self.peak_flops[precision]

    @property
    def weight_streaming_efficiency(self) -> float:
        """Achieved fraction of HBM bandwidth when a decode GEMM (a few tokens) streams its
        weights: the device file's ``efficiency.stream`` where measured, else ``memory``."""
        return self.stream_efficiency or self.memory_efficiency

    def weight_streaming_efficiency_for(self, precision: str) -> float:
        """Achieved fraction of HBM bandwidth when a decode GEMM computing at ``precision`` streams its
        weights: the FP8 scaled kernels' own measurement (``efficiency.stream_fp8``) for fp8 and fp4
        where the file gives one [fp4: assumption], else ``weight_streaming_efficiency``."""
        if precision in ("fp8", "fp4") and self.stream_fp8_efficiency:
            return self.stream_fp8_efficiency
        return self.weight_streaming_efficiency

    @property
    def kv_streaming_efficiency(self) -> float:
        """Achieved fraction of HBM bandwidth when decode attention streams the KV cache: the
        device file's ``efficiency.kv_stream`` where measured, else ``memory``."""
        return self.kv_stream_efficiency or self.memory_efficiency

    def attention_efficiency_at(self, kv_tokens: float) -> float:
        """Achieved fraction of the 16-bit peak of a training flash-attention kernel whose calls attend
        ``kv_tokens`` keys (log-linear interpolation of the measured curve, held beyond its ends);
        ``attention_efficiency`` where the device file gives no curve."""
        return _by_tokens(kv_tokens, self.attention_tokens, self.attention_curve, self.attention_efficiency)

    def attention_triton_efficiency_at(self, kv_tokens: float) -> float:
        """The same for FlashAttention's Triton port: its curve by the keys a call attends where the device file
        gives one, else ``attention_triton_efficiency`` (0 where the file gives neither)."""
        return _by_tokens(kv_tokens, self.attention_triton_tokens, self.attention_triton_curve, self.attention_triton_efficiency)

    def attention_backward_at(self, kv_tokens: float) -> float:
        """The training flash-attention kernel's backward time over its forward's for calls attending ``kv_tokens``
        keys: its measured curve (log-linear, held beyond its ends), else ``attention_backward`` (0: unknown)."""
        return _by_tokens(kv_tokens, self.attention_backward_tokens, self.attention_backward_curve, self.attention_backward)

    def gemm_efficiency_at(self, flops, precision: str = "bf16"):
        """Achieved fraction of ``precision`` peak for a GEMM of ``flops`` FLOPs (log-linear
        interpolation of the measured curve; FP8/FP4 have their own curve when the file gives one),
        times ``gemm_scale`` (1 but under a serving engine's profile)."""
        xs, ys = self.gemm_efficiency_flops, self.gemm_efficiency
        for name, curve_x, curve_y in self.low_precision_gemm:
            if name == precision:
                xs, ys = curve_x, curve_y
        if isinstance(flops, (int, float)):  # one GEMM (the factor tables' case): the same interpolation, in Python
            return self.gemm_scale * _log_interp(math.log(max(flops, 1.0)), *_log_curve(tuple(xs), tuple(ys)))
        import numpy as np  # noqa: PLC0415 (arrays of GEMMs only: evaluating one plan needs no numpy)

        return self.gemm_scale * np.interp(np.log(np.maximum(flops, 1.0)), np.log(xs), ys)


@dataclass(frozen=True)
class SystemSpec:
    """A machine: ``num_gpus`` devices in scale-up domains joined by a scale-out network."""

    __hash__ = hash_once
    __getstate__ = state_without_hash

    name: str
    device: DeviceSpec
    num_gpus: int
    gpus_per_node: int
    scale_up_domain: int  # GPUs per scale-up (NVLink) domain
    scale_up: NetworkTier
    scale_out: NetworkTier
    memory_reserve_bytes: float = 0.0
    # a margin per GPU the plan must leave unused (constraints.memory_headroom_gib / memory_headroom;
    # memory.memory_headroom_bytes): it comes off the usable memory every peak is compared against
    memory_headroom_bytes: float = 0.0
    straggler: float = 0.0  # mean per-GPU delay of a synchronous step, as a share of it (training.straggler_stretch)
    host_memory_bytes: float = 0.0  # host DRAM of one node (gpus_per_node GPUs), bytes; 0 = unknown: not checked
    source: str | None = field(default=None, compare=False)
    topology: object = field(default=None, compare=False)  # model.topology.Topology from the file; None: derived

    @property
    def usable_memory_bytes(self) -> float:
        """Bytes per GPU a plan may use: the device's memory less what the runtime reserves (CUDA
        context, allocator) and the headroom the problem keeps free."""
        return self.device.hbm_bytes - self.memory_reserve_bytes - self.memory_headroom_bytes

    @property
    def host_memory_per_gpu_bytes(self) -> float:
        """Each GPU's share of its node's host DRAM, bytes (0: the system file gives none): what offloaded
        states and activations may take on the host [assumption: the OS, data loading and pinned staging
        buffers beside them not counted]."""
        return self.host_memory_bytes / self.gpus_per_node

    def network_topology(self):
        """The system file's topology, or the two-level one its scale_up/scale_out tiers describe
        (``model.topology.default_topology``), sized for ``num_gpus``."""
        if self.topology is not None:
            return self.topology
        return default_topology(self.scale_up, self.scale_out, self.scale_up_domain, self.num_gpus)


@dataclass(frozen=True)
class AllocatorOverhead:
    """Bytes the caching allocator keeps reserved beyond the live tensors at a training step's peak, as a
    share of the step's transient bytes (its peak less what persists between steps: activations,
    recomputation working sets, buffers), measured per allocator setting on emulated pipeline stages
    (problems/measurements/h200-allocator-microbench.yaml, ``summary``; ``memory.allocator_cache_bytes``).
    ``recompute_full_scores``: stages that recompute every layer with materialised attention scores (the
    s x s score blocks, the largest transient tensors, are rebuilt between long-lived checkpoints, which
    fragments most); ``recompute_full``: every layer recomputed under flash attention; ``otherwise``:
    none or selective."""

    allocator: Allocator
    recompute_full_scores: float = 0.0
    recompute_full: float = 0.0
    otherwise: float = 0.0


@dataclass(frozen=True)
class CommunicatorCtas:
    """NCCL thread blocks (channels) a run allows each communicator at most (Megatron-Core's
    --nccl-communicator-config-path, ``max_ctas`` per process group; NCCL's ``maxCTAs`` config); None: NCCL's own
    choice, no cap. ``dp`` caps the data-parallel gradient and parameter traffic (Megatron's dp and dp_cp groups),
    ``tp`` the tensor-parallel collectives NCCL runs (not Transformer Engine's userbuffers), ``cp`` the
    context-parallel exchange, ``pp`` the pipeline sends (model/nccl_channels.py)."""

    tp: int | None = None
    cp: int | None = None
    dp: int | None = None
    pp: int | None = None

    def any(self) -> bool:
        """Whether any communicator is capped."""
        return any(value is not None for value in (self.tp, self.cp, self.dp, self.pp))


NO_CTA_CAPS = CommunicatorCtas()


@dataclass(frozen=True)
class Workload:
    """What is run: training with a sequence length and a global batch in sequences."""

    __hash__ = hash_once
    __getstate__ = state_without_hash

    kind: str
    seq_len: int
    global_batch: int
    precision: str = "bf16"
    attention: str = "flash"  # choices.AttentionKernel: flash | standard (materialised scores) | triton (Triton port)
    low_precision_recipe: str | None = (
        None  # how fp8/fp4 GEMM inputs are quantised (choices.LowPrecisionRecipe); None: the default
    )
    grad_bytes: float = 4.0  # bytes per gradient element held (Megatron main_grad: fp32)
    lowp_grad_bytes: float = 0.0  # a 16-bit .grad kept beside the accumulation buffer (2: DeepSpeed BF16_Optimizer, 2022)
    # conversion copies of gradients on the optimizer's path (``memory.accumulate_copy_bytes``, ``reduce_copy_bytes``): per element of the largest
    # parameter's gradient as it is accumulated (4: DeepSpeed BF16_Optimizer's fp32 cast, 2022), per parameter of the
    # stage's gradients as they are reduced (2: DeepSpeed's fallback all-reduce in bf16, 2022)
    grad_accumulate_copy_bytes: float = 0.0
    grad_reduce_copy_bytes: float = 0.0
    zero3_gather: str = "block"  # what ZeRO-3 gathers at once (choices.Zero3Gather): block (FSDP) | module (DeepSpeed)
    # when ZeRO-3 gathers the next block in the backward pass (choices.BackwardPrefetch): pre (under the current
    # block's gradients) | post (after them: FSDP's BACKWARD_POST, Composer's default; the gather waits uncovered)
    zero3_backward_prefetch: str = "pre"
    adam_moment_bytes: float = 4.0  # bytes per element of each Adam moment (2: bf16, precision-aware optimizer)
    master_weight_bytes: float = 4.0  # bytes of the fp32 master copy per parameter (2: bf16 params + 16-bit remainders)
    recompute_modules: tuple = ("core_attn",)  # what recompute selective recomputes (choices.RecomputeModule)
    offload_modules: tuple = ()  # modules whose saved inputs wait in host memory (choices.OffloadModule)
    overlap_dp: bool = True  # overlap DP gradient reduce / parameter gather with compute
    overlap_tp_grad: bool = True  # TP input-gradient collectives under the weight-gradient GEMMs (Megatron since 2021)
    # full recomputation stops once the backward's tensors are rebuilt, skipping a dense layer's MLP down projection
    # (PyTorch's non-reentrant checkpoint since 2.1; compute.checkpoint_tail_forward_time_s); false: the whole
    # forward is redone (Megatron-Core's and DeepSpeed's reentrant checkpoints)
    checkpoint_early_stop: bool = False
    moe_dispatcher: MoeDispatcher = MoeDispatcher.ALLTOALL  # alltoall (Megatron-Core) | deepep (DeepEP, HybridEP)
    moe_fp8_dispatch: bool = False  # deepep sends the fp8 forward dispatch in FP8 + 1x128 scales (DeepSeek's framework)
    moe_a2a_overlap: bool = False  # hide the EP all-to-all behind another micro-batch's compute
    fp8_param_gather: bool = False  # the data-parallel parameter all-gather moves FP8 weights (Megatron --fp8-param-gather)
    fp8_output_proj: bool = False  # the output layer's GEMMs in MXFP8 too (Megatron-Core fp8_output_proj), not 16 bits
    fp8_attention: bool = False  # flash attention in FP8 (Megatron-Core fp8_dot_product_attention; model/fp8_attention.py)
    # the routed experts' activation (and, under MXFP8, the casts) in their GEMMs' epilogues (model/fused_grouped_mlp.py)
    fused_grouped_mlp: bool = False
    # NVFP4's random Hadamard transform on the column-wise copies of inputs and gradients (Transformer Engine's
    # default); false: NVTE_NVFP4_DISABLE_RHT=1, as MLPerf's NVFP4 configs set it (precision.quantised_bytes_per_element)
    nvfp4_hadamard: bool = True
    allocator: Allocator = Allocator.CACHING  # PyTorch's CUDA allocator setting (choices.Allocator)
    # its measured reserve beyond the live tensors, the row of ``allocator`` (the problem parser reads it); None: none counted
    allocator_overhead: AllocatorOverhead | None = None
    mtp_layers: int = 0  # multi-token-prediction modules trained on the last stage (DeepSeek-V3: 1)
    train_tokens: float | None = None  # tokens of the whole run (for run hours and run cost)
    goodput: float | None = None  # share of a run's wall-clock time that trains; None: model/goodput.py's estimate
    nccl_max_ctas: CommunicatorCtas = NO_CTA_CAPS  # NCCL channels each communicator may use (CommunicatorCtas)
    source: str | None = field(default=None, compare=False)

    def __post_init__(self):
        overhead = self.allocator_overhead
        if overhead is not None and overhead.allocator != self.allocator:
            raise ValueError(f"allocator_overhead is the {overhead.allocator} row, the workload's allocator is {self.allocator}")

    def with_choices(self, dispatcher=None, a2a_overlap: bool | None = None, recompute_modules=None) -> Workload:
        """This workload with the choices a mapping made: its MoE tokens sent by ``dispatcher`` (choices.MoeDispatcher),
        their all-to-all overlapped or not (``a2a_overlap``), selective recomputation redoing ``recompute_modules``
        (choices.RecomputeModule); None keeps the workload's own."""
        changes = {}
        if recompute_modules is not None and tuple(recompute_modules) != self.recompute_modules:
            changes["recompute_modules"] = tuple(recompute_modules)
        if dispatcher is not None and dispatcher != self.moe_dispatcher:
            changes["moe_dispatcher"] = MoeDispatcher(dispatcher)
        if a2a_overlap is not None and a2a_overlap != self.moe_a2a_overlap:
            changes["moe_a2a_overlap"] = bool(a2a_overlap)
        return replace(self, **changes) if changes else self


@dataclass(frozen=True)
class Mapping:
    """One concrete parallel mapping (Megatron-LM terms, Narayanan et al. SC'21)."""

    tp: int
    pp: int
    dp: int
    micro_batch: int
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    sp: bool = False
    recompute: str = "none"
    zero: int = 1
    first_stage_layers: int = 0  # 0 means an even split
    last_stage_layers: int = 0
    placement: str = DEFAULT_PLACEMENT  # rank order of the parallel dimensions, innermost first (model/placement.py)
    uneven_chunks: bool = False  # interleaved chunks may differ in size (Megatron-Core pipeline_model_parallel_layout)
    offload_layers: int = 0  # layers per stage whose activations wait in host memory (Megatron-Core cpu_offloading_num_layers)
    cp_comm: str = "ring"  # context parallelism's exchange: ring (p2p) | a2a (Ulysses) | allgather; choices.CpComm
    etp: int = 1  # expert tensor parallelism: ranks each routed expert is split over (--expert-tensor-parallel-size)
    tp_comm_overlap: bool = False  # TP collectives overlapped with their GEMMs (TE userbuffers, --tp-comm-overlap)
    optimizer_offload: float = 0.0  # owned optimizer state kept and stepped on the host (--optimizer-offload-fraction)
    weight_offload: bool = False  # ZeRO-3's weight shard kept on the host (DeepSpeed offload_param)
    dualpipe: bool = False  # DeepSeek-V3's bidirectional schedule: rank i runs stage i and stage pp-1-i (model/pipeline.py)
    module_offload: bool = False  # workload.offload_modules' inputs offloaded (--fine-grained-activation-offloading)
    # how an MoE model's routed tokens reach their experts (choices.MoeDispatcher); None: the workload's (moe_dispatcher)
    moe_dispatcher: str | None = None
    # the expert all-to-all hidden behind another micro-batch's compute; None: the workload's (moe_a2a_overlap)
    moe_a2a_overlap: bool | None = None
    # what recompute selective redoes (choices.RecomputeModule values); None: the workload's (recompute_modules)
    recompute_modules: tuple | None = None

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def chosen_workload(self, workload: Workload) -> Workload:
        """``workload`` with the choices this mapping made of what a workload otherwise states (``moe_dispatcher``,
        ``moe_a2a_overlap``, ``recompute_modules``; the workload's own where the mapping leaves them)."""
        return workload.with_choices(self.moe_dispatcher, self.moe_a2a_overlap, self.recompute_modules)

    def a2a_overlapped(self, workload: Workload) -> bool:
        """Whether this mapping hides an expert all-to-all behind compute: overlap chosen and ep > 1 (at ep 1
        there is no all-to-all to hide; Megatron-Core refuses the overlap there)."""
        return self.ep > 1 and self.chosen_workload(workload).moe_a2a_overlap

    def as_dict(self) -> dict:
        return {
            "tp": self.tp,
            "pp": self.pp,
            "dp": self.dp,
            "cp": self.cp,
            "ep": self.ep,
            "micro_batch": self.micro_batch,
            "vpp": self.vpp,
            "sp": self.sp,
            "recompute": self.recompute,
            "zero": self.zero,
            "first_stage_layers": self.first_stage_layers,
            "last_stage_layers": self.last_stage_layers,
            "placement": self.placement,
            "uneven_chunks": self.uneven_chunks,
            "offload_layers": self.offload_layers,
            "cp_comm": self.cp_comm,
            "etp": self.etp,
            "tp_comm_overlap": self.tp_comm_overlap,
            "optimizer_offload": self.optimizer_offload,
            "weight_offload": self.weight_offload,
            "dualpipe": self.dualpipe,
            "module_offload": self.module_offload,
            **({"moe_dispatcher": str(self.moe_dispatcher)} if self.moe_dispatcher is not None else {}),
            **({"moe_a2a_overlap": self.moe_a2a_overlap} if self.moe_a2a_overlap is not None else {}),
            **({"recompute_modules": list(self.recompute_modules)} if self.recompute_modules is not None else {}),
        }


DECODE_ATTENTION_KERNELS = ("grouped", "per_query_head")


@dataclass(frozen=True)
class InferenceWorkload:
    """What is served: requests of ``input_len`` prompt tokens and ``output_len`` generated tokens.

    ``batch`` is the number of requests one replica (one model instance: tp·pp GPUs) runs at once,
    its decode batch; None when the planner chooses it. ``precision`` is the GEMM (activation)
    precision, ``weight_precision`` the stored weights' (weight-only quantisation when narrower),
    ``kv_precision`` the KV cache's. SLOs are upper bounds in seconds, None when absent.
    """

    input_len: int
    output_len: int
    batch: int | None = None
    precision: str = "bf16"
    kv_precision: str = "bf16"
    weight_precision: str = "bf16"
    serving: str = "static"
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    kv_block_tokens: int = 16  # paged KV block (vLLM's default block_size 16; Kwon et al., SOSP 2023)
    # the engine's token budget of one pass (TensorRT-LLM max_num_tokens, vLLM max_num_batched_tokens): every token a pass
    # carries counts against it, a decoding sequence's one as well as the prompt tokens (inference.budget_micro_batch);
    # None: none stated, the plan sets what it needs (launch lines: at least inference.DEFAULT_PASS_TOKENS)
    max_prefill_tokens: int | None = None
    decode_attention: str = "grouped"  # grouped (K/V read once per KV head) | per_query_head (once per query head)
    # share of the memory free after weights and activations the engine gives its KV-cache pool (TensorRT-LLM
    # KvCacheConfig.free_gpu_memory_fraction, default 0.9: docs/source/examples/kvcacheconfig.md); kv_cache.kv_pool_bytes
    kv_cache_memory_fraction: float = 0.9
    # serving engine whose efficiencies replace the device file's (problems/engines/<name>.yaml; applied when the
    # problem builds its system, solver.library.device_under_engine); None: the device file's own measurements
    engine: str | None = None
    # the load to sustain, requests per second (each of input_len prompt and output_len generated tokens);
    # None: no load target (serving_step.compose: the request_rate limit)
    request_rate: float | None = None
    # a finite set of this many identical requests queued at once (an offline run), served in waves
    # (inference.request_waves); None: the steady state
    requests: int | None = None
    # the engine's largest batch per replica (vLLM --max-num-seqs; TensorRT-LLM --max_batch_size and MLPerf's
    # gpu_batch_size x pp, as they bound each micro-batch in flight): the planner's default batches go up to it;
    # None: up to solver.serving_space.MAX_DEFAULT_BATCH
    max_batch_size: int | None = None
    # the spread of request lengths, as two moments of the dataset (inference.mean_decode_context): E[o²]/E[o]² of
    # the generated lengths o (>= 1) and E[p·o]/(E[p]·E[o]) of prompt and generated lengths; 1.0: identical requests
    output_len_dispersion: float = 1.0
    prompt_output_comoment: float = 1.0
    # a finite set whose lengths vary (continuous serving): the longest answer a request may generate, tokens (the
    # engine's max output length, where a share of the answers reaches it), which the set's drain lasts
    # (serving_step.drained_makespan); None: identical requests, served in waves
    output_len_max: int | None = None
    # the smallest batch the engine's CUDA graphs are captured at, with padding on: a drain step of fewer sequences
    # runs as that many (TensorRT-LLM cuda_graph_batch_sizes with cuda_graph_padding_enabled); 1: none
    cuda_graph_min_batch: int = 1
    # the layer GEMMs (choices.LayerGemm) the quantised checkpoint leaves at 16 bits, weights and compute (a ModelOpt
    # checkpoint's exclude_modules: nvidia/DeepSeek-R1-FP4 keeps MLA's down- and up-projections in BF16); (): every
    # layer GEMM at weight_precision and precision
    unquantised_gemms: tuple = ()
    # where the experts span ep/tp > 1 replicas (attention data parallelism), the mean over the maximum of the tokens
    # the replicas bring to a step: their own work runs at the busiest's pace (inference.replica_wait); 1.0: balanced
    attention_dp_balance: float = 1.0
    kind: str = "inference"
    source: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class PoolMapping:
    """One pool of identical model replicas: tp·pp GPUs each, dp replicas; ep spreads the experts
    of an MoE model over ep ranks (ep divides tp·dp, experts laid over the pool's GPUs)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def as_dict(self) -> dict:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp}


@dataclass(frozen=True)
class ServingMapping:
    """A serving plan: the decode batch per replica and the pool(s). Static and continuous serving
    run prefill and decode on ``decode``; disaggregated serving adds a ``prefill`` pool."""

    batch: int
    decode: PoolMapping
    prefill: PoolMapping | None = None

    @property
    def num_gpus(self) -> int:
        return self.decode.num_gpus + (self.prefill.num_gpus if self.prefill is not None else 0)

    def as_dict(self) -> dict:
        if self.prefill is None:
            return {**self.decode.as_dict(), "batch": self.batch}
        return {"prefill": self.prefill.as_dict(), "decode": self.decode.as_dict(), "batch": self.batch}


def _by_tokens(kv_tokens: float, tokens: tuple, curve: tuple, flat: float) -> float:
    """An attention kernel's fraction of the peak for calls attending ``kv_tokens`` keys: its curve (``tokens``,
    ``curve``; log-linear, held beyond its ends) where a device file gives one, else its ``flat`` rate."""
    if not tokens:
        return flat
    return _log_interp(math.log(max(kv_tokens, 1.0)), *_log_curve(tokens, curve))


@functools.lru_cache(maxsize=64)
def _log_curve(xs: tuple, ys: tuple) -> tuple:
    """(log x, y, slope of each segment) of a measured efficiency curve, for ``_log_interp``."""
    lx = [math.log(x) for x in xs]
    slopes = [(ys[i + 1] - ys[i]) / (lx[i + 1] - lx[i]) for i in range(len(lx) - 1)]
    return lx, list(ys), slopes


def _log_interp(x: float, lx: list, ys: list, slopes: list) -> float:
    """``np.interp(x, lx, ys)`` for one x: linear between the points, constant beyond the ends."""
    if x <= lx[0]:
        return float(ys[0])
    if x >= lx[-1]:
        return float(ys[-1])
    i = bisect.bisect_right(lx, x) - 1
    return float(slopes[i] * (x - lx[i]) + ys[i])
