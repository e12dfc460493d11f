"""The model's operations (``parasol.model.ops``) as a CP-SAT model over scaled integers.

Each decision of the space is an integer variable and each relation of the space one table
constraint (``add_allowed_assignments``). Each operation becomes an exact constraint on integer
quantities (``IntQ``: a linear expression with its bounds and unit):

============================  ===========================================================================
``lookup``                    an index variable tied to the factor's decisions by one table constraint,
                              each output read with an element constraint (tables sharing their
                              decisions share the index), the values scaled by ``scaling.Scale``
``product``                   ``add_multiplication_equality``; by a table of at most ``SMALL_TABLE``
                              rows (the price of each device count): one linear equality per row
``quotient``                  ``add_division_equality`` (DOWN: the floor); UP: q with d·q >= a, the
                              ceiling wherever it is minimised; ``fine``: a numerator scaled first so
                              the quotient keeps ``QUOTIENT_STEPS`` steps (a ratio only compared)
``maximum``, ``minimum``      ``add_max_equality``, ``add_min_equality``
``where``                     a variable equal to either side, enforced by the condition's literal
``equals``, ``at_least``      a Boolean literal reified on the decision (a constant where its domain
                              decides)
============================  ===========================================================================

Every variable's domain is the range its inputs allow (never widened to 0), so the LP sees real bounds.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd
from ortools.sat.python import cp_model

from parasol.model.errors import ProblemError
from parasol.model.ops import Factor, Rounding, Unit

from . import deadline
from .scaling import Scale
from .tables import CHECK_EVERY, Tables

SMALL_TABLE = 16
QUOTIENT_STEPS = 10**6
INT_LIMIT = 2**61
PIECEWISE_ROWS = 64  # a lookup table longer than this is tried as piecewise affine in one decision
PIECEWISE_GAIN = 4  # ... and encoded so when that takes at most 1/4 of its rows
AFFINE_TOLERANCE = 1e-9  # relative: a table value on the line through its piece's first two


class IntQ:
    """A quantity of the integer model: ``expr`` (a CP-SAT linear expression or an int) within
    [``lo``, ``hi``], in units of ``scale`` model units of ``unit``. ``table``: (index variable,
    values) when it is a factor's output read from its table."""

    __slots__ = ("expr", "lo", "hi", "unit", "scale", "table")

    def __init__(self, expr, lo: int, hi: int, unit: Unit, scale: float, table=None):
        self.expr, self.lo, self.hi, self.unit, self.scale, self.table = expr, int(lo), int(hi), unit, scale, table

    def _like(self, expr, lo, hi) -> IntQ:
        return IntQ(expr, lo, hi, self.unit, self.scale)

    def _operand(self, other) -> IntQ:
        if isinstance(other, IntQ):
            if other.unit is not self.unit or other.scale != self.scale:
                raise TypeError(f"adding {other.unit} to {self.unit}: a composition bug")
            return other
        if isinstance(other, bool) or not isinstance(other, int) or (other and self.unit is not Unit.COUNT):
            raise TypeError(f"adding {other!r} to a {self.unit} quantity: a composition bug")
        return IntQ(other, other, other, self.unit, self.scale)

    def __add__(self, other):
        o = self._operand(other)
        return self._like(self.expr + o.expr, self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __sub__(self, other):
        o = self._operand(other)
        return self._like(self.expr - o.expr, self.lo - o.hi, self.hi - o.lo)

    def __rsub__(self, other):
        return self._operand(other) - self

    def __neg__(self):
        return self._like(-self.expr, -self.hi, -self.lo)

    def __mul__(self, k):
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"an integer quantity times {k!r}: a composition bug")
        lo, hi = sorted((self.lo * k, self.hi * k))
        return self._like(self.expr * k, lo, hi)

    __rmul__ = __mul__

    @property
    def constant(self) -> bool:
        return self.lo == self.hi


def _q(x, like: IntQ) -> IntQ:
    return x if isinstance(x, IntQ) else like._operand(x)


def _product_unit(a: IntQ, b: IntQ) -> tuple[Unit, float]:
    if a.unit is Unit.COUNT:
        return b.unit, b.scale
    if b.unit is Unit.COUNT:
        return a.unit, a.scale
    if {a.unit, b.unit} == {Unit.TIME, Unit.PRICE}:
        return Unit.COST, a.scale * b.scale
    raise TypeError(f"a product of {a.unit} and {b.unit}: a composition bug")


class Piece(NamedTuple):
    """A run of a factor table on which every output is affine in one decision x."""

    others: tuple  # the other decisions' stored values
    first: int  # the first and last value of x
    last: int
    start: np.ndarray  # the outputs at x = first
    slope: np.ndarray  # their slopes per unit of x


def affine_pieces(table, space) -> tuple | None:
    """(decision x, pieces) of a factor table: per combination of its other decisions, the maximal runs
    of x's values over which every output lies on the line through the run's first two points (within
    ``AFFINE_TOLERANCE``), each a ``Piece``; over the numeric decision giving the fewest pieces. None
    when no decision has 3+ values."""
    keys, values = table.keys, table.values
    candidates = [k for k in table.factor.keys if space.domains[k].numeric and keys[k].nunique() >= 3]
    if not candidates:
        return None
    best = None
    for x in [max(candidates, key=lambda k: keys[k].nunique())]:  # the decision with the most values
        others = [k for k in table.factor.keys if k != x]
        column = keys[x].to_numpy()
        group = keys[others].to_numpy() if others else np.zeros((len(keys), 0), dtype=np.int64)
        order = np.lexsort((column,) + tuple(group[:, j] for j in reversed(range(group.shape[1]))))
        xs, ys, gs = column[order], values[order], group[order]
        new_group = np.ones(len(xs), dtype=bool)
        new_group[1:] = np.any(gs[1:] != gs[:-1], axis=1)
        starts = np.flatnonzero(new_group)
        ends = np.append(starts[1:], len(xs))
        pieces = []
        for a, b in zip(starts, ends):
            i = a
            while i < b:
                if i + 1 >= b:
                    pieces.append(Piece(tuple(int(v) for v in gs[i]), int(xs[i]), int(xs[i]), ys[i], np.zeros(ys.shape[1])))
                    break
                slope = (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
                predicted = ys[i] + slope * (xs[i:b, None] - xs[i])
                off = np.any(np.abs(predicted - ys[i:b]) > AFFINE_TOLERANCE * np.maximum(np.abs(ys[i:b]), 1e-300), axis=1)
                j = i + (int(np.argmax(off)) if off.any() else b - i)  # the first point off the line
                pieces.append(Piece(tuple(int(v) for v in gs[i]), int(xs[i]), int(xs[j - 1]), ys[i], slope))
                i = j
        if best is None or len(pieces) < len(best[1]):
            best = (x, pieces)
    return best


class CpSatOps:
    """A CP-SAT model of ``tables.space``: one variable per decision, one table per relation."""

    def __init__(self, tables: Tables, scale: Scale):
        self.tables, self.scale = tables, scale
        self.model = cp_model.CpModel()
        space = tables.space
        self.values = {}  # key -> sorted stored values its variable may take
        for rel in space.relations:
            for c in rel.frame.columns:
                seen = set(rel.frame[c].unique().tolist())
                self.values[c] = sorted(seen if c not in self.values else seen & set(self.values[c]))
        self.vars = {
            k: self.model.new_int_var_from_domain(cp_model.Domain.from_values(v), str(k)) for k, v in self.values.items()
        }
        self._decisions, self._indices, self._literals, self._rows, self._materialised = {}, {}, {}, {}, {}
        for rel in space.relations:
            if rel.compact is None:
                self._table(rel.frame)
                continue
            for part in rel.compact.relations:  # the relation as smaller tables and identities (relations.CompactForm)
                self._table(part.frame)
            for identity in rel.compact.identities:
                self.model.add(_q(identity.quantity(self), IntQ(0, 0, 0, Unit.COUNT, 1.0)).expr == identity.value)

    def _table(self, frame) -> None:
        columns = list(frame.columns)
        if len(columns) > 1:  # one column: the variable's domain is the relation
            self.model.add_allowed_assignments(
                [self.vars[c] for c in columns], [tuple(r) for r in frame.itertuples(index=False, name=None)]
            )

    # ---- helpers -----------------------------------------------------------------------------

    def var(self, lo: int, hi: int, name: str):
        self._check(lo, hi, name)
        return self.model.new_int_var(int(lo), int(hi), name)

    def _new(self, lo, hi, unit, scale, name) -> IntQ:
        return IntQ(self.var(lo, hi, name), lo, hi, unit, scale)

    def _var_of(self, q):
        """``q`` as a single variable (a new one equal to its expression, once per quantity): sums
        that several constraints read are stated once, not copied into each."""
        if not isinstance(q, IntQ) or q.constant or isinstance(q.expr, cp_model.IntVar):
            return q
        key = id(q)
        if key not in self._materialised:
            x = self.var(q.lo, q.hi, "sum")
            self.model.add(x == q.expr)
            self._materialised[key] = (q, IntQ(x, q.lo, q.hi, q.unit, q.scale))
        return self._materialised[key][1]

    def _check(self, lo: int, hi: int, name: str = "quantity") -> None:
        """ProblemError (one line) when an integer of the model would pass CP-SAT's 64-bit range."""
        if max(abs(int(lo)), abs(int(hi))) >= INT_LIMIT:
            raise ProblemError(
                f"the model's {name} reaches {max(abs(int(lo)), abs(int(hi))):.3g} in the solver's integer units, past "
                "CP-SAT's 64-bit range; restrict the problem (shorter sequences, smaller batches, fewer requests) or use "
                "--method enumerate",
                field="workload",
            )

    # ---- the operations ----------------------------------------------------------------------

    def decision(self, key) -> IntQ:
        if key not in self._decisions:
            values = self.values[key]
            self._decisions[key] = IntQ(self.vars[key], values[0], values[-1], Unit.COUNT, 1.0)
        return self._decisions[key]

    def lookup(self, factor: Factor):
        if factor.name not in self._rows:
            self._rows[factor.name] = self._lookup(factor)
        return self._rows[factor.name]

    def _lookup(self, factor: Factor):
        table = self.tables.table(factor)
        if len(table.keys) > PIECEWISE_ROWS:
            found = affine_pieces(table, self.tables.space)
            if found is not None and len(found[1]) * PIECEWISE_GAIN <= len(table.keys):
                return self._piecewise(factor, *found)
        index = self._index(factor.keys, table.keys, factor.name)
        outputs = []
        for j, out in enumerate(factor.outputs):
            values = self.scale.to_ints(out.unit, table.values[:, j]).tolist()
            lo, hi = min(values), max(values)
            self._check(lo, hi)
            unit_scale = self.scale.unit(out.unit)
            if lo == hi:
                outputs.append(IntQ(lo, lo, hi, out.unit, unit_scale))
                continue
            x = self.var(lo, hi, f"{factor.name}_{out.name}")
            self.model.add_element(index, values, x)
            outputs.append(IntQ(x, lo, hi, out.unit, unit_scale, table=(index, values)))
        return factor.row(*outputs)

    def _index(self, keys, rows, name: str, shared: bool = True):
        """A variable for the row of ``rows`` (stored values of ``keys``) the decisions take, tied to them
        by one table constraint over the keys that are not fixed; tables over the same rows of the same
        such keys share it (``shared``)."""
        live = [k for k in keys if len(self.values[k]) > 1]
        table = rows[live].to_numpy(dtype=np.int64) if live else np.zeros((len(rows), 0), dtype=np.int64)
        cache = tuple(live)
        if shared and cache in self._indices and np.array_equal(self._indices[cache][1], table):
            return self._indices[cache][0]
        index = self.var(0, max(0, len(rows) - 1), f"{name}_row")
        if live:
            self.model.add_allowed_assignments(
                [self.vars[k] for k in live] + [index], [tuple(r) + (i,) for i, r in enumerate(table.tolist())]
            )
        if shared:
            self._indices.setdefault(cache, (index, table))
        return index

    def _piecewise(self, factor: Factor, x: str, pieces: list):
        """A long table as pieces (the other decisions, the range [lo, hi] of decision ``x``) on each of
        which every output is affine in ``x``: a piece index tied to the other decisions and to x's
        range, and per output its value at the piece's start plus (x - start) x its slope. Slopes and
        starts round to the output's unit (memory up), so the integers stay within x/2 units of the
        table's values (at or above them for memory)."""
        others = [k for k in factor.keys if k != x]
        index = self._index(
            others, pd.DataFrame([p.others for p in pieces], columns=others), f"{factor.name}_piece", shared=False
        )
        xq = self.decision(x)
        start = self._element(index, [p.first for p in pieces], Unit.COUNT, f"{factor.name}_{x}_start")
        end = self._element(index, [p.last for p in pieces], Unit.COUNT, f"{factor.name}_{x}_end")
        self.model.add(xq.expr >= start.expr)
        self.model.add(xq.expr <= end.expr)
        offset = xq - start
        offset.lo, offset.hi = 0, max(p.last - p.first for p in pieces)
        outputs = []
        for j, out in enumerate(factor.outputs):
            unit = self.scale.unit(out.unit)
            up = out.unit is Unit.MEMORY
            base = [self.scale.to_int(out.unit, p.start[j]) for p in pieces]
            slope = [math.ceil(p.slope[j] / unit - 1e-9) if up else int(round(p.slope[j] / unit)) for p in pieces]
            value = self._element(index, base, out.unit, f"{factor.name}_{out.name}_start")
            step = self._element(index, slope, out.unit, f"{factor.name}_{out.name}_slope")
            outputs.append(value + self.product(offset, step))
        return factor.row(*outputs)

    def _element(self, index, values: list, unit: Unit, name: str) -> IntQ:
        lo, hi = min(values), max(values)
        self._check(lo, hi)
        if lo == hi:
            return IntQ(lo, lo, hi, unit, self.scale.unit(unit))
        x = self.var(lo, hi, name)
        self.model.add_element(index, values, x)
        return IntQ(x, lo, hi, unit, self.scale.unit(unit))

    def product(self, a, b):
        if not isinstance(a, IntQ) or not isinstance(b, IntQ):
            k, q = (a, b) if not isinstance(a, IntQ) else (b, a)
            return 0 if k == 0 else q * k
        unit, scale = _product_unit(a, b)
        for small, other in ((a, b), (b, a)):
            if small.table is not None and len(small.table[1]) <= SMALL_TABLE:
                index, values = small.table
                corners = [w * x for w in values for x in (other.lo, other.hi)]
                out = self._new(min(corners), max(corners), unit, scale, "product")
                for i, w in enumerate(values):
                    self.model.add(out.expr == w * other.expr).only_enforce_if(self._index_literal(index, i))
                return out
        if a.constant or b.constant:
            k, q = (a.lo, b) if a.constant else (b.lo, a)
            lo, hi = sorted((k * q.lo, k * q.hi))
            return IntQ(q.expr * k, lo, hi, unit, scale)
        corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
        self._check(min(corners), max(corners))
        a, b = self._var_of(a), self._var_of(b)
        out = self._new(min(corners), max(corners), unit, scale, "product")
        self.model.add_multiplication_equality(out.expr, [a.expr, b.expr])
        return out

    def quotient(self, a, d, rounding: Rounding, fine: bool = False):
        d = d if isinstance(d, IntQ) else IntQ(d, d, d, Unit.COUNT, 1.0)
        if d.lo < 1 or d.unit is not Unit.COUNT:
            raise ValueError("a quotient by a count of at least 1: a composition bug")
        scale = a.scale
        if fine:
            least = max(1, a.lo)
            r = max(1, min(math.ceil(QUOTIENT_STEPS * d.hi / least), INT_LIMIT // max(1, abs(a.hi), abs(a.lo))))
            a, scale = IntQ(a.expr * r, a.lo * r, a.hi * r, a.unit, a.scale / r), a.scale / r
        corners = [x / y for x in (a.lo, a.hi) for y in (d.lo, d.hi)]
        lo, hi = math.floor(min(corners)), math.ceil(max(corners))
        out = self._new(lo, hi, a.unit, scale, "quotient")
        if rounding is Rounding.DOWN:
            self.model.add_division_equality(out.expr, a.expr, d.expr)
        else:
            self.model.add(self.product(d, out).expr >= a.expr)
        return out

    def maximum(self, *xs):
        return self._extreme(xs, max, self.model.add_max_equality)

    def minimum(self, *xs):
        return self._extreme(xs, min, self.model.add_min_equality)

    def _extreme(self, xs, pick, constrain):
        like = next((x for x in xs if isinstance(x, IntQ)), None)
        if like is None:
            return pick(xs)
        qs = [self._var_of(_q(x, like)) for x in xs]
        lo, hi = pick(q.lo for q in qs), pick(q.hi for q in qs)
        if lo == hi and all(q.constant for q in qs):
            return IntQ(lo, lo, hi, like.unit, like.scale)
        out = self._new(lo, hi, like.unit, like.scale, pick.__name__)
        constrain(out.expr, [q.expr for q in qs])
        return out

    def where(self, cond, a, b):
        if isinstance(cond, bool):
            return a if cond else b
        like = a if isinstance(a, IntQ) else b
        if not isinstance(like, IntQ):
            raise TypeError("where on two constants with a variable condition: a composition bug")
        qa, qb = self._var_of(_q(a, like)), self._var_of(_q(b, like))
        out = self._new(min(qa.lo, qb.lo), max(qa.hi, qb.hi), like.unit, like.scale, "where")
        self.model.add(out.expr == qa.expr).only_enforce_if(cond)
        self.model.add(out.expr == qb.expr).only_enforce_if(~cond)
        return out

    def equals(self, x: IntQ, c: int):
        if x.constant or c < x.lo or c > x.hi:
            return x.lo == c if x.constant else False
        return self._literal(x, "==", c)

    def at_least(self, x: IntQ, c: int):
        if x.lo >= c or x.hi < c:
            return x.lo >= c
        return self._literal(x, ">=", c)

    def _literal(self, x: IntQ, op: str, c: int):
        key = (id(x), op, c)
        if key not in self._literals:
            lit = self.model.new_bool_var(f"{op}{c}")
            if op == "==":
                self.model.add(x.expr == c).only_enforce_if(lit)
                self.model.add(x.expr != c).only_enforce_if(~lit)
            else:
                self.model.add(x.expr >= c).only_enforce_if(lit)
                self.model.add(x.expr <= c - 1).only_enforce_if(~lit)
            self._literals[key] = (x, lit)  # x kept alive: its id stays unique
        return self._literals[key][1]

    def _index_literal(self, index, i: int):
        key = (index.index, "row", i)
        if key not in self._literals:
            lit = self.model.new_bool_var(f"row{i}")
            self.model.add(index == i).only_enforce_if(lit)
            self.model.add(index != i).only_enforce_if(~lit)
            self._literals[key] = (index, lit)
        return self._literals[key][1]

    def implied_at_least(self, q, bound) -> None:
        """q >= the bound, tabulated on the cover of its keys from this model's own integer table
        values (so it holds for every integer solution), rounded down (``ops.ImpliedBound``)."""
        if not isinstance(q, IntQ) or not bound.integer:
            return
        space = self.tables.space
        keys = tuple(dict.fromkeys(tuple(bound.keys) + tuple(k for f in bound.factors for k in f.keys)))
        rows = space.cover(keys)
        stored = {k: rows[k].to_numpy() for k in keys}
        outs = []
        for factor in bound.factors:
            deadline.check()  # a bound over millions of rows takes seconds of Python
            table = self.tables.table(factor)
            ints = np.stack([self.scale.to_ints(o.unit, table.values[:, j]) for j, o in enumerate(factor.outputs)], axis=1)
            position = {tuple(r): i for i, r in enumerate(table.keys.itertuples(index=False, name=None))}
            at = [position[tuple(int(stored[k][i]) for k in factor.keys)] for i in range(len(rows))]
            outs.append((factor, ints[at]))
        values = []
        for i in range(len(rows)):
            if i % CHECK_EVERY == 0:
                deadline.check()
            decided = {k: space.domains[k].value(stored[k][i]) for k in bound.keys}
            values.append(math.floor(bound.fn(decided, *(f.row(*v[i].tolist()) for f, v in outs)) + 1e-9))
        index = self._index(keys, rows, bound.name)
        lo, hi = min(values), max(values)
        x = self.var(lo, hi, bound.name)
        self.model.add_element(index, values, x)
        self.model.add(q.expr >= x)

    # ---- limits, values ----------------------------------------------------------------------

    def at_most(self, q, bound: float) -> None:
        """Require ``q`` <= ``bound`` (model units), the bound rounded down to ``q``'s units."""
        if isinstance(q, IntQ):
            self.model.add(q.expr <= math.floor(bound / q.scale + (1e-9 if q.unit is Unit.COUNT else 0.0)))

    @staticmethod
    def value(solver: cp_model.CpSolver, q) -> float:
        """A quantity's value in a solution, in model units."""
        return solver.value(q.expr) * q.scale if isinstance(q, IntQ) else float(q)

    def stored(self, solver: cp_model.CpSolver) -> dict:
        """Every decision's stored value in a solution."""
        return {k: solver.value(v) for k, v in self.vars.items()}
