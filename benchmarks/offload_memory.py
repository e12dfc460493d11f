"""Peak device memory, host memory and step time of a published run under each subset of its offloaded modules.

    python benchmarks/offload_memory.py [RUN_ID]

RUN_ID (default: the Megatron MoE Model Zoo's Qwen3-235B-A22B MXFP8 row on 256 GB200, which the Zoo marks
"activation offloading required") names a run of problems/validation/training_runs.yaml that lists
``workload.offload_modules``; the run is evaluated as published with every subset of those modules offloaded
(model/offload.py), the empty one included. The figures docs/accuracy.md and docs/planner.md quote for that
run come from here.
"""

from __future__ import annotations

import copy
import itertools
import sys

from parasol.solver.validation import evaluate_run, load_runs

DEFAULT_RUN = "moezoo-bw-qwen3_235b-gb200-256gpu-mxfp8-offload-tp1-ep64-pp4"


def subsets(run_id: str = DEFAULT_RUN) -> list[dict]:
    """One row per subset of the run's offloaded modules: the modules, step time (s), peak and usable device
    memory (GiB), whether it fits, and host memory (GiB, 0 without offloading)."""
    (entry,) = [e for e in load_runs() if e["id"] == run_id]
    listed = entry["workload"].get("offload_modules", [])
    rows = []
    for n in range(len(listed), -1, -1):
        for modules in itertools.combinations(listed, n):
            trial = copy.deepcopy(entry)
            trial["workload"]["offload_modules"] = list(modules)
            metrics = evaluate_run(trial).evaluation.metrics
            rows.append(
                {
                    "modules": list(modules),
                    "step_time_s": metrics["step_time_s"],
                    "peak_memory_gib": metrics["peak_memory_gib"],
                    "usable_memory_gib": metrics["usable_memory_gib"],
                    "fits": metrics["fits"],
                    "host_memory_gib": metrics.get("host_memory_gib", 0.0),
                }
            )
    return rows


def main() -> int:
    run_id = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_RUN
    print(f"{run_id}: each subset of its offloaded modules")
    print(f"{'offloaded modules':<24} {'step s':>8} {'peak GiB':>9} {'usable GiB':>11} {'fits':>5} {'host GiB':>9}")
    for r in subsets(run_id):
        names = ", ".join(r["modules"]) or "(none)"
        print(
            f"{names:<24} {r['step_time_s']:8.3f} {r['peak_memory_gib']:9.1f} {r['usable_memory_gib']:11.1f} "
            f"{str(r['fits']).lower():>5} {r['host_memory_gib']:9.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
