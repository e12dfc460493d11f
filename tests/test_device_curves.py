"""The A100 and Blackwell device files carry our Hopper measurements over by published, non-reserved
measurements (benchmarks/device_curves.py, problems/measurements/published_kernels.yaml)."""

import re
import sys

import pytest
import yaml
from conftest import REPO

from parasol.solver.library import load_device

sys.path.insert(0, str(REPO / "benchmarks"))
import device_curves  # noqa: E402  benchmarks/device_curves.py


def test_the_device_files_hold_the_scripts_derivation():
    assert device_curves.differences(device_curves.derive()) == []


def test_the_transfer_scales_the_hopper_curve_by_the_mamf_ratio():
    """e_X(F) = e_Hopper(F) x MAMF_X / MAMF_Hopper: the A100's 86.9 % against the H100's 80.3 % (stas00's
    table) lifts every point of the bf16 curve by the same 8.2 %; GB200's fp8 72.3 % against H200's 73.4 %
    lowers the fp8 curve by 1.5 %."""
    hopper, a100, gb200 = (load_device(n) for n in ("h100-sxm-80gb", "a100-sxm-80gb", "gb200"))
    ratio = (271.2 / 312) / (794.5 / 989)
    assert a100.gemm_efficiency_at(1e11) == pytest.approx(hopper.gemm_efficiency_at(1e11) * ratio, abs=6e-4)
    assert a100.gemm_efficiency_at(1e13) == pytest.approx(hopper.gemm_efficiency_at(1e13) * ratio, abs=6e-4)
    fp8 = (3615.6 / 5000) / (1453.4 / 1979)
    assert gb200.gemm_efficiency_at(1e12, "fp8") == pytest.approx(hopper.gemm_efficiency_at(1e12, "fp8") * fp8, abs=6e-4)


def test_b200_fp4_holds_torchaos_measured_square_gemms():
    """NVFP4 on B200 (torchao bench_matmul, pytorch/ao#2427): 4.46, 5.50 and 5.37 PFLOP/s at 4096^3,
    6144^3 and 8192^3 of 9 PFLOP/s dense (the file holds their FLOPs to three digits)."""
    b200 = load_device("b200")
    for n, pflops in ((4096, 4.46), (6144, 5.50), (8192, 5.37)):
        assert b200.gemm_efficiency_at(2.0 * n**3, "fp4") == pytest.approx(pflops / 9.0, abs=1.5e-3)


def test_hopper_weight_streaming_is_the_decode_microbenchmarks_median_per_precision():
    """efficiency.stream and stream_fp8 are the medians of the measured decode GEMMs (1-64 tokens) of each
    precision (problems/measurements/decode-microbench.yaml): FP8 scaled GEMMs stream their weights slower
    than 16-bit ones on both GPUs, so one median of both would time FP8 decoding too fast."""
    import statistics  # noqa: PLC0415

    import yaml  # noqa: PLC0415

    measured = yaml.safe_load((REPO / "problems" / "measurements" / "decode-microbench.yaml").read_text())
    for gpu, device in (("h100", "h100-sxm-80gb"), ("h200", "h200-sxm-141gb")):
        rows = [e for e in measured[gpu]["gemm"] if e["m"] <= 64]
        median = {
            p: statistics.median(e["weight_stream_efficiency"] for e in rows if e["precision"] == p) for p in ("bf16", "fp8")
        }
        spec = load_device(device)
        assert spec.stream_efficiency == pytest.approx(median["bf16"], abs=5e-4)
        assert spec.stream_fp8_efficiency == pytest.approx(median["fp8"], abs=5e-4)
        assert spec.stream_fp8_efficiency < spec.stream_efficiency
        assert spec.weight_streaming_efficiency_for("fp8") == spec.stream_fp8_efficiency
        assert spec.weight_streaming_efficiency_for("bf16") == spec.stream_efficiency


def test_blackwell_grouped_fp8_is_the_guides_grouped_gemm_over_gb200s_dense_curve():
    """2,672 TFLOP/s of MXFP8 grouped GEMM at 4,096 x 2,048 x 7,168 per expert (Megatron-LM's GB200 guide)
    against GB200's FP8 curve there; the H100 keeps its own measurement (torch._scaled_grouped_mm)."""
    from parasol.model.compute import gemm_time_s  # noqa: PLC0415

    gb200 = load_device("gb200")
    dense = 2.0 * 4096 * 2048 * 7168 / gemm_time_s(gb200, 4096, 2048, 7168, "fp8")
    assert gb200.grouped_fp8_efficiency == pytest.approx(2672e12 / dense, abs=5e-3)
    assert {load_device(n).grouped_fp8_efficiency for n in ("b200", "b300", "gb300")} == {gb200.grouped_fp8_efficiency}
    assert load_device("h100-sxm-80gb").grouped_fp8_efficiency == 0.67


def test_no_data_file_or_script_takes_a_number_from_the_reserved_azure_guide():
    """Issue 13 reserves the Azure AI benchmarking guide for measuring the model: a line of a system, device,
    engine, measurement or validation file, or of a benchmark script, may name it only to say it is reserved,
    and then carries no number but the issue's. The reserved sets' own files (problems/validation/reserved_*.yaml,
    benchmarks/reserved_*.py), which only measure the model and which no fit or test reads
    (tests/test_reserved_accuracy.py holds that), are the exception, and so are lines about Azure's MLPerf Inference
    submission (its system ND_GB200_v6), another source than the guide."""
    paths = [
        *(REPO / "problems" / "systems").rglob("*.yaml"),
        *(REPO / "problems" / "measurements").glob("*.yaml"),
        *(REPO / "problems" / "engines").glob("*.yaml"),
        *(REPO / "problems" / "validation").glob("*.yaml"),
        *(REPO / "benchmarks").glob("*.py"),
    ]
    paths = [p for p in paths if not p.name.startswith("reserved_")]
    cited = []
    for path in paths:
        for line in path.read_text().splitlines():
            mlperf = "ND_GB200_v6" in line and "AI-benchmarking-guide" not in line
            if ("Azure" in line or "AI-benchmarking-guide" in line) and not mlperf:
                numbers = set(re.findall(r"\d+(?:[.,]\d+)*", line)) - {"13"}
                if "reserve" not in line or numbers:
                    cited.append(f"{path.name}: {line.strip()[:80]}")
    assert cited == []


def test_blackwell_ultra_attention_follows_the_published_softmax_speedup():
    """NVIDIA's blog: Blackwell Ultra doubles the exponential's rate and runs DeepSeek-V3's FP8 attention
    forward ~35 % faster. The rule must give that FP8 forward back, a smaller gain in 16 bits (twice the
    tensor-core time per element) and smaller still with the backward (2.5x the tensor work, one more
    exponential); with no faster exponential, no gain; up to our measurement's 8K keys Blackwell keeps Hopper's
    attention times cuDNN's own GB200-over-H200 share of the peak (0.93-0.97, below 1 at every length)."""
    published = {"exp_rate_ratio": 2.0, "fp8_forward_speedup": 1.35}
    ultra = device_curves.softmax_speedups(published)
    assert ultra.fp8_forward == pytest.approx(1.35)
    assert 1.0 < ultra.training < ultra.forward < 1.35
    assert ultra.forward == pytest.approx(1.212, abs=1e-3) and ultra.training == pytest.approx(1.133, abs=1e-3)
    same = device_curves.softmax_speedups({"exp_rate_ratio": 2.0, "fp8_forward_speedup": 1.0})
    assert same.fp8_forward == same.forward == same.training == 1.0
    hopper, gb200, gb300 = (load_device(n) for n in ("h100-sxm-80gb", "gb200", "gb300"))
    measured = len([t for t in hopper.attention_tokens if t <= device_curves.MEASURED_KEYS])  # past it: each family's rows
    kept = device_curves.blackwell_over_hopper(yaml.safe_load(device_curves.PUBLISHED.read_text())["cudnn_sdpa_training"])
    assert set(kept) == {2048, 4096, 8192} and all(0.92 < r < 0.98 for r in kept.values())
    for t, h, b in zip(hopper.attention_tokens[:measured], hopper.attention_curve[:measured], gb200.attention_curve[:measured]):
        assert b == pytest.approx(h * device_curves.ratio_at(kept, t), abs=6e-4) and b < h
    for blackwell, ultra_y in zip(gb200.attention_curve[:measured], gb300.attention_curve[:measured]):
        assert ultra_y == pytest.approx(blackwell * ultra.training, abs=1e-3)  # both rounded to 3 decimals


def test_the_softmax_exp_ratios_give_the_published_fp8_speedups_back():
    """softmax_exp_ratio, what FP8 attention is timed by (model/fp8_attention.py): Blackwell's gives NVIDIA's
    ~35 % faster FP8 forward on Blackwell Ultra back at the Ultra's halved ratio; Hopper's gives
    FlashAttention-3's FP8 over FP16 forward on H100 (1,200 over 740 TFLOP/s) back at its 256-dim heads (a
    512-wide score, 1.6x the reference); a faster FP8 forward would mean a cheaper exponential."""
    from parasol.model.fp8_attention import serial_pass_time  # noqa: PLC0415

    gb200, gb300, h100 = (load_device(n) for n in ("gb200", "gb300", "h100-sxm-80gb"))
    e = gb200.softmax_exp_ratio
    assert serial_pass_time(1, 1, e) / serial_pass_time(1, 1, gb300.softmax_exp_ratio) == pytest.approx(1.35, abs=2e-3)
    e_h = h100.softmax_exp_ratio * 320 / 512
    assert serial_pass_time(2, 1, e_h) / serial_pass_time(1, 1, e_h) == pytest.approx(1200 / 740, abs=2e-3)
    faster = device_curves.hopper_exp_ratio({"fp8_forward_tflops": 1300, "fp16_forward_tflops": 740, "head_dim": 256})
    assert faster < h100.softmax_exp_ratio


def test_fp8_attention_gains_more_with_the_backward_and_on_blackwell_ultra():
    """The backward does 2.5x the forward's tensor work against one exponential, so FP8 saves it more; Blackwell
    Ultra's cheaper exponential leaves FP8 more to save than Blackwell's; narrower heads (Llama's 128 + 128
    against MLA's 192 + 128) less (`python benchmarks/device_curves.py` prints the figures docs/accuracy.md quotes)."""
    lines = {line.split(":")[0]: line for line in device_curves.fp8_attention_speedups(device_curves.derive())}
    assert set(lines) == {"b200", "b300", "gb200", "gb300", "h100-sxm-80gb", "h200-sxm-141gb", "h800-sxm-80gb"}

    def gains(device):
        return [float(x) for x in re.findall(r"([0-9.]+)x", lines[device])]  # dsv3 fwd, train, llama fwd, train

    for device in lines:
        dsv3_fwd, dsv3_train, llama_fwd, llama_train = gains(device)
        assert 1.0 < dsv3_fwd < dsv3_train < 2.0 and llama_fwd < dsv3_fwd and llama_train < dsv3_train
    assert gains("gb300")[1] > gains("gb200")[1]


def test_blackwell_attention_past_8k_follows_its_own_familys_cudnn_rows():
    """Past our H200 measurement's 8K keys each family's curve grows as cuDNN's published grouped rows of that family
    do (benchmarks/device_curves.py cudnn_growth_beyond): Blackwell by GB200's (cuDNN 9.22 loses ground at 32K: below
    its 8K efficiency), Blackwell Ultra by GB300's, Hopper by H200's; beyond 32K the curves hold."""
    rows = yaml.safe_load(device_curves.PUBLISHED.read_text())["cudnn_sdpa_training"]["grouped"]
    for name, gpu in (("gb200", "gb200"), ("b200", "gb200"), ("gb300", "gb300"), ("h100-sxm-80gb", "h200")):
        device = load_device(name)
        growth = device_curves.cudnn_growth_beyond(rows[gpu], 8192)
        at_8k = device.attention_efficiency_at(8192)
        for tokens, gain in growth.items():
            assert device.attention_efficiency_at(tokens) == pytest.approx(at_8k * gain, abs=1e-3), (name, tokens)
        assert device.attention_efficiency_at(131072) == device.attention_efficiency_at(32768)
    gb200 = load_device("gb200")
    assert (
        gb200.attention_efficiency_at(32768)
        < gb200.attention_efficiency_at(8192)
        < load_device("h100-sxm-80gb").attention_efficiency_at(32768)
    )


def test_the_triton_port_past_8k_grows_as_cudnn_on_hopper_and_holds_on_a100():
    """FlashAttention's Triton port past 8K keys: on Hopper it gains as cuDNN's published H200 rows do (the rule Hopper's
    own curve follows), so its 16K and 32K rates exceed its 8K one by cuDNN's ratios; on A100, which has no such rows, it
    holds its 8K rate."""
    rows = yaml.safe_load(device_curves.PUBLISHED.read_text())["cudnn_sdpa_training"]["grouped"]["h200"]
    growth = device_curves.cudnn_growth_beyond(rows, 8192)
    assert set(growth) == {16384, 32768} and all(g > 1.0 for g in growth.values())
    for name in device_curves.HOPPER_DEVICES:
        device = load_device(name)
        at_8k = device.attention_triton_efficiency_at(8192)
        for tokens, gain in growth.items():
            assert device.attention_triton_efficiency_at(tokens) == pytest.approx(at_8k * gain, abs=1e-3), (name, tokens)
        assert device.attention_triton_efficiency_at(65536) == device.attention_triton_efficiency_at(32768)
    for name in device_curves.AMPERE:
        a100 = load_device(name)
        assert a100.attention_triton_efficiency_at(32768) == a100.attention_triton_efficiency_at(8192)


@pytest.mark.parametrize("name", ["a100-sxm-80gb", "a100-sxm-40gb"])
def test_a100_flash_attention_rises_with_the_length_as_flashattention_2_does(name):
    """The A100's training flash attention by the keys a call attends: FlashAttention-2's combined published maxima x the
    H200's FlashAttention-2 median at each length over the maximum, the flat rate's median/maximum taken per length;
    the flat rate (what serving reads) lies between its 2K and 4K points, and the curve is held past 1K-8K."""
    a100 = load_device(name)
    tokens, shape = device_curves.flash_by_tokens_over_max()
    assert a100.attention_tokens == tokens
    for t, y in zip(tokens, shape):
        assert a100.attention_efficiency_at(t) == pytest.approx(
            a100.attention_efficiency * y / device_curves.flash_median_over_max(), rel=0.03
        )
    assert a100.attention_efficiency_at(2048) < a100.attention_efficiency < a100.attention_efficiency_at(4096)
    assert a100.attention_efficiency_at(512) == a100.attention_efficiency_at(1024)
    assert a100.attention_efficiency_at(65536) == a100.attention_efficiency_at(8192)
