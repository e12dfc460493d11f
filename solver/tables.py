"""Factor tables: a model term computed on every combination its decisions take in a space.

``Tables(space, ctx).table(factor)`` calls ``factor.fn`` once per row of ``space.project(factor.keys)``
(decoded to model values); nothing here computes a number of its own. The numpy backend gathers
from these tables, the CP-SAT backend scales them to integers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from parasol.model.ops import Factor

from . import deadline
from .relations import Space

DENSE_LIMIT = 1 << 22  # a table over fewer key combinations than this is gathered from a dense array
CHECK_EVERY = 256  # rows computed between two looks at the time limit (each row: about 0.1-0.3 ms)


@dataclass
class FactorTable:
    """A factor's rows: ``keys`` (stored values, one column per key) and ``values`` (rows x outputs)."""

    factor: Factor
    keys: pd.DataFrame
    values: np.ndarray

    def __post_init__(self):
        self.columns = [np.ascontiguousarray(self.values[:, j]) for j in range(self.values.shape[1])]

    def column(self, name: str) -> np.ndarray:
        return self.columns[[o.name for o in self.factor.outputs].index(name)]


class Tables:
    """The factor tables of one space and problem context, each computed once."""

    def __init__(self, space: Space, ctx):
        self.space, self.ctx = space, ctx
        self._tables, self._index = {}, {}

    def on(self, space: Space) -> Tables:
        """These tables for a restriction of their space (its points are among theirs, so every table
        still covers them), sharing what is already computed."""
        other = Tables(space, self.ctx)
        other._tables, other._index = self._tables, self._index
        return other

    def table(self, factor: Factor) -> FactorTable:
        if factor.name not in self._tables:
            keys = self.space.cover(factor.keys)
            rows = []
            for i, args in enumerate(self._decoded(factor.keys, keys)):
                if i % CHECK_EVERY == 0:
                    deadline.check()  # a large table takes seconds: the search's time limit holds here too
                rows.append(factor.evaluate_at(self.ctx, args))
            values = np.array(rows, dtype=float).reshape(len(rows), len(factor.outputs))
            self._tables[factor.name] = FactorTable(factor, keys.reset_index(drop=True), values)
        return self._tables[factor.name]

    def _decoded(self, names: tuple, keys: pd.DataFrame):
        """The model values of each row of ``keys`` (stored values), in ``names`` order; each distinct
        stored value is decoded once."""
        if not names:
            return [()] * len(keys)
        columns = []
        for name in names:
            unique, inverse = np.unique(keys[name].to_numpy(), return_inverse=True)
            decoded = [self.space.domains[name].value(v) for v in unique]
            columns.append([decoded[i] for i in inverse.ravel()])
        return zip(*columns)

    def gather(self, factor: Factor, cols: dict, codes: dict | None = None) -> list:
        """The factor's outputs (one array per output) at every point of ``cols`` (stored-value arrays)."""
        rows = self.rows(factor, cols, codes)
        return [column[rows] for column in self.table(factor).columns]

    def rows(self, factor: Factor, cols: dict, codes: dict | None = None) -> np.ndarray:
        """The factor table's row of every point of ``cols`` (stored-value arrays); ``codes`` caches each
        decision's codes across the lookups of one set of points."""
        table = self.table(factor)
        radices = [len(self.space.domains[k].values) for k in factor.keys]
        codes = {} if codes is None else codes
        for k in factor.keys:
            if k not in codes:
                codes[k] = self.space.domains[k].codes(cols[k])
        code = codes[factor.keys[0]]
        for k, r in zip(factor.keys[1:], radices[1:]):
            code = code * r + codes[k]
        if factor.name not in self._index:
            keys = self.codes(factor.keys, radices, {k: table.keys[k].to_numpy() for k in factor.keys})
            size = int(np.prod(radices, dtype=np.float64))
            if size <= DENSE_LIMIT:
                dense = np.full(max(size, 1), -1, dtype=np.int64)
                dense[keys] = np.arange(len(keys))
                self._index[factor.name] = ("dense", dense)
            else:
                order = np.argsort(keys)
                self._index[factor.name] = ("sorted", (keys[order], order))
        kind, index = self._index[factor.name]
        if kind == "dense":
            return index[code]
        sorted_keys, order = index
        return order[np.searchsorted(sorted_keys, code)]

    def codes(self, keys, radices, cols) -> np.ndarray:
        """One integer per row of ``cols`` for its values of ``keys`` (each decision's code, mixed radix)."""
        code = np.zeros(len(cols[keys[0]]) if keys else 1, dtype=np.int64)
        for k, r in zip(keys, radices):
            code = code * r + self.space.domains[k].codes(cols[k])
        return code
