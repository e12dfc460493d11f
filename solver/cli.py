"""The ``parasol`` command line.

Every user mistake ends as one line on stderr, ``parasol: <file>: <field>: <what is allowed>``,
and exit status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys

from model.errors import ProblemError
from model.training import evaluate_training

from .problem import load_problem
from .report import evaluation_json, evaluation_table


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, as argparse does, but without the usage block
        print(f"parasol: {message}", file=sys.stderr)
        raise SystemExit(2)


def _build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="parasol", description="Plan LLM training on large machines.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    ev = sub.add_parser("evaluate", help="evaluate the mapping fixed in a problem file")
    ev.add_argument("problem", help="problem YAML file")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def cmd_evaluate(args) -> int:
    problem = load_problem(args.problem)
    mapping = problem.fixed_mapping()
    evaluation = evaluate_training(problem.model, problem.system(), problem.workload, mapping)
    if args.json:
        print(json.dumps(evaluation_json(problem, mapping, evaluation), indent=2))
    else:
        print(evaluation_table(problem, mapping, evaluation))
    return 0


COMMANDS = {"evaluate": cmd_evaluate}


def main(argv: list[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except ProblemError as exc:
        print(f"parasol: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
