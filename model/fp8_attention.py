"""FP8 flash attention: Transformer Engine's FP8 DotProductAttention (cuDNN's fused FP8 attention, forward
and backward: NVTE_FP8_DPA_BWD defaults to 1), which Megatron-Core runs under
``TransformerConfig.fp8_dot_product_attention`` (``workload.fp8_attention``).

Time, against the 16-bit kernel the device file measures (``compute.attention_core_forward_time_s``), by
one rule [assumption] (benchmarks/device_curves.py applies it to Blackwell Ultra as well): a score element
costs its tensor-core work and its softmax exponential one after the other. In units of the FP8 tensor-core
time of the element's two products (QK^T and AV, 2·(d_qk + d_v) FLOPs), a 16-bit forward costs 2 + e, an
FP8 one 1 + e, the backward 2.5x the tensor work and one exponential again (FlashAttention-2, Sec. 4.1),
with e the exponential's cost (``exp_ratio``). So FP8 gains most where the exponential is cheap against
the products: wide heads, and devices whose special-function units keep pace with their tensor cores.

Grouped-query heads (fewer key/value heads than query heads) are timed from measurement where the device
file has one (``efficiency.fp8_attention_grouped``: cuDNN's own FP8-over-BF16 times per pass, by keys per
call, problems/measurements/published_kernels.yaml ``cudnn_sdpa_training``): there the rule fails. On GB200
at 8K keys cuDNN's FP8 backward of Llama 3.1's 64/8 heads is 1.09x its BF16 one, where the rule gives 1.65x;
its forward 1.30x against 1.43x. The same measurements hold the rule on multi-head (MLA) attention, DeepSeek-V3's
and Kimi K2.6's heads, within a few per cent per pass (tests/test_fp8_attention.py). Multi-head attention, and
grouped heads on a device without the measurement, keep the rule [assumption]; so does Hopper, whose measured causal
FP8 backward (cuDNN 9.19 on H200) does not skip the masked half (benchmarks/device_curves.py). The ratios are of
causal calls, a context-parallel rank's whole share at cp = 1; under ring attention with cp > 1 the off-diagonal steps
are unmasked, whose ratios differ [assumption: the causal ones], and under the all-to-all and all-gather schemes a
call sees all the keys, looked up at seq/cp as the 16-bit curve is (``compute.attention_core_forward_time_s``).

Memory: the attention keeps its FP8 Q, K and V for the backward instead of 16-bit ones (``memory``'s
``LayerTokens.attention_input_bytes``). Casts: Q, K and V quantised in the forward, the output's gradient
in the backward (``cast_bytes``).
"""

from __future__ import annotations

from .choices import LowPrecisionRecipe
from .compute import FLASH_BACKWARD_FACTOR, attention_activation_widths, attention_head_dims
from .errors import ProblemError
from .precision import attention_quantised_bytes_per_element
from .specs import DeviceSpec, ModelSpec, Workload

# d_qk + d_v of DeepSeek-V3's MLA heads (192 + 128), the shape NVIDIA's published FP8 attention speed-up was
# measured at: the width a device file's ``softmax_exp_ratio`` is given for
REFERENCE_SCORE_WIDTH = 320
SIXTEEN_BIT_TENSOR_UNITS = 2.0  # a 16-bit product takes twice the FP8 tensor-core time (half the dense rate)
FP8_SAVED_BYTES = 1.0  # Q, K and V kept for the backward, and exchanged, in FP8


def fp8_attention_problem(precision: str, attention: str, recipe, device: DeviceSpec | None = None) -> str | None:
    """Why FP8 attention cannot run here, or None when it can: it needs FP8 or FP4 training (Transformer Engine's
    fused FP8 attention under an FP8 autocast), flash attention, a recipe Megatron-Core passes ``fp8_dpa`` to (not
    blockwise: it builds Float8BlockScaling without it, megatron/core/fp8_utils.py) and, to be timed, the device
    file's ``softmax_exp_ratio``."""
    if precision not in ("fp8", "fp4") or attention != "flash":
        return (
            f"FP8 attention needs precision fp8 or fp4 and attention flash (Transformer Engine's fused FP8 attention, "
            f"Megatron-Core fp8_dot_product_attention), got precision {precision}, attention {attention}; set it false"
        )
    if recipe == LowPrecisionRecipe.BLOCKWISE:
        return (
            "FP8 attention does not run under the blockwise recipe (Megatron-Core builds Float8BlockScaling without "
            "fp8_dpa, megatron/core/fp8_utils.py); use delayed, tensorwise, mxfp8 or nvfp4, or set it false"
        )
    if device is not None and not device.softmax_exp_ratio:
        return f"device {device.name} gives no softmax_exp_ratio, so FP8 attention cannot be timed on it; set it false"
    return None


def serial_pass_time(tensor_units: float, exponentials: float, exp_ratio: float) -> float:
    """Time of a flash-attention pass per score element, in FP8 tensor-core units (the module docstring's
    rule): ``tensor_units`` of tensor-core work, then ``exponentials`` softmax exponentials of
    ``exp_ratio`` units each."""
    return tensor_units + exponentials * exp_ratio


def exp_ratio(model: ModelSpec, device: DeviceSpec) -> float:
    """A softmax exponential's time over the FP8 tensor-core time of its score element's two products for
    ``model``'s heads on ``device``: the device file's ``softmax_exp_ratio`` (given at 320-wide scores),
    inversely as the products' width d_qk + d_v. ProblemError where the device file gives none."""
    reason = fp8_attention_problem("fp8", "flash", None, device)
    if reason is not None:
        raise ProblemError(reason, field="workload.fp8_attention")
    d_qk, d_v = attention_head_dims(model)
    return device.softmax_exp_ratio * REFERENCE_SCORE_WIDTH / (d_qk + d_v)


def grouped_query(model: ModelSpec) -> bool:
    """Whether ``model``'s attention has fewer key/value heads than query heads (GQA, MQA)."""
    return model.kv_heads < model.heads


def pass_factors(model: ModelSpec, device: DeviceSpec, workload: Workload, kv_tokens: float) -> tuple[float, float]:
    """(forward, backward) time of the attention core against its 16-bit kernel's for calls of ``kv_tokens`` keys,
    dimensionless: 1 and 1 unless ``workload.fp8_attention``; then, for grouped-query heads on a device that measured
    them, the measured ratios there (``DeviceSpec.fp8_attention_grouped``), else (1 + e)/(2 + e) and
    (2.5 + e)/(5 + e) (``serial_pass_time``)."""
    if not workload.fp8_attention:
        return 1.0, 1.0
    if grouped_query(model) and device.fp8_attention_grouped is not None:
        return device.fp8_attention_grouped.at(kv_tokens)
    e = exp_ratio(model, device)
    forward = serial_pass_time(1.0, 1.0, e) / serial_pass_time(SIXTEEN_BIT_TENSOR_UNITS, 1.0, e)
    backward_units = FLASH_BACKWARD_FACTOR
    backward = serial_pass_time(backward_units, 1.0, e) / serial_pass_time(SIXTEEN_BIT_TENSOR_UNITS * backward_units, 1.0, e)
    return forward, backward


def cast_bytes(model: ModelSpec, workload: Workload, tokens: float, tp: int, recipe) -> tuple[float, float]:
    """(forward, backward) HBM bytes of FP8 attention's quantisation on one rank for ``tokens`` tokens: Q, K
    and V in the forward, the output's gradient in the backward
    (``precision.attention_quantised_bytes_per_element`` under the training ``recipe``); 0 without it."""
    if not workload.fp8_attention:
        return 0.0, 0.0
    qkv, out = attention_activation_widths(model)
    per_element = attention_quantised_bytes_per_element(recipe)
    return tokens * qkv / tp * per_element, tokens * out / tp * per_element


def exchanged_output_bytes_per_element(workload: Workload, recipe, sixteen_bit: float) -> float:
    """Bytes per element of the attention's output as the all-to-alls of context parallelism return it in the
    forward: FP8 under FP8 attention with delayed scaling; 16-bit otherwise, current scaling included
    (Transformer Engine keeps that output in 16 bits: NVTE_DPA_FP8CS_O_in_F16 defaults to 1). Its gradient goes
    back quantised, at ``qkv_bytes_per_element``."""
    if workload.fp8_attention and recipe == LowPrecisionRecipe.DELAYED:
        return FP8_SAVED_BYTES
    return sixteen_bit


def qkv_bytes_per_element(workload: Workload, sixteen_bit: float) -> float:
    """Bytes per element of the attention's Q, K and V, FP8 under FP8 attention, else ``sixteen_bit``: as the
    attention keeps them for the backward, and as context parallelism exchanges them and their gradients, which
    Transformer Engine quantises before any exchange and passes as FP8 data
    (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py, under the per-tensor recipes
    that FP8 attention is taken to run in, ``precision.attention_quantised_bytes_per_element``; an MXFP8 attention
    recipe would exchange them in 16 bits): K and V around the ring and, in the backward, the dK and dV blocks in
    one all-to-all (AttnFuncWithCPAndKVP2P, ``training.cp_ring_backward_time_s``); Q, K, V, their gradients and the
    output's gradient through the all-to-alls (AttnFuncWithCPAndQKVOA2A; the output itself:
    ``exchanged_output_bytes_per_element``); K and V gathered (AttnFuncWithCPAndKVAllGather, whose dK and dV
    are reduce-scattered in 16 bits: not this)."""
    return FP8_SAVED_BYTES if workload.fp8_attention else sixteen_bit
