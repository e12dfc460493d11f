"""The ``top`` best points found so far by a search that walks a space chunk by chunk (the enumerator,
the bounded search): their keys (what the composition minimises) and stored values, best first; of
equal keys, the one found first."""

from __future__ import annotations

import numpy as np


class TopK:
    def __init__(self, top: int):
        self.top = top
        self.keys = np.empty(0)
        self.rows: list = []

    def add(self, cols: dict, idx: np.ndarray, keys: np.ndarray) -> None:
        """The points ``idx`` of the chunk ``cols`` (stored-value arrays), whose keys are ``keys``."""
        pick = np.argsort(keys, kind="stable")[: self.top]
        merged = np.concatenate([self.keys, keys[pick]])
        rows = self.rows + [{k: int(v[idx[i]]) for k, v in cols.items()} for i in pick]
        best = np.argsort(merged, kind="stable")[: self.top]
        self.keys, self.rows = merged[best], [rows[i] for i in best]
