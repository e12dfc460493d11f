"""Import XLA's published collective table into problems/measurements/xla_collectives.yaml.

    python benchmarks/xla_collective_table.py TXTPB [--write]

XLA ships the collective timings its latency-hiding scheduler interpolates
(xla/service/gpu/model/default_collective_perf_table.txtpb, written by xla/tools/collective_perf_table_gen.cc):
all-reduce, all-gather, reduce-scatter and all-to-all of F32 arrays over iota replica groups, on an 8-GPU
Hopper server (key sm_90), an 8-GPU B200 server (sm_100_B200), GB200 NVL72 (sm_100_GB200, 64- and 72-GPU
worlds) and GB300 NVL72 (sm_103). Each entry's ``network_throughput_bytes_per_sec`` is the array's bytes (the
whole array for all-gather and reduce-scatter, each rank's buffer for all-to-all: the sizes nccl-tests
counts) over the median of 20 timed executions of the one-instruction module (collective_perf_table_gen.cc:
GetNetworkThroughputBytesPerSec, GetMedianRuntimeNs): nccl-tests' algbw. This script turns it into busbw
(nccl-tests' factors, ``model.collectives.busbw_factor``) in the schema of nccl_tests.yaml, one entry per
machine, collective and group size, and keeps arrays of at least MIN_BYTES: below that the execution's own
launch dominates what XLA timed. Collective-permute entries are left out (their pairs are not nccl-tests'
sendrecv ring). Without ``--write`` it prints what it would write and exits 1 where the stored file differs.

The table read here is the one at ROCm/xla dc660322168302831d1cbc4c99683cd79671286e (a mirror of
openxla/xla; PR #47515 did not touch the NVIDIA entries); get it with
``git show dc66032:xla/service/gpu/model/default_collective_perf_table.txtpb``.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import yaml
from table_import import run_import  # benchmarks/table_import.py

from parasol.model.collectives import busbw_factor

OUT = Path(__file__).resolve().parent.parent / "problems" / "measurements" / "xla_collectives.yaml"
SOURCE = (
    "https://github.com/ROCm/xla/blob/dc660322168302831d1cbc4c99683cd79671286e/"
    "xla/service/gpu/model/default_collective_perf_table.txtpb (openxla/xla's table)"
)
MIN_BYTES = 1 << 20
ELEMENT_BYTES = {"F32": 4, "BF16": 2, "F16": 2}
OPS = {"all-reduce": "allreduce", "all-gather": "allgather", "reduce-scatter": "reducescatter", "all-to-all": "alltoall"}
# XLA's device key -> (short name, parasol system, the machine as far as the key tells it)
MACHINES = {
    "sm_90": (
        "hopper",
        "dgx-h100",
        "one 8-GPU Hopper SXM server (NVLink4, NVSwitch) [assumption: H100 or H200, the key says sm_90 only]",
    ),
    "sm_100_B200": ("b200", "dgx-b200", "one 8-GPU B200 server (NVLink5, NVSwitch)"),
    "sm_100_GB200": ("gb200", "gb200-nvl72", "GB200 NVL72, 64 or 72 GPUs of one NVLink5 domain"),
    "sm_103": (
        "gb300",
        "gb300-nvl72",
        "GB300 NVL72 (sm_103, 64 or 72 GPUs of one NVLink5 domain) [assumption: the key says sm_103 only]",
    ),
}


def parse(text: str) -> list[dict]:
    """The table's timed collectives: device key, op, element type, elements, group count and size, algbw."""
    rows = []
    parts = re.split(r'\n  key: "([^"]*)"\n', text)
    for key, body in zip(parts[1::2], parts[2::2]):
        for entry in re.split(r"\n    entries \{\n", body)[1:]:
            row = _timed_collective(key, entry)
            if row is not None:
                rows.append(row)
    return rows


def _timed_collective(key: str, entry: str) -> dict | None:
    """One entry's fields, or None where it is not a timed replica-group collective (collective-permute, an
    untimed size, a field missing)."""
    fields = {
        name: re.search(pattern, entry)
        for name, pattern in (
            ("op", r'opcode: "([^"]*)"'),
            ("element", r"element_type: (\w+)"),
            ("groups", r"num_replica_groups: (\d+)"),
            ("n", r"num_devices_per_group: (\d+)"),
            ("algbw", r"network_throughput_bytes_per_sec: (\d+)"),
        )
    }
    if any(m is None for m in fields.values()) or fields["op"].group(1) not in OPS:
        return None
    dims = re.findall(r"^\s+dimensions: (\d+)$", entry.split("layout")[0], re.M)
    if not dims:
        return None
    row = {name: m.group(1) for name, m in fields.items()}
    for name in ("groups", "n", "algbw"):
        row[name] = int(row[name])
    if row["n"] < 2 or row["algbw"] <= 0:
        return None
    row.update(key=key, elements=math.prod(int(d) for d in dims))
    return row


def array_bytes(row: dict) -> int:
    """The array nccl-tests would count: the output for all-reduce, all-gather and all-to-all; the input
    (n outputs) for reduce-scatter."""
    size = row["elements"] * ELEMENT_BYTES[row["element"]]
    return size * row["n"] if row["op"] == "reduce-scatter" else size


def entries(rows: list[dict]) -> list[dict]:
    grouped: dict = {}
    for r in rows:
        if r["key"] not in MACHINES or r["element"] not in ELEMENT_BYTES:
            continue
        nbytes = array_bytes(r)
        if nbytes < MIN_BYTES:
            continue
        grouped.setdefault((r["key"], r["op"], r["n"], r["groups"]), {})[nbytes] = r["algbw"]
    out = []
    for (key, op, n, groups), points in sorted(grouped.items(), key=lambda kv: (list(MACHINES).index(kv[0][0]), *kv[0][1:])):
        short, system, machine = MACHINES[key]
        name = OPS[op]
        factor = busbw_factor(name, n, False)
        out.append(
            {
                "id": f"xla-{short}-{name}-{n}of{n * groups}",
                "system": system,
                "machine": f"{machine}; XLA key {key}; {groups} groups of {n} ranks at once (iota replica groups)",
                "op": name,
                "gpus": n,
                "concurrent_groups": groups,
                "algorithm": None,
                "busbw": "default",
                "kind": "measurement",
                "role": "validation",
                "source": SOURCE,
                "busbw_gbps": {b: round(points[b] * factor / 1e9, 1) for b in sorted(points)},
            }
        )
    return out


HEADER = """\
# XLA's published collective timings (benchmarks/xla_collective_table.py, which writes this file; its docstring
# says how XLA measured them), in nccl_tests.yaml's schema, for benchmarks/collectives.py and
# tests/test_xla_collectives.py. Every entry is validation: nothing in problems/systems was set from it.
# concurrent_groups: how many groups of `gpus` ranks ran the collective at once (XLA's iota replica groups);
# the model times one group, placed compactly [assumption: the NVSwitch fabric carries the groups at once
# without contention]. F32 arrays; all-reduce busbw in nccl-tests' default convention (2(n-1)/n), whatever
# algorithm NCCL chose under XLA.
"""


def build(text: str, path: str) -> tuple[str, str] | None:
    """The file's body and its count of entries and points; None, after a line on stderr, where it has none."""
    data = entries(parse(text))
    if not data:
        print(f"{path}: no NVIDIA collective entries found (keys {', '.join(MACHINES)})", file=sys.stderr)
        return None
    body = HEADER + "\n" + yaml.safe_dump({"measurements": data}, sort_keys=False, width=200, default_flow_style=None)
    return body, f"{len(data)} entries, {sum(len(e['busbw_gbps']) for e in data)} points"


def main(argv=None) -> int:
    return run_import(__doc__, "default_collective_perf_table.txtpb (see the docstring for where)", OUT, argv, build)


if __name__ == "__main__":
    sys.exit(main())
