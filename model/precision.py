"""Number formats: bytes per element (IEEE 754 / OCP MX specifications)."""

from typing import NamedTuple

from .choices import LowPrecisionRecipe as R
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


class QuantisationRecipe(NamedTuple):
    """What a low-precision training recipe streams to quantise one 16-bit GEMM input: ``reads`` passes
    over it (the cast, plus an amax pass where the scale comes from the tensor itself), then two
    quantised copies written (row-wise for its own GEMM, column-wise for the weight-gradient GEMM, as
    Transformer Engine keeps both), each ``precision`` elements with ``scale_bytes`` of scales per element.
    ``transform_reads`` of the reads are a transform's own pass (NVFP4's random Hadamard transform of the
    column-wise copy), which a run without the transform saves."""

    precision: str
    reads: int
    scale_bytes: float
    transform_reads: int = 0

    @property
    def copy_bytes(self) -> float:
        """Bytes per element of one quantised copy, its scales included."""
        return bytes_per_element(self.precision) + self.scale_bytes


# Transformer Engine's recipes (docs: transformer_engine.common.recipe; NVIDIA, "Pretraining Large Language
# Models with NVFP4", 2025): delayed scaling fuses the amax into its cast (one pass); current scaling
# reads the tensor once for its amax first; MXFP8 writes an E8M0 scale per 32 values in each copy;
# blockwise an fp32 scale per 128; NVFP4 reads for the global amax, then quantises row-wise and, through a
# 16x16 random Hadamard transform, column-wise in a second pass, an E4M3 scale per 16 values in each copy.
# Without the transform (NVTE_NVFP4_DISABLE_RHT=1; common/recipe/__init__.py: it is applied to the column-wise
# usage only) both copies come from one pass, as MXFP8's do [assumption: the fused row- and column-wise cast].
RECIPES = {
    R.DELAYED: QuantisationRecipe("fp8", 1, 0.0),
    R.TENSORWISE: QuantisationRecipe("fp8", 2, 0.0),
    R.MXFP8: QuantisationRecipe("fp8", 1, 1.0 / 32.0),
    R.BLOCKWISE: QuantisationRecipe("fp8", 1, 4.0 / 128.0),
    R.NVFP4: QuantisationRecipe("fp4", 3, 1.0 / 16.0, transform_reads=1),
}
DEFAULT_RECIPE = {"fp8": R.DELAYED, "fp4": R.NVFP4}  # Megatron-LM's --fp8-recipe default; NVFP4 for fp4


def training_recipe(precision: str, recipe: str | None) -> R | None:
    """The recipe FP8/FP4 training at ``precision`` quantises with (``recipe``, or the precision's
    default); None for 16-bit training. ProblemError naming ``workload.low_precision_recipe`` when the
    recipe does not produce that precision."""
    if precision not in DEFAULT_RECIPE:
        if recipe is not None:
            raise ProblemError(
                f"a recipe quantises fp8 and fp4 training; the workload trains in {precision}",
                field="workload.low_precision_recipe",
            )
        return None
    if recipe is None:
        return DEFAULT_RECIPE[precision]
    fitting = [r.value for r in R if RECIPES[r].precision == precision]
    if recipe not in fitting:
        raise ProblemError(
            f"{recipe!r} does not train in {precision}; allowed: {', '.join(fitting)}", field="workload.low_precision_recipe"
        )
    return R(recipe)


def quantised_bytes_per_element(recipe: R, transform: bool = True) -> float:
    """HBM bytes streamed per element of a 16-bit GEMM input that ``recipe`` quantises: its reads of
    the 16-bit tensor and the two quantised copies with their scales (``QuantisationRecipe``); without
    ``transform`` (``Workload.nvfp4_hadamard`` false), the recipe's transform pass is not read."""
    r = RECIPES[recipe]
    reads = r.reads - (0 if transform else r.transform_reads)
    return reads * BYTES_PER_ELEMENT["bf16"] + 2.0 * r.copy_bytes


def gathered_bytes_per_element(recipe: R | None, activation_bytes: float) -> float:
    """Bytes per element a tensor-parallel all-gather of a GEMM's input moves: under a low-precision recipe
    Transformer Engine quantises the input before it gathers it, one row-wise copy with its scales (the sequence-
    parallel input of a column-parallel GEMM, its re-gather for the weight gradient, a row-parallel GEMM's output
    gradient: module/layernorm_linear.py, linear.py and base.py grad_output_preprocess, gather_along_first_dim with
    the quantizer, the userbuffers path alike); ``activation_bytes``, the 16-bit activation, without one."""
    return activation_bytes if recipe is None else RECIPES[recipe].copy_bytes


def attention_quantised_bytes_per_element(recipe: R) -> float:
    """HBM bytes streamed per element of a 16-bit attention input that FP8 attention quantises (Q, K and V in
    the forward, the output's gradient in the backward): its reads and one FP8 copy with a per-tensor scale.
    cuDNN's FP8 attention takes per-tensor scales, so Transformer Engine quantises its inputs with delayed
    scaling under the delayed recipe and with current scaling (an amax pass first) under the others
    (NVTE_DPA_FP8_RECIPE; MLPerf Training v5.1's NVFP4 configs set Float8CurrentScaling)."""
    reads = RECIPES[R.DELAYED if recipe == R.DELAYED else R.TENSORWISE].reads
    return reads * BYTES_PER_ELEMENT["bf16"] + BYTES_PER_ELEMENT["fp8"]
