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
