"""Hashes of the frozen specs that the model's caches are keyed by.

A topology, a group's placement, a device or a model is a key of many cached calls while a space's
tables are built (hundreds of thousands per problem); the hash a frozen dataclass computes anew
each time walks every nested field. ``hash_once`` keeps it after the first call.
"""

from __future__ import annotations

from dataclasses import fields


def _hashable(value):
    return tuple(sorted(value.items())) if isinstance(value, dict) else value


def hash_once(self) -> int:
    """``__hash__`` for a frozen dataclass: the hash of its fields (a dict field by its items),
    computed on first use and kept. Equal objects have equal fields, hence equal hashes."""
    cached = self.__dict__.get("_hash")
    if cached is None:
        cached = hash(tuple(_hashable(getattr(self, f.name)) for f in fields(self)))
        object.__setattr__(self, "_hash", cached)
    return cached


def state_without_hash(self) -> dict:
    """``__getstate__`` of a class hashed by ``hash_once``: a hash kept in one process (string hashes
    are salted per process) does not travel in a pickle."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}
