"""The time a search must end by, for the work CP-SAT's own limit does not cover (building the factor
tables the model's terms are read from): ``until(seconds)`` sets it for the code inside, ``check()``
raises ``TimeUp`` once it has passed. A search cut short this way has nothing to answer with: it ends
UNKNOWN and says the time limit passed while its tables were built."""

from __future__ import annotations

import contextlib
import contextvars
import time

_DEADLINE: contextvars.ContextVar = contextvars.ContextVar("parasol_deadline", default=None)
GRACE_S = 0.5  # past the time limit, the tables may still be finished (a search under way answers within limit + 1 s)


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
    """Raise ``TimeUp`` if the deadline set by ``until`` has passed."""
    deadline = _DEADLINE.get()
    if deadline is not None and time.perf_counter() > deadline:
        raise TimeUp
