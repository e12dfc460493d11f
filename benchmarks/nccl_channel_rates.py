"""The rate NCCL gives one channel on each device's NVLink, from its topology search's constants.

    python benchmarks/nccl_channel_rates.py [--check]

problems/measurements/nccl_search.yaml holds NCCL's per-link NVLink rates, its ring-search speed tables and each
device's NVLink link count; model/nccl_channels.py ``search_channel_rate`` plays the search. Prints each device's
rate; --check exits 1 where a device file's ``nccl_channel_bytes_per_s`` differs (tests/test_nccl_channels.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from parasol.model.nccl_channels import search_channel_rate
from parasol.solver.library import load_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
from device_curves import check_arguments, report  # noqa: E402  the same --check as the device curves

SEARCH = Path(__file__).resolve().parent.parent / "problems" / "measurements" / "nccl_search.yaml"
GB = 1e9


def derive() -> dict:
    """{device file: bytes/s NCCL rates one ring channel at}."""
    data = yaml.safe_load(SEARCH.read_text())
    out = {}
    for device, row in data["devices"].items():
        cc = row["compute_capability"]
        speeds = tuple(s * GB for s in data["speeds_gb_per_s"][cc])
        nvlink = row["nvlinks"] * data["nvlink_gb_per_s"][cc] * GB
        out[device] = search_channel_rate(nvlink, speeds, cc, data["max_ring_channels"])
    return out


def differences(derived: dict) -> list[str]:
    """Where a device file's ``nccl_channel_bytes_per_s`` differs from the derivation."""
    return [
        f"{device}: nccl_channel_bytes_per_s {load_device(device).nccl_channel_bytes_per_s:g} != {rate:g}"
        for device, rate in derived.items()
        if abs(load_device(device).nccl_channel_bytes_per_s - rate) > 1.0
    ]


def main(argv=None) -> int:
    args = check_arguments(__doc__, "device file", argv)
    derived = derive()
    for device, rate in derived.items():
        print(f"{device}: nccl_channel_bytes_per_s {rate / GB:g} GB/s")
    return report(differences(derived)) if args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
