"""Number formats: bytes per element (IEEE 754 / OCP MX specifications)."""

from .errors import ProblemError

BYTES_PER_ELEMENT = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int4": 0.5}

TRAINING_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")


def bytes_per_element(precision: str) -> float:
    """Storage size of one element in ``precision``, in bytes."""
    try:
        return BYTES_PER_ELEMENT[precision]
    except KeyError:
        raise ProblemError(f"unknown precision {precision!r}; allowed: {', '.join(BYTES_PER_ELEMENT)}") from None


def activation_precision(compute_precision: str) -> str:
    """Precision in which activations are stored and exchanged.

    FP8/FP4 training (Transformer Engine, NVIDIA's FP8 training recipe) runs the GEMMs in the
    low precision but keeps activations, attention and communication in bf16.
    """
    return "bf16" if compute_precision in ("fp8", "fp4") else compute_precision


# Serving: weights may be stored narrower than the GEMMs compute (weight-only quantisation) and the
# KV cache has its own format.
INFERENCE_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")  # GEMM (activation) precision
WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "fp4", "int4")
KV_PRECISIONS = ("bf16", "fp16", "fp8", "fp4")

# Block-scale overhead per stored element, bytes. NVFP4 keeps one FP8 (E4M3) scale per 16 values
# (NVIDIA, "Introducing NVFP4", 2025; OCP MX v1.0 uses 32-value blocks with an 8-bit scale); int4
# weight-only quantisation (AWQ, Lin et al. MLSys 2024; GPTQ) keeps an fp16 scale and an fp16 zero
# point per group of 128. FP8 uses per-tensor scales: no per-element overhead.
BLOCK_SCALE_BYTES = {"fp4": 1.0 / 16.0, "int4": 4.0 / 128.0}


def stored_bytes_per_element(precision: str) -> float:
    """Bytes one stored weight or KV-cache element takes, block scales included."""
    return bytes_per_element(precision) + BLOCK_SCALE_BYTES.get(precision, 0.0)
