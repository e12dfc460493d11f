"""What overlapping the pipeline's boundary sends would change (the trial in docs/accuracy.md).

    python benchmarks/pipeline_overlap.py

Megatron-Core's interleaved schedule posts each boundary send and receive beside the next pass
(overlap_p2p_comm: on in Megatron-LM unless --no-overlap-p2p-communication; Megatron-Bridge and NeMo set it whenever vpp > 1), while
``training_step.compose`` charges vpp sends each way per micro-batch in every stage's time, as a
synchronous schedule spends them. First, the schedule played out (``pipeline.pipeline_schedule``, equal
stages, f = 0.05 s and b = 0.10 s per micro-batch) with synchronous and with overlapped transfers (Megatron's
default, the warm-up's and the flush's sends synchronous, and with every send overlapped,
--overlap-p2p-communication-warmup-flush), against the two closed forms: synchronous (m + (p-1)/v)(c + s), overlapped m·max(c, s) + (p-1)·c/v + p·s,
with c = f + b and s = 2·v·h the sends of one micro-batch through a stage (vpp 1 is left out: Megatron's
1F1B sends synchronously). Then, for every published
interleaved run, the share of its predicted step that the model charges to the sends (breakdown
``comm/pp``), the most that overlapping them could take off.
"""

from __future__ import annotations

import statistics

from parasol.model.pipeline import pipeline_schedule, pipeline_time_s
from parasol.solver.validation import best_listed_mapping, load_runs

F, B = 0.05, 0.10
GRID = [(4, 16, 5, 0.01), (8, 64, 6, 0.004), (8, 64, 6, 0.001), (16, 32, 8, 0.002), (4, 32, 20, 0.0005), (2, 16, 8, 0.002)]


def schedule_end(pp: int, m: int, v: int, h: float, overlapped: bool, warmup_flush: bool = False) -> float:
    return max(p[5] for p in pipeline_schedule([F] * pp, [B] * pp, m, v, h, overlapped, warmup_flush))


def main() -> None:
    print("pp   m   v  h ms | synchronous: played  closed form | overlapped: played  all sends  closed form | saves")
    for pp, m, v, h in GRID:
        c, s = F + B, 2 * v * h
        sync, overlap = schedule_end(pp, m, v, h, False), schedule_end(pp, m, v, h, True)
        every = schedule_end(pp, m, v, h, True, True)
        closed = m * max(c, s) + (pp - 1) * c / v + pp * s
        print(
            f"{pp:2d} {m:3d} {v:3d} {h * 1e3:5.1f} | {sync:19.3f} {pipeline_time_s([c + s] * pp, m, v):12.3f} |"
            f" {overlap:18.3f} {every:10.3f} {closed:12.3f} | {1 - overlap / sync:5.1%}"
        )
    shares = []
    for entry in load_runs():
        _, mapping, evaluation = best_listed_mapping(entry)
        if mapping.pp > 1 and mapping.vpp > 1:
            shares.append((evaluation.breakdown["time_s"]["comm/pp"] / evaluation.metrics["step_time_s"], entry["id"]))
    shares.sort(reverse=True)
    print(
        f"\n{len(shares)} interleaved published runs: sends {statistics.fmean(s for s, _ in shares):.1%} of the predicted step on average"
    )
    for share, run_id in shares[:8]:
        print(f"  {share:6.1%}  {run_id}")


if __name__ == "__main__":
    main()
