"""Transformer Engine's fused grouped MLP (``workload.fused_grouped_mlp``): a mixture-of-experts layer's routed
experts run as two grouped GEMMs whose epilogues do the elementwise work between them.

Forward: the first grouped GEMM (gate and up projections) applies SwiGLU, the router's probabilities and the
block-scaled quantisation of the second GEMM's input in its epilogue, writing its own output (kept for the backward)
and the quantised input of the second. Backward: the second GEMM's data-gradient kernel applies SwiGLU's derivative
and quantises the first GEMM's output gradient in its epilogue. So a routed expert's activation, its derivative and
those two casts stream nothing of their own (``compute.elementwise_forward_bytes``,
``compute.low_precision_cast_bytes``); the GEMMs are timed as before, the epilogue's writes hidden under their
compute [assumption: no measurement of the fused kernels at hand]. The first GEMM's input (the dispatched tokens)
and the second's output gradient are still quantised on their own.

Source: Transformer Engine ``ops/fused/forward_grouped_mlp.py`` (``ForwardGroupedMLP_CuTeGEMMSwiGLU_MXFP8``: cuDNN
front-end's ``grouped_gemm_glu_wrapper_sm100``, "grouped GEMM, GLU activation, and post-multiplication", its
outputs the GLU input and the row- and column-wise MXFP8 input of FC2) and ``backward_grouped_mlp.py``
(``grouped_gemm_dglu_wrapper_sm100``) as added in NVIDIA/TransformerEngine 29a8c2f (2026-04-03, "GEMM + Swiglu
fused Grouped MLP for MXFP8"; in release v2.15), since generalised to block-scaled recipes (MXFP8 and NVFP4,
``ops/fused/grouped_mlp.py``). Enabled by ``NVTE_CUTEDSL_FUSED_GROUPED_MLP=1`` with Megatron-Core's
Transformer Engine op fuser (``USE_TE_OPS``), as NVIDIA's MLPerf Training v6.0 DeepSeek-V3 configs set both; the
kernels need compute capability 10 (``is_supported``: Blackwell, Blackwell Ultra).
"""

from __future__ import annotations

from .choices import Architecture, LowPrecisionRecipe
from .specs import DeviceSpec, ModelSpec

# the block-scaled recipes the fused kernels quantise in (Transformer Engine's grouped_mlp.py)
BLOCK_SCALED = (LowPrecisionRecipe.MXFP8, LowPrecisionRecipe.NVFP4)
# compute capability 10 (Transformer Engine's is_supported)
FUSED_ARCHITECTURES = (Architecture.BLACKWELL, Architecture.BLACKWELL_ULTRA)


def fused_grouped_mlp_problem(model: ModelSpec, precision: str, recipe, device: DeviceSpec | None = None) -> str | None:
    """Why the fused grouped MLP cannot run here, or None when it can: it needs a mixture-of-experts model with
    SwiGLU experts, low-precision training under a block-scaled recipe (MXFP8 or NVFP4) and, where the device is
    known, a Blackwell-class device (its architecture, from the device file)."""
    if model.moe is None or model.activation != "swiglu":
        kind = "is dense" if model.moe is None else f"has {model.activation} experts"
        return f"the fused grouped MLP fuses a mixture-of-experts layer's SwiGLU experts, model {model.name} {kind}; set it false"
    if precision not in ("fp8", "fp4") or recipe not in BLOCK_SCALED:
        allowed = " or ".join(str(r) for r in BLOCK_SCALED)
        got = "no recipe" if recipe is None else f"recipe {recipe}"
        return (
            f"the fused grouped MLP quantises with a block-scaled recipe: needs precision fp8 or fp4 with "
            f"low_precision_recipe {allowed} (got precision {precision}, {got}); set it false"
        )
    if device is not None and device.architecture not in FUSED_ARCHITECTURES:
        allowed = ", ".join(str(a) for a in FUSED_ARCHITECTURES)
        return (
            f"the fused grouped MLP's kernels need compute capability 10 (architecture {allowed}), the {device.name} is "
            f"{device.architecture or 'of no stated architecture'}; set it false"
        )
    return None
