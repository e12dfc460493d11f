"""Fit each device's efficiency curves on the published runs of that device.

    python benchmarks/calibrate.py [--holdout | --moe | --mxfp8 | --training-gemm | --attention | --engine NAME | --step-overhead]

Compute efficiencies are not fitted: GEMM curves, attention and HBM efficiency are microbenchmark
measurements (H100: our H200 run, problems/measurements/h200-microbench.yaml; A100 and Blackwell:
carried over from it by published measurements, benchmarks/device_curves.py); only the share of them Blackwell's training
steps sustain is fitted (--training-gemm, below). Fitted here, on the dense runs of A100, H100, B200,
GB200 and GB300 (Megatron-Bridge 25.11's included): one straggler share for every system (the mean
per-GPU delay of a synchronous step, ``training.straggler_stretch``), by grid search; for each value
of it, per device, the network efficiency (achieved fraction of the link rate, both tiers) by
golden-section search and, for each step of 0.1 of efficiency.tp_overlap (the share of a GEMM's time
that can hide a tensor-parallel collective beside it), the best pair kept; tp_overlap only on a device
with at least TP_OVERLAP_MIN_RUNS runs, some of which overlap such collectives (A100's 2021-22 runs
overlap none: its file's value; the Blackwell devices have 2-3 runs each: they take the H100's), and the
network efficiency only on a device with at least NETWORK_MIN_RUNS runs (B200's two: the H100's). The objective is the
mean absolute relative step-time error over all the runs. DeepSpeed ZeRO-3 runs of SC'21 Table 2
are excluded from the fit (see the README: the model has no term for that implementation's
overheads) and reported like every other run.

--holdout refits leaving out one publication family at a time and prints the error on it (a Blackwell
device left without runs takes the H100's network and tp_overlap, as one with too few does; another the
network efficiency the files state for a system with no run, 0.80).

--moe first prints the H100's measured FP8 grouped-GEMM efficiency (efficiency.grouped_fp8: the
scaled grouped kernels against the FP8 dense curve, from problems/measurements/h100-kernel-microbench.yaml),
then fits the mixture-of-experts number every device file holds (efficiency.moe_expert: the rate of the
routed-expert block against the GEMM roofline; an overlapped all-to-all costs the SMs its kernels
take, training.overlap_exposed_s, nothing fitted) on the MoE runs of the calibration set
(MOE_CALIBRATION: Megatron-Bridge 25.09's three on H100 and 25.11's seventeen on H100, B200, GB200 and
GB300), by grid search (step 0.01) of the mean absolute step-time error; prints the leave-one-source-out
fits (each source's error under the value fitted on the other) and the error on the published MoE runs
outside the calibration set (MOE_CHECK: the Megatron MoE Model Zoo, Megatron-LM's GB200 guide and MLPerf
Training v6.0's DeepSeek-V3 runs).

--mxfp8 fits the share of the FP8 GEMM curve MXFP8's block-scaled dense GEMMs reach (efficiency.mxfp8_gemm of the
Blackwell device files) on published pairs of one configuration in MXFP8 and in FP8 with per-tensor current scaling,
from their step-time ratios (benchmarks/mxfp8_pairs.py says how), and checks it on Megatron-Bridge 25.09's pairs.

--training-gemm fits the share of their GEMM curves the Blackwell devices sustain through a training step
(efficiency.training_gemm, which Problem.system puts on a training problem's device as its gemm_scale): their curves come
from short published runs (MAMF, torchao) where the Hopper ones are our sustained measurement. One share for B200 and
GB200 (their MAMF entries measured alike), fitted on their dense calibration runs (Megatron-Bridge 25.11's, with the
networks the dense fit stores) and carried by B300; GB300's own on its runs (its curves are GB200's). Grid 0.70-1.30, step
0.01, least mean absolute step-time error; prints each run before and after, the fit leaving out one device (one run),
the same fit on A100's runs for comparison (A100's curves come from MAMF too; its files keep 1), the out-of-sample dense
and MoE runs on these devices, and exits 1 where a device file holds another value. The dense fit
above reads the stored share; the two were run in turn until neither moved.

--attention prints the training flash-attention curve the H100-class device files hold
(efficiency.attention_by_tokens): for each measured sequence length, the median over the measured
shapes (heads, head dims) of cuDNN's causal forward+backward fraction of the datasheet bf16 peak
(problems/measurements/h200-microbench.yaml; FLOPs 3.5 x 4·b·heads·s²·d x 0.5), then beyond the longest
measured length (8K) the last median grown as cuDNN's published H200 SDPA training rows grow to 16K and 32K
(published_kernels.yaml cudnn_sdpa_training). Measured, not fitted.

--engine NAME fits a serving-engine profile (problems/engines/NAME.yaml): for each device the profile
covers, the efficiencies it sets (``stream``, the HBM fraction weight GEMMs reach; ``gemm``, the share of
the device file's GEMM rates its kernels reach) together, by exhaustive search of their grids (stream
0.20-0.95, gemm 0.50-1.00, step 0.01) for the least mean absolute error of output tokens/s on that engine's
throughput runs (problems/validation/engine_runs.yaml; about a minute); prints the fitted values next to the
stored ones, then the error on the first-token latencies of the same release, which the fit does not see.

--step-overhead fits the serving runtime's per-pass overhead every device file holds
(``serving_step_overhead_s``: scheduling, sampling and launches, added once to every pass) on TensorRT-LLM
0.6.1's throughput tables (problems/validation/inference_runs.yaml, the rows that name no engine: H100 FP8
and A100 FP16), one value for both, by exhaustive search from 0 to 5 ms in steps of 0.01 ms; prints it
next to the stored one, each table's error under the value fitted on the other (leave one source out),
and exits 1 when a device file holds another value.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

import mxfp8_pairs  # benchmarks/mxfp8_pairs.py
import yaml

from parasol.model.errors import ProblemError
from parasol.solver.validation import evaluate_all, family, load_runs, out_of_sample

DEVICE_OF_SYSTEM = {
    "dgx-a100": "a100-sxm-80gb",
    "jean-zay-a100": "a100-sxm-80gb",
    "dgx-h100": "h100-sxm-80gb",
    "dgx-b200": "b200",
    "dgx-b300": "b300",
    "gb200-nvl72": "gb200",
    "gb300-nvl72": "gb300",
}
# tp_overlap is fitted only on a device with this many runs; the others keep the value their file states
TP_OVERLAP_MIN_RUNS = 10
# a device with fewer runs takes the H100's network efficiency: two runs let the network absorb a compute
# error (B200's fell to the range's floor and made its 400G NICs slower than the H100's same NICs)
NETWORK_MIN_RUNS = 3
NO_RUN_NETWORK = 0.80  # what a system file states where no run tells its network efficiency
# ZeRO-3: outside the model (README, Accuracy). MoE runs: not in the network fit; the MoE number is fitted
# on the calibration set's MoE runs by --moe (MOE_CALIBRATION), the out-of-sample ones never.
MOE_CALIBRATION = ("Megatron-Bridge 25.09 MoE", "Megatron-Bridge 25.11 MoE")
MOE_CHECK = (
    "MoE Model Zoo (out of sample)",
    "MoE Model Zoo long context (out of sample)",
    "MoE Model Zoo Blackwell (out of sample)",
    "Megatron-LM GB200 guide (out of sample)",
    "MLPerf Training MoE (out of sample)",
    "NeMo 25.02-25.04 MoE (out of sample)",
    "Megatron-Bridge 25.09 Blackwell MoE (out of sample)",
)
# LLM Foundry's MPT runs (problems/validation/llm_foundry_runs.yaml, PyTorch FSDP) and Megatron-Bridge 25.09's Blackwell
# runs (mbridge_2509_runs.yaml, both families below), which this script never reads
LLM_FOUNDRY = "LLM Foundry MPT (out of sample)"
# the dense runs outside the calibration set, never fitted: reported apart by benchmarks/accuracy.py
DENSE_CHECK = (
    "Llama 3 paper (out of sample)",
    "MLPerf Training (out of sample)",
    "BLOOM 02-28 benchmarks (out of sample)",
    "NeMo 25.02-25.04 (out of sample)",
    "Megatron-Bridge 25.09 Blackwell (out of sample)",
    LLM_FOUNDRY,
)
EXCLUDED_FAMILIES = ("Megatron SC'21 Table 2 ZeRO-3", *MOE_CALIBRATION, *MOE_CHECK, *DENSE_CHECK)


def override(params: dict, tp_overlap: float | None = None, straggler: float | None = None):
    """system_override applying a trial network efficiency {device: efficiency} to both tiers (and a
    trial tp_overlap to the device, a trial straggler share to the system)."""

    def apply(system):
        if straggler is not None:
            system = dataclasses.replace(system, straggler=straggler)
        if system.device.name not in params:
            return system
        eff = params[system.device.name]
        if tp_overlap is not None:
            system = dataclasses.replace(system, device=dataclasses.replace(system.device, tp_overlap_efficiency=tp_overlap))
        return dataclasses.replace(
            system,
            scale_up=dataclasses.replace(system.scale_up, efficiency=eff),
            scale_out=dataclasses.replace(system.scale_out, efficiency=eff),
        )

    return apply


def moe_override(expert: float):
    """system_override applying a trial routed-expert efficiency to the device."""
    from parasol.solver.inference_validation import with_device_fields  # noqa: PLC0415

    return with_device_fields(moe_expert_efficiency=expert)


# each measured device and its grouped-GEMM measurement (benchmarks/kernel_microbench.py)
GROUPED_MEASUREMENTS = {
    "h100-sxm-80gb": "measurements/h100-kernel-microbench.yaml",
    "h200-sxm-141gb": "measurements/h200-kernel-microbench.yaml",
}
GROUPED_MIN_ROWS = 512  # the regime of the training runs (2,048+ rows per expert); fewer rows are launch-bound


def grouped_fp8_efficiency(device_name: str = "h100-sxm-80gb") -> float:
    """FP8 grouped expert GEMMs' rate against the device's FP8 dense curve, measured on that device
    (``GROUPED_MEASUREMENTS``: torch._scaled_grouped_mm, row-wise scales): the median over the measured
    shapes with at least GROUPED_MIN_ROWS rows per expert of the model's per-expert FP8 roofline time
    over the measured time (``compute.moe_routed_forward_time_s``)."""
    import yaml  # noqa: PLC0415

    from parasol.model.compute import gemm_time_s  # noqa: PLC0415
    from parasol.solver import library  # noqa: PLC0415

    device = library.load_device(device_name)
    path = library.library_root() / GROUPED_MEASUREMENTS[device_name]
    entries = yaml.safe_load(path.read_text())["grouped_gemm"]["entries"]
    ratios = [
        e["experts"] * gemm_time_s(device, e["rows_per_expert"], e["n"], e["k"], "fp8") / e["fp8_seconds"]
        for e in entries
        if e.get("fp8_seconds") and e["rows_per_expert"] >= GROUPED_MIN_ROWS
    ]
    return statistics.median(ratios)


H200_BF16_PEAK = 989.4e12  # the datasheet's dense bf16 rate, the measurement's convention (its clock_based_note)


def attention_curve() -> tuple[tuple, tuple]:
    """(sequence lengths, efficiencies): per measured sequence length, the median over the measured
    shapes of cuDNN's causal flash attention, forward+backward, as a fraction of the bf16 peak."""
    from device_curves import FWD_BWD_FLOPS, h200_cudnn_causal_by_seq  # noqa: PLC0415  benchmarks/device_curves.py

    def efficiency(e: dict) -> float:
        flops = FWD_BWD_FLOPS * 4 * e["batch"] * e["heads"] * e["seq"] ** 2 * e["head_dim"] * 0.5
        return flops / (e["fwd_bwd"]["seconds"] * H200_BF16_PEAK)

    by_seq = h200_cudnn_causal_by_seq(efficiency)
    return tuple(by_seq), tuple(round(statistics.median(v), 3) for v in by_seq.values())


PUBLISHED_ATTENTION = "measurements/published_kernels.yaml"


def h200_cudnn_rows() -> dict:
    """cuDNN's published H200 SDPA training rows (published_kernels.yaml cudnn_sdpa_training, grouped heads: Llama 3.1
    405B's 64/8, causal), by sequence length."""
    from parasol.solver import library  # noqa: PLC0415

    return yaml.safe_load((library.library_root() / PUBLISHED_ATTENTION).read_text())["cudnn_sdpa_training"]["grouped"]["h200"]


def attention_growth_beyond(last_seq: int) -> dict:
    """{sequence length: efficiency over that at ``last_seq``} past ``last_seq`` by cuDNN's published H200 rows
    (``device_curves.cudnn_growth_beyond``): how cuDNN's causal attention keeps gaining past our measurement on Hopper."""
    from device_curves import cudnn_growth_beyond  # noqa: PLC0415  benchmarks/device_curves.py

    return cudnn_growth_beyond(h200_cudnn_rows(), last_seq)


def attention_curve_extended() -> tuple[tuple, tuple]:
    """The curve the Hopper device files hold: the measured medians (``attention_curve``), carried past the longest
    measured sequence by cuDNN's published H200 rows (``device_curves.grown_curve``) [assumption: the median over our
    shapes gains past 8K as the published grouped-query shape does]."""
    from device_curves import grown_curve  # noqa: PLC0415  benchmarks/device_curves.py

    seqs, effs = attention_curve()
    tokens, efficiencies = grown_curve(seqs, effs, h200_cudnn_rows())
    return tuple(int(t) for t in tokens), efficiencies


def moe_expert_fit(calibration, base=None) -> tuple[float, float]:
    """(mean |error|, moe_expert): the grid search (0.20-1.00, step 0.01) of the routed-expert
    efficiency on the MoE calibration runs (on the systems ``base`` overrides first, when given)."""
    grid = [x / 100 for x in range(20, 101)]

    def trial(x):
        expert = moe_override(x)
        return expert if base is None else (lambda system: expert(base(system)))

    return min((statistics.fmean(abs(r.error) for r in evaluate_all(calibration, trial(x))), x) for x in grid)


def fit_moe(entries) -> None:
    """The measured FP8 grouped-GEMM efficiency, then a grid search of moe_expert on the MoE
    calibration runs (with the stored grouped_fp8); prints both errors."""
    for device_name in GROUPED_MEASUREMENTS:
        print(
            f"grouped_fp8 ({device_name} measured, >= {GROUPED_MIN_ROWS} rows per expert): {grouped_fp8_efficiency(device_name):.2f}"
        )
    calibration = [e for e in entries if family(e["id"]) in MOE_CALIBRATION]
    check = [e for e in entries if family(e["id"]) in MOE_CHECK]
    value, x = moe_expert_fit(calibration)
    print(f"MoE: {len(calibration)} calibration runs, moe_expert {x:.2f}, mean |error| {100 * value:.1f} %")
    for source in MOE_CALIBRATION:  # leave one source out
        held = [e for e in calibration if family(e["id"]) == source]
        _, x_out = moe_expert_fit([e for e in calibration if family(e["id"]) != source])
        error = statistics.fmean(abs(r.error) for r in evaluate_all(held, moe_override(x_out)))
        print(f"  without {source}: moe_expert {x_out:.2f}, its {len(held)} runs {100 * error:.1f} %")
    for name, runs in (("calibration", calibration), ("out of sample", check)):
        results = evaluate_all(runs, moe_override(x))
        for r in results:
            print(f"  {name:<13} {r.run_id:<64} {100 * r.error:+6.1f} %")
        print(f"  {name}: {len(results)} runs, mean |error| {100 * statistics.fmean(abs(r.error) for r in results):.1f} %")


def loss(entries, params, tp_overlap: float | None = None, straggler: float | None = None) -> float:
    return statistics.fmean(abs(r.error) for r in evaluate_all(entries, override(params, tp_overlap, straggler)))


def overlaps_tp(entries) -> bool:
    """Whether any run hides tensor-parallel collectives behind GEMMs (tp > 1, Megatron's asynchronous
    input gradients or userbuffers), so that tp_overlap can be fitted on them."""
    return any(
        e["mapping"].get("tp", 1) > 1 and (e["workload"].get("overlap_tp_grad", True) or e["mapping"].get("tp_comm_overlap"))
        for e in entries
    )


def fit_network(entries, device: str, tp_overlap: float | None = None, straggler: float | None = None) -> tuple[float, float]:
    """Golden-section search of the network efficiency in [0.6, 0.95] (a physical range:
    nccl-tests bus bandwidth is typically 75-90 % of the line rate; lower values would hide
    compute or pipeline errors behind the network)."""
    lo, hi = 0.6, 0.95
    ratio = (5**0.5 - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = loss(entries, {device: a}, tp_overlap, straggler), loss(entries, {device: b}, tp_overlap, straggler)
    for _ in range(25):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = loss(entries, {device: a}, tp_overlap, straggler)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = loss(entries, {device: b}, tp_overlap, straggler)
    x = (lo + hi) / 2
    return x, loss(entries, {device: x}, tp_overlap, straggler)


def fit(
    entries, device: str, straggler: float | None = None, tp_overlap: float | None = None, network: float | None = None
) -> tuple[float, float | None, float]:
    """(network efficiency, the tp_overlap it was fitted at, mean |error|) at a given straggler share
    (None: the systems' stored one). Where the runs cannot tell tp_overlap it is ``tp_overlap`` (None:
    the device file's own); where they are fewer than NETWORK_MIN_RUNS the network is ``network``."""
    if network is not None and len(entries) < NETWORK_MIN_RUNS:
        return network, tp_overlap, loss(entries, {device: network}, tp_overlap, straggler)
    if not overlaps_tp(entries) or len(entries) < TP_OVERLAP_MIN_RUNS:
        x, error = fit_network(entries, device, tp_overlap, straggler)
        return x, tp_overlap, error
    best = min((*reversed(fit_network(entries, device, t / 10, straggler)), t / 10) for t in range(11))
    return best[1], best[2], best[0]


STRAGGLER_GRID = tuple(k / 400 for k in range(13))  # 0 to 0.03 in steps of 0.0025
DEVICES = ("a100-sxm-80gb", "h100-sxm-80gb", "b200", "gb200", "gb300")
FEW_RUN_DEVICES = ("b200", "gb200", "gb300")  # they take the H100's tp_overlap (their files: "the H100 fit")


def fit_all(entries) -> tuple[float, dict, float]:
    """(straggler share, {device: (network efficiency, tp_overlap, mean |error|)}, mean |error| over
    all their runs): the straggler share is one number for every system (what grows with the GPU
    count is not the device's), so for each value of the grid each device's network is fitted on its
    own runs and the value with the least mean error over all of them is kept."""
    best = None
    for k in STRAGGLER_GRID:
        per_device, total, runs = {}, 0.0, 0
        shared_overlap = shared_network = None  # the H100's fitted values, which the devices with few runs take
        for device in DEVICES:  # the H100 before the Blackwell devices
            own = device_entries(entries, device)
            if own:
                few = device in FEW_RUN_DEVICES
                per_device[device] = fit(own, device, k, shared_overlap if few else None, shared_network if few else None)
                total, runs = total + per_device[device][2] * len(own), runs + len(own)
                if device == "h100-sxm-80gb":
                    shared_network = per_device[device][0]
                    if per_device[device][1] is not None:
                        shared_overlap = per_device[device][1]
        if best is None or total / runs < best[2]:
            best = (k, per_device, total / runs)
    return best


def device_entries(entries, device: str):
    return [e for e in entries if DEVICE_OF_SYSTEM.get(e["system"]) == device and family(e["id"]) not in EXCLUDED_FAMILIES]


def fit_engine(name: str) -> int:
    """Refit the efficiencies of engine profile ``name`` on its throughput runs; print them and the
    held-out first-token-latency error; 1 when a stored value differs from the fit."""
    from parasol.solver import library  # noqa: PLC0415
    from parasol.solver.inference_validation import evaluate_all as evaluate_serving  # noqa: PLC0415
    from parasol.solver.inference_validation import fit_engine_profile, load_engine_runs, mean_abs_error
    from parasol.solver.inference_validation import load_runs as load_serving_runs  # noqa: PLC0415

    runs = [e for e in load_engine_runs() if e["workload"].get("engine") == name]
    checks = [e for e in load_serving_runs() if e["workload"].get("engine") == name]
    status = 0
    for device, stored in library.load_engine(name).items():
        fitted, error = fit_engine_profile(runs, device, stored)
        for key, value in stored.items():
            same = abs(fitted[key] - value) < 0.005
            status |= not same
            print(f"{name} on {device}: {key} fitted {fitted[key]:.2f} (stored {value:.2f}{'' if same else ', DIFFERS'})")
        print(f"  mean |error| {100 * error:.1f} % on its throughput runs")
    for label, entries in (("throughput runs (fitted)", runs), ("first-token latencies (held out)", checks)):
        results = evaluate_serving(entries)
        for fam in sorted({r.family for r in results}):
            own = [r for r in results if r.family == fam]
            print(f"  {label:<34} {fam:<56} {len(own):>2} runs  mean |error| {100 * mean_abs_error(own):5.1f} %")
    return status


def fit_step_overhead() -> int:
    """Refit the serving runtime's per-pass overhead on TensorRT-LLM 0.6.1's throughput tables, print it with
    the leave-one-table-out errors; 1 when a device file holds another value."""
    from parasol.solver import library  # noqa: PLC0415
    from parasol.solver.inference_validation import STEP_OVERHEAD_STEP_S, step_overhead_runs  # noqa: PLC0415
    from parasol.solver.inference_validation import family as serving_family  # noqa: PLC0415
    from parasol.solver.inference_validation import fit_step_overhead as fit_overhead  # noqa: PLC0415
    from parasol.solver.inference_validation import step_overhead_error as error_at  # noqa: PLC0415

    runs = step_overhead_runs()

    seconds, error = fit_overhead(runs)
    print(
        f"serving_step_overhead_s fitted {1e3 * seconds:.2f} ms: mean |error| {100 * error:.1f} % over {len(runs)} runs "
        f"({100 * error_at(runs, 0.0):.1f} % without it)"
    )
    for table in sorted({serving_family(e) for e in runs}):
        train = [e for e in runs if serving_family(e) != table]
        held = [e for e in runs if serving_family(e) == table]
        fitted, _ = fit_overhead(train)
        print(
            f"  {table:<56} {len(held):>2} runs: {100 * error_at(held, fitted):.1f} % under the value fitted on the "
            f"other table ({1e3 * fitted:.2f} ms), {100 * error_at(held, 0.0):.1f} % without it"
        )
    status = 0
    for name in library.names("systems/devices"):
        stored = library.load_device(name).serving_step_overhead_s
        if abs(stored - seconds) > STEP_OVERHEAD_STEP_S / 2:
            print(f"  {name}: stored {1e3 * stored:.2f} ms, DIFFERS")
            status = 1
    return status


SERVING_GEMM_FIT_DEVICES = ("b200", "gb200")  # the devices whose runs the share is fitted on (Blackwell)
# the devices that carry it: Blackwell Ultra's curves come from the same B200 NVFP4 measurement and MAMF ratios, so its
# serving kernels are assumed to reach the same share of them (none of its runs is fitted; they stay held out)
SERVING_GEMM_DEVICES = (*SERVING_GEMM_FIT_DEVICES, "b300", "gb300")


def serving_gemm_runs() -> tuple[list, list]:
    """(fitted, held out): the MLPerf Inference runs on B200 and GB200 that the serving GEMM share is fitted on (family
    "... (fits serving_gemm) ...", v5.0) and the out-of-sample ones on the devices that carry it (v5.1)."""
    from parasol.solver.inference_validation import load_mlperf_runs  # noqa: PLC0415

    runs = [e for e in load_mlperf_runs() if DEVICE_OF_SYSTEM.get(e["system"]) in SERVING_GEMM_DEVICES]
    fitted = [e for e in runs if "(fits serving_gemm)" in e["family"]]
    stray = [e["id"] for e in fitted if DEVICE_OF_SYSTEM[e["system"]] not in SERVING_GEMM_FIT_DEVICES]
    if stray:
        raise SystemExit(f"runs marked 'fits serving_gemm' on a device the share is not fitted on: {', '.join(stray)}")
    return fitted, [e for e in runs if out_of_sample(e["family"])]


def at_serving_gemm(entries: list, share: float, folder) -> list:
    """The entries with the serving GEMM share ``share`` on the devices that carry it: an engine profile whose ``gemm`` replaces
    the device files' (``solver.library.device_under_engine``), written into ``folder``."""
    path = Path(folder) / f"serving-gemm-{share:.2f}.yaml"
    path.write_text(yaml.safe_dump({"name": "serving-gemm-trial", "devices": {d: {"gemm": share} for d in SERVING_GEMM_DEVICES}}))
    return [{**e, "workload": {**e["workload"], "engine": {"file": str(path)}}} for e in entries]


def fit_serving_gemm_share(entries: list, near: float | None = None, steps: int = 3) -> float:
    """The share of the GEMM curves serving engines' kernels reach on B200 and GB200 that best predicts ``entries``
    (least squares of their relative errors; ties to the smaller) over an engine profile's gemm grid (0.50-1.00), or its
    points within ``steps`` of ``near``."""
    from parasol.solver.inference_validation import ENGINE_FIT_GRIDS, evaluate_mlperf, grid_window  # noqa: PLC0415

    grid = ENGINE_FIT_GRIDS["gemm"] if near is None else grid_window(ENGINE_FIT_GRIDS["gemm"], near, steps)
    with tempfile.TemporaryDirectory() as folder:
        return min(grid, key=lambda s: (sum(r.error**2 for r in evaluate_mlperf(at_serving_gemm(entries, s, folder))), s))


def fit_serving_gemm() -> int:
    """Refit the serving GEMM share of B200 and GB200 on the v5.0 MLPerf Inference runs, print each run's error at 1
    (no share) and at the fit, fitted and held out (B300 and GB300 take it too); 1 when a device file holds another
    value."""
    from parasol.solver import library  # noqa: PLC0415
    from parasol.solver.inference_validation import evaluate_mlperf  # noqa: PLC0415

    fitted, held = serving_gemm_runs()
    share = fit_serving_gemm_share(fitted)
    print(
        f"serving GEMM share of B200 and GB200 (B300 and GB300 take it), fitted on {len(fitted)} MLPerf Inference v5.0 runs: {share:.2f}"
    )
    with tempfile.TemporaryDirectory() as folder:
        for label, entries in (("fitted", fitted), ("held out", held)):
            before = evaluate_mlperf(at_serving_gemm(entries, 1.0, folder))
            after = evaluate_mlperf(at_serving_gemm(entries, share, folder))
            for b, a in zip(before, after):
                print(f"  {label:<9} {b.run_id:<46} {100 * b.error:+6.1f} % -> {100 * a.error:+6.1f} %")
            mean = lambda rs: 100 * statistics.fmean(abs(r.error) for r in rs)  # noqa: E731
            print(f"  {label:<9} mean |error| {mean(before):.1f} % -> {mean(after):.1f} %")
            for model in dict.fromkeys(r.problem.model.name for r in before):
                own = [i for i, r in enumerate(before) if r.problem.model.name == model]
                was, now = [before[i] for i in own], [after[i] for i in own]
                print(f"  {label:<9}   {model:<14} {len(own)} runs: {mean(was):.1f} % -> {mean(now):.1f} %")
    status = 0
    for name in SERVING_GEMM_DEVICES:
        stored = library.load_device(name).serving_gemm_efficiency
        if abs(stored - share) > 0.005:
            print(f"  {name}: stored {stored:.2f}, DIFFERS")
            status = 1
    return status


# The training GEMM share (efficiency.training_gemm): what a training step sustains of the GEMM curves of the devices whose
# curves come from short published benchmarks (MAMF, torchao). Fitted per group, on the dense calibration runs of the
# group's devices, and carried by the devices listed with it: B200 and GB200, whose MAMF entries were measured the same
# way, share one value (their same-configuration pairs run within 3 % of each other, as one share keeps them), which B300
# (no run in the calibration set) takes; GB300 has no MAMF entry (its curve is GB200's [assumption]), so its own runs fit it.
TRAINING_GEMM_GROUPS = {("b200", "gb200"): ("b200", "b300", "gb200"), ("gb300",): ("gb300",)}
TRAINING_GEMM_GRID = tuple(x / 100 for x in range(70, 131))  # 0.70 to 1.30, step 0.01


def training_gemm_override(shares: dict):
    """system_override putting trial training GEMM shares ({device: share}) on those devices (what Problem.system does
    with the stored ones)."""

    def apply(system):
        if system.device.name not in shares:
            return system
        return dataclasses.replace(system, device=dataclasses.replace(system.device, gemm_scale=shares[system.device.name]))

    return apply


def training_gemm_fit(entries, devices, grid=TRAINING_GEMM_GRID) -> tuple[float, float]:
    """(share, mean |error|): the grid point with the least mean absolute step-time error on ``entries``, put on
    ``devices`` (ties to the share nearer 1, the curves as published)."""
    error, _, share = min(
        (
            statistics.fmean(abs(r.error) for r in evaluate_all(entries, training_gemm_override(dict.fromkeys(devices, x)))),
            abs(x - 1),
            x,
        )
        for x in grid
    )
    return share, error


def fit_training_gemm(entries) -> int:
    """Fit each group's training GEMM share (TRAINING_GEMM_GROUPS) on its devices' dense calibration runs (Megatron-Bridge
    25.11's, with the networks the dense fit stores); print each run's error at 1 and at the fit, the fit leaving out one
    device (or, in a one-device group, one run) at a time, and the out-of-sample dense and MoE runs on the carrying devices
    before and after; 1 when a device file holds another value."""
    from parasol.solver import library  # noqa: PLC0415
    from parasol.solver.validation import load_all_runs  # noqa: PLC0415

    mean = lambda rs: 100 * statistics.fmean(abs(r.error) for r in rs)  # noqa: E731
    fitted, status = {}, 0
    for fit_devices, carriers in TRAINING_GEMM_GROUPS.items():
        runs = {device: device_entries(entries, device) for device in fit_devices}
        calibration = [e for own in runs.values() for e in own]
        share, _ = training_gemm_fit(calibration, carriers)
        fitted.update(dict.fromkeys(carriers, share))
        print(
            f"training GEMM share of {', '.join(carriers)}, fitted on {len(calibration)} dense runs of {', '.join(fit_devices)}: {share:.2f}"
        )
        before = evaluate_all(calibration, training_gemm_override(dict.fromkeys(carriers, 1.0)))
        after = evaluate_all(calibration, training_gemm_override(dict.fromkeys(carriers, share)))
        for b, a in zip(before, after):
            print(f"  {b.run_id:<64} {100 * b.error:+6.1f} % -> {100 * a.error:+6.1f} %")
        print(f"  {len(calibration)} runs, mean |error| {mean(before):.1f} % -> {mean(after):.1f} %")
        held_sets = list(runs.items()) if len(runs) > 1 else [(e["id"], [e]) for e in calibration]
        for name, held in held_sets:  # leave one device (one run) out
            x, _ = training_gemm_fit([e for e in calibration if e not in held], carriers)
            print(
                f"  without {name}: {x:.2f}, its {len(held)} run(s) {mean(evaluate_all(held, training_gemm_override(dict.fromkeys(carriers, x)))):.1f} %"
            )
        for name in carriers:
            stored = library.load_device(name).training_gemm_efficiency
            if abs(stored - share) > 0.005:
                print(f"  {name}: stored {stored:.2f}, DIFFERS")
                status = 1
    # A100's curves come from MAMF too, but its runs were never short of them: the same fit, printed, not stored
    a100 = ("a100-sxm-80gb", "a100-sxm-40gb")
    own = device_entries(entries, a100[0])
    x, error = training_gemm_fit(own, a100)
    print(
        f"for comparison, the same fit on A100's {len(own)} dense runs: {x:.2f} ({mean(evaluate_all(own)):.1f} -> {100 * error:.1f} %; its files keep 1)"
    )
    check = [
        e
        for e in load_all_runs()
        if family(e["id"]) in (*DENSE_CHECK, *MOE_CHECK) and DEVICE_OF_SYSTEM.get(e["system"]) in fitted
    ]
    for label, families in (("dense", DENSE_CHECK), ("MoE", MOE_CHECK)):
        group = [e for e in check if family(e["id"]) in families]
        before = evaluate_all(group, training_gemm_override(dict.fromkeys(fitted, 1.0)))
        after = evaluate_all(group, training_gemm_override(fitted))
        print(
            f"out of sample, {label} runs on these devices: {len(group)}, mean |error| {mean(before):.1f} % -> {mean(after):.1f} %"
        )
    return status


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holdout", action="store_true", help="leave-one-family-out errors")
    parser.add_argument("--moe", action="store_true", help="fit the routed-expert efficiency of the H100 instead")
    parser.add_argument("--attention", action="store_true", help="print the measured flash-attention curve instead")
    parser.add_argument("--engine", metavar="NAME", help="fit the serving-engine profile problems/engines/NAME.yaml instead")
    parser.add_argument("--step-overhead", action="store_true", help="fit the serving runtime's per-pass overhead instead")
    parser.add_argument(
        "--serving-gemm", action="store_true", help="fit B200's and GB200's serving GEMM share on MLPerf Inference v5.0 instead"
    )
    parser.add_argument(
        "--mxfp8", action="store_true", help="fit the Blackwell devices' MXFP8 GEMM share on MXFP8/FP8-CS pairs instead"
    )
    parser.add_argument(
        "--training-gemm", action="store_true", help="fit the Blackwell devices' training GEMM share on their dense runs instead"
    )
    args = parser.parse_args()
    if args.mxfp8:
        return mxfp8_pairs.main()
    if args.step_overhead:
        return fit_step_overhead()
    if args.serving_gemm:
        return fit_serving_gemm()
    if args.attention:
        seqs, effs = attention_curve()
        print(f"measured (cuDNN causal fwd+bwd, median over shapes): tokens {list(seqs)}, efficiency {list(effs)}")
        for length, gain in attention_growth_beyond(seqs[-1]).items():
            print(f"published cuDNN H200 rows: {length} tokens {gain:.4f}x the {seqs[-1]}-token efficiency")
        seqs, effs = attention_curve_extended()
        print(f"efficiency.attention_by_tokens: tokens {list(seqs)}, efficiency {list(effs)}")
        return 0
    if args.engine:
        try:
            return fit_engine(args.engine)
        except ProblemError as err:  # an unknown engine name: one line, as the CLI answers
            print(f"calibrate.py --engine: {err}", file=sys.stderr)
            return 2
    entries = load_runs()
    if args.moe:
        fit_moe(entries)
        return 0
    if args.training_gemm:
        return fit_training_gemm(entries)
    k, per_device, value = fit_all(entries)
    print(f"straggler share {k:.4f} (every system), mean |error| {100 * value:.1f} % over the runs below")
    for device, (x, tp_overlap, error) in per_device.items():
        told = (
            "its file's (no run overlaps)"
            if tp_overlap is None
            else f"{tp_overlap:.1f}" + (" (the H100's: too few runs)" if device in FEW_RUN_DEVICES else "")
        )
        own = device_entries(entries, device)
        net = f"{x:.3f}" + (" (the H100's: too few runs)" if len(own) < NETWORK_MIN_RUNS and device in FEW_RUN_DEVICES else "")
        print(f"{device}: {len(own)} runs, network efficiency {net}, tp_overlap {told}, mean |error| {100 * error:.1f} %")
    if args.holdout:
        print("\nleave-one-family-out (fit the straggler share and the networks without the family, error on it):")
        for fam in sorted({family(e["id"]) for device in DEVICES for e in device_entries(entries, device)}):
            train = [e for e in entries if family(e["id"]) != fam]
            test = [e for e in entries if family(e["id"]) == fam]
            k_out, fitted, _ = fit_all(train)
            errors = []
            for device in DEVICES:
                held = device_entries(test, device)
                if held:  # a device left without runs: as fit_all treats one with too few, the H100's network and overlap
                    h100 = fitted.get("h100-sxm-80gb") if device in FEW_RUN_DEVICES else None
                    x, tp_overlap, _ = fitted.get(device, (h100[0], h100[1], None) if h100 else (NO_RUN_NETWORK, None, None))
                    errors += [abs(r.error) for r in evaluate_all(held, override({device: x}, tp_overlap, k_out))]
            print(
                f"  {fam:<32} {len(errors):>2} runs: held-out mean |error| {100 * statistics.fmean(errors):.1f} % "
                f"(straggler {k_out:.4f})"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
