"""The files a command has read, so that none of its outputs replaces one of them, ``--force`` or not (nothing the
user wrote is overwritten): every reader of a user's or the library's file notes it here, and
``results.check_new_file`` refuses an output on any of them. ``forget`` starts a command afresh."""

from __future__ import annotations

import os

_READ: set[str] = set()  # real paths


def note(path) -> None:
    """Record that the command read the file at ``path``."""
    try:
        _READ.add(os.path.realpath(path))
    except (OSError, ValueError):  # a path the OS cannot resolve was not read either
        pass


def forget() -> None:
    """Start a command: nothing read yet."""
    _READ.clear()


def read_file_at(path) -> str | None:
    """The file the command read that ``path`` names (the same file by any name, hard links and a case-folding
    file system's spellings included), or None."""
    target = os.path.realpath(path)
    if target in _READ:
        return target
    if os.path.exists(path):
        for read in _READ:
            try:
                if os.path.samefile(read, path):
                    return read
            except OSError:
                continue
    return None
