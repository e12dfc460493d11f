"""Measured vs predicted step time (and memory) for every published run in the validation set.

    python benchmarks/accuracy.py [--json] [--markdown] [--write-docs] [--write-bands]

--write-docs replaces the generated blocks of docs/accuracy.md (family summary, per-run tables,
serving) and the accuracy summary that heads both README.md and docs/accuracy.md with this run's figures.

--write-bands rewrites problems/validation/accuracy_bands.yaml, the out-of-sample error by regime (training or
serving, dense or MoE, the device's architecture) that every plan reports (solver/accuracy_bands.py), and its table in
docs/accuracy.md, and prints nothing else.

The whole-run budgets follow the training runs: DeepSeek-V3's published 2.664M H800 GPU-hours against
its published mapping as it ran, and DeepSeek-V2's 172.8K H800 GPU-hours per trillion tokens against its
published parallelism (benchmarks/cost_validation.py; out of sample; --json: "whole_run").

The serving runs (problems/validation/inference_runs.yaml) are summarised at the end (per run:
benchmarks/inference_accuracy.py; --json adds them under "inference"), then the out-of-sample
max-throughput runs (problems/validation/inference_runs_oos.yaml, batch = the planner's choice;
--json: "inference_out_of_sample") and MLPerf Inference's Offline runs
(problems/validation/mlperf_inference_runs.yaml: five v5.0 Blackwell runs fit the devices' serving GEMM share, the rest
out of sample; --json: "inference_mlperf").

Runs: problems/validation/training_runs.yaml (copied from ../shared/reference/calibration_runs.yaml
with sources, then the published runs outside it) and problems/validation/llm_foundry_runs.yaml (LLM Foundry's
MPT benchmarks, benchmarks/llm_foundry_runs.py). The device efficiency curves were calibrated on the reference's
runs (benchmarks/calibrate.py), so their errors are in-sample; every family named "(out of sample)" was never
fitted on; see --holdout in calibrate.py for a cross-validated figure.
"""

from __future__ import annotations

import json
import statistics
import sys

import cost_validation  # benchmarks/cost_validation.py: the whole-run budget
import inference_accuracy  # benchmarks/inference_accuracy.py: the serving runs
import yaml
from calibrate import DENSE_CHECK, LLM_FOUNDRY, MOE_CALIBRATION, MOE_CHECK  # benchmarks/calibrate.py: fitted or not
from docs_block import write_block

from parasol.solver import accuracy_bands
from parasol.solver.library import library_root
from parasol.solver.report import text_table
from parasol.solver.validation import best_listed_mapping, evaluate_all, load_out_of_memory_runs, load_runs, out_of_sample

# DeepSpeed ZeRO-3 as run in SC'21 Table 2: the step time stays flat as GPUs double, which the
# model's bandwidth-optimal collectives cannot reproduce (see README, Accuracy).
OUTSIDE_MODEL = ("Megatron SC'21 Table 2 ZeRO-3",)
MOE = MOE_CALIBRATION  # in sample, reported on their own (calibrate.py --moe fits on them)
# published runs outside ../shared/reference, never used for fitting: reported on their own
DENSE_OUT_OF_SAMPLE = DENSE_CHECK  # the out-of-sample dense families: the Llama 3 paper, MLPerf Training
OUT_OF_SAMPLE = (MOE_CHECK[0], *DENSE_OUT_OF_SAMPLE, *MOE_CHECK[1:])
APART = MOE + OUT_OF_SAMPLE


def moe_out_of_sample(results) -> list:
    """The out-of-sample runs of every MoE family (calibrate.MOE_CHECK)."""
    return [r for r in results if r.family in MOE_CHECK]


def dense_out_of_sample(results) -> list:
    """The out-of-sample runs of every dense family (calibrate.DENSE_CHECK)."""
    return [r for r in results if r.family in DENSE_OUT_OF_SAMPLE]


def summarise(results) -> dict:
    errors = [abs(r.error) for r in results]
    by_family = {}
    for r in results:
        by_family.setdefault(r.family, []).append(abs(r.error))
    return {
        "runs": len(results),
        "mean_abs_error": statistics.fmean(errors),
        "max_abs_error": max(errors),
        "worst_run": max(results, key=lambda r: abs(r.error)).run_id,
        "by_family": {
            k: {"runs": len(v), "mean_abs_error": statistics.fmean(v), "max_abs_error": max(v)} for k, v in by_family.items()
        },
    }


def table(results, markdown: bool) -> str:
    head = ["run", "GPUs", "mapping (tp/pp/dp/cp, mb, vpp)", "measured s", "predicted s", "error", "mem meas/pred GiB"]
    rows = []
    for r in results:
        m = r.mapping
        mem = f"{r.measured_memory_gib:.0f} / {r.predicted_device_memory_gib:.1f}" if r.measured_memory_gib else ""
        rows.append(
            [
                r.run_id,
                str(m.num_gpus),
                f"{m.tp}/{m.pp}/{m.dp}/{m.cp}, {m.micro_batch}, {m.vpp}",
                f"{r.measured_step_s:.3f}",
                f"{r.predicted_step_s:.3f}",
                f"{100 * r.error:+.1f} %",
                mem,
            ]
        )
    return text_table(head, rows, markdown)


def family_table(results, markdown: bool = True) -> str:
    """Mean and worst |error| per published family, then the dense runs the model covers, all dense
    runs, and the MoE and out-of-sample families on their own."""
    head = ["family", "runs", "mean abs. step-time error", "worst"]
    rows = []

    def row(name, rs, bold=False):
        errors = [abs(r.error) for r in rs]
        cells = [name, str(len(rs)), f"{100 * statistics.fmean(errors):.1f} %", f"{100 * max(errors):.1f} %"]
        rows.append([f"**{c}**" if bold and i in (0, 2) else c for i, c in enumerate(cells)])

    families = list(dict.fromkeys(r.family for r in results))
    covered = [f for f in families if f not in OUTSIDE_MODEL + APART]
    for f in covered:
        row(f, [r for r in results if r.family == f])
    row(f"dense runs above ({len(covered)} families)", [r for r in results if r.family in covered], bold=True)
    for f in OUTSIDE_MODEL:
        row(f, [r for r in results if r.family == f])
    row("all dense runs", [r for r in results if r.family not in APART], bold=True)
    for f in dict.fromkeys(APART):
        rs = [r for r in results if r.family == f]
        if rs:
            row(f, rs)
    return text_table(head, rows, markdown)


def memory_lines(results) -> list[str]:
    """Device memory (what nvidia-smi shows: ``RunResult.predicted_device_memory_gib``) against the
    published readings, per family."""
    lines = []
    for name in dict.fromkeys(r.family for r in results if r.measured_memory_gib):
        errors = [r.memory_error for r in results if r.measured_memory_gib and r.family == name]
        lines.append(
            f"device memory (the live peak, the allocator's cache, the reduction copy's segment and the CUDA/NCCL reserve) "
            f"vs nvidia-smi, {name} ({len(errors)} runs): mean |error| {100 * statistics.fmean(map(abs, errors)):.1f} %, "
            f"range {100 * min(errors):+.1f} % to {100 * max(errors):+.1f} %"
        )
    return lines


def out_of_memory() -> list[dict]:
    """The published configurations that ran out of memory, with what the model says of them."""
    rows = []
    for entry in load_out_of_memory_runs():
        _, _, evaluation = best_listed_mapping(entry)
        m = evaluation.metrics
        rows.append(
            {
                "id": entry["id"],
                "fits": m["fits"],
                "peak_memory_gib": m["peak_memory_gib"],
                "device_memory_gib": m["device_memory_gib"],
                "usable_memory_gib": m["usable_memory_gib"],
            }
        )
    return rows


def whole_run() -> list[dict]:
    """The published training budgets not reserved by issue 13, against the model's: DeepSeek-V3's
    pre-training (Table 1: 2.664M H800 GPU-hours for 14.8T tokens) with the published mapping as it ran
    (DualPipe, the report's selective recomputation; ``cost_validation.published_mapping_row``), and
    DeepSeek-V2's cost per trillion tokens (172.8K H800 GPU-hours) with the report's parallelism and the
    assumptions ``cost_validation.deepseek_v2_row`` states (2,048 GPUs, 1F1B, the all-to-all exposed)."""
    label, _, gpu_hours, _ = cost_validation.published_mapping_row("selective", True)
    v2_label, _, v2_gpu_hours, _ = cost_validation.deepseek_v2_row()
    rows = (
        ("deepseek-v3-pretraining", label, cost_validation.DEEPSEEK_GPU_HOURS, gpu_hours),
        ("deepseek-v2-per-trillion-tokens", v2_label, cost_validation.DEEPSEEK_V2_GPU_HOURS_PER_T, v2_gpu_hours),
    )
    return [
        {
            "id": run_id,
            "setting": setting,
            "published_gpu_hours": published,
            "predicted_gpu_hours": predicted,
            "error": predicted / published - 1.0,
        }
        for run_id, setting, published, predicted in rows
    ]


def write_docs(results, serving, serving_oos, budget, mlperf) -> None:
    write_block("accuracy.md", "training-families", family_table(results))
    write_block(
        "accuracy.md", "training-runs", f"<details><summary>{len(results)} runs</summary>\n\n{table(results, True)}\n\n</details>"
    )
    write_block(
        "accuracy.md",
        "serving",
        "\n".join(
            [
                inference_accuracy.table(serving, True),
                "",
                "```",
                inference_accuracy.report(serving),
                "```",
                "",
                "Out of sample (problems/validation/inference_runs_oos.yaml; batch = the planner's best):",
                "",
                inference_accuracy.table(serving_oos, True),
                "",
                "```",
                inference_accuracy.oos_report(serving_oos),
                "```",
                "",
                "MLPerf Inference Offline (problems/validation/mlperf_inference_runs.yaml; batch = the planner's best up to "
                "the run's gpu_batch_size; five v5.0 Blackwell runs fit the devices' serving GEMM share, the rest out of sample):",
                "",
                inference_accuracy.table(mlperf, True),
                "",
                "```",
                inference_accuracy.mlperf_report(mlperf),
                "```",
            ]
        ),
    )
    dense = [r for r in results if r.family not in OUTSIDE_MODEL + APART]
    dense_oos = dense_out_of_sample(results)
    foundry = [r for r in dense_oos if r.family == LLM_FOUNDRY]
    megatron_oos = [r for r in dense_oos if r.family != LLM_FOUNDRY]
    moe, moe_oos = [r for r in results if r.family in MOE], moe_out_of_sample(results)
    s = inference_accuracy.summarise(serving)["by_metric"]
    mean = lambda rs: 100 * statistics.fmean(abs(r.error) for r in rs)  # noqa: E731
    lines = [
        "| what | runs | mean abs. error |",
        "|---|---|---|",
        f"| training step time, dense (in sample) | {len(dense)} | {mean(dense):.1f} % |",
        f"| training step time, MoE (in sample: Megatron-Bridge 25.09 and 25.11, H100 to GB300) | {len(moe)} | "
        f"{mean(moe):.1f} % |",
        "| training step time, dense, out of sample: Megatron-class stacks (Llama 3 paper, MLPerf Training, BLOOM's 02-28 "
        f"benchmarks, NeMo 25.02-25.04, Megatron-Bridge 25.09 on Blackwell) · LLM Foundry's MPT (PyTorch FSDP) · all | {len(megatron_oos)} · {len(foundry)} · "
        f"{len(dense_oos)} | "
        f"{mean(megatron_oos):.1f} % · {mean(foundry):.1f} % · {mean(dense_oos):.1f} % |",
        f"| training step time, MoE, out of sample (Model Zoo, GB200 guide, MLPerf Training, NeMo 25.02-25.04, "
        f"Megatron-Bridge 25.09 on Blackwell) | {len(moe_oos)} | "
        f"{mean(moe_oos):.1f} % |",
    ]
    for name, st in s.items():
        lines.append(f"| serving {inference_accuracy.METRIC_NAMES[name]} | {st['runs']} | {100 * st['mean_abs_error']:.1f} % |")
    held = [r for r in mlperf if out_of_sample(r.family)]
    dense_mlperf = [r for r in held if r.problem.model.moe is None]
    dense_trtllm = [r for r in serving_oos if r.problem.model.moe is None]
    moe_held = [r for r in held + list(serving_oos) if r.problem.model.moe is not None]
    lines.append(
        "| serving max throughput, out of sample: TensorRT-LLM dense on H100/H200 · MLPerf Inference dense · MoE (MLPerf "
        "Inference, TensorRT-LLM's DeepSeek-R1), H100 to GB300 | "
        f"{len(dense_trtllm)} · {len(dense_mlperf)} · {len(moe_held)} | {mean(dense_trtllm):.1f} % · {mean(dense_mlperf):.1f} % · "
        f"{mean(moe_held):.1f} % |"
    )
    memory = [abs(r.memory_error) for r in results if r.measured_memory_gib]
    fit = sum(r.evaluation.metrics["fits"] for r in results)
    lines.append(
        f"| device memory per GPU against nvidia-smi (BLOOM's 02-28 benchmarks; {fit} of {len(results)} published runs fit) | "
        f"{len(memory)} | {100 * statistics.fmean(memory):.1f} % |"
    )
    # DeepSeek-V2's open assumptions (GPUs, overlap, the bubble's bounds): the range of its error over them
    v2 = [
        h / cost_validation.DEEPSEEK_V2_GPU_HOURS_PER_T - 1.0
        for _, _, *hours in cost_validation.deepseek_v2_rows()
        for h in hours
    ]
    lines.append(
        f"| whole-run GPU-hours, out of sample (DeepSeek-V3's budget; DeepSeek-V2's per trillion tokens, on "
        f"assumptions that span {100 * min(v2):+.0f} to {100 * max(v2):+.0f} %) | {len(budget)} | "
        f"{100 * statistics.fmean(abs(b['error']) for b in budget):.1f} % |"
    )
    for page in ("../README.md", "accuracy.md"):  # the same table heads the README and docs/accuracy.md
        write_block(page, "accuracy-summary", "\n".join(lines))


def write_bands() -> str:
    """Rewrite problems/validation/accuracy_bands.yaml from the out-of-sample runs as they stand
    (``accuracy_bands.measured_bands``); the path written."""
    bands = accuracy_bands.measured_bands()
    path = library_root() / accuracy_bands.BANDS_FILE
    head = (
        "# The model's error on the published runs no number of it was fitted to, by regime (task, model kind, the\n"
        '# device\'s architecture) and figure: what every plan reports under "accuracy" (solver/accuracy_bands.py).\n'
        "# Written by `python benchmarks/accuracy.py --write-bands`; do not edit by hand (tests/test_accuracy_bands.py\n"
        "# holds it to the runs). Errors are (predicted - measured) / measured.\n"
    )
    body = yaml.safe_dump({"bands": accuracy_bands.bands_document(bands)}, sort_keys=False, width=130)
    path.write_text(head + body, encoding="utf-8")
    head_row, rows = accuracy_bands.bands_table(accuracy_bands.load_bands(str(path)))  # as stored (5 digits), read back
    write_block("accuracy.md", "accuracy-bands", text_table(head_row, rows, markdown=True))
    return str(path)


def main() -> int:
    cli = inference_accuracy.parser(__doc__)
    cli.add_argument("--write-bands", action="store_true", help="rewrite problems/validation/accuracy_bands.yaml")
    args = cli.parse_args()
    if args.write_bands:
        print(f"wrote {write_bands()}")
        return 0
    results = evaluate_all()
    summary = summarise(results)
    serving, serving_oos = inference_accuracy.evaluate_all(), inference_accuracy.evaluate_oos()
    mlperf = inference_accuracy.evaluate_mlperf()
    budget = whole_run()
    if args.json:
        print(
            json.dumps(
                {
                    "summary": summary,
                    "inference": inference_accuracy.as_json(serving),
                    "inference_out_of_sample": inference_accuracy.as_json(serving_oos),
                    "inference_mlperf": inference_accuracy.as_json(mlperf),
                    "whole_run": budget,
                    "out_of_memory": out_of_memory(),
                    "runs": [
                        {
                            "id": r.run_id,
                            "family": r.family,
                            "measured_step_s": r.measured_step_s,
                            "predicted_step_s": r.predicted_step_s,
                            "error": r.error,
                            "mapping": r.mapping.as_dict(),
                            "measured_memory_gib": r.measured_memory_gib,
                            "predicted_memory_gib": r.evaluation.metrics["peak_memory_gib"],
                            "predicted_device_memory_gib": r.predicted_device_memory_gib,
                        }
                        for r in results
                    ],
                },
                indent=2,
            )
        )
        return 0
    if args.write_docs:
        write_docs(results, serving, serving_oos, budget, mlperf)
    print(table(results, args.markdown))
    print()
    print(
        f"{summary['runs']} runs: mean |error| {100 * summary['mean_abs_error']:.1f} %, "
        f"max {100 * summary['max_abs_error']:.1f} % ({summary['worst_run']})"
    )
    dense = [r for r in results if r.family not in OUTSIDE_MODEL + APART]
    if len(dense) < len(results):
        errors = [abs(r.error) for r in dense]
        worst = max(dense, key=lambda r: abs(r.error))
        print(
            f"{len(dense)} dense runs without {', '.join(OUTSIDE_MODEL)}: mean |error| {100 * statistics.fmean(errors):.1f} %, "
            f"max {100 * max(errors):.1f} % ({worst.run_id})"
        )
    for name in MOE + OUT_OF_SAMPLE:
        errors = [abs(r.error) for r in results if r.family == name]
        if errors:
            print(
                f"{len(errors)} runs, {name}: mean |error| {100 * statistics.fmean(errors):.1f} %, max {100 * max(errors):.1f} %"
            )
    moe_in = [abs(r.error) for r in results if r.family in MOE]
    if moe_in:
        print(f"{len(moe_in)} MoE runs in sample (calibrate.py --moe): mean |error| {100 * statistics.fmean(moe_in):.1f} %")
    dense_oos = dense_out_of_sample(results)
    if dense_oos:  # issue 13's figures: the mean, the worst, and how many runs lie beyond its 15 % bound
        worst = max(dense_oos, key=lambda r: abs(r.error))
        print(
            f"{len(dense_oos)} dense runs out of sample, all families: mean |error| "
            f"{100 * statistics.fmean(abs(r.error) for r in dense_oos):.2f} %, max {100 * abs(worst.error):.1f} % "
            f"({worst.run_id}), {sum(abs(r.error) > 0.15 for r in dense_oos)} beyond 15 %"
        )
    moe_oos = [abs(r.error) for r in moe_out_of_sample(results)]
    if moe_oos:
        print(
            f"{len(moe_oos)} MoE runs out of sample, all families: mean |error| {100 * statistics.fmean(moe_oos):.1f} %, "
            f"max {100 * max(moe_oos):.1f} %"
        )
    for line in memory_lines(results):
        print(line)
    unfit = [r.run_id for r in results if not r.evaluation.metrics["fits"]]
    if unfit:
        print(f"published runs the model says do not fit in memory ({len(unfit)}): {', '.join(unfit)}")
    else:
        print(f"every published run fits in memory ({len(results)} runs)")
    for row in out_of_memory():
        verdict = "does not fit" if not row["fits"] else "fits (wrongly)"
        print(
            f"published configuration that ran out of memory: {row['id']}: the model {verdict}, live peak "
            f"{row['peak_memory_gib']:.1f} of {row['usable_memory_gib']:.1f} GiB usable, {row['device_memory_gib']:.1f} GiB in use"
        )
    for entry in load_runs(expressible=False):
        print(f"published run the model cannot express yet: {entry['id']}: {entry['not_expressible']}")
    for name, s in summary["by_family"].items():
        print(f"  {name:<44} {s['runs']:>3} runs  mean {100 * s['mean_abs_error']:5.1f} %  max {100 * s['max_abs_error']:5.1f} %")
    for b in budget:
        print(
            f"whole-run GPU-hours, out of sample: {b['id']} published {b['published_gpu_hours'] / 1e6:.4f}M, "
            f"predicted {b['predicted_gpu_hours'] / 1e6:.4f}M ({100 * b['error']:+.1f} %; {b['setting']})"
        )
    print()
    print("Inference (problems/validation/inference_runs.yaml; per run: python benchmarks/inference_accuracy.py)")
    print(inference_accuracy.report(serving))
    print("Inference out of sample (problems/validation/inference_runs_oos.yaml)")
    print(inference_accuracy.oos_report(serving_oos))
    print("MLPerf Inference Offline (problems/validation/mlperf_inference_runs.yaml)")
    print(inference_accuracy.mlperf_report(mlperf))
    return 0


if __name__ == "__main__":
    sys.exit(main())
