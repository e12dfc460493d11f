"""DeepEP's achieved fraction of the NIC line rate across nodes, from its published benchmark.

    python benchmarks/deepep_efficiency.py [--check]

problems/measurements/published_kernels.yaml (deepep_internode) holds DeepEP's normal-kernel table on
H800 with one 400 Gb/s ConnectX-7 per GPU, in DeepSeek-V3's setting. Its "bottleneck bandwidth" counts
one copy per token to every distinct destination node, the sender's own node included, so
(nodes - 1)/nodes of it leaves through the NIC (every node is equally likely). A row measures the NIC
where the NIC is the bottleneck: where the copies leaving each node, timed at the NIC's line rate, take
longer than the NVLink forwards at the H800's (``expert_parallel.dispatch_copies_per_token`` for
DeepSeek-V3, whose 256 experts, top-8 and 4-node routing limit the benchmark uses). At EP 16 (two nodes)
each token's one remote copy fans out to about six GPUs over NVLink, which binds; at EP 32 and 64 the
NIC does. The efficiency is the mean of the NIC-bound rows' dispatch and combine:

    deepep_efficiency = mean(counted GB/s x (nodes - 1)/nodes / NIC GB/s)

It applies to the systems whose NIC is the one measured (SYSTEMS: a ConnectX-7 400 Gb/s per GPU);
the others keep their tier's efficiency for DeepEP too. Prints the rows and the value; --check exits 1
where a system file's scale_out.deepep_efficiency differs (tests/test_deepep_efficiency.py).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import yaml
from device_curves import PUBLISHED, check_arguments, report  # benchmarks/device_curves.py

from parasol.model.choices import MoeDispatcher
from parasol.model.expert_parallel import dispatch_copies_per_token
from parasol.solver.library import load_model, load_system

ROOT = Path(__file__).resolve().parent.parent
BENCHMARK_MODEL = "deepseek-v3"  # the benchmark's routing: 256 experts, top-8, at most 4 nodes per token
MEASURED_ON = "dgx-h800"  # its NVLink rate decides which rows the NIC binds
SYSTEMS = ("dgx-h100", "dgx-h800", "hgx-h200", "dgx-b200", "gb200-nvl72")  # one ConnectX-7 400 Gb/s per GPU
DIGITS = 2


def rows() -> list[dict]:
    """Each published row with its nodes, the NIC's share of the counted copies, whether the NIC
    binds, and the NIC efficiency of its dispatch and combine."""
    pub = yaml.safe_load(PUBLISHED.read_text())["deepep_internode"]
    model = load_model(BENCHMARK_MODEL)
    system = load_system(MEASURED_ON, 64)
    nic, local = pub["nic_bytes_per_s"], pub["gpus_per_node"]
    out = []
    for row in pub["rows"]:
        nodes = row["ep"] // local
        inside, across = dispatch_copies_per_token(model, row["ep"], local, MoeDispatcher.DEEPEP)
        share = (nodes - 1) / nodes
        out.append(
            {
                "ep": row["ep"],
                "nodes": nodes,
                "nic_binds": across / nic > inside / system.scale_up.bandwidth_bytes_per_s,
                "efficiencies": [row[key] * 1e9 * share / nic for key in ("dispatch_gbps", "combine_gbps")],
            }
        )
    return out


def derive() -> float:
    """The mean NIC efficiency of the rows the NIC binds, rounded to DIGITS."""
    return round(statistics.fmean(x for r in rows() if r["nic_binds"] for x in r["efficiencies"]), DIGITS)


def differences(value: float) -> list[str]:
    """Where a system file's scale_out.deepep_efficiency differs from ``value`` (SYSTEMS) or from 0 (the rest)."""
    bad = []
    for path in sorted((ROOT / "problems" / "systems").glob("*.yaml")):
        have = load_system(path.stem, 8).scale_out.deepep_efficiency
        want = value if path.stem in SYSTEMS else 0.0
        if abs(have - want) > 1e-9:
            bad.append(f"{path.stem}: scale_out.deepep_efficiency {have} != {want}")
    return bad


def main(argv=None) -> int:
    args = check_arguments(__doc__, "system file", argv)
    for r in rows():
        dispatch, combine = r["efficiencies"]
        binds = "NIC binds" if r["nic_binds"] else "NVLink binds (not used)"
        print(
            f"EP {r['ep']:>3} ({r['nodes']} nodes): dispatch {dispatch:.3f}, combine {combine:.3f} of the NIC line rate; {binds}"
        )
    value = derive()
    print(f"scale_out.deepep_efficiency: {value} ({', '.join(SYSTEMS)})")
    return report(differences(value)) if args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
