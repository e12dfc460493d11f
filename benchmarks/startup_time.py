"""Wall time of short commands, start-up included: `parasol --help` and `parasol evaluate` on the
shipped examples, each run N times in a fresh interpreter (best and median), and the part of it spent
importing (``python -X importtime``: the imports' cumulative microseconds).

Python normally caches compiled modules (``__pycache__``; ``pip install`` writes them); where the
environment turns that off (``PYTHONDONTWRITEBYTECODE``, as on our CI machines) every start compiles
parasol's sources again. Both are measured: "cached" with bytecode written to a private folder (a
warm-up run first; the checkout gets no ``__pycache__``), "compiling" as the environment is.

    python benchmarks/startup_time.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
COMMANDS = {
    "--help": ["--help"],
    "evaluate (training)": ["evaluate", "problems/examples/gpt3-175b-a100.yaml"],
    "evaluate (serving)": ["evaluate", "SERVING"],  # the serving example with its plan fixed (written below)
}
SERVING_PLAN = {"tp": 4, "pp": 1, "dp": 2}  # and workload.batch 64 per replica


def environment(cache: str | None) -> dict:
    """This environment, with compiled modules cached in ``cache`` (None: as the environment says)."""
    env = dict(os.environ)
    if cache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = cache
    return env


def wall_s(args: list, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "parasol", *args], cwd=REPO, capture_output=True, check=False, env=env)
    return time.perf_counter() - start


def import_s(args: list, env: dict) -> float:
    err = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "parasol", *args], cwd=REPO, capture_output=True, text=True, env=env
    ).stderr
    total = 0
    for line in err.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("  "):  # top-level imports only
            total += int(parts[1])
    return total / 1e6


def serving_file(folder: str) -> str:
    data = yaml.safe_load((REPO / "problems/examples/llama3-70b-serving.yaml").read_text())
    data["workload"]["batch"] = 64
    data["mapping"] = SERVING_PLAN
    path = Path(folder) / "serving.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    print(f"{'command':<22} {'bytecode':<10} {'best s':>7} {'median s':>9} {'imports s':>10}")
    for name, argv in COMMANDS.items():
        argv = [serving_file(folder) if a == "SERVING" else a for a in argv]
        for label, env in (("cached", environment(os.path.join(folder, "pycache"))), ("compiling", environment(None))):
            run = subprocess.run([sys.executable, "-m", "parasol", *argv], cwd=REPO, capture_output=True, env=env)
            if run.returncode == 2:  # (this run also warms the bytecode cache)
                raise SystemExit(f"{name}: the command refused its input")
            walls = [wall_s(argv, env) for _ in range(args.runs)]
            imports = import_s(argv, env)
            print(f"{name:<22} {label:<10} {min(walls):>7.2f} {statistics.median(walls):>9.2f} {imports:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
