"""The length moments a serving workload takes from a dataset of requests.

    python benchmarks/dataset_lengths.py FILE.csv [FILE.csv ...] [--max-output-len N] [--json]

Each FILE is a CSV with one row per request and the columns ``input_length`` and ``output_length``
(tokens; the layout of Harshith-umesh/mlperf-dashboard's mlperf-data/summaries/*.csv, which hold the
MLPerf Inference datasets' token counts). Prints, per file, what ``workload:`` takes:

- ``input_len`` and ``output_len``: the mean prompt E[p] and the mean generated length E[o];
- ``output_len_dispersion``: E[o²]/E[o]² (1 + the squared coefficient of variation of o);
- ``prompt_output_comoment``: E[p·o]/(E[p]·E[o]) (1 when p and o are uncorrelated);

``--max-output-len N`` caps each generated length at N first: an engine stops a request there (TensorRT-LLM's
max_output_len), so a run's answers are the dataset's, cut at N.

and the mean decode context these give (``inference.mean_decode_context``: the length-biased mean a
continuous batch sees) beside E[p] + E[o]/2, the one of identical requests.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from parasol.model.inference import mean_decode_context
from parasol.model.specs import InferenceWorkload


@dataclass(frozen=True)
class LengthMoments:
    """A dataset's request lengths as the serving model reads them."""

    requests: int
    input_len: float
    output_len: float
    output_len_dispersion: float
    prompt_output_comoment: float

    def decode_context(self) -> float:
        """The mean decode context of these lengths, tokens (``inference.mean_decode_context``)."""
        return mean_decode_context(
            InferenceWorkload(
                input_len=self.input_len,
                output_len=self.output_len,
                output_len_dispersion=self.output_len_dispersion,
                prompt_output_comoment=self.prompt_output_comoment,
            )
        )


def length_moments(pairs: list[tuple[int, int]], max_output_len: int | None = None) -> LengthMoments:
    """The moments of (prompt, generated) token counts, one pair per request, each generated count cut at
    ``max_output_len`` when given."""
    if max_output_len is not None:
        pairs = [(p, min(o, max_output_len)) for p, o in pairs]
    n = len(pairs)
    mean_p = sum(p for p, _ in pairs) / n
    mean_o = sum(o for _, o in pairs) / n
    return LengthMoments(
        requests=n,
        input_len=mean_p,
        output_len=mean_o,
        output_len_dispersion=sum(o * o for _, o in pairs) / n / mean_o**2,
        prompt_output_comoment=sum(p * o for p, o in pairs) / n / (mean_p * mean_o),
    )


def read_lengths(path: Path) -> list[tuple[int, int]]:
    """(input_length, output_length) per row of a CSV; a one-line error (exit 2) when it has no such rows."""
    try:
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        pairs = [(int(row["input_length"]), int(row["output_length"])) for row in rows]
    except (OSError, KeyError, ValueError, TypeError) as error:
        _fail(f"{path}: needs integer columns input_length and output_length, one row per request ({error})")
    if not pairs or min(min(pair) for pair in pairs) < 1:
        _fail(f"{path}: needs at least one row, every length a positive number of tokens")
    return pairs


def _fail(message: str) -> None:
    """One line on stderr, exit code 2 (bad input)."""
    print(message, file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--max-output-len", type=int, default=None, help="cut each generated length at N tokens first")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.max_output_len is not None and args.max_output_len < 1:
        _fail(f"--max-output-len must be a positive number of tokens, got {args.max_output_len}")
    results = {str(path): length_moments(read_lengths(path), args.max_output_len) for path in args.files}
    if args.json:
        print(json.dumps({name: asdict(m) | {"decode_context": m.decode_context()} for name, m in results.items()}, indent=2))
        return 0
    for name, m in results.items():
        print(
            f"{name}: {m.requests:,} requests; input_len {m.input_len:,.1f}, output_len {m.output_len:,.1f}, "
            f"output_len_dispersion {m.output_len_dispersion:.4f}, prompt_output_comoment {m.prompt_output_comoment:.4f}; "
            f"decode context {m.decode_context():,.0f} tokens (identical requests: {m.input_len + m.output_len / 2:,.0f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
