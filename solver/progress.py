"""Progress of long searches on stderr: the incumbent, the bound and the gap of a solve, the points
of an enumeration or a front, as the search goes.

Silent unless a caller turns it on (``showing``): the CLI does when stderr is a terminal and
``--quiet`` is not given; the Python API never does unless asked. A line appears only once a
search has run ``DELAY_S``, then at most every ``INTERVAL_S``; on a terminal each line replaces the
previous one and the last is cleared when the search ends, so stdout stays the answer alone.
"""

from __future__ import annotations

import contextlib
import sys
import time

DELAY_S = 1.0  # searches shorter than this print nothing
INTERVAL_S = 0.5  # at most two lines a second


class Progress:
    """Throttled one-line updates on ``stream``; ``overwrite``: replace the line in place (a terminal)."""

    def __init__(self, stream=None, overwrite: bool | None = None, delay_s: float = DELAY_S, interval_s: float = INTERVAL_S):
        self.stream = sys.stderr if stream is None else stream
        self.overwrite = _is_terminal(self.stream) if overwrite is None else overwrite
        self.delay_s, self.interval_s = delay_s, interval_s
        self.start = time.perf_counter()
        self._last = -float("inf")
        self._shown = False

    def restart(self) -> None:
        """A new search begins: its own delay before the first line."""
        self.end()
        self.start = time.perf_counter()

    def due(self) -> bool:
        """Whether a line would be shown now (callers skip the work of one otherwise)."""
        now = time.perf_counter()
        return now - self.start >= self.delay_s and now - self._last >= self.interval_s

    def update(self, text: str, force: bool = False) -> None:
        if not (force or self.due()):
            return
        now = self._last = time.perf_counter()
        line = f"parasol: {now - self.start:6.1f} s  {text}"
        if self.overwrite:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._shown = True

    def end(self) -> None:
        """The search is over: clear the in-place line."""
        if self._shown and self.overwrite:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self._shown = False


class _Silent:
    def due(self) -> bool:
        return False

    def restart(self) -> None:
        pass

    def update(self, text: str, force: bool = False) -> None:
        pass

    def end(self) -> None:
        pass


SILENT = _Silent()
_current: Progress | _Silent = SILENT


def current() -> Progress | _Silent:
    """The progress sink of the search under way (SILENT unless ``showing`` is active)."""
    return _current


@contextlib.contextmanager
def showing(progress: Progress | None):
    """Report progress to ``progress`` inside the block (None: stay silent)."""
    global _current
    previous, _current = _current, (progress or SILENT)
    try:
        yield _current
    finally:
        _current.end()
        _current = previous


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def gap_text(gap: float | None) -> str:
    return "gap -" if gap is None else f"gap {100 * gap:.3f} %"
