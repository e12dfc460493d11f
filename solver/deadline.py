"""The time a search must end by, for the work CP-SAT's own limit does not cover (building the space
and the factor tables the model's terms are read from, explaining an infeasible problem):
``until(seconds)`` sets it for the code inside, ``check()`` raises ``TimeUp`` once it has passed. A
search cut short this way has nothing to answer with: it ends UNKNOWN and says where the time went.

A command's ``--time-limit`` counts from the command's start (``start_command``), so loading the
problem and importing the search's libraries come out of it too (``left``); run as a process of its own
(the ``parasol`` command, ``python -m parasol``), from the process's start, the interpreter's own start-up
included (``process_age_s``)."""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
from pathlib import Path

_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("parasol_deadline", default=None)  # past it nothing new starts
_COMMAND_START = [time.perf_counter()]  # when the command began (reset by start_command)
# a process this old when its command starts has not just been started for it (or /proc tells something else): seconds
PLAUSIBLE_START_UP_S = 10.0


def start_command(from_process_start: bool = False) -> None:
    """The command starts now: ``left`` counts from here, or, for a command that is its process
    (``from_process_start``), from when the process began (``process_age_s``), unless that was longer ago than
    a start-up takes (``PLAUSIBLE_START_UP_S``)."""
    age = process_age_s() if from_process_start else 0.0
    _COMMAND_START[0] = time.perf_counter() - (age if age <= PLAUSIBLE_START_UP_S else 0.0)


def process_age_s() -> float:
    """Seconds since this process started, to the kernel's clock tick: /proc/self/stat's start time (field 22,
    in ticks since boot; proc(5)) against /proc/uptime. 0 where /proc does not tell (not Linux)."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()  # after the command name
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime_s - started_s)


def left(limit: float | None) -> float | None:
    """Seconds left of a command's ``limit`` (None: no limit), at least 0.05."""
    return None if limit is None else max(0.05, limit - (time.perf_counter() - _COMMAND_START[0]))


def at() -> float | None:
    """The deadline set by ``until`` (``time.perf_counter()`` seconds), None when there is none."""
    return _DEADLINE.get()


def passed() -> bool:
    """Whether the deadline set by ``until`` has passed, or the user interrupted the command."""
    deadline = _DEADLINE.get()
    return _INTERRUPTED[0] or (deadline is not None and time.perf_counter() > deadline)


_INTERRUPTED = [False]


def interrupt() -> None:
    """The user asked the command to stop (Ctrl-C): searches end as if their time had run out."""
    _INTERRUPTED[0] = True


def interrupted() -> bool:
    return _INTERRUPTED[0]


@contextlib.contextmanager
def stopping_on_ctrl_c():
    """Inside, a first Ctrl-C (SIGINT) stops the search gracefully (``interrupt``: it answers with what
    it has, the command exits 130); a second one raises KeyboardInterrupt at once. In the main thread
    only (elsewhere Ctrl-C raises KeyboardInterrupt, as Python does)."""
    _INTERRUPTED[0] = False
    if threading.current_thread() is not threading.main_thread():
        try:
            yield
        finally:
            _INTERRUPTED[0] = False
        return

    def on_sigint(signum, frame):
        if _INTERRUPTED[0]:
            raise KeyboardInterrupt
        interrupt()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _INTERRUPTED[0] = False  # the next command starts afresh


class TimeUp(Exception):  # noqa: N818 (an event, not an error: the time limit passed)
    """The time limit passed before the search had anything to answer with."""


@contextlib.contextmanager
def until(seconds: float | None):
    """Code inside must end within ``seconds`` from now (None: no limit of its own), and by any deadline
    around it."""
    outer = _DEADLINE.get()
    mine = None if seconds is None else time.perf_counter() + seconds
    token = _DEADLINE.set(mine if outer is None else (outer if mine is None else min(outer, mine)))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check() -> None:
    """Raise ``TimeUp`` if the deadline set by ``until`` has passed (or the command was interrupted)."""
    if passed():
        raise TimeUp
