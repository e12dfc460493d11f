"""What the scripts that import a published table into problems/ share (xla_collective_table.py and
xla_matmul_table.py into problems/measurements, llm_foundry_runs.py into problems/validation): their command line,
reading the table file, and writing the file or checking the stored one (``run_import``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path


def table_arguments(doc: str, table_help: str, out: Path, argv=None) -> argparse.Namespace:
    """The command line of an import script: the table file (``table``) and ``--write`` (write ``out``)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("table", help=table_help)
    parser.add_argument("--write", action="store_true", help=f"write {out.name}")
    return parser.parse_args(argv)


def read_table(path: str) -> str | None:
    """The text of the table at ``path``; None, after one line on stderr naming the file, where it cannot be read as
    text (the caller exits 2)."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        print(f"{path}: cannot read it ({exc.strerror or exc})", file=sys.stderr)
    except UnicodeDecodeError as exc:
        print(f"{path}: cannot read it as text ({exc.reason})", file=sys.stderr)
    return None


def write_or_check(out: Path, body: str, counted: str, write: bool) -> int:
    """With ``write``, write ``body`` to ``out`` (exit status 0); otherwise compare it with the stored file: 0 where it
    matches, 1 where it differs. ``counted`` says how much the body holds ("750 shapes")."""
    if write:
        out.write_text(body)
        print(f"wrote {out}: {counted}")
        return 0
    same = out.exists() and out.read_text() == body
    print(f"{counted}; {out.name} {'matches' if same else 'differs (run with --write)'}")
    return 0 if same else 1


def run_import(doc: str, table_help: str, out: Path, argv, build: Callable[[str, str], tuple[str, str] | None]) -> int:
    """An import script's main: ``build(text, path)`` turns the table's text into (the file's body, what it counts),
    or None after one line on stderr naming what the table lacks; exit status 2 then, or where the table cannot be
    read, else ``write_or_check``'s."""
    args = table_arguments(doc, table_help, out, argv)
    text = read_table(args.table)
    built = None if text is None else build(text, args.table)
    if built is None:
        return 2
    body, counted = built
    return write_or_check(out, body, counted, args.write)
