"""The data-parallel traffic of each published ZeRO-3 (FSDP) run, per micro-batch, and what it bounds.

    python benchmarks/zero3_traffic.py [RUN_ID ...]

For every run of problems/validation/training_runs.yaml at zero 3 (or the runs named): per micro-batch,
the bytes each GPU sends in the forward gather, the backward gather and the gradient reduce-scatter
(``training.dp_comm_times_s``: Rajbhandari et al. SC'20 Sec. 7; Megatron-FSDP's ``optim_grads_params``
reduces after every micro-batch's backward), their seconds at the model's rates over the run's dp and
expert-dp layouts, and the step that traffic alone takes at the scale-out line rate with nothing else
running, against the measured step. Then the step-time error at the run's gradient bytes and at 16-bit
gradients (``workload.grad_bytes`` 2, Megatron's --grad-reduce-in-bf16). Nothing here is fitted.
"""

from __future__ import annotations

import copy
import sys

from parasol.model import nccl_channels, placement, training
from parasol.solver.validation import best_listed_mapping, evaluate_run, load_runs

GB = 1e9


def group_traffic(system, workload, params: float, layout) -> tuple[float, float, float | None]:
    """(bytes each GPU sends per micro-batch, seconds at the model's rates, seconds at the scale-out line rate)
    of ZeRO-3's two gathers and one reduce-scatter of ``params`` parameters over ``layout``; the line-rate
    seconds only where every member sits in its own scale-up domain (all of it then crosses the NICs), else None."""
    reduce_s, gather_s = training.dp_comm_times_s(system, workload, 3, params, layout)
    gathered = nccl_channels.sent_bytes("allgather", params * training.param_gather_bytes(workload), layout.n)
    sent = 2 * gathered + nccl_channels.sent_bytes("reducescatter", params * training.grad_bytes(workload), layout.n)
    line = sent / system.scale_out.bandwidth_bytes_per_s if layout.n > 1 and layout.local == 1 else None
    return sent, reduce_s + 2 * gather_s, line


def report(entry: dict) -> None:
    problem, mapping, _ = best_listed_mapping(entry)
    system, model, workload = problem.system(mapping.num_gpus), problem.model, problem.workload
    layouts = placement.group_layouts(system, mapping)
    moe_layers = model.layers if model.moe is not None else 0
    dense = training.stage_params(model, model.layers, True, True, mapping.tp, moe_layers, 0)
    rows = [("dp", dense, layouts["dp"])]
    if model.moe is not None:
        rows.append(("edp", training.stage_expert_params(model, moe_layers, mapping.ep, mapping.etp), layouts["edp"]))
    micro_batches = entry["workload"]["global_batch"] // (mapping.dp * mapping.micro_batch)
    measured = entry["measured"]["step_time_s"]
    print(f"{entry['id']}: {micro_batches} micro-batches, measured step {measured:.2f} s")
    for name, params, layout in rows:
        sent, model_s, line_s = group_traffic(system, workload, params, layout)
        line = (
            "" if line_s is None else f", {line_s:5.2f} s at the {system.scale_out.bandwidth_bytes_per_s / GB:.0f} GB/s line rate"
        )
        print(
            f"  {name:<4} {params / 1e9:6.2f}B params per GPU over {placement.describe(layout, system)}: "
            f"{sent / GB:6.1f} GB sent per micro-batch, {model_s:5.2f} s at the model's rates{line}; "
            f"x {micro_batches}: {micro_batches * model_s:.1f} s"
            + ("" if line_s is None else f", {micro_batches * line_s:.1f} s")
        )
    own = evaluate_run(entry).error
    bf16 = copy.deepcopy(entry)
    bf16["workload"]["grad_bytes"] = 2
    print(
        f"  step-time error: {100 * own:+.1f} % (grad_bytes {workload.grad_bytes:g}), {100 * evaluate_run(bf16).error:+.1f} % (2)"
    )


def main(argv: list[str]) -> int:
    runs = [e for e in load_runs() if (e["id"] in argv if argv else e["mapping"].get("zero") == 3)]
    if argv and len(runs) != len(set(argv)):
        unknown = sorted(set(argv) - {e["id"] for e in runs})
        print(f"zero3_traffic.py: no run {', '.join(unknown)} in problems/validation/training_runs.yaml", file=sys.stderr)
        return 2
    for entry in runs:
        report(entry)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
