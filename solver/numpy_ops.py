"""The model's operations (``parasol.model.ops``) on numpy arrays: one element per mapping.

Every operation is the elementwise float64 counterpart of ``FloatOps``'s, in the same order, so a
composition gives each mapping exactly the numbers ``evaluate`` gives it; lookups gather from the
factor tables (``tables.Tables``).
"""

from __future__ import annotations

import numpy as np

from parasol.model.ops import Factor, FloatOps

from .tables import Tables


class _LazyRow:
    """A factor's outputs at the points: each gathered from its table the first time it is read."""

    def __init__(self, table, rows: np.ndarray):
        self._table, self._rows = table, rows
        self._names = [o.name for o in table.factor.outputs]

    def __getattr__(self, name: str):
        if name.startswith("_") or name not in self._names:
            raise AttributeError(name)
        value = self._table.columns[self._names.index(name)][self._rows]
        setattr(self, name, value)
        return value


class NumpyOps(FloatOps):
    """Operations over the points ``cols`` (stored-value arrays, one per decision) of a space, with
    its factor ``tables`` (or the space alone, for compositions without lookups). Products,
    quotients and comparisons are ``FloatOps``'s, elementwise as written; the rest is here."""

    def __init__(self, tables, cols: dict):
        self.tables, self.cols = tables, cols
        self.space = tables.space if isinstance(tables, Tables) else tables
        self.size = len(next(iter(cols.values())))
        self._rows, self._codes = {}, {}

    def decision(self, key):
        domain = self.space.domains[key]
        values = self.cols[key]
        return values if domain.numeric else np.asarray(domain.values, dtype=object)[values]

    def lookup(self, factor: Factor):
        if factor.name not in self._rows:
            self._rows[factor.name] = _LazyRow(self.tables.table(factor), self.tables.rows(factor, self.cols, self._codes))
        return self._rows[factor.name]

    @staticmethod
    def maximum(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = np.maximum(out, x)
        return out

    @staticmethod
    def minimum(*xs):
        out = xs[0]
        for x in xs[1:]:
            out = np.minimum(out, x)
        return out

    @staticmethod
    def where(cond, a, b):
        return np.where(cond, a, b)
