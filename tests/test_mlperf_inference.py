"""MLPerf Inference's Llama 2 70B Offline runs (problems/validation/mlperf_inference_runs.yaml) and the engine's
batch cap they need (workload.max_batch_size)."""

from __future__ import annotations

import dataclasses
import re
import statistics
import sys

import pytest
from conftest import REPO, run_main, solved_as_enumerated, write_yaml

from parasol.model import inference
from parasol.model.specs import InferenceWorkload
from parasol.solver import library, serving_space
from parasol.solver.inference_validation import (
    evaluate_mlperf,
    load_latency_oos_runs,
    load_mlperf_runs,
    load_oos_runs,
    load_runs,
)
from parasol.solver.library import load_device, load_model
from parasol.solver.problem import parse_problem


@pytest.fixture(scope="module")
def results():
    return evaluate_mlperf()


OOS, FIT = "(out of sample)", "(fits serving_gemm)"
# each family: model | out of sample, or fitted | hardware | runs | mean |error| bound (the measurement of
# 2026-11-28 + 1 point; the Blackwell rows of 2026-11-29, after XLA's GEMM size penalty; the 405B fitted and Blackwell
# Ultra rows and the Hopper 8B row after the attention kernels' measured forward share, 2026-11-29)
FAMILY_TABLE = """
Llama 2 70B    | oos | Hopper FP8              | 8 | 0.069
Llama 2 70B    | fit | Blackwell FP4           | 2 | 0.078
Llama 2 70B    | oos | Blackwell FP4           | 12 | 0.100
Mixtral 8x7B   | oos | Hopper FP8              | 3 | 0.061
Mixtral 8x7B   | fit | Blackwell FP8/FP4 mix   | 1 | 0.061
Llama 3.1 405B | oos | Hopper FP8              | 4 | 0.024
Llama 3.1 405B | fit | Blackwell FP4           | 2 | 0.113
Llama 3.1 405B | oos | Blackwell FP4           | 16 | 0.022
Llama 3.1 405B | oos | Blackwell Ultra FP4     | 1 | 0.255
Llama 3.1 8B   | oos | Blackwell FP4           | 7 | 0.148
Llama 3.1 8B   | oos | Hopper FP8              | 2 | 0.096
DeepSeek-R1    | oos | Blackwell FP4           | 6 | 0.049
DeepSeek-R1    | oos | Blackwell Ultra FP4     | 2 | 0.065
"""


def _families() -> dict:
    """{family name: (runs, bound)} from FAMILY_TABLE."""
    out = {}
    for line in FAMILY_TABLE.strip().splitlines():
        model, kind, hardware, runs, bound = (cell.strip() for cell in line.split("|"))
        out[f"{model} Offline {OOS if kind == 'oos' else FIT}, {hardware}"] = (int(runs), float(bound))
    return out


FAMILIES = _families()
# the dataset's mean prompt, from its official file's token lengths (the data file's header)
MEAN_PROMPT = {"llama2-70b": 222, "mixtral-8x7b": 427, "llama3.1-405b": 9429, "llama3.1-8b": 871, "deepseek-v3": 804}


def _family(rows, name):
    return [r for r in rows if (r["family"] if isinstance(r, dict) else r.family).endswith(name)]


def test_the_runs_are_nvidias_code_and_in_no_other_file():
    """NVIDIA's own submissions, and its partners' v5.1 runs of the same TensorRT-LLM code: DeepSeek-R1 (Dell,
    GigaComputing, Google, CoreWeave) and Llama 2 70B, Llama 3.1 405B and 8B on 8 B200 with NVIDIA's config byte for
    byte (eight, eleven and six systems), Llama 2 70B and Llama 3.1 405B on 8 H200 with the one H200 config every
    such partner submitted (four and two systems), and Llama 3.1 405B on two 4-GPU GB200 nodes (Azure, Nebius) with
    NVIDIA's GB200 x4 config but for its final newline; and Nebius's five and ASUSTeK's H200 Llama 2 70B, whose configs
    differ from those only in how long LoadGen runs or how many samples it issues; and Llama 3.1 8B on 8 H200 at Quanta
    (the H200 8B file it shares with Dell) and HPE (that file with max_num_tokens 12000 and a 0.99 KV share; added
    2026-11-28: +2.8 and +19.2 %, mean 11.0 %; with the token budget, 2026-11-29: +2.6 and +12.3 %, mean 7.5 %, bound
    + one point);
    every v5.0 Blackwell run of NVIDIA's fits the serving GEMM share."""
    entries = load_mlperf_runs()
    sizes = {name: len(_family(entries, name)) for name in FAMILIES}
    assert sizes == {name: runs for name, (runs, _) in FAMILIES.items()}
    assert sum(sizes.values()) == len(entries)
    fitted = [e for e in entries if FIT in e["family"]]
    assert len(fitted) == 5 and all("-v50-" in e["id"] and e["system"] in ("dgx-b200", "gb200-nvl72") for e in fitted)
    blackwell_llama2 = [e for e in entries if e["model"] == "llama2-70b" and e["system"] in ("dgx-b200", "gb200-nvl72")]
    assert all(e["workload"]["precision"] == e["workload"]["weight_precision"] == "fp4" for e in blackwell_llama2)
    assert all(
        e["mapping"]["tp"] == e["mapping"]["pp"] == e["mapping"]["ep"] == 1 for e in entries if e["model"] == "mixtral-8x7b"
    )
    others = {e["id"] for e in load_runs() + load_oos_runs() + load_latency_oos_runs()}
    assert not {e["id"] for e in entries} & others


def test_each_run_has_the_datasets_mean_prompt_its_own_mean_output_and_its_published_rate():
    """The prompt is the dataset's mean (Llama 2 70B 222.33 tokens, Mixtral 8x7B 427.39, from the official dataset
    files' token lengths); the output each run's Tokens / Samples per second, and the rate per GPU its Tokens per
    second over its GPUs, as the summary its source names prints them."""
    for e in load_mlperf_runs():
        samples, tokens = (
            float(re.search(rf"{key} ([0-9.]+)", e["source"]).group(1)) for key in ("Samples per second", "Tokens per second")
        )
        assert e["workload"]["input_len"] == MEAN_PROMPT[e["model"]], e["id"]
        assert e["workload"]["output_len"] == round(tokens / samples), e["id"]
        assert e["measured"]["tokens_per_s_per_gpu"] == pytest.approx(tokens / e["num_gpus"], abs=0.05), e["id"]


def test_the_serving_gemm_share_of_b200_and_gb200_is_the_fit_on_the_v5_0_runs():
    """benchmarks/calibrate.py --serving-gemm: least squares over 0.50-1.00 on the five v5.0 B200/GB200 runs gives 0.74
    (their mean |error| 23.4 -> 5.7 %; the v5.1 runs held out, 48.6 -> 29.5 %, without DeepSeek-R1 26.3 -> 6.5 %);
    0.73 once the networks were refitted on chunk-wise data-parallel overlap (23.3 -> 7.5 %; held out 33.2 -> 16.9 %
    with the datasets' spread of lengths), 0.74 again once each slot held the length-biased whole request (23.1 ->
    7.5 %; held out 29.3 -> 13.6 %), and still once DeepSeek-R1's sets drained, their answers cut at 20,000 tokens (held out 27.7 -> 12.1 %; 29.0 -> 15.5 %
    with the partners' four B200 runs of DeepSeek-R1; 25.6 -> 12.3 % with their eight B200 runs of Llama 2 70B too;
    25.9 -> 9.5 % over 36 with their Llama 3.1 405B and 8B runs; 26.8 -> 10.8 % over 39 once GB300, whose curves come from
    the same B200 measurement, carried it too; 26.6 -> 10.4 % over 41 with Azure's and Nebius's GB200 x4 405B runs; 26.2 -> 9.9 % over 44 with Nebius's B200 and GB200 x4 runs);
    0.72 once the engine's token budget held each pass's decoding tokens and a pipelined run's gpu_batch_size bounded each
    of its pp micro-batches (2026-11-29: 24.7 -> 8.4 %; held out 26.6 -> 9.5 % over 44); 0.71 once the Blackwell GEMM
    curves carried XLA's size penalty (2026-11-29: 26.2 -> 7.4 %; held out 23.2 -> 6.4 % over 44).
    Here: each device file holds the best share within 0.03 of it; B200 and GB200, whose runs it is fitted on, and
    Blackwell Ultra's B300 and GB300 carry it, no other device."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from calibrate import fit_serving_gemm_share, serving_gemm_runs  # noqa: PLC0415

    stored = {name: load_device(name).serving_gemm_efficiency for name in library.names("systems/devices")}
    carriers = {name for name, share in stored.items() if share != 1.0}
    assert carriers == {"b200", "gb200", "b300", "gb300"} and len({stored[name] for name in carriers}) == 1
    fitted, held = serving_gemm_runs()
    assert len(fitted) == 5 and len(held) == 44
    assert fit_serving_gemm_share(fitted, near=stored["b200"]) == stored["b200"]


def test_the_serving_share_scales_serving_gemms_and_leaves_training_alone():
    """A serving problem on B200 takes the device file's serving GEMM share as its GEMM scale; a training problem on the
    same system takes its training share instead (tests/test_training_gemm.py)."""
    serving = parse_problem(
        {
            "model": "llama3.1-8b",
            "system": {"name": "dgx-b200", "num_gpus": 8},
            "workload": {"kind": "inference", "input_len": 128, "output_len": 128},
        },
        source="t",
    )
    training = parse_problem(
        {
            "model": "llama3.1-8b",
            "system": {"name": "dgx-b200", "num_gpus": 8},
            "workload": {"kind": "training", "seq_len": 4096, "global_batch": 64},
        },
        source="t",
    )
    b200 = load_device("b200")
    assert serving.system().device.gemm_scale == b200.serving_gemm_efficiency < 1.0
    assert training.system().device.gemm_scale == b200.training_gemm_efficiency != b200.serving_gemm_efficiency


def test_error_as_measured(results):
    """Out of sample, nothing fitted on them: the planner's best plan (batch up to the run's gpu_batch_size) against
    the published Offline throughput. Measured 2026-11-28. Llama 2 70B, every run too fast: H100 +10.0 %, H200
    +5.3 % (7.7 %); B200 x8 +17.6 % (v5.0) and +20.3 % (v5.1), B200 x1 +24.3 %, GB200 x4 +23.0 % (21.3 %), as the
    issue found the reserved B200/GB200 serving tables. Mixtral 8x7B: H100 +9.8 %, H200 +5.5 % (v4.1) and -1.1 %
    (v5.0) (5.5 %), B200 +16.9 %; +43.1, +38.9, +30.3 and +36.3 % before serving charged the routed experts'
    grouped GEMMs at the devices' measured grouped share (docs/serving.md). Llama 3.1 405B: H200 -4.4 %; B200 +27.0 %
    (v5.0) and +18.6 % (v5.1), GB200 NVL72 +31.0 and +25.1 % (25.4 %); GB300 NVL72 +47.4 %. Llama 3.1 8B on B200
    +44.4 %. DeepSeek-R1 (attention data parallel, 8-way expert parallel): B200 +94.6 %, GB200 NVL72 +114.1 %,
    GB300 NVL72 +107.3 %. Every Blackwell run too fast. Since B200 and GB200 carry the serving GEMM share fitted on
    the five v5.0 runs among them: those -5.3, -0.5, -7.3, +6.1 and +9.6 %; held out, Llama 2 70B -3.7 and -1.2 %,
    Llama 3.1 405B -0.9 and +4.4 %, 8B +22.3 %, DeepSeek-R1 +78.1 and +95.8 %. Since each run carries its dataset's
    spread of lengths (workload.output_len_dispersion, prompt_output_comoment; the fit still 0.74), measured
    2026-11-28: Llama 2 70B H100 +8.4, H200 +4.1 %, v5.0 Blackwell -6.8 and -2.1 %, v5.1 -5.3 and -3.0 %; Mixtral
    +8.9, +4.8, -1.7 and -8.0 %; Llama 3.1 405B -4.4, +6.2, +9.8, -0.8, +4.6 and GB300 +47.8 %; 8B +22.3 %
    (unchanged: its file has no token counts of the outputs); DeepSeek-R1 +29.7, +44.6 and GB300 +43.8 %. Since the
    networks were refitted on chunk-wise data-parallel overlap (faster NVLink collectives) and the share with them
    (0.73): Llama 2 70B +8.4, +4.1, -7.7, -3.1, -6.3, -4.0 %; Mixtral +8.9, +4.8, -1.7, -9.0 %; Llama 3.1 405B
    -1.7, +6.7, +11.0, -0.3, +5.8, +47.8 %; 8B +21.4 %; DeepSeek-R1 +31.9, +48.6, +43.8 %. Since each slot holds the
    length-biased whole request in KV cache (inference.held_sequence_tokens; the share refitted 0.74 again): Llama 2
    70B +7.5, +4.0, -6.8, -2.8, -6.0, -3.6 %; Mixtral +8.9, +4.8, -1.7, -8.3 %; Llama 3.1 405B -1.7, +7.7, +12.0,
    +0.5, +6.7, +47.8 %; 8B +22.3 %; DeepSeek-R1 +20.1, +36.2, +32.7 % (its batches memory-bound: 328, 344, 632).
    Since DeepSeek-R1's runs are the finite sets LoadGen issued (26,328, 210,624 and 396,000 samples at once), staggered
    and then drained over up to 20,000 steps (workload.output_len_max; serving_step.drained_makespan), B200's and
    GB300's drain steps padded to 128 sequences, and their answers' moments taken with the engine's cut at 20,000
    tokens (2.2409 and 0.7778; in the steady state that alone gives +31.1, +49.4, +44.7 %): DeepSeek-R1 +12.1, +33.3,
    +33.3 %. Partners' runs of the same code (Dell XE9680L and XE9685L, GigaComputing and Google B200 x8, CoreWeave
    GB300 x8), added then: +24.0, +22.4, +22.0, +17.2 and +29.5 % (steady state +45.6, +44.3, +43.6, +37.0, +40.8 %).
    Llama 2 70B on partners' 8 B200 with NVIDIA's config, added then: -5.8, -6.6, -3.2, +21.8 (Google, 23 % slower than
    the others), -6.8, -7.3, -6.0, -6.9 %; Llama 3.1 405B on eleven: -1.5 to +1.1 %; Llama 3.1 8B on six: +13.2 to
    +18.6 %. Since the engine's token budget (max_num_tokens) holds a pass's decoding tokens as well as its prompt
    tokens (inference.budget_micro_batch; measured 2026-11-29): Llama 3.1 8B on B200 +12.3 to +21.3 % (1 point less),
    on H200 +2.6 and +12.3 % (Quanta's 1,536 tokens hold 196 sequences), Llama 3.1 405B on H200 -2.2 to +0.2 %, GB300
    NVL72 +25.1 %; the rest unchanged. Since a pipelined run's gpu_batch_size bounds each of its pp micro-batches
    (TensorRT-LLM holds max_batch_size x pp sequences) and the serving GEMM share refitted on that (0.72): Llama 2 70B
    Blackwell -6.9, -4.8 % (v5.0), v5.1 -9.2 to +19.3 %; Mixtral B200 -10.2 %; Llama 3.1 405B B200 and GB200 v5.0 +7.8,
    +12.1 %, v5.1 -1.4 to +4.8 %, GB300 +23.1 %; 8B on B200 +10.5 to +19.4 %; DeepSeek-R1 +11.1 to +32.1 %; Hopper
    unchanged. Since the NVFP4 checkpoint's MLA projections are stored and computed at 16 bits (its hf_quant_config's
    exclude_modules; workload.unquantised_gemms; measured 2026-11-29): DeepSeek-R1 +6.5 to +26.6 % (Blackwell 15.6 %,
    Blackwell Ultra 19.8 %), the rest unchanged. Since the 8 replicas that share each MoE layer wait for the busiest
    (workload.attention_dp_balance 0.877, TensorRT-LLM's measured balance with the ADP balance scheduler the configs
    enable; measured 2026-11-29): DeepSeek-R1 -1.4 to +17.3 % (Blackwell 7.5 %, Blackwell Ultra 9.9 %). Since the
    Blackwell GEMM curves lose what XLA's GEMM table measures a GEMM of each size losing more on B200 than on Hopper
    (benchmarks/device_curves.py gemm_size_penalty) and the share refitted on them (0.71; measured 2026-11-29): Llama 2
    70B Blackwell 6.8 % (fitted), 9.0 % (held out); Mixtral 5.1 %; Llama 3.1 405B 9.0 % (fitted), 1.2 %, GB300
    +22.3 %; 8B 13.8 %; DeepSeek-R1 Blackwell 3.9 %, Blackwell Ultra 5.5 %. Since a prefill's attention takes the forward's
    measured share of its kernel's forward + backward time (compute.attention_core_backward_factor; 2026-11-29): Llama 3.1
    405B 10.2 % (fitted), 1.1 % (B200, held out), 0.9 % (Hopper), GB300 +24.4 %; 8B Blackwell 14.3 %, Hopper 8.5 %; the
    rest within 0.1 point. Bounds: the measurements + 1 point."""
    assert all(r.error > 0 for r in results if r.problem.system().device.architecture == "blackwell-ultra")
    for name, (_, bound) in FAMILIES.items():
        assert statistics.fmean(abs(r.error) for r in _family(results, name)) <= bound, name


def test_serving_charges_fp8_routed_experts_the_grouped_kernels_share_of_the_compute_rate():
    """Where the experts' GEMMs are compute-bound (many rows per expert) an FP8 MoE layer takes about 1/grouped_fp8
    of the time it takes at the dense curve; where a decode step streams the experts' weights (a few rows) the
    time is the same; in 16 bits the share does not apply (training charges the same: compute.moe_routed_forward_time_s)."""
    model, h100 = load_model("mixtral-8x7b"), load_device("h100-sxm-80gb")
    dense = dataclasses.replace(h100, grouped_fp8_efficiency=1.0)
    fp8 = InferenceWorkload(input_len=512, output_len=128, precision="fp8", weight_precision="fp8", kv_precision="fp8")
    bf16 = dataclasses.replace(fp8, precision="bf16", weight_precision="bf16", kv_precision="bf16")
    wide, narrow = (inference.routed_experts_time_s(model, d, fp8, 16384, 1, 1) for d in (h100, dense))
    assert h100.grouped_fp8_efficiency == 0.67 and 1.3 < wide / narrow < 1 / 0.67
    few = [inference.routed_experts_time_s(model, d, fp8, 4, 1, 1) for d in (h100, dense)]
    assert few[0] == pytest.approx(few[1])
    assert inference.routed_experts_time_s(model, h100, bf16, 16384, 1, 1) == pytest.approx(
        inference.routed_experts_time_s(model, dense, bf16, 16384, 1, 1)
    )


def test_the_plans_fit_and_keep_to_the_runs_batch_cap(results):
    for r in results:
        met = r.evaluation.metrics
        assert met["fits"] and 1 <= met["batch"] <= r.problem.workload.max_batch_size, r.run_id


def test_the_token_budget_parts_the_two_h200_8b_runs(results):
    """Quanta's and HPE's 8-H200 Llama 3.1 8B runs are one TensorRT-LLM code, the KV share (0.9, 0.99) and
    max_num_tokens (1,536, 12,000) apart; HPE measures 8,255 tokens/s per GPU, Quanta 7,115 (1.16x). Without the
    budget's limit the model put them 0.1 % apart (its KV caches hold 2,040 and 1,856 sequences, and the steady state
    is weight-bound); with it 1.06x (measured 2026-11-29). Every plan keeps within its run's budget."""
    rate = {
        r.run_id.split("-")[3]: r.evaluation.metrics["tokens_per_s_per_gpu"] for r in results if "h200x8-llama3.1-8b" in r.run_id
    }
    assert rate["hpe"] / rate["quanta"] > 1.05
    assert all(r.evaluation.metrics["within_token_budget"] for r in results)


# ---------------------------------------------------------------- workload.max_batch_size


def _serving(cap=None, **workload):
    wl = {"kind": "inference", "input_len": 256, "output_len": 256, "precision": "fp8", "serving": "continuous", **workload}
    if cap is not None:
        wl["max_batch_size"] = cap
    return {
        "model": "llama3.1-8b",
        "system": {"name": "hgx-h200", "num_gpus": 1},
        "workload": wl,
        "mapping": {"tp": 1},
        "objective": "throughput",
    }


def test_the_engines_batch_cap_bounds_the_planners_batches():
    """Without a cap the planner's batches stop at MAX_DEFAULT_BATCH (1,024); an engine that takes 2,048 lets it go
    past, and a cap of 64 holds it to 64, the CP-SAT plan equal to the enumerator's."""
    default = serving_space.build_space(parse_problem(_serving(), source="t")).relation("batch")["batch"].max()
    wide = serving_space.build_space(parse_problem(_serving(2048), source="t")).relation("batch")["batch"].max()
    assert default == serving_space.MAX_DEFAULT_BATCH < wide <= 2048
    plan = solved_as_enumerated(parse_problem(_serving(64), source="t"))
    assert plan.mapping.batch == 64


@pytest.mark.parametrize(
    "change, field",
    [
        ({"workload": {"max_batch_size": 0}}, "workload.max_batch_size"),
        ({"workload": {"max_batch_size": "many"}}, "workload.max_batch_size"),
        ({"workload": {"max_batch_size": 16, "batch": 32}}, "workload.batch"),
        ({"workload": {"max_batch_size": 16}, "mapping": {"tp": 1, "batch": [8, 32]}}, "mapping.batch"),
    ],
)
def test_a_bad_batch_cap_is_one_line_and_exit_2(tmp_path, change, field):
    data = _serving()
    data["workload"].update(change.get("workload", {}))
    data["mapping"] = change.get("mapping", data["mapping"])
    command = "evaluate" if "batch" in data["workload"] else "solve"
    proc = run_main([command, str(write_yaml(tmp_path / "p.yaml", data))])
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert field in proc.stderr and "p.yaml" in proc.stderr
