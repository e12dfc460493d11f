"""Transformer Engine's fused grouped MLP (``workload.fused_grouped_mlp``): a mixture-of-experts layer's routed
experts run as two grouped GEMMs whose epilogues do the elementwise work between them.

Forward: the first grouped GEMM (gate and up projections) applies SwiGLU and the router's probabilities in its
epilogue, writing its own output (kept for the backward) and the second GEMM's input; backward: the second GEMM's
data-gradient kernel applies SwiGLU's derivative in its epilogue. So a routed expert's activation and its derivative
stream nothing of their own (``compute.elementwise_forward_bytes``). Under MXFP8 the epilogues also quantise: the
first writes the second's input in MXFP8 (both copies with their scales), the second the first's output gradient, so
those two casts stream nothing either (``compute.low_precision_cast_bytes``); under NVFP4 both epilogues write 16 bits
and a separate grouped kernel quantises them, as without the fusion. The GEMMs are timed as before, the epilogues'
writes hidden under their compute [assumption: no measurement of the fused kernels at hand]. The first GEMM's input
(the dispatched tokens) and the second's output gradient are quantised on their own either way.

Source: Transformer Engine ``ops/fused/forward_grouped_mlp.py`` (``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8``: cuDNN
front-end's ``grouped_gemm_glu_wrapper_sm100``, "grouped GEMM, GLU activation, and post-multiplication", its outputs
the GLU input and the row- and column-wise MXFP8 input of FC2) and ``backward_grouped_mlp.py``
(``grouped_gemm_dglu_wrapper_sm100``) as added in NVIDIA/TransformerEngine 29a8c2f (2026-04-03, "GEMM + Swiglu fused
Grouped MLP for MXFP8"; in release v2.15), since extended to NVFP4 (``ops/fused/grouped_mlp.py`` at d0067d0: FC1's
and the dGLU kernel's outputs in bf16 under NVFP4, quantised by ``_group_quantize_for_grouped_mlp``; no fusion under
NVFP4 without its random Hadamard transform). Enabled by ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` with Megatron-Core's
Transformer Engine op fuser (``USE_TE_OPS``), as NVIDIA's MLPerf Training v6.0 DeepSeek-V3 configs set both. Where
it runs (``fused_grouped_mlp_problem``): compute capability 10 (Transformer Engine's ``is_supported``: Blackwell,
Blackwell Ultra); FC1's and FC2's widths multiples of 64 (``validate_grouped_mlp_dims``); no recomputation of the
activation (``_ScaledGLU`` refuses it); in Megatron-Core (``moe/experts.py`` ``_is_fused_impl_supported``) no expert
tensor parallelism and no offloading of the experts' FC1 input or activation.
"""

from __future__ import annotations

from .choices import Architecture, LowPrecisionRecipe, OffloadModule, RecomputeModule
from .specs import DeviceSpec, ModelSpec, Workload

# the block-scaled recipes the fused kernels run under (Transformer Engine's grouped_mlp.py)
BLOCK_SCALED = (LowPrecisionRecipe.MXFP8, LowPrecisionRecipe.NVFP4)
# the recipe whose quantisation runs in the GEMMs' epilogues (NVFP4's runs in a kernel of its own)
EPILOGUE_QUANTISED = LowPrecisionRecipe.MXFP8
# compute capability 10 (Transformer Engine's is_supported)
FUSED_ARCHITECTURES = (Architecture.BLACKWELL, Architecture.BLACKWELL_ULTRA)
# FC1's and FC2's in and out features must be multiples of this (validate_grouped_mlp_dims)
WIDTH_MULTIPLE = 64
# what Megatron-Core runs only unfused: the activation recomputed, the experts' FC1 input or activation offloaded
UNFUSED_RECOMPUTE = (RecomputeModule.MOE_ACT,)
UNFUSED_OFFLOAD = (OffloadModule.EXPERT_FC1, OffloadModule.MOE_ACT)


def unfused_recompute_problem(modules, field: str) -> str | None:
    """Why the fused grouped MLP cannot run beside selective recomputation of ``modules`` (named by ``field``): it does
    not recompute the experts' activation (Transformer Engine refuses it); None when none of them asks that."""
    recomputed = [m for m in modules if m in UNFUSED_RECOMPUTE]
    if recomputed:
        return (
            f"the fused grouped MLP does not recompute the experts' activation (Transformer Engine refuses it): drop "
            f"{', '.join(recomputed)} from {field}, or set it false"
        )
    return None


def fused_grouped_mlp_problem(model: ModelSpec, workload: Workload, device: DeviceSpec | None = None) -> str | None:
    """Why the fused grouped MLP cannot run ``workload`` here, or None when it can: it needs a mixture-of-experts
    model with SwiGLU experts whose widths are multiples of 64, low-precision training under a block-scaled recipe
    (MXFP8, or NVFP4 with its Hadamard transform), neither the activation recomputed nor the experts' FC1 input or
    activation offloaded, and, where the device is known, a Blackwell-class device (its architecture, from the device
    file). Expert tensor parallelism: ``fused_grouped_mlp_etp_problem``."""
    if model.moe is None or model.activation != "swiglu":
        kind = "is dense" if model.moe is None else f"has {model.activation} experts"
        return f"the fused grouped MLP fuses a mixture-of-experts layer's SwiGLU experts, model {model.name} {kind}; set it false"
    widths = (model.hidden, model.moe.expert_ffn)
    if any(w % WIDTH_MULTIPLE for w in widths):
        return (
            f"the fused grouped MLP's kernels need the hidden size and the expert width to be multiples of {WIDTH_MULTIPLE}, "
            f"model {model.name} has {widths[0]} and {widths[1]}; set it false"
        )
    recipe = workload.low_precision_recipe
    if workload.precision not in ("fp8", "fp4") or recipe not in BLOCK_SCALED:
        allowed = " or ".join(str(r) for r in BLOCK_SCALED)
        got = "no recipe" if recipe is None else f"recipe {recipe}"
        return (
            f"the fused grouped MLP quantises with a block-scaled recipe: needs precision fp8 or fp4 with "
            f"low_precision_recipe {allowed} (got precision {workload.precision}, {got}); set it false"
        )
    if recipe == LowPrecisionRecipe.NVFP4 and not workload.nvfp4_hadamard:
        return (
            "under nvfp4 the fused grouped MLP needs nvfp4_hadamard true (Transformer Engine does not fuse without the "
            "random Hadamard transform); set it false, or nvfp4_hadamard true"
        )
    reason = unfused_recompute_problem(workload.recompute_modules, "workload.recompute_modules")
    if reason is not None:
        return reason
    offloaded = [m for m in workload.offload_modules if m in UNFUSED_OFFLOAD]
    if offloaded:
        return (
            f"Megatron-Core runs the experts unfused when it offloads {' and '.join(offloaded)}: drop "
            f"{', '.join(offloaded)} from workload.offload_modules, or set it false"
        )
    if device is not None and device.architecture not in FUSED_ARCHITECTURES:
        allowed = ", ".join(str(a) for a in FUSED_ARCHITECTURES)
        return (
            f"the fused grouped MLP's kernels need compute capability 10 (architecture {allowed}), the {device.name} is "
            f"{device.architecture or 'of no stated architecture'}; set it false"
        )
    return None


def fused_grouped_mlp_etp_problem(etps) -> str | None:
    """Why the fused grouped MLP cannot run at the expert tensor parallelism ``etps`` (the sizes a mapping lists), or
    None: Megatron-Core fuses only whole experts (``_is_fused_impl_supported``: an expert tensor-parallel group of 1)."""
    wider = sorted({e for e in etps if e != 1})
    if wider:
        return f"the fused grouped MLP needs etp 1 (Megatron-Core fuses only whole experts), got etp {wider}; use etp 1"
    return None
