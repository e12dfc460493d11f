"""The reliability numbers of the goodput model (model/goodput.py), derived from the Llama 3 report.

    python benchmarks/goodput.py [--write]

Dubey et al., "The Llama 3 Herd of Models" (arXiv 2407.21783), Sec. 3.3.4 and Table 5: in a 54-day
snapshot of pre-training on 16,384 H100 GPUs, 419 unexpected interruptions; "higher than 90 %
effective training time". Sec. 3.3.1: checkpoints go to Tectonic at a sustained 2 TB/s.

- failures per GPU-hour: 419 / (54 days x 24 h x 16,384 GPUs);
- checkpoint stall: Llama 3 405B's model states (bf16 weights, fp32 master weights and the two Adam
  moments: 14 bytes per parameter, the gradients are not saved) written at the sustained 2 TB/s;
- restart: the one number left, set so that the model gives exactly 90 % goodput at 16,384 GPUs
  (the report's "higher than 90 %" makes it an upper bound on the restart time).

Prints the derivation and the goodput from 1,024 to 131,072 GPUs; --write stores the three numbers
in problems/cost/reliability.yaml (the file is this script's output).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from parasol.model.goodput import Reliability, checkpoint_interval_s, job_mtbf_s, run_goodput

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "problems" / "cost" / "reliability.yaml"

INTERRUPTIONS, DAYS, GPUS = 419, 54, 16_384  # Llama 3 report, Table 5 and Sec. 3.3.4
EFFECTIVE = 0.90  # "higher than 90 % effective training time"
PARAMS, STATE_BYTES, STORAGE_BYTES_PER_S = 405e9, 14.0, 2e12  # Llama 3 405B; Sec. 3.3.1


def derive() -> Reliability:
    rate = INTERRUPTIONS / (DAYS * 24 * GPUS)
    stall = PARAMS * STATE_BYTES / STORAGE_BYTES_PER_S
    probe = Reliability(rate, stall, 0.0)
    # the goodput falls by R/M with the restart time R (model.goodput.run_goodput): solve for 90 %
    restart = (run_goodput(GPUS, probe) - EFFECTIVE) * job_mtbf_s(GPUS, probe)
    return Reliability(rate, stall, restart)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"store the numbers in {OUT.relative_to(ROOT)}")
    args = parser.parse_args()
    r = derive()
    print(f"failures per GPU-hour   {r.failures_per_gpu_hour:.4g}  ({INTERRUPTIONS} / ({DAYS} d x 24 h x {GPUS:,} GPUs))")
    print(
        f"checkpoint stall        {r.checkpoint_stall_s:.2f} s  ({PARAMS:.3g} params x {STATE_BYTES:g} B / {STORAGE_BYTES_PER_S:.0e} B/s)"
    )
    print(f"restart                 {r.restart_s:.0f} s  (goodput {EFFECTIVE:.0%} at {GPUS:,} GPUs)")
    print("GPUs     MTBF h   checkpoint every s   goodput")
    for n in (1024, 4096, 16_384, 32_768, 65_536, 131_072):
        print(f"{n:>7,}  {job_mtbf_s(n, r) / 3600:7.2f}  {checkpoint_interval_s(n, r):19.0f}   {run_goodput(n, r):7.1%}")
    if args.write:
        OUT.write_text(
            "# Reliability of a training cluster, for the goodput of whole runs (model/goodput.py).\n"
            "# Written by benchmarks/goodput.py from the Llama 3 report (Dubey et al. 2024, arXiv 2407.21783):\n"
            f"# {INTERRUPTIONS} unexpected interruptions in {DAYS} days on {GPUS:,} H100 GPUs (Sec. 3.3.4, Table 5);\n"
            f"# checkpoints of Llama 3 405B's states ({STATE_BYTES:g} B/param) at Tectonic's sustained 2 TB/s (Sec. 3.3.1);\n"
            f"# the restart time set so that the goodput is {EFFECTIVE:.0%} at {GPUS:,} GPUs (the report: 'higher than 90 %').\n"
            f"failures_per_gpu_hour: {r.failures_per_gpu_hour:.6g}   # {INTERRUPTIONS} / ({DAYS} d x 24 h x {GPUS:,} GPUs)\n"
            f"checkpoint_stall_s: {r.checkpoint_stall_s:.4g}           # {PARAMS:.3g} params x {STATE_BYTES:g} B / 2 TB/s\n"
            f"restart_s: {math.floor(r.restart_s)}                     # fitted: goodput {EFFECTIVE:.0%} at {GPUS:,} GPUs\n"
        )
        print(f"written: {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
