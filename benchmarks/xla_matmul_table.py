"""Import XLA's published GEMM table into problems/measurements/xla_matmul.yaml.

    python benchmarks/xla_matmul_table.py TABLE [--write]

XLA ships the GEMM rates its latency-hiding scheduler interpolates (xla/service/gpu/model/matmul_interpolator_data.h,
written by xla/tools/matmul_perf_table_gen.cc: each shape one HLO dot [b,m,k] @ [b,k,n] that XLA compiles to its
autotuned library GEMM, timed on the GPU; FLOP/s = 2·b·m·n·k over the time). One grid of 375 shapes, b in 1, 2, 4 and
m, n, k in 256..4096 (powers of two), on two GPUs: sm_90 (Hopper SXM) and sm_100 (B200). This script keeps, per shape,
the bf16 rate of both and the FP8 (E4M3 x E4M3 -> bf16) rate of B200, in TFLOP/s.

Hopper's FP8 rates are left out: they exceed the H100's dense FP8 peak (1,979 TF) at the larger shapes (2,424 TF at
4096³; their median over the shapes of 1e11 FLOPs is 1.07x the peak), which no kernel reaches. Its bf16 rates stay
below the 989 TF peak (at most 0.81 of it) and follow our own H200 curve (tests/test_xla_matmul.py).

The table read here is ROCm/xla 71feeddf7cc3c9c7878eee18ea43c983631e6e84 (a mirror of openxla/xla; "[XLA:GPU] Update
latency hiding scheduler cost models for B200/H100 FP8 matmul", 2025-10-21); get it with
``git show 71feeddf7c:xla/service/gpu/model/matmul_interpolator_data.h``. Later versions keep these B200 rows
unchanged (dc66032216, the collective table's, has them under sm_100_B200) but replace the Hopper ones by rates above
the H100's peak (1,033 TF bf16 at 4096³), which is why this one is read. Without ``--write`` it prints what it would
write and exits 1 where the stored file differs.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml
from table_import import run_import  # benchmarks/table_import.py

OUT = Path(__file__).resolve().parent.parent / "problems" / "measurements" / "xla_matmul.yaml"
COMMIT = "71feeddf7cc3c9c7878eee18ea43c983631e6e84"
SOURCE = f"https://github.com/ROCm/xla/blob/{COMMIT}/xla/service/gpu/model/matmul_interpolator_data.h (openxla/xla's table)"
BF16 = "bf16xbf16->bf16"
FP8 = "f8e4m3fnxf8e4m3fn->bf16"
# XLA's device key -> (device file, the rates kept)
DEVICES = {"sm_90": ("h100-sxm-80gb", (BF16,)), "sm_100": ("b200", (BF16, FP8))}


def parse(text: str) -> dict:
    """{device key: {(b, m, n, k): {dtype: FLOP/s}}} of the table's entries."""
    out: dict = {}
    parts = re.split(r'\n\s*key: "(sm_[^"]*)"\s*\n', text)
    for key, body in zip(parts[1::2], parts[2::2]):
        rows = out.setdefault(key, {})
        for m in re.finditer(r"b: (\d+)\s+m: (\d+)\s+n: (\d+)\s+k: (\d+)(.*?)(?=\bb: \d+\s+m:|\Z)", body, re.S):
            rates = {dtype: float(v) for dtype, v in re.findall(r'key: "([^"]+)" value: (\d+)', m.group(5))}
            rows[tuple(int(x) for x in m.group(1, 2, 3, 4))] = rates
    return out


def entries(table: dict) -> dict:
    """{device file: {columns, rows}}: one row per shape, [b, m, n, k, TFLOP/s per kept dtype]."""
    out = {}
    for key, (device, dtypes) in DEVICES.items():
        rows = table.get(key, {})
        kept = [
            [*shape, *(round(rates[d] / 1e12, 1) for d in dtypes)]
            for shape, rates in sorted(rows.items())
            if all(d in rates for d in dtypes)
        ]
        if kept:
            columns = ["b", "m", "n", "k", *("bf16_tflops" if d == BF16 else "fp8_tflops" for d in dtypes)]
            out[device] = {"xla_key": key, "columns": columns, "rows": kept}
    return out


HEADER = f"""\
# XLA's published GEMM rates (benchmarks/xla_matmul_table.py, which writes this file; its docstring says how XLA
# measured them): one grid of shapes [b,m,k] @ [b,k,n], TFLOP/s = 2·b·m·n·k over the time, on a Hopper SXM GPU
# (XLA key sm_90) and a B200 (sm_100). benchmarks/device_curves.py derives from them how much more of Blackwell's
# peak a GEMM of each size loses than of Hopper's (device_curves.gemm_size_penalty).
# source: {SOURCE}
"""


def build(text: str, path: str) -> tuple[str, str] | None:
    """The file's body and its count of shapes; None, after a line on stderr, where a device's entries are missing."""
    data = entries(parse(text))
    if set(data) != {device for device, _ in DEVICES.values()}:
        print(f"{path}: entries for keys {', '.join(DEVICES)} not all found", file=sys.stderr)
        return None
    body = HEADER + yaml.safe_dump({"source": SOURCE, "devices": data}, sort_keys=False, width=200, default_flow_style=None)
    return body, f"{sum(len(d['rows']) for d in data.values())} shapes"


def main(argv=None) -> int:
    return run_import(__doc__, "matmul_interpolator_data.h (see the docstring for where)", OUT, argv, build)


if __name__ == "__main__":
    sys.exit(main())
