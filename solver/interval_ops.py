"""The model's operations (``parasol.model.ops``) on intervals: a lower and an upper bound of every
quantity over each *block* of a space (a set of mappings sharing some decisions: a grid point with
its micro-batch size), for ``bounded_search``.

A block fixes the decisions its columns hold; every other decision is known only by the range of
values the space's relations allow it in that block, and every lookup only by the least and largest
value its factor table takes where it agrees with the block. Each operation then returns an interval
that contains the value of every mapping of the block (interval arithmetic, Moore 1966): sums and
differences add the ends, products and quotients take the extreme corners, maxima and minima act on
each end, a condition is certain, impossible or undecided in a block (``Truth``) and ``where`` joins
both branches when undecided. ``implied_at_least`` raises the lower end to the composition's own
redundant bound where the block fixes the bound's decisions. Nothing here computes a model number:
the composition is the model's, the numbers its factor tables'.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from parasol.model.ops import Factor, FloatOps, ImpliedBound, Rounding

from .tables import Tables


class Interval:
    """[lo, hi] per block: numpy arrays (or numbers, the same for every block)."""

    __slots__ = ("lo", "hi")

    def __init__(self, lo, hi):
        self.lo, self.hi = lo, hi

    def __add__(self, other):
        o = interval(other)
        return Interval(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __sub__(self, other):
        o = interval(other)
        return Interval(self.lo - o.hi, self.hi - o.lo)

    def __rsub__(self, other):
        return interval(other) - self

    def __neg__(self):
        return Interval(-self.hi, -self.lo)

    def __mul__(self, k):
        if isinstance(k, Interval):
            return IntervalOps.product(self, k)
        a, b = self.lo * k, self.hi * k
        return Interval(np.minimum(a, b), np.maximum(a, b))

    __rmul__ = __mul__


def interval(x) -> Interval:
    return x if isinstance(x, Interval) else Interval(x, x)


class Truth:
    """A condition per block: ``must`` where every mapping meets it, ``can`` where some may."""

    __slots__ = ("must", "can")

    def __init__(self, must, can):
        self.must, self.can = must, can


class IntervalOps(FloatOps):
    """Operations over ``blocks`` (a frame of stored values of the decisions each block fixes) of a
    space whose factor ``tables`` are built; ``free`` gives each other decision's (lo, hi) arrays."""

    def __init__(self, tables: Tables, blocks: pd.DataFrame, free: dict):
        self.tables, self.space = tables, tables.space
        self.blocks, self.free = blocks, free
        self.size = len(blocks)
        self._cols = {c: blocks[c].to_numpy(dtype=np.int64) for c in blocks.columns}
        self._rows = {}

    def decision(self, key):
        if key in self._cols:
            if not self.space.domains[key].numeric:
                raise TypeError(f"decision {key!r} is categorical: compositions read only numeric decisions")
            v = self._cols[key].astype(float)
            return Interval(v, v)
        lo, hi = self.free[key]
        return Interval(lo, hi)

    def lookup(self, factor: Factor):
        if factor.name not in self._rows:
            self._rows[factor.name] = factor.row(*self._lookup(factor))
        return self._rows[factor.name]

    def _lookup(self, factor: Factor) -> list:
        table = self.tables.table(factor)
        shared = [k for k in factor.keys if k in self._cols]
        if len(shared) == len(factor.keys):
            rows = self.tables.rows(factor, self._cols)
            return [Interval(c[rows], c[rows]) for c in table.columns]
        if not shared:
            return [Interval(c.min(initial=np.inf), c.max(initial=-np.inf)) for c in table.columns]
        radices = [len(self.space.domains[k].values) for k in shared]
        table_key = self.tables.codes(shared, radices, {k: table.keys[k].to_numpy(dtype=np.int64) for k in shared})
        block_key = self.tables.codes(shared, radices, self._cols)
        unique, inverse = np.unique(table_key, return_inverse=True)
        at = np.searchsorted(unique, block_key)
        if len(unique) == 0 or (unique[np.minimum(at, len(unique) - 1)] != block_key).any():
            raise AssertionError(f"a block has no row of factor {factor.name}'s table")  # a bug: tables cover the space
        out = []
        for column in table.columns:
            lo = np.full(len(unique), np.inf)
            hi = np.full(len(unique), -np.inf)
            np.minimum.at(lo, inverse, column)
            np.maximum.at(hi, inverse, column)
            out.append(Interval(lo[at], hi[at]))
        return out

    @staticmethod
    def product(a, b):
        a, b = interval(a), interval(b)
        return _hull(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)

    @staticmethod
    def quotient(a, d, rounding: Rounding, fine: bool = False):
        a, d = interval(a), interval(d)
        if np.any(np.asarray(d.lo) <= 0):
            raise ValueError("a quotient's divisor must be positive")  # a count: micro-batches, vpp, basis points
        return _hull(a.lo / d.lo, a.lo / d.hi, a.hi / d.lo, a.hi / d.hi)

    @staticmethod
    def maximum(*xs):
        return _each_end(np.maximum, xs)

    @staticmethod
    def minimum(*xs):
        return _each_end(np.minimum, xs)

    @staticmethod
    def where(cond, a, b):
        a, b = interval(a), interval(b)
        if isinstance(cond, (bool, np.bool_)):
            return a if cond else b
        must, can = cond.must, cond.can
        lo = np.where(must, a.lo, np.where(can, np.minimum(a.lo, b.lo), b.lo))
        hi = np.where(must, a.hi, np.where(can, np.maximum(a.hi, b.hi), b.hi))
        return Interval(lo, hi)

    @staticmethod
    def equals(x, c) -> Truth:
        x = interval(x)
        return Truth((x.lo == c) & (x.hi == c), (x.lo <= c) & (c <= x.hi))

    @staticmethod
    def at_least(x, c) -> Truth:
        x = interval(x)
        return Truth(x.lo >= c, x.hi >= c)

    def implied_at_least(self, q, bound: ImpliedBound) -> None:
        """Raise ``q``'s lower end to the bound where the blocks fix its decisions (the bound is linear
        with non-negative coefficients in its factors' outputs: their lower ends give its least value)."""
        if not isinstance(q, Interval) or any(k not in self._cols for k in bound.keys):
            return
        values = {k: self.decision(k).lo for k in bound.keys}
        rows = [f.row(*[out.lo for out in self.lookup(f)]) for f in bound.factors]
        q.lo = np.maximum(q.lo, bound.fn(values, *rows))


def _hull(*corners) -> Interval:
    """The least interval holding every corner (a product's or a quotient's four)."""
    corners = np.broadcast_arrays(*corners)
    return Interval(np.minimum.reduce(corners), np.maximum.reduce(corners))


def _each_end(extreme, xs) -> Interval:
    """``extreme`` (np.maximum, np.minimum) of several intervals: taken end by end."""
    xs = [interval(x) for x in xs]
    return Interval(
        extreme.reduce(np.broadcast_arrays(*[x.lo for x in xs])), extreme.reduce(np.broadcast_arrays(*[x.hi for x in xs]))
    )
