"""A decision space as the natural join of small relations.

Each relation is a table of allowed combinations of a few decisions (the valid tp·pp·dp·cp grids
with where their groups sit, the micro-batch sizes each dp allows, the pipeline partitions each
pp allows, ...); a mapping of the space is one row of their join. The three uses of a space:

- counting its points, and the points behind each combination of some decisions (``counts``),
  by variable elimination over the relations (sum-product on small tables; never materialised);
- the combinations a term's decisions take (``project``): the tables a factor is computed on;
- its rows, materialised in chunks by numpy joins for the enumerator (``chunks``);

and the CP-SAT backend states each relation as one table constraint.

Values are stored as integers: a numeric decision (tp, pp, the micro-batch count, layers) as its
value, which compositions compute with; a categorical one (recompute, sp, the placement, where a
group sits) as a code into its ``Domain``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

COUNT = "_rows"  # the count column of the elimination's factors
LUT_LIMIT = 1 << 20  # a numeric domain's values up to this are coded by a lookup table (8 MiB at most)


@dataclass(frozen=True)
class Domain:
    """The values a decision takes: ``values`` (model values, sorted ints when ``numeric``)."""

    values: tuple
    numeric: bool

    @functools.cached_property
    def _codes(self) -> dict:
        return {v: i for i, v in enumerate(self.values)}

    def store(self, value) -> int:
        """The stored integer of a model value (itself when numeric, else its code)."""
        return int(value) if self.numeric else self._codes[value]

    def value(self, stored):
        """The model value of a stored integer."""
        return int(stored) if self.numeric else self.values[int(stored)]

    @functools.cached_property
    def _lut(self) -> np.ndarray | None:
        """stored value -> code, for numeric domains whose largest value is below ``LUT_LIMIT`` (None
        above it: a batch of 2^31 requests would need a 16 GiB table; ``codes`` searches instead)."""
        largest = max(self.values) if self.values else 0
        if largest >= LUT_LIMIT:
            return None
        lut = np.full(largest + 1, -1, dtype=np.int64)
        lut[np.asarray(self.values, dtype=np.int64)] = np.arange(len(self.values))
        return lut

    def codes(self, stored: np.ndarray) -> np.ndarray:
        """Codes 0..len-1 of stored integers (vectorised)."""
        if not self.numeric:
            return np.asarray(stored, dtype=np.int64)
        if self._lut is None:  # as the table would: -1 for a value not in the domain
            values = np.asarray(self.values, dtype=np.int64)
            at = np.minimum(np.searchsorted(values, stored), len(values) - 1)
            return np.where(values[at] == stored, at, -1)
        return self._lut[stored]


def numeric(values) -> Domain:
    return Domain(tuple(sorted({int(v) for v in values})), True)


def categorical(values) -> Domain:
    return Domain(tuple(dict.fromkeys(values)), False)


@dataclass(frozen=True)
class Identity:
    """A condition on decisions: ``quantity(o)`` (written against ``parasol.model.ops``) equals ``value``."""

    quantity: object
    value: int


@dataclass(frozen=True)
class CompactForm:
    """A relation restated for CP-SAT as smaller relations and identities whose join is exactly it
    (checked when built, ``check_compact``): a relation over pairs of free layer counts has O(L^2)
    rows, the identity that the stages hold all layers one constraint."""

    relations: tuple
    identities: tuple


@dataclass(frozen=True)
class Relation:
    name: str
    frame: pd.DataFrame  # int64 columns named by decision
    compact: CompactForm | None = None


@dataclass
class Space:
    """The join of ``relations`` (their order is the order rows are materialised in: each relation
    should share a decision with those before it, or multiply them) over ``domains``."""

    relations: tuple
    domains: dict
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.relations = tuple(self.relations)
        for rel in self.relations:
            for c in rel.frame.columns:
                if c not in self.domains:
                    raise KeyError(f"relation {rel.name} has a column {c!r} with no domain")

    @property
    def keys(self) -> list:
        return list(dict.fromkeys(c for rel in self.relations for c in rel.frame.columns))

    def relation(self, name: str) -> pd.DataFrame:
        return next(rel.frame for rel in self.relations if rel.name == name)

    def replace(self, name: str, frame: pd.DataFrame) -> Space:
        """The same space with relation ``name`` replaced by ``frame`` (a restriction when a subset)."""
        return Space(tuple(Relation(name, frame) if r.name == name else r for r in self.relations), self.domains)

    def extend(self, name: str, frame: pd.DataFrame) -> Space:
        """The space further restricted by a relation ``frame`` on decisions it already has."""
        return Space(self.relations + (Relation(name, frame),), self.domains)

    # ---- counting and projection (variable elimination) -----------------------------------------

    def counts(self, keep) -> pd.DataFrame:
        """For every combination of the decisions ``keep`` that some point of the space takes, how
        many points take it (column ``COUNT``)."""
        keep = tuple(keep)
        if keep not in self._cache:
            self._cache[keep] = _eliminate([r.frame for r in self.relations], keep, self.domains)
        return self._cache[keep]

    def counts_at(self, rows: pd.DataFrame) -> np.ndarray:
        """The points of the space that agree with each row of ``rows`` (stored values of some of its
        decisions; 0 where none does)."""
        return _counts_at([r.frame for r in self.relations], rows, self.domains)

    def size(self) -> int:
        """Points of the space."""
        counted = self.counts(())
        return int(counted[COUNT].iloc[0]) if len(counted) else 0

    def project(self, keys) -> pd.DataFrame:
        """The distinct combinations of ``keys`` the space's points take (stored values)."""
        return self.counts(tuple(keys)).drop(columns=COUNT)

    def cover(self, keys) -> pd.DataFrame:
        """Combinations of ``keys`` that include every one the space's points take: each relation
        projected on the keys it holds, joined on shared keys only. Correlations a relation makes
        through decisions outside ``keys`` (the micro-batch sizes a dp allows) are left to that
        relation, so a factor table over the cover restates none of them: a table that only maps
        decisions to values costs CP-SAT far less than one that also restricts them (measured:
        presolve of GPT-3 175B on 1,024 A100, 3.7 s with exact projections, 0.7 s with covers)."""
        keys = tuple(keys)
        cache = ("cover",) + keys
        if cache not in self._cache:
            # on codes with numpy (_join, _sum_out): pandas merges cost ~5 ms each, most of a small solve
            radix = {k: len(self.domains[k].values) for k in keys}
            parts = []
            for rel in self.relations:
                held = [k for k in keys if k in rel.frame.columns]
                if held:
                    codes = np.stack([self.domains[k].codes(rel.frame[k].to_numpy(dtype=np.int64)) for k in held], axis=1)
                    parts.append(_sum_out(_Factor(tuple(held), codes, np.ones(len(codes), dtype=np.int64)), held, radix))
            joined = _sum_out(functools.reduce(lambda a, b: _join(a, b, radix), parts), list(keys), radix)
            stored = [_stored(self.domains[k], joined.codes[:, j]) for j, k in enumerate(joined.columns)]
            order = np.lexsort(stored[::-1]) if stored and len(stored[0]) else np.zeros(0, dtype=np.int64)
            self._cache[cache] = pd.DataFrame({k: v[order] for k, v in zip(joined.columns, stored)})
        return self._cache[cache]

    # ---- rows --------------------------------------------------------------------------------

    def chunks(self, rows: int = 1 << 20, roots: np.ndarray | None = None, per_root: np.ndarray | None = None):
        """The points of the space, in a fixed order, as dicts of stored-value arrays of about
        ``rows`` points each (the first relation's rows split so that their joins stay near it).
        The joins carry one row index per relation and gather the decisions' values once, at the end.
        ``roots``: only the points of these rows of the first relation, in this order; ``per_root``:
        the points behind each of them when the caller knows (else counted here)."""
        root = self.relations[0].frame
        roots = np.arange(len(root)) if roots is None else np.asarray(roots, dtype=np.int64)
        if not len(roots):
            return
        if per_root is None:
            counted = root.merge(self.counts(tuple(root.columns)), on=list(root.columns), how="left")[COUNT].fillna(0)
            per_root = counted.to_numpy(dtype=np.int64)[roots]
        bounds = _chunk_bounds(np.asarray(per_root, dtype=np.int64), rows)
        arrays, owner, joins = self._joins()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            index = {0: roots[lo:hi]}
            for i, join in enumerate(joins, start=1):
                index = join(index, arrays, i)
                if not len(index[0]):
                    break
            for at in range(0, len(index[0]), rows):  # a root behind many points still comes in chunks of ``rows``
                yield {c: arrays[i][c][index[i][at : at + rows]] for c, i in owner.items()}

    def _joins(self) -> tuple:
        """(each relation's columns as arrays, the relation that owns each decision, the joins of the
        relations after the first onto the rows before them), built once per space."""
        if "joins" not in self._cache:
            arrays = [{c: rel.frame[c].to_numpy(dtype=np.int64) for c in rel.frame.columns} for rel in self.relations]
            owner = {}
            for i, rel in enumerate(self.relations):
                for c in rel.frame.columns:
                    owner.setdefault(c, i)
            joins = [_Join(arrays[i], self.domains, on, owner) for i, on in enumerate(_shared_columns(self.relations)) if i > 0]
            self._cache["joins"] = (arrays, owner, joins)
        return self._cache["joins"]


def _shared_columns(relations):
    seen = set()
    for rel in relations:
        yield tuple(c for c in rel.frame.columns if c in seen)
        seen |= set(rel.frame.columns)


def _chunk_bounds(per_root: np.ndarray, rows: int) -> list:
    bounds, total = [0], 0
    for i, n in enumerate(per_root):
        if total and total + n > rows:
            bounds.append(i)
            total = 0
        total += int(n)
    bounds.append(len(per_root))
    return bounds


class _Join:
    """One relation joined onto the rows so far on their shared decisions (numpy, the relation grouped
    once): every row repeated once per matching row of the relation."""

    def __init__(self, right: dict, domains: dict, on: tuple, owner: dict):
        self.on, self.owner, self.domains = on, owner, domains
        self.size = len(next(iter(right.values())))
        self.radices = [len(domains[c].values) for c in on]
        if on:
            key = self._key({c: right[c] for c in on})
            self.order = np.argsort(key, kind="stable")
            self.unique, self.start, self.count = np.unique(key[self.order], return_index=True, return_counts=True)

    def _key(self, cols: dict) -> np.ndarray:
        key = np.zeros(len(cols[self.on[0]]), dtype=np.int64)
        for c, r in zip(self.on, self.radices):
            key = key * r + self.domains[c].codes(cols[c])
        return key

    def __call__(self, index: dict, arrays: list, me: int) -> dict:
        n_left = len(index[0])
        if not self.size:
            return {i: v[:0] for i, v in index.items()} | {me: np.zeros(0, dtype=np.int64)}
        if not self.on:
            left = np.repeat(np.arange(n_left), self.size)
            right = np.tile(np.arange(self.size), n_left)
        else:
            key = self._key({c: arrays[self.owner[c]][c][index[self.owner[c]]] for c in self.on})
            pos = np.minimum(np.searchsorted(self.unique, key), len(self.unique) - 1)
            count = np.where(self.unique[pos] == key, self.count[pos], 0)
            left = np.repeat(np.arange(n_left), count)
            within = np.arange(len(left)) - np.repeat(np.cumsum(count) - count, count)
            right = self.order[np.repeat(self.start[pos], count) + within]
        out = {i: v[left] for i, v in index.items()}
        out[me] = right
        return out


def check_compact(relation: Relation, domains: dict) -> None:
    """Raise (a bug) unless the relation's compact form holds exactly its rows: the compact relations'
    join, restricted to the relation's columns, filtered by the identities (numpy), compared row by row."""
    from .numpy_ops import NumpyOps  # noqa: PLC0415 (numpy_ops imports tables, which imports this module)

    form = relation.compact
    space = Space(form.relations, domains)
    rows = [c for c in space.chunks(1 << 22)]
    cols = {k: np.concatenate([r[k] for r in rows]) for k in rows[0]} if rows else {}
    if cols:
        o = NumpyOps(space, cols)
        keep = np.ones(o.size, dtype=bool)
        for identity in form.identities:
            keep &= np.asarray(identity.quantity(o)) == identity.value
        got = pd.DataFrame({c: cols[c][keep] for c in relation.frame.columns}).drop_duplicates()
    else:
        got = pd.DataFrame(columns=relation.frame.columns)
    want = relation.frame.drop_duplicates()
    merged = got.merge(want, how="outer", indicator=True)
    if len(got) != len(want) or (merged["_merge"] != "both").any():
        raise AssertionError(f"the compact form of relation {relation.name} holds {len(got)} rows, the relation {len(want)}")


class _Factor:
    """A table of code rows over ``columns`` with a count per row (sum-product elimination)."""

    __slots__ = ("columns", "codes", "count")

    def __init__(self, columns: tuple, codes: np.ndarray, count: np.ndarray):
        self.columns, self.codes, self.count = columns, codes, count

    def __len__(self) -> int:
        return len(self.count)


def _key(codes: np.ndarray, radices: list) -> np.ndarray:
    key = np.zeros(len(codes), dtype=np.int64)
    for j, r in enumerate(radices):
        key = key * r + codes[:, j]
    return key


def _join(a: _Factor, b: _Factor, radix: dict) -> _Factor:
    """Rows of ``a`` and ``b`` that agree on their shared columns, counts multiplied."""
    on = [c for c in a.columns if c in b.columns]
    new = [c for c in b.columns if c not in on]
    if not len(a) or not len(b):
        columns = a.columns + tuple(new)
        return _Factor(columns, np.zeros((0, len(columns)), dtype=np.int64), np.zeros(0, dtype=np.int64))
    if on:
        ka = _key(a.codes[:, [a.columns.index(c) for c in on]], [radix[c] for c in on])
        kb = _key(b.codes[:, [b.columns.index(c) for c in on]], [radix[c] for c in on])
        order = np.argsort(kb, kind="stable")
        unique, start, count = np.unique(kb[order], return_index=True, return_counts=True)
        pos = np.minimum(np.searchsorted(unique, ka), len(unique) - 1)
        n = np.where(unique[pos] == ka, count[pos], 0)
        left = np.repeat(np.arange(len(ka)), n)
        within = np.arange(len(left)) - np.repeat(np.cumsum(n) - n, n)
        right = order[np.repeat(start[pos], n) + within]
    else:
        left = np.repeat(np.arange(len(a)), len(b))
        right = np.tile(np.arange(len(b)), len(a))
    codes = np.concatenate([a.codes[left], b.codes[right][:, [b.columns.index(c) for c in new]]], axis=1)
    return _Factor(a.columns + tuple(new), codes, a.count[left] * b.count[right])


def _sum_out(f: _Factor, keep: list, radix: dict) -> _Factor:
    """Counts summed over the columns not in ``keep``."""
    idx = [f.columns.index(c) for c in keep]
    if not keep:
        return _Factor((), np.zeros((1, 0), dtype=np.int64), np.array([f.count.sum()], dtype=np.int64))
    if not len(f):
        return _Factor(tuple(keep), np.zeros((0, len(keep)), dtype=np.int64), np.zeros(0, dtype=np.int64))
    key = _key(f.codes[:, idx], [radix[c] for c in keep])
    unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    count = np.zeros(len(unique), dtype=np.int64)
    np.add.at(count, inverse, f.count)
    return _Factor(tuple(keep), f.codes[first][:, idx], count)


def _reduced(frames: list, keep: tuple, domains: dict) -> tuple[list, dict]:
    """Sum-product variable elimination down to factors over ``keep`` only (the variable whose
    elimination builds the smallest join first): the join of the factors returned, summed, counts
    the points per combination of ``keep``. Also the radices of the codes."""
    radix = {c: len(domains[c].values) for f in frames for c in f.columns}
    factors = []
    for frame in frames:
        cols = tuple(frame.columns)
        codes = (
            np.stack([domains[c].codes(frame[c].to_numpy(dtype=np.int64)) for c in cols], axis=1)
            if cols
            else np.zeros((1, 0), dtype=np.int64)
        )
        factors.append(_sum_out(_Factor(cols, codes, np.ones(len(codes), dtype=np.int64)), list(cols), radix))
    while True:
        names = sorted({c for f in factors for c in f.columns} - set(keep))
        if not names:
            break
        name = min(names, key=lambda v: math.prod(len(f) for f in factors if v in f.columns))
        involved = [f for f in factors if name in f.columns]
        factors = [f for f in factors if name not in f.columns]
        joined = functools.reduce(lambda a, b: _join(a, b, radix), involved)
        factors.append(_sum_out(joined, [c for c in joined.columns if c != name], radix))
    return factors, radix


def _eliminate(frames: list, keep: tuple, domains: dict) -> pd.DataFrame:
    """The count of join rows per combination of ``keep`` (stored values)."""
    factors, radix = _reduced(frames, keep, domains)
    result = functools.reduce(lambda a, b: _join(a, b, radix), factors) if factors else None
    if result is None or not len(result):
        return pd.DataFrame({**{c: np.zeros(0, dtype=np.int64) for c in keep}, COUNT: np.zeros(0, dtype=np.int64)})
    result = _sum_out(result, list(keep), radix)
    out = {c: _stored(domains[c], result.codes[:, j]) for j, c in enumerate(result.columns)}
    out[COUNT] = result.count
    return pd.DataFrame(out)


def _counts_at(frames: list, rows: pd.DataFrame, domains: dict) -> np.ndarray:
    """The join rows of ``frames`` that agree with each row of ``rows`` (stored values of decisions),
    without materialising the product of the factors over those decisions: each factor left by the
    elimination is looked up per row, the counts multiplied."""
    keep = tuple(c for c in rows.columns if any(c in f.columns for f in frames))
    factors, radix = _reduced(frames, keep, domains)
    total = np.ones(len(rows), dtype=np.int64)
    for f in factors:
        if not f.columns:
            total *= int(f.count.sum())
            continue
        radices = [radix[c] for c in f.columns]
        keys = _key(f.codes, radices)
        order = np.argsort(keys)
        wanted = _key(np.stack([domains[c].codes(rows[c].to_numpy(dtype=np.int64)) for c in f.columns], axis=1), radices)
        pos = np.minimum(np.searchsorted(keys[order], wanted), max(len(keys) - 1, 0))
        found = (keys[order][pos] == wanted) if len(keys) else np.zeros(len(rows), dtype=bool)
        total *= np.where(found, f.count[order][pos] if len(keys) else 0, 0)
    return total


def _stored(domain: Domain, codes: np.ndarray) -> np.ndarray:
    return np.asarray(domain.values, dtype=np.int64)[codes] if domain.numeric else codes.astype(np.int64)
