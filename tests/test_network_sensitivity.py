"""benchmarks/network_sensitivity.py: its DEVICE=EFFICIENCY arguments are checked before anything is evaluated."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from parasol.solver import library

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
import network_sensitivity  # noqa: E402  (benchmarks/network_sensitivity.py)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["gb2000=0.76"], "unknown device 'gb2000'; allowed: a100-sxm-40gb, a100-sxm-80gb"),
        (["=0.5"], "unknown device ''"),
        (["gb200=fast"], "expected DEVICE=EFFICIENCY"),
        (["gb200=1.5"], "must be in (0, 1]"),
        ([], "give at least one"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(argv, said, capsys):
    assert network_sensitivity.main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and err.count("\n") == 1


def test_the_library_devices_are_what_it_accepts():
    devices = tuple(library.names("systems/devices"))
    assert {"b200", "gb200", "gb300", "h100-sxm-80gb"} <= set(devices)
    assert network_sensitivity.parse(["gb200=0.76", "b200=0.7"], devices) == {"gb200": 0.76, "b200": 0.7}
