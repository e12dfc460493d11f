"""Readable tables and JSON documents for evaluations and plans."""

from __future__ import annotations

from model.training import Evaluation


def mapping_dict(mapping, num_gpus: int) -> dict:
    """Every mapping key as a scalar, plus num_gpus (accepted back by ``evaluate``)."""
    return {**mapping.as_dict(), "num_gpus": num_gpus}


def evaluation_json(problem, mapping, evaluation: Evaluation) -> dict:
    """evaluate --json: metrics, breakdown, mapping and per-stage detail."""
    stages = [{k: v for k, v in s.items() if k != "state"} | {"state_bytes": s["state"]} for s in evaluation.stages]
    return {
        "model": problem.model.name,
        "system": problem.system_name,
        "metrics": evaluation.metrics,
        "breakdown": evaluation.breakdown,
        "mapping": mapping_dict(mapping, problem.system().num_gpus),
        "stages": stages,
    }


def _rows(title: str, rows: list[tuple[str, str]]) -> list[str]:
    width = max(len(k) for k, _ in rows)
    return [title] + [f"  {k:<{width}}  {v}" for k, v in rows]


def evaluation_table(problem, mapping, evaluation: Evaluation) -> str:
    """The readable report of one evaluated mapping."""
    m, met, bd = mapping, evaluation.metrics, evaluation.breakdown
    lines = [f"parasol evaluate: {problem.model.name} on {met['num_gpus']} x {problem.system_name} "
             f"({problem.workload.precision}, seq {problem.workload.seq_len}, global batch {problem.workload.global_batch})"]
    lines.append(f"mapping: tp {m.tp}  pp {m.pp}  dp {m.dp}  cp {m.cp}  micro_batch {m.micro_batch}  vpp {m.vpp}  "
                 f"sp {str(m.sp).lower()}  recompute {m.recompute}  zero {m.zero}  "
                 f"stage layers {[s['layers'] for s in evaluation.stages] if m.pp <= 8 else 'first %d, last %d' % (evaluation.stages[0]['layers'], evaluation.stages[-1]['layers'])}")
    lines.append("")
    lines += _rows("metrics", [
        ("step time", f"{met['step_time_s']:.3f} s"),
        ("tokens/s", f"{met['tokens_per_s']:,.0f}  ({met['tokens_per_s_per_gpu']:,.0f} per GPU)"),
        ("MFU", f"{met['mfu'] * 100:.1f} %"),
        ("model TFLOP/s per GPU", f"{met['tflops_per_gpu']:.1f}"),
        ("peak memory per GPU", f"{met['peak_memory_gib']:.1f} GiB of {met['usable_memory_gib']:.1f} GiB usable"
                                + ("" if met["fits"] else "  ** DOES NOT FIT **")),
        ("micro-batches per step", str(met["microbatches"])),
    ])
    step = met["step_time_s"]
    lines.append("")
    lines += _rows(f"time (slowest stage {bd['critical_stage']}, whole step)",
                   [(k, f"{v:9.3f} s  {100 * v / step:5.1f} %") for k, v in bd["time_s"].items() if abs(v) > 1e-9])
    lines.append("")
    lines += _rows(f"memory per GPU (stage {bd['peak_memory_stage']})",
                   [(k, f"{v:7.2f} GiB") for k, v in bd["memory_gib"].items()])
    return "\n".join(lines)
