"""``parasol collective``: one collective on a library system's topology (model/collectives.py), and the
published measurements it is checked against: nccl-tests (problems/measurements/nccl_tests.yaml) and XLA's
collective table (problems/measurements/xla_collectives.yaml, benchmarks/xla_collective_table.py)."""

from __future__ import annotations

import functools
import re

from parasol.model.collectives import CollectiveTime, busbw_factor, collective_time
from parasol.model.errors import ProblemError
from parasol.model.topology import Topology

from . import library

SIZE_SUFFIXES = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
JSON_KEYS = ("time_s", "algbw_gbps", "busbw_gbps", "algorithm")


def parse_bytes(text: str) -> int:
    """A buffer size in bytes: an integer, optionally with K, M, G or T (powers of 1024, as
    nccl-tests' -b/-e take them). ValueError if it is not a positive size."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:i?B)?\s*", str(text), flags=re.IGNORECASE)
    if not match or int(match.group(1)) <= 0:
        raise ValueError(f"expected a positive number of bytes (e.g. 1073741824 or 1G), got {text!r}")
    return int(match.group(1)) * SIZE_SUFFIXES[match.group(2).upper()]


def _bare(exc: ProblemError) -> str:
    """The message of ``exc`` without its "file: field: " prefix."""
    prefix = ": ".join(p for p in (exc.source, exc.field) if p)
    return str(exc)[len(prefix) + 2 :] if prefix else str(exc)


def system_topology(name: str, gpus: int) -> Topology:
    """The topology of library system ``name`` (derived from its tiers when it has no ``topology:``)."""
    try:
        return library.load_system(name, gpus).network_topology()
    except ProblemError as exc:
        if exc.field == "system.name" and exc.source is None:
            raise ProblemError(_bare(exc), field="--system") from None
        raise


def run_collective(system: str, op: str, nbytes: int, gpus: int, algorithm: str | None = None) -> CollectiveTime:
    """The collective on ``gpus`` GPUs of ``system``; ProblemError naming the option at fault."""
    topology = system_topology(system, gpus)
    try:
        return collective_time(op, nbytes, gpus, topology, algorithm)
    except ProblemError as exc:
        raise ProblemError(f"{_bare(exc)} (system {system})", field=f"--{exc.field}" if exc.field else None) from None


def result_json(result: CollectiveTime) -> dict:
    """The public contract: time_s, algbw_gbps, busbw_gbps (GB/s = 1e9 bytes/s), algorithm."""
    return {
        "time_s": result.time_s,
        "algbw_gbps": result.algbw_bytes_per_s / 1e9,
        "busbw_gbps": result.busbw_bytes_per_s / 1e9,
        "algorithm": result.algorithm,
    }


def result_table(system: str, result: CollectiveTime) -> str:
    """Every applicable algorithm with its time and nccl-tests bandwidths; the chosen one marked."""
    topology = system_topology(system, result.n)
    placement = topology.place(result.n)
    where = ", ".join(f"{e} on {lv.name} ({lv.kind})" for e, lv in zip(placement.extents, topology.levels) if e > 1)
    lines = [
        f"{result.op} of {int(result.nbytes)} B on {result.n} GPUs of {system}: {where}",
        f"{'algorithm':<22}{'time (s)':>12}{'algbw GB/s':>13}{'busbw GB/s':>13}",
    ]
    factor = result.busbw_bytes_per_s / result.algbw_bytes_per_s  # one convention for the whole table
    for name, seconds in result.candidates:
        mark = " <-" if name == result.algorithm else ""
        algbw = result.nbytes / seconds
        lines.append(f"{name + mark:<22}{seconds:>12.4e}{algbw / 1e9:>13.1f}{algbw * factor / 1e9:>13.1f}")
    how = "fixed" if result.fixed else "fastest"
    lines.append(
        f"<- {how}; GB/s = 1e9 B/s; busbw = algbw x {factor:.3f} (nccl-tests factor for {result.op} on {result.n} ranks)"
    )
    return "\n".join(lines)


# ---- published measurements -------------------------------------------------------------------


# the measurement files, each in nccl_tests.yaml's schema (see its header for the fields)
MEASUREMENT_FILES = ("nccl_tests.yaml", "xla_collectives.yaml")


@functools.cache
def _measurement_file(name: str) -> tuple:
    path = library.library_root() / "measurements" / name
    data = library.read_yaml(path, "measurement file")
    return tuple(data["measurements"])


def measurements(files: tuple = MEASUREMENT_FILES) -> list[dict]:
    """The entries of problems/measurements/``files``, each with the file it came from (``file``)."""
    return [dict(entry, file=name) for name in files for entry in _measurement_file(name)]


def compare_measurements(files: tuple = MEASUREMENT_FILES) -> list[dict]:
    """One row per measured point of ``files``: parasol's bus bandwidth beside the published one (in the
    entry's busbw convention) and the relative error (model / measured - 1). A point's role is
    ``calibration`` when its entry is, or when its size is one of the entry's calibration_sizes."""
    rows = []
    for entry in measurements(files):
        for nbytes, measured in sorted(entry["busbw_gbps"].items()):
            result = run_collective(entry["system"], entry["op"], int(nbytes), entry["gpus"], entry.get("algorithm"))
            model = result.algbw_bytes_per_s * busbw_factor(result.op, result.n, entry.get("busbw") == "in_network") / 1e9
            role = "calibration" if nbytes in entry.get("calibration_sizes", ()) else entry["role"]
            rows.append(
                {
                    "id": entry["id"],
                    "system": entry["system"],
                    "op": entry["op"],
                    "gpus": entry["gpus"],
                    "bytes": int(nbytes),
                    "algorithm": result.algorithm,
                    "kind": entry["kind"],
                    "role": role,
                    "measured_gbps": float(measured),
                    "model_gbps": model,
                    "error": model / float(measured) - 1.0,
                    "source": entry["source"],
                    "file": entry["file"],
                }
            )
    return rows
