"""What each NCCL thread-block cap does to the published runs that set them.

    python benchmarks/nccl_caps_effect.py

For every run of problems/validation/training_runs.yaml with ``workload.nccl_max_ctas``: the step-time error
without caps, with each capped communicator alone (tp, cp, dp, pp) and with all of them (as the run sets them).
"""

from __future__ import annotations

import copy

from parasol.model.nccl_channels import CAPPED_GROUPS
from parasol.solver.validation import evaluate_run, load_runs


def error(entry: dict, caps: dict | None) -> float:
    """The run's relative step-time error with ``caps`` in place of its own (None: no caps)."""
    changed = copy.deepcopy(entry)
    if caps is None:
        changed["workload"].pop("nccl_max_ctas")
    else:
        changed["workload"]["nccl_max_ctas"] = caps
    return evaluate_run(changed).error


def main() -> int:
    print(f"{'run':<48} {'none':>7} " + " ".join(f"{g + ' alone':>8}" for g in CAPPED_GROUPS) + f" {'all':>7}")
    for entry in load_runs():
        caps = entry["workload"].get("nccl_max_ctas")
        if caps is None:
            continue
        alone = [error(entry, {g: caps[g]}) if g in caps else error(entry, None) for g in CAPPED_GROUPS]
        cells = " ".join(f"{100 * e:+8.1f}" for e in alone)
        print(f"{entry['id']:<48} {100 * error(entry, None):+7.1f} {cells} {100 * error(entry, caps):+7.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
