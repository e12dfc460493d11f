"""The checks of input values, defined once: every spec, problem file and library file is read
through these, so a mistake always reads the same, names its field (and file) and says what is
allowed, as a ``ProblemError``."""

from __future__ import annotations

import numbers
from enum import Enum

from .errors import ProblemError

MAX_MAGNITUDE = 1e30  # any number in a file: far above every physical quantity here (FLOP/s, bytes, $, tokens)


def as_float(value) -> float | None:
    """A YAML number as float. PyYAML (YAML 1.1) reads ``312.0e12`` (no exponent sign) as a
    string, so numeric strings are accepted; None for anything else, and for NaN, infinities and
    magnitudes above ``MAX_MAGNITUDE`` (which later arithmetic would turn into inf or an overflow)."""
    if isinstance(value, bool):
        return None
    number = None
    if isinstance(value, numbers.Real):
        try:
            number = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str) and len(value) <= 64:
        try:
            number = float(value)
        except ValueError:
            return None
    if number is None or not abs(number) <= MAX_MAGNITUDE:  # NaN fails this too
        return None
    return number


MAX_INT = 2**31 - 1  # any count in a file: within CP-SAT's and numpy's 32-bit integers, before any arithmetic
MAX_SEQ_LEN = 1 << 24  # tokens of a sequence, a prompt or an answer (16.8M)
MAX_REQUESTS = 10**6  # requests of a finite serving set (offline benchmarks run 1k-30k): bounds its wave count


def shown(value) -> str:
    """``value`` as an error message quotes it: a huge integer by its digits, a long text cut short."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def positive_int(value, field: str, source: str | None = None, most: int = MAX_INT) -> int:
    """A positive integer up to ``most``: every count is checked against its range before use."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ProblemError(f"must be a positive integer, got {shown(value)}", source=source, field=field)
    if value > most:
        raise ProblemError(f"must be at most {most:,}, got {shown(value)}", source=source, field=field)
    return int(value)


def non_negative_int(value, field: str, source: str | None = None, most: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ProblemError(f"must be a non-negative integer, got {shown(value)}", source=source, field=field)
    if value > most:
        raise ProblemError(f"must be at most {most:,}, got {shown(value)}", source=source, field=field)
    return int(value)


def positive_number(value, field: str, source: str | None = None, what: str = "number") -> float:
    """A number > 0 (``what`` names it in the message: 'number of seconds', 'price', ...)."""
    number = as_float(value)
    if number is None or not number > 0:
        raise ProblemError(f"must be a positive {what}, got {shown(value)}", source=source, field=field)
    return number


def non_negative_number(value, field: str, source: str | None = None) -> float:
    number = as_float(value)
    if number is None or number < 0:
        raise ProblemError(f"must be a non-negative number, got {shown(value)}", source=source, field=field)
    return number


def fraction(value, field: str, source: str | None = None) -> float:
    number = as_float(value)
    if number is None or not 0 < number <= 1:
        raise ProblemError(f"must be a fraction in (0, 1], got {shown(value)}", source=source, field=field)
    return number


def factor(value, field: str, source: str | None = None, most: float = 2.0) -> float:
    """A positive factor of at most ``most`` (a rate against a curve that may run above it)."""
    number = as_float(value)
    if number is None or not 0 < number <= most:
        raise ProblemError(f"must be a positive factor of at most {most:g}, got {shown(value)}", source=source, field=field)
    return number


def share(value, field: str, source: str | None = None) -> float:
    """A share from 0 to 1, both included."""
    number = as_float(value)
    if number is None or not 0 <= number <= 1:
        raise ProblemError(f"must be a share from 0 to 1, got {shown(value)}", source=source, field=field)
    return number


def text(value, field: str, source: str | None = None) -> str:
    """A name: a non-empty string (not a number, list, null or bool that YAML would read in its place)."""
    if not isinstance(value, str) or not value.strip():
        raise ProblemError(f"must be a non-empty name, got {shown(value)}", source=source, field=field)
    return value


def flag(value, field: str, source: str | None = None) -> bool:
    if not isinstance(value, bool):
        raise ProblemError(f"must be true or false, got {shown(value)}", source=source, field=field)
    return value


def choice(value, allowed, field: str, source: str | None = None):
    """``value`` when it is one of ``allowed`` (a tuple, or an enum whose values are allowed)."""
    values = tuple(m.value for m in allowed) if isinstance(allowed, type) and issubclass(allowed, Enum) else tuple(allowed)
    if isinstance(value, bool) and not any(isinstance(v, bool) for v in values) or value not in values:
        raise ProblemError(f"{value!r} is not allowed; allowed: {', '.join(map(str, values))}", source=source, field=field)
    return allowed(value) if isinstance(allowed, type) and issubclass(allowed, Enum) else value


def mapping(value, field: str, source: str | None = None) -> dict:
    if not isinstance(value, dict):
        raise ProblemError(f"must be a mapping, got {type(value).__name__}", source=source, field=field)
    return value


def nonempty_list(value, field: str, source: str | None = None) -> list:
    if not isinstance(value, list) or not value:
        raise ProblemError("must be a non-empty list", source=source, field=field)
    return value


def first_repeat(keys) -> tuple[int, int] | None:
    """(the earlier index, the later one) of the first key that occurs twice in ``keys`` (hashable), None if none does."""
    seen = {}
    for i, key in enumerate(keys):
        if key in seen:
            return seen[key], i
        seen[key] = i
    return None


def keys(data: dict, allowed: tuple, required: tuple, source: str | None, prefix: str) -> None:
    """ProblemError for an unknown or a missing key of a YAML mapping."""
    unknown = sorted(set(map(str, data)) - set(allowed))
    if unknown:
        raise ProblemError(
            f"unknown key {unknown[0]!r}; allowed: {', '.join(allowed)}", source=source, field=f"{prefix}{unknown[0]}"
        )
    for key in required:
        if key not in data:
            raise ProblemError("is required", source=source, field=f"{prefix}{key}")
