"""GEMM curves and memory and attention efficiencies of the devices parasol has not measured itself.

    python benchmarks/device_curves.py [--check]

Our own curves were measured on a Hopper GPU (problems/measurements/h200-microbench.yaml, held in
h100-sxm-80gb.yaml). For A100 and Blackwell the published measurements in
problems/measurements/published_kernels.yaml carry them over, one rule per quantity:

- GEMM, bf16 and fp8: the Hopper curve times the device's maximum achievable matmul efficiency over
  Hopper's, both measured the same way (stas00's MAMF table), times what a GEMM of F FLOPs loses more of
  Blackwell's peak than of Hopper's: e_X(F) = e_Hopper(F) * MAMF_X / MAMF_Hopper * P(F). P
  (``gemm_size_penalty``) is from XLA's GEMM table (problems/measurements/xla_matmul.yaml), which timed one
  grid of shapes on a Hopper GPU and on a B200: at each F, the median over the shapes within a quarter decade
  of B200's bf16 share of its peak over Hopper's at the same shape, over the MAMF ratio; 1 beyond the table's
  largest shapes (5.5e11 FLOPs, where it is 0.96) [assumption: from there on B200 keeps the MAMF ratio]. Every
  Blackwell device and FP8 take B200's bf16 penalty [assumption: the same SMs and tiles; XLA's Hopper FP8
  rates exceed the peak and cannot be the reference]. GB300 has no MAMF entry: it takes GB200's, whose nominal
  bf16 and fp8 peaks and superchip it shares [assumption]. MAMF's runs are short, and a training step runs these curves at
  the device file's efficiency.training_gemm, fitted on published runs (benchmarks/calibrate.py --training-gemm).
- GEMM, fp4: B200's NVFP4 square GEMMs (torchao) at their FLOPs, held above the last; below the first the
  Hopper fp8 shape times the size penalty's fall from the first; another Blackwell device scales them by its
  fp8 MAMF over B200's.
- memory, stream, stream_fp8, kv_stream: the device's copy bandwidth over its spec, times the ratio to a
  plain copy on the same GPU of, in turn, the layer kernels' median (H200), 16-bit and FP8 decode GEMMs
  streaming their weights and decode attention streaming the KV cache (H100 SXM; h100-sxm-80gb.yaml holds
  them); stream_fp8 only where the device has FP8 tensor cores.
- attention (A100): FlashAttention-2's published forward and backward maxima, combined as
  forward + backward (backward = 2.5 x forward FLOPs), times the median/maximum ratio of the same
  kernel over the shapes measured on H200; attention_by_tokens the same by the keys a call attends (the median
  over the H200's shapes of each length, 1K-8K, over their maximum; held beyond), as training times it.
- attention_triton (A100, Hopper): FlashAttention's Triton port (published_kernels.yaml flash_attention_triton):
  on A100, the A100 rule above with FlashAttention-2's forward and backward times each multiplied by its published
  speed-up over the port (forward: the middle of 1.3-1.5x; backward 2x); on Hopper, that A100 fraction times
  FlashAttention-2's utilization on H100 over its forward maximum on A100 (35 % / 73 %) [assumption: the port, written
  for Ampere's synchronous tensor-core instructions as FlashAttention-2 is, keeps what that kernel keeps on Hopper].
  That is over the shapes; attention_triton_by_tokens gives it by the keys a call attends: the same rule at
  FlashAttention-2's best shape, times the median over the H200's FlashAttention-2 shapes of each length (1K-8K,
  causal) over their maximum [assumption: the port's rate rises with the length as FlashAttention-2's does]; beyond 8K
  grown as cuDNN's published H200 rows grow on Hopper (the rule Hopper's own attention curve follows
  [assumption: a tiled kernel keeps gaining past 8K as cuDNN does on the same GPU]), held on A100, which has no such
  rows. No Blackwell value: nothing published speaks for the port there.
- attention (Blackwell): the Hopper measurements up to their 8K keys, each times what cuDNN's own causal attention on
  GB200 reaches of its peak over what it reaches on H200 at that length (Llama 3.1's grouped heads: 0.933 at 2K, 0.954
  at 4K, 0.973 at 8K; 1K takes 2K's; ``blackwell_over_hopper``), beyond them grown as cuDNN's published grouped rows of
  the device's family grow (GB200's
  for B200 and GB200, GB300's for B300 and GB300; ``cudnn_growth_beyond``); on
  Blackwell Ultra (B300, GB300) faster by its doubled softmax exponential rate (published_kernels.yaml
  blackwell_ultra_softmax). Rule [assumption] (model/fp8_attention.py, serial_pass_time): a score element
  costs its tensor-core work M plus its exponential E, one after the other; the FP8 forward's M is half the
  16-bit one's, and NVIDIA's measured FP8 forward speed-up s at an exponential rate r times Blackwell's gives
  E = M_fp8 (s - 1)/(1 - s/r). The 16-bit forward (2 M_fp8 + E) and backward (2.5 x the forward's tensor
  work, one exponential again) then run (2 + 2.5 x 2 + 2e)/(7 + 2e/r) faster together (training's curve,
  e = E/M_fp8), the forward alone (2 + e)/(2 + e/r) (serving's attention).
- softmax_exp_ratio (e at DeepSeek-V3's 320-wide scores, what FP8 attention is timed by): Blackwell's e from
  the same figures, Blackwell Ultra's e/r; Hopper's from FlashAttention-3's FP8 and FP16 forward maxima on
  H100 (published_kernels.yaml flash_attention_3_h100): their ratio s = (2 + e)/(1 + e) at its heads' width,
  scaled to 320 as e is (inversely with d_qk + d_v).
- fp8_attention_grouped (Hopper, Blackwell): FP8 attention's time over BF16's, forward and backward apart, by the
  keys per call, for grouped-query heads: cuDNN's own SDPA training benchmark (published_kernels.yaml
  cudnn_sdpa_training, Llama 3.1 405B's 64/8 heads), GB200's rows for B200 and GB200, GB300's for B300 and GB300
  [assumption: the same chip at another power limit]. Not Hopper: H200's causal FP8 backward there (cuDNN 9.19) does
  not skip the masked half (0.91 of its unmasked time, BF16 0.49), so the Hopper files keep the serial rule
  [assumption], as multi-head attention does, whose rows there the rule reproduces.
- block_fp8_gemm, block_fp8_grouped (Hopper): Float8BlockScaling's GEMMs measured on our H200
  (problems/measurements/h200-fp8-scaling-microbench.yaml, benchmarks/fp8_scaling_microbench.py): per linear, its
  three GEMMs' summed time under the scaling the model's reference curve or grouped rate was measured with (per-tensor
  with fast accumulation for the dense linears; row-wise for the routed experts) over their summed blockwise time;
  the median over the dense linears (DeepSeek-V3's attention and shared experts, Llama 3 70B at tp 4, 8192^3) and over
  the expert shapes. H100 and H800 take the H200's [assumption: one GH100 die, the same cuBLAS kernels].
- grouped_fp8 (Blackwell): the MXFP8 grouped GEMM Megatron-LM's GB200 guide measured, over GB200's FP8
  curve at the same per-expert shape (``compute.gemm_time_s``); the other Blackwell devices take the
  same ratio of their own curves [assumption: the same tensor cores and kernels].

Prints each device's values; --check exits 1 where a device file differs (tests/test_device_curves.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import statistics
import sys
from pathlib import Path
from typing import NamedTuple

import yaml
from fp8_scaling_microbench import BLOCK_PASS_SCALING  # benchmarks/fp8_scaling_microbench.py (torch imported lazily)

from parasol.model.compute import FLASH_BACKWARD_FACTOR, gemm_time_s
from parasol.model.fp8_attention import REFERENCE_SCORE_WIDTH, SIXTEEN_BIT_TENSOR_UNITS, pass_factors, serial_pass_time
from parasol.model.specs import PassRatios, Workload
from parasol.solver.library import load_device, load_model, names

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "problems" / "measurements" / "published_kernels.yaml"
XLA_MATMUL = ROOT / "problems" / "measurements" / "xla_matmul.yaml"
PENALTY_HALF_WIDTH = 0.25  # decades of FLOPs either side of a point whose XLA shapes give its size penalty
H200 = ROOT / "problems" / "measurements" / "h200-microbench.yaml"
H100 = ROOT / "problems" / "measurements" / "h100-microbench.yaml"
FP8_SCALING = ROOT / "problems" / "measurements" / "h200-fp8-scaling-microbench.yaml"
HOPPER = "h100-sxm-80gb"  # the file holding our measured curves
# device file -> its entries in the MAMF table (bf16, fp8); None: no such tensor cores
DEVICES = {
    "a100-sxm-80gb": ("a100", None),
    "a100-sxm-40gb": ("a100", None),  # the same GA100 chip and clocks as the 80 GB part [assumption: the same MAMF]
    "b200": ("b200", "b200"),
    "b300": ("b300", "b300"),
    "gb200": ("gb200", "gb200"),
    "gb300": ("gb200", "gb200"),  # no GB300 entry: GB200's, whose nominal bf16/fp8 peaks it shares [assumption]
}
BLACKWELL = tuple(device for device, (_, fp8) in DEVICES.items() if fp8)  # the devices with FP8 tensor cores here
BLACKWELL_ULTRA = ("b300", "gb300")  # twice Blackwell's softmax exponential rate
# device file -> the GPU of cudnn_sdpa_training whose grouped-query rows it takes
CUDNN_GPU = {
    "b200": "gb200",
    "gb200": "gb200",
    "b300": "gb300",
    "gb300": "gb300",
}  # not Hopper: H200's causal FP8 backward (cuDNN 9.19) runs 0.91 of its unmasked time where BF16's runs 0.49, a kernel
#    that does not skip the masked half, not the device; the Hopper files keep the serial rule [assumption]
AMPERE = ("a100-sxm-80gb", "a100-sxm-40gb")  # FlashAttention-2 paper's A100 rates
HOPPER_DEVICES = ("h100-sxm-80gb", "h200-sxm-141gb", "h800-sxm-80gb")  # one GH100 compute die
STREAM = {"a100-sxm-80gb": "a100", "a100-sxm-40gb": "a100", "b200": "b200", "b300": "b200", "gb200": "b200", "gb300": "b200"}
FWD_BWD_FLOPS = 1.0 + FLASH_BACKWARD_FACTOR  # forward + backward FLOPs over the forward's (h200-microbench.yaml flops_convention)
DIGITS = 3


@functools.cache
def _measurement(path: Path) -> dict:
    """A measurement file, parsed once per process (libyaml's parser where PyYAML has it: the H200 file is large and the
    derivation reads it for every device). Shared: callers read it, never change it."""
    return yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def _eff(entry: dict) -> float:
    return entry["tflops"] / entry["peak_tflops"]


def copy_efficiency(measurement: Path) -> float:
    """A plain copy's fraction of the measured GPU's HBM bandwidth (median of the file's copies)."""
    return statistics.median(e["efficiency"] for e in _measurement(measurement)["memory"]["entries"] if e["op"] == "copy_")


def _flash_causal() -> list[dict]:
    """The H200's FlashAttention-2 measurements (PyTorch's flash backend), causal, forward + backward."""
    entries = _measurement(H200)["attention"]["entries"]
    return [e for e in entries if e.get("backend_used") == "flash" and e.get("causal")]


def flash_median_over_max() -> float:
    """FlashAttention-2 (PyTorch's flash backend), causal, forward + backward, over the H200's shapes."""
    fb = [e["fwd_bwd_efficiency"] for e in _flash_causal()]
    return statistics.median(fb) / max(fb)


def flash_by_tokens_over_max() -> tuple[tuple, tuple]:
    """(sequence lengths, the median over the H200's FlashAttention-2 shapes of that length / the maximum over all):
    ``flash_median_over_max`` by the keys a call attends. Its rise with the length (1K: 0.60, 8K: 0.94) is the
    kernel's own: longer calls give each thread block more key tiles to stream past one query tile."""
    rows = _flash_causal()
    top = max(e["fwd_bwd_efficiency"] for e in rows)
    seqs = sorted({e["seq"] for e in rows})
    return tuple(float(s) for s in seqs), tuple(
        statistics.median(e["fwd_bwd_efficiency"] for e in rows if e["seq"] == s) / top for s in seqs
    )


def combined_flash(fa: dict, forward_slowdown: float = 1.0, backward_slowdown: float = 1.0) -> float:
    """FlashAttention-2's forward and backward maxima on A100 (``fa``: published_kernels.yaml flash_attention_2_a100)
    as one forward + backward fraction of the peak (backward = 2.5 x the forward's FLOPs), each pass's time
    multiplied by its slowdown (a slower kernel's, against FlashAttention-2)."""
    times = forward_slowdown / fa["max_fwd_efficiency"] + FLASH_BACKWARD_FACTOR * backward_slowdown / fa["max_bwd_efficiency"]
    return FWD_BWD_FLOPS / times


def triton_at_maximum(pub: dict) -> float:
    """FlashAttention's Triton port on A100 at FlashAttention-2's best shape, forward + backward, its fraction of the
    16-bit peak: FlashAttention-2's combined maxima (``combined_flash``) with each pass slowed by FlashAttention-2's
    published speed-up over the port (forward: the middle of the published range)."""
    triton = pub["flash_attention_triton"]
    forward = statistics.fmean(triton["fa2_forward_speedup"])
    return combined_flash(pub["flash_attention_2_a100"], forward, triton["fa2_backward_speedup"])


def hopper_kept(pub: dict) -> float:
    """What FlashAttention-2, written for Ampere's synchronous tensor-core instructions, keeps of its utilization on
    Hopper: 35 % of H100's peak over its 73 % forward maximum on A100 [assumption: the Triton port, written for the
    same instructions, keeps as much]."""
    return pub["flash_attention_triton"]["fa2_h100_utilization"] / pub["flash_attention_2_a100"]["max_fwd_efficiency"]


def triton_on_ampere(pub: dict) -> float:
    """FlashAttention's Triton port on A100, forward + backward, its fraction of the 16-bit peak over the shapes: the
    A100 attention rule (x ``flash_median_over_max``) on ``triton_at_maximum``."""
    return triton_at_maximum(pub) * flash_median_over_max()


def triton_on_hopper(pub: dict) -> float:
    """The same on Hopper: ``triton_on_ampere`` x ``hopper_kept``."""
    return triton_on_ampere(pub) * hopper_kept(pub)


def by_tokens(at_maximum: float) -> tuple[tuple, tuple]:
    """A fused attention kernel's curve by the keys a call attends, from its rate at FlashAttention-2's best shape:
    ``at_maximum`` x FlashAttention-2's own rise with the length (``flash_by_tokens_over_max``), held beyond the
    H200's 1K-8K [assumption: the kernel tiles the sequence as FlashAttention-2 does]."""
    tokens, shape = flash_by_tokens_over_max()
    return tokens, tuple(round(at_maximum * y, DIGITS) for y in shape)


def flash_backward_ratio(fa: dict, forward_slowdown: float = 1.0, backward_slowdown: float = 1.0) -> float:
    """A FlashAttention-2-like kernel's backward time over its forward's at FlashAttention-2's best shape on A100: the
    backward's FLOPs (FLASH_BACKWARD_FACTOR forwards) at its published maximum over the forward's at its own, each
    pass slowed by ``*_slowdown`` (the Triton port's, against FlashAttention-2)."""
    return FLASH_BACKWARD_FACTOR * (backward_slowdown / fa["max_bwd_efficiency"]) / (forward_slowdown / fa["max_fwd_efficiency"])


def triton_backward_ratio(pub: dict) -> float:
    """The Triton port's backward time over its forward's (efficiency.attention_triton_backward): FlashAttention-2's
    maxima slowed by its published speed-ups over the port (forward: the middle of 1.3-1.5x; backward 2x). The same on
    Hopper, whose one factor (``hopper_kept``) scales both passes."""
    triton = pub["flash_attention_triton"]
    return flash_backward_ratio(
        pub["flash_attention_2_a100"], statistics.fmean(triton["fa2_forward_speedup"]), triton["fa2_backward_speedup"]
    )


def h200_cudnn_causal_by_seq(value) -> dict:
    """{sequence length: [``value`` of each entry]} over our H200 run's cuDNN causal attention entries
    (h200-microbench.yaml): the shapes whose medians make Hopper's training attention curve (calibrate.py --attention)
    and its split between the passes (``hopper_backward_by_tokens``)."""
    by_seq = {}
    for e in _measurement(H200)["attention"]["entries"]:
        if e["backend_used"] == "cudnn" and e["causal"]:
            by_seq.setdefault(e["seq"], []).append(value(e))
    return dict(sorted(by_seq.items()))


def hopper_backward_by_tokens() -> tuple[tuple, tuple]:
    """Hopper's training attention, backward time over forward's, by the keys a call attends: per measured length, the
    median over our H200 shapes of cuDNN's causal kernel (``h200_cudnn_causal_by_seq``); held beyond 8K."""
    by_seq = h200_cudnn_causal_by_seq(lambda e: (e["fwd_bwd"]["seconds"] - e["fwd"]["seconds"]) / e["fwd"]["seconds"])
    return tuple(float(s) for s in by_seq), tuple(round(statistics.median(v), 2) for v in by_seq.values())


def cudnn_backward_by_tokens(rows: dict) -> tuple[tuple, tuple]:
    """A Blackwell GPU's training attention, backward time over forward's, by keys per call: cuDNN's published bf16 rows
    of that GPU (published_kernels.yaml cudnn_sdpa_training, Llama 3.1 405B's grouped heads, causal); held beyond."""
    keys = sorted(int(k) for k in rows)
    return tuple(float(k) for k in keys), tuple(round(rows[k][1] / rows[k][0], 2) for k in keys)


def triton_by_tokens(pub: dict, kept: float = 1.0, cudnn_rows: dict | None = None) -> tuple[tuple, tuple]:
    """The port's curve by the keys a call attends (efficiency.attention_triton_by_tokens): ``by_tokens`` of
    ``triton_at_maximum`` x ``kept`` (1 on A100, ``hopper_kept`` on Hopper); past 8K carried by ``cudnn_rows``
    (``grown_curve``) where the device's cuDNN rows are published (Hopper: H200's), held where they are not (A100)
    [assumption: a tiled kernel gains past 8K as cuDNN's does on the same GPU, the rule Hopper's cuDNN curve follows]."""
    tokens, efficiencies = by_tokens(triton_at_maximum(pub) * kept)
    if cudnn_rows is None:
        return tokens, efficiencies
    return grown_curve(tokens, efficiencies, cudnn_rows)


def grouped_fp8_blackwell(measured: dict, gb200_fp8: tuple) -> float:
    """The measured MXFP8 grouped GEMM's rate over GB200's FP8 dense curve ``gb200_fp8`` (flops,
    efficiency), as derived, at its per-expert shape."""
    m, n, k = measured["rows_per_expert"], measured["n"], measured["k"]
    gb200 = dataclasses.replace(load_device("gb200"), low_precision_gemm=(("fp8", *gb200_fp8),))
    dense = 2.0 * m * n * k / gemm_time_s(gb200, m, n, k, "fp8")
    return round(measured["tflops"] * 1e12 / dense, 2)


def gemm_size_penalty(xla: dict, mamf_ratio: float):
    """P(F), dimensionless: how much more of its peak B200 loses than Hopper on a bf16 GEMM of F FLOPs, from XLA's
    table ``xla`` (xla_matmul.yaml's devices): the median over the shapes within PENALTY_HALF_WIDTH decades of F of
    B200's share of its dense peak over Hopper's at the same shape, divided by ``mamf_ratio`` (B200's MAMF share over
    Hopper's, the ratio the curves carry at their best shapes); 1 where no shape is that close and F lies beyond the
    table [assumption: B200 keeps the MAMF ratio there; its largest shape, 5.5e11 FLOPs, is at 0.96]."""
    hopper_peak = load_device(HOPPER).peak_flops["bf16"]
    b200_peak = load_device("b200").peak_flops["bf16"]
    hopper = {tuple(r[:4]): r[4] for r in xla["h100-sxm-80gb"]["rows"]}
    ratios = [
        (math.log10(2.0 * math.prod(r[:4])), (r[4] * 1e12 / b200_peak) / (hopper[tuple(r[:4])] * 1e12 / hopper_peak))
        for r in xla["b200"]["rows"]
    ]
    largest = max(x for x, _ in ratios)

    def penalty(flops: float) -> float:
        x = math.log10(flops)
        near = [r for at, r in ratios if abs(at - x) <= PENALTY_HALF_WIDTH]
        if not near:
            if x < largest:
                raise ValueError(f"no shape of XLA's table within {PENALTY_HALF_WIDTH} decades of {flops:.3g} FLOPs")
            return 1.0
        return statistics.median(near) / mamf_ratio

    return penalty


class SoftmaxSpeedup(NamedTuple):
    """How much faster attention runs at a faster exponential rate (``softmax_speedups``)."""

    fp8_forward: float  # the FP8 forward the rule starts from (it gives the published figure back)
    forward: float  # a 16-bit forward alone (serving's attention)
    training: float  # a 16-bit forward + backward (training's curve)


def blackwell_exp_ratio(published: dict) -> float:
    """Blackwell's softmax_exp_ratio: a softmax exponential's time over the FP8 forward's tensor-core time per
    score element at DeepSeek-V3's MLA heads, from the published exponential-rate ratio r and FP8 forward
    speed-up s of Blackwell Ultra (the module docstring's rule: (1 + e)/(1 + e/r) = s)."""
    r, s = published["exp_rate_ratio"], published["fp8_forward_speedup"]
    return (s - 1.0) / (1.0 - s / r)


def hopper_exp_ratio(fa3: dict) -> float:
    """Hopper's softmax_exp_ratio from FlashAttention-3's FP8 and FP16 forward rates on H100 at one head width:
    s = (2 + e)/(1 + e) there, e scaled to the 320-wide reference inversely with d_qk + d_v."""
    s = fa3["fp8_forward_tflops"] / fa3["fp16_forward_tflops"]
    e = (SIXTEEN_BIT_TENSOR_UNITS - s) / (s - 1.0)
    return e * 2 * fa3["head_dim"] / REFERENCE_SCORE_WIDTH


def softmax_speedups(published: dict) -> SoftmaxSpeedup:
    """Blackwell Ultra's attention against Blackwell's from the published exponential-rate ratio and FP8
    forward speed-up (the module docstring's rule: a score element's tensor-core work and exponential
    serial, the upper bound of the 16-bit gain the FP8 figure allows; at DeepSeek-V3's MLA head sizes)."""
    r, e = published["exp_rate_ratio"], blackwell_exp_ratio(published)

    def speedup(tensor: float, exponentials: float) -> float:  # tensor-core time (FP8 forwards) + exponentials
        return serial_pass_time(tensor, exponentials, e) / serial_pass_time(tensor, exponentials, e / r)

    fwd16 = SIXTEEN_BIT_TENSOR_UNITS  # the 16-bit forward's tensor-core time over the FP8 one's
    return SoftmaxSpeedup(
        fp8_forward=speedup(1.0, 1.0),
        forward=speedup(fwd16, 1.0),
        training=speedup(fwd16 * (1.0 + FLASH_BACKWARD_FACTOR), 2.0),  # the backward: 2.5x the tensor work, one exponential
    )


def fp8_over_bf16(rows: dict) -> tuple[tuple, tuple, tuple]:
    """(keys, forward, backward): FP8 attention's time over BF16's per pass from cudnn_sdpa_training rows
    {keys: [bf16 forward, bf16 backward, fp8 forward, fp8 backward] ms}."""
    keys = tuple(sorted(rows))
    return (
        tuple(float(k) for k in keys),
        tuple(round(rows[k][2] / rows[k][0], DIGITS) for k in keys),
        tuple(round(rows[k][3] / rows[k][1], DIGITS) for k in keys),
    )


class BlockShares(NamedTuple):
    """Float8BlockScaling's GEMM rates on Hopper, each the median over the measured linears of one kind of the
    summed time of a linear's three GEMMs (forward, data gradient, weight gradient) under the reference scaling over
    their summed blockwise time (1x128 x 128x128 scales in the first two, 1x128 x 1x128 in the weight gradient)."""

    dense: float  # the dense linears against per-tensor scales with fast accumulation (the FP8 curve's GEMMs)
    grouped: float  # the routed-expert shapes against row-wise scales (the grouped GEMMs grouped_fp8 was measured on)


def block_fp8_shares(measurement: dict) -> BlockShares:
    """``BlockShares`` from the scaling section of fp8_scaling_microbench.py's file; linears named ``expert_*``
    are the routed experts' shapes. Only scalings whose layout was checked against the dequantised product count."""
    layouts = measurement["meta"]["block_layouts"]
    if not all(layouts[s].get("checked") for s in set(BLOCK_PASS_SCALING.values()) | {"rowwise"}):
        raise ValueError(f"{FP8_SCALING.name}: a block scaling's layout was not checked; run the script again")
    linears: dict[tuple, dict] = {}
    for e in measurement["scaling"]["entries"]:
        linears.setdefault((e["model"], e["layer"]), {})[e["pass"]] = e
    dense, grouped = [], []
    for (_, layer), passes in linears.items():
        if set(passes) != set(BLOCK_PASS_SCALING):
            continue
        block = sum(passes[p][f"{s}_seconds"] for p, s in BLOCK_PASS_SCALING.items())
        if layer.startswith("expert"):
            grouped.append(sum(p["rowwise_seconds"] for p in passes.values()) / block)
        else:
            dense.append(sum(p["tensorwise_fast_seconds"] for p in passes.values()) / block)
    return BlockShares(round(statistics.median(dense), 2), round(statistics.median(grouped), 2))


def derive() -> dict:
    """{device file: {gemm: (flops, eff), gemm_fp8: ..., gemm_fp4: ..., memory: x, grouped_fp8: x, attention: x}}."""
    pub = _measurement(PUBLISHED)
    hopper = load_device(HOPPER)
    bf16_x, bf16_y = hopper.gemm_efficiency_flops, hopper.gemm_efficiency
    fp8_x, fp8_y = next((x, y) for name, x, y in hopper.low_precision_gemm if name == "fp8")
    mamf = pub["mamf"]
    h200_copy, h100_copy = copy_efficiency(H200), copy_efficiency(H100)
    over_copy = {  # each ratio on the GPU it was measured on
        "memory": hopper.memory_efficiency / h200_copy,  # the layer kernels: H200
        "stream": hopper.stream_efficiency / h100_copy,  # decode weight (16-bit, FP8) and KV streaming: H100 SXM
        "stream_fp8": hopper.stream_fp8_efficiency / h100_copy,
        "kv_stream": hopper.kv_stream_efficiency / h100_copy,
    }
    size = gemm_size_penalty(_measurement(XLA_MATMUL)["devices"], _eff(mamf["bf16"]["b200"]) / _eff(mamf["bf16"]["h100"]))
    fp4 = pub["fp4_b200"]
    fp4_points = [(2.0 * p["n"] ** 3, p["pflops"] * 1e3 / fp4["peak_tflops"]) for p in fp4["points"]]
    first_x, first_y = fp4_points[0]
    fp4_below = [
        (x, y * first_y / hopper.gemm_efficiency_at(first_x, "fp8") * size(x) / size(first_x))
        for x, y in zip(fp8_x, fp8_y)
        if x < first_x
    ]
    out = {}
    for device, (bf16_key, fp8_key) in DEVICES.items():
        scale = _eff(mamf["bf16"][bf16_key]) / _eff(mamf["bf16"]["h100"])
        blackwell = device in BLACKWELL  # the size penalty is Blackwell's against Hopper; the A100 keeps Hopper's shape
        values = {
            "gemm": (
                tuple(bf16_x),
                tuple(round(y * scale * (size(x) if blackwell else 1.0), DIGITS) for x, y in zip(bf16_x, bf16_y)),
            )
        }
        if fp8_key:
            f8 = _eff(mamf["fp8"][fp8_key]) / _eff(mamf["fp8"]["h200"])
            values["gemm_fp8"] = (tuple(fp8_x), tuple(round(y * f8 * size(x), DIGITS) for x, y in zip(fp8_x, fp8_y)))
            f4 = _eff(mamf["fp8"][fp8_key]) / _eff(mamf["fp8"]["b200"])
            pts = fp4_below + fp4_points
            values["gemm_fp4"] = (tuple(x for x, _ in pts), tuple(round(y * f4, DIGITS) for _, y in pts))
        s = pub["stream"][STREAM[device]]
        for key, ratio in over_copy.items():
            if key != "stream_fp8" or fp8_key:  # no FP8 kernels, no FP8 streaming (A100)
                values[key] = round(s["tbps"] / s["spec_tbps"] * ratio, 2)
        if device in AMPERE:
            fa = pub["flash_attention_2_a100"]
            values["attention"] = round(combined_flash(fa) * flash_median_over_max(), 2)
            values["attention_by_tokens"] = by_tokens(combined_flash(fa))
            values["attention_triton"] = round(triton_on_ampere(pub), 2)
            values["attention_triton_by_tokens"] = triton_by_tokens(pub)
            values["attention_backward"] = round(flash_backward_ratio(fa), 2)
            values["attention_triton_backward"] = round(triton_backward_ratio(pub), 2)
        out[device] = values
    grouped = grouped_fp8_blackwell(pub["grouped_mxfp8_gb200"], out["gb200"]["gemm_fp8"])
    ultra = softmax_speedups(pub["blackwell_ultra_softmax"])
    exp_b = blackwell_exp_ratio(pub["blackwell_ultra_softmax"])
    block = block_fp8_shares(_measurement(FP8_SCALING))
    for device in HOPPER_DEVICES:
        out[device] = {
            "block_fp8_gemm": block.dense,
            "block_fp8_grouped": block.grouped,
            "softmax_exp_ratio": round(hopper_exp_ratio(pub["flash_attention_3_h100"]), DIGITS),
            "attention_triton": round(triton_on_hopper(pub), 2),
            "attention_triton_by_tokens": triton_by_tokens(pub, hopper_kept(pub), pub["cudnn_sdpa_training"]["grouped"]["h200"]),
            "attention_backward": hopper_backward_by_tokens(),
            "attention_triton_backward": round(triton_backward_ratio(pub), 2),
        }
    for device, gpu in CUDNN_GPU.items():
        out[device]["fp8_attention_grouped"] = fp8_over_bf16(pub["cudnn_sdpa_training"]["grouped"][gpu])
    for device in BLACKWELL:
        out[device]["grouped_fp8"] = grouped
        ultra_device = device in BLACKWELL_ULTRA
        out[device]["softmax_exp_ratio"] = round(
            exp_b / pub["blackwell_ultra_softmax"]["exp_rate_ratio"] if ultra_device else exp_b, DIGITS
        )
        fwd, train = (ultra.forward, ultra.training) if ultra_device else (1.0, 1.0)
        out[device]["attention"] = round(hopper.attention_efficiency * fwd, DIGITS)
        kept = blackwell_over_hopper(pub["cudnn_sdpa_training"])
        measured = [
            (t, y * train * ratio_at(kept, t))
            for t, y in zip(hopper.attention_tokens, hopper.attention_curve)
            if t <= MEASURED_KEYS
        ]
        out[device]["attention_backward"] = cudnn_backward_by_tokens(pub["cudnn_sdpa_training"]["grouped"][CUDNN_GPU[device]])
        out[device]["attention_by_tokens"] = grown_curve(
            [t for t, _ in measured], [y for _, y in measured], pub["cudnn_sdpa_training"]["grouped"][CUDNN_GPU[device]]
        )
    return out


MEASURED_KEYS = 8192  # the longest sequence of our own attention measurement (calibrate.py --attention)


def blackwell_over_hopper(cudnn: dict) -> dict:
    """{keys: GB200's share of its bf16 peak over H200's} for cuDNN's own causal forward + backward at Llama 3.1 405B's
    grouped heads, at the lengths both GPUs published up to our measurement's 8K (published_kernels.yaml
    cudnn_sdpa_training: each row's time per sequence, its ``sequences_per_row``, against the device files' bf16
    peaks). One harness, one kernel family on both GPUs: what the Blackwell curve keeps of Hopper's measured one."""
    rows, sequences = cudnn["grouped"], cudnn["sequences_per_row"]
    peak = {gpu: load_device(name).peak("bf16") for gpu, name in (("gb200", "gb200"), ("h200", "h200-sxm-141gb"))}

    def rate(gpu, keys):  # sequences per second per FLOP/s of peak
        return sequences[gpu] / sum(rows[gpu][keys][:2]) / peak[gpu]

    return {int(k): rate("gb200", k) / rate("h200", k) for k in sorted(rows["gb200"]) if k in rows["h200"] and k <= MEASURED_KEYS}


def ratio_at(ratios: dict, keys: float) -> float:
    """``ratios`` at ``keys``: the nearest published length's, the shortest one's below it."""
    return ratios[min(ratios, key=lambda k: (abs(math.log(k / keys)), k))]


def cudnn_growth_beyond(rows: dict, last_seq: int) -> dict:
    """{sequence length: efficiency over that at ``last_seq``} for the lengths beyond ``last_seq`` of one GPU's cuDNN
    SDPA training rows (published_kernels.yaml cudnn_sdpa_training, grouped heads, causal, bf16 forward + backward):
    a row's FLOPs grow as s², so the ratio is (s/last)² x t(last)/t(s). The attention curves go on past our own
    measurement this way: Hopper's by H200's rows (calibrate.py --attention), Blackwell's by GB200's, Blackwell
    Ultra's by GB300's."""
    seconds = {int(s): row[0] + row[1] for s, row in rows.items()}
    return {s: (s / last_seq) ** 2 * seconds[last_seq] / t for s, t in sorted(seconds.items()) if s > last_seq}


def grown_curve(tokens, efficiencies, rows: dict) -> tuple[tuple, tuple]:
    """A measured attention curve (``tokens``, ``efficiencies``) carried past its last point by one GPU's cuDNN rows
    (``cudnn_growth_beyond``), efficiencies rounded to DIGITS: the curves the device files hold."""
    growth = cudnn_growth_beyond(rows, int(tokens[-1]))
    return (
        tuple(float(t) for t in tokens) + tuple(float(t) for t in growth),
        tuple(round(y, DIGITS) for y in efficiencies) + tuple(round(efficiencies[-1] * g, DIGITS) for g in growth.values()),
    )


# the derived numbers DeviceSpec holds under their own names, and where a device file keeps each
SPEC_NAMED = {"attention_triton_backward": "efficiency.attention_triton_backward", "softmax_exp_ratio": "softmax_exp_ratio"}


def differences(derived: dict) -> list[str]:
    """Where a device file's values differ from the derivation (curves to 3 decimals), and device files that hold
    measured FP8 attention ratios the derivation does not give them."""
    bad = [
        f"{name}: efficiency.fp8_attention_grouped is not derived for it"
        for name in names("systems/devices")
        if "fp8_attention_grouped" not in derived.get(name, {}) and load_device(name).fp8_attention_grouped is not None
    ]
    for device, values in derived.items():
        spec = load_device(device)
        curves = {"gemm": (spec.gemm_efficiency_flops, spec.gemm_efficiency)}
        curves.update({f"gemm_{name}": (x, y) for name, x, y in spec.low_precision_gemm})
        curves["attention_by_tokens"] = (spec.attention_tokens, spec.attention_curve)
        curves["attention_triton_by_tokens"] = (spec.attention_triton_tokens, spec.attention_triton_curve)
        for key, value in values.items():
            if key in curves:
                have = curves.get(key)
                if (
                    have is None
                    or len(have[0]) != len(value[0])
                    or any(
                        not math.isclose(a, b, rel_tol=5e-3) or abs(c - d) > 1e-9
                        for a, b, c, d in zip(have[0], value[0], have[1], value[1])
                    )
                ):
                    bad.append(f"{device}: efficiency.{key} {have} != {value}")
            elif key == "fp8_attention_grouped":
                have = tuple(spec.fp8_attention_grouped) if spec.fp8_attention_grouped is not None else None
                if have != value:
                    bad.append(f"{device}: efficiency.{key} {have} != {value}")
            elif key == "attention_backward":
                have = (
                    spec.attention_backward
                    if isinstance(value, float)
                    else (spec.attention_backward_tokens, spec.attention_backward_curve)
                )
                if have != value:
                    bad.append(f"{device}: efficiency.{key} {have} != {value}")
            elif key in SPEC_NAMED:  # a number DeviceSpec holds under the key's own name
                if abs(getattr(spec, key) - value) > 1e-9:
                    bad.append(f"{device}: {SPEC_NAMED[key]} {getattr(spec, key)} != {value}")
            elif abs(getattr(spec, f"{key}_efficiency") - value) > 1e-9:  # efficiency.KEY is DeviceSpec.KEY_efficiency
                bad.append(f"{device}: efficiency.{key} {getattr(spec, f'{key}_efficiency')} != {value}")
    return bad


def check_arguments(doc: str, files: str, argv=None) -> argparse.Namespace:
    """The command line of a derivation script: --check (exit 1 where one of ``files`` differs)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 where a {files} differs")
    return parser.parse_args(argv)


def report(bad: list[str]) -> int:
    """--check's answer: each difference on stderr, 1 if there is one."""
    for line in bad:
        print(line, file=sys.stderr)
    return 1 if bad else 0


def main(argv=None) -> int:
    args = check_arguments(__doc__, "device file", argv)
    derived = derive()
    for device, values in derived.items():
        print(f"{device}:")
        for key, value in values.items():
            if key in ("attention_by_tokens", "attention_triton_by_tokens"):
                print(f"  {key}:\n    tokens:     [{', '.join(f'{x:g}' for x in value[0])}]")
                print(f"    efficiency: [{', '.join(f'{y:.3f}' for y in value[1])}]")
            elif key == "attention_backward" and not isinstance(value, float):
                print(f"  {key}:\n    tokens: [{', '.join(f'{x:g}' for x in value[0])}]")
                print(f"    ratio:  [{', '.join(f'{y:.2f}' for y in value[1])}]")
            elif key == "fp8_attention_grouped":
                print(f"  {key}:\n    tokens:   [{', '.join(f'{x:g}' for x in value[0])}]")
                print(f"    forward:  [{', '.join(f'{y:.3f}' for y in value[1])}]")
                print(f"    backward: [{', '.join(f'{y:.3f}' for y in value[2])}]")
            elif key.startswith("gemm"):
                print(f"  {key}:\n    flops:      [{', '.join(f'{x:.3g}' for x in value[0])}]")
                print(f"    efficiency: [{', '.join(f'{y:.3f}' for y in value[1])}]")
            else:
                print(f"  {key}: {value}")
    for line in fp8_attention_speedups(derived):
        print(line)
    return report(differences(derived)) if args.check else 0


def fp8_attention_speedups(derived: dict) -> list[str]:
    """How much faster FP8 attention runs than the device's 16-bit kernel at DeepSeek-V3's MLA heads and at
    Llama's grouped 128-dim ones, at 4,096 keys per call (``fp8_attention.pass_factors``; training: the forward and
    the 2.5x backward together)."""
    workload = Workload(kind="training", seq_len=4096, global_batch=1, precision="fp8", fp8_attention=True)
    lines = []
    for device, values in derived.items():
        if "softmax_exp_ratio" not in values:
            continue
        grouped = values.get("fp8_attention_grouped")
        spec = dataclasses.replace(
            load_device(device),
            softmax_exp_ratio=values["softmax_exp_ratio"],
            fp8_attention_grouped=PassRatios(*grouped) if grouped else None,
        )
        shown = []
        for name in ("deepseek-v3", "llama3-70b"):
            fwd, bwd = pass_factors(load_model(name), spec, workload, workload.seq_len)
            training = (1.0 + FLASH_BACKWARD_FACTOR) / (fwd + FLASH_BACKWARD_FACTOR * bwd)
            shown.append(f"{name} forward {1 / fwd:.2f}x, training {training:.2f}x")
        lines.append(f"{device}: FP8 attention against 16 bits: " + "; ".join(shown))
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
