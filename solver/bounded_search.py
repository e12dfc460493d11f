"""Bound and enumerate: the exact best plans of a space too large to enumerate whole, by bounding
blocks of it on intervals and enumerating, best bound first, only the blocks that could hold a
better plan than the best found (best-first branch and bound, Land and Doig 1960, with the model's
own composition as the bounding function).

A *block* is the set of points of the space that share the values of some decisions
(``Planner.block_levels``: training fixes the grid point, the micro-batch size and recomputation at
the first level, then the ZeRO stage, sequence parallelism and the schedule with its interleaving
depth). The composition runs on ``IntervalOps`` over many blocks at once and gives, per block, a
lower end of the objective and of each limit's quantity: a block whose limit cannot be met, or whose
least objective is worse than the ``top``-th best plan found, holds no plan worth having.

The search keeps one pool of blocks per level. It always works on the block of least bound over
all pools (with those of about the same bound, a batch): a block of the last level is enumerated on
the numpy backend, one of an earlier level is refined into the next level's blocks, which are
bounded and pooled. It stops when no pool holds a block whose bound could beat the ``top``-th best
plan: those plans are then proven the best (``OPTIMAL``). Stopped by the time limit, the best plan
so far comes with the least bound of the blocks left (``bound``, ``gap``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import deadline, progress
from .interval_ops import IntervalOps
from .numpy_ops import NumpyOps
from .planner import feasible_mask, scan
from .relations import Relation, Space
from .tables import Tables
from .top_k import TopK

ENUMERATE_POINTS = 1 << 17  # points of last-level blocks enumerated at a time (and per numpy chunk)
REFINE_POINTS = 1 << 21  # points of earlier-level blocks refined at a time
RELATIVE_TOLERANCE = 1e-9  # a bound within this of the cut-off is kept (float rounding of the interval sums)
_clock = time.perf_counter  # the search's clock (a test stops it part-way)


@dataclass
class BoundedOutcome:
    """The best ``top`` points (stored-value dicts, best first) and what the search proved."""

    rows: list
    keys: np.ndarray  # their values of what the composition minimises (a front: points x quantities)
    complete: bool  # every block enumerated or bounded out: the rows are the best (the front) of the space
    least_bound: float | None  # the least objective key a block left could reach (None: none left)
    points_evaluated: int
    blocks_bounded: int


def bounded_best(planner, problem, space: Space, objective: str, top: int, time_limit: float | None) -> BoundedOutcome:
    """The ``top`` best feasible points of ``space`` for ``objective`` (see the module docstring)."""
    return _run(planner, problem, space, (objective,), _Best((objective,), top), time_limit)


def bounded_front(
    planner, problem, space: Space, objectives: tuple, minimised: tuple, time_limit: float | None, max_points: int
) -> BoundedOutcome:
    """The non-dominated feasible points of ``space`` for the front metrics ``objectives``, ordered by the
    composition's ``minimised`` quantities (all smaller-is-better), one per distinct tuple of values: a
    block is left out when a point found already weakly dominates its lower corner. ``keys`` holds each
    point's values (points x quantities)."""
    return _run(planner, problem, space, objectives, _Front(minimised, max_points), time_limit)


def enumerated_front(
    planner, problem, space: Space, objectives: tuple, minimised: tuple, time_limit: float | None, max_points: int
) -> BoundedOutcome:
    """``bounded_front`` by evaluating every point of the space (numpy), for spaces small enough."""
    goal, evaluated = _Front(minimised, max_points), 0
    for _, cols, o, out, _ in scan(planner, problem, space, objectives, time_limit):
        _feed(goal, cols, o.size, out)
        evaluated += o.size
    complete = evaluated >= space.size() and not goal.overflow
    return BoundedOutcome(goal.rows, goal.keys, complete, None, evaluated, 0)


def _run(planner, problem, space: Space, objectives: tuple, goal, time_limit: float | None) -> BoundedOutcome:
    start = _clock()
    ctx = planner.context(problem, objectives)
    full = Tables(space, ctx)
    space = planner.solver_space(problem, space, full)
    search = _Search(planner, full.on(space), ctx, goal)
    levels = planner.block_levels(problem, space)
    pools = [_Pool(space, sum(levels[: i + 1], ())) for i in range(len(levels))]
    pools[0].add(search.bound(space, None, levels[0]))
    complete = True
    while True:
        least = [pool.least() for pool in pools]
        depth = max(range(len(pools)), key=lambda i: (-least[i], i))  # least bound; the deepest on a tie
        if not np.isfinite(least[depth]):
            break
        if (time_limit is not None and _clock() - start > time_limit) or deadline.passed():
            complete = False
            break
        pool = pools[depth]
        if depth == len(pools) - 1:
            search.enumerate(pool, pool.take(search, ENUMERATE_POINTS))
        else:
            pools[depth + 1].add(search.bound(space, pool.pop(pool.take(search, REFINE_POINTS)), levels[depth + 1]))
        for p in pools:
            p.keep(goal.may_improve(p.lower))
        _report(search, sum(len(p.lower) for p in pools))
    left = [p.least() for p in pools]
    return BoundedOutcome(
        rows=goal.rows,
        keys=goal.keys,
        complete=complete and not goal.overflow,
        least_bound=None if complete or not np.isfinite(min(left)) else float(min(left)),
        points_evaluated=search.evaluated,
        blocks_bounded=search.bounded,
    )


class _Search:
    """The planner's composition on the space's tables, feeding what it finds to a goal (``_Best``,
    ``_Front``)."""

    def __init__(self, planner, tables: Tables, ctx, goal):
        self.planner, self.tables, self.ctx, self.goal = planner, tables, ctx, goal
        self.evaluated = self.bounded = 0

    def bound(self, space: Space, parent: pd.DataFrame | None, decisions: tuple) -> tuple:
        """The blocks of ``parent`` (None: the whole space) refined by ``decisions``, with their points and
        the lower ends of the goal's quantities (blocks x quantities), without those that cannot meet a
        limit or hold anything the goal wants: (frame, points, lower)."""
        frame, counts = _refine(space, parent, decisions)
        n = len(frame)
        self.bounded += n
        if not n:
            return frame, counts, np.empty((0, len(self.goal.names)))
        out = self.planner.compose(IntervalOps(self.tables, frame, _free_ranges(space, frame)), self.ctx)
        ok = np.ones(n, dtype=bool)
        for limit in out.limits:
            ok &= np.broadcast_to(np.asarray(_lower(limit.quantity)) <= limit.bound, (n,))
        lower = np.stack(
            [np.broadcast_to(np.asarray(_lower(out.minimised[k]), dtype=float), (n,)) for k in self.goal.names], axis=1
        )
        ok &= self.goal.may_improve(lower)
        return frame[ok].reset_index(drop=True), counts[ok], lower[ok]

    def enumerate(self, pool: _Pool, rows: np.ndarray) -> None:
        """Every point of ``pool``'s blocks ``rows`` through the composition (numpy) into the goal; the
        blocks then leave the pool."""
        space = pool.block_space()
        tables = self.tables.on(space)
        for cols in space.chunks(ENUMERATE_POINTS, roots=rows, per_root=pool.counts[rows]):
            o = NumpyOps(tables, cols)
            _feed(self.goal, cols, o.size, self.planner.compose(o, self.ctx))
            self.evaluated += o.size
        pool.pop(rows)


class _Best(TopK):
    """The ``top`` least points of one quantity, and the cut-off they set."""

    overflow = False

    def __init__(self, names: tuple, top: int):
        super().__init__(top)
        self.names = names

    def may_improve(self, lower: np.ndarray) -> np.ndarray:
        """Where a block whose quantity is at least ``lower`` (blocks x 1) could still enter the best ``top``."""
        if len(self.keys) < self.top:
            return np.ones(len(lower), dtype=bool)
        cut = float(self.keys[-1])
        return lower[:, 0] <= cut + RELATIVE_TOLERANCE * abs(cut)

    def add(self, cols: dict, idx: np.ndarray, values: np.ndarray) -> None:
        super().add(cols, idx, values[:, 0])


class _Front:
    """The non-dominated points found (all quantities minimised), one per distinct tuple of values."""

    def __init__(self, names: tuple, max_points: int):
        self.names, self.max_points = names, max_points
        self.keys = np.empty((0, len(names)))
        self.rows: list = []
        self.overflow = False  # more non-dominated points than max_points

    def may_improve(self, lower: np.ndarray) -> np.ndarray:
        """Where a block whose quantities are at least ``lower`` (blocks x quantities) may hold a point
        that no point found weakly dominates."""
        keep = np.ones(len(lower), dtype=bool)
        cut = lower - RELATIVE_TOLERANCE * np.abs(lower)
        for start in range(0, len(self.keys), 64):
            front = self.keys[start : start + 64]
            keep &= ~(front[:, None, :] <= cut[None, :, :]).all(axis=2).any(axis=0)
        return keep

    def add(self, cols: dict, idx: np.ndarray, values: np.ndarray) -> None:
        """The points ``idx`` of the chunk ``cols``, whose quantities are the rows of ``values``."""
        values = np.concatenate([self.keys, values])
        rows = len(self.rows)
        keep = non_dominated_rows(values)
        new = [i for i in keep if i >= rows]
        picked = {i: {k: int(v[idx[i - rows]]) for k, v in cols.items()} for i in new}
        self.rows = [self.rows[i] if i < rows else picked[i] for i in keep]
        self.keys = values[keep]
        if len(self.rows) > self.max_points:
            self.overflow = True
            self.rows, self.keys = self.rows[: self.max_points], self.keys[: self.max_points]


def non_dominated_rows(values: np.ndarray) -> list:
    """The rows of ``values`` (points x quantities, all minimised) that no other row weakly dominates,
    the first of equal rows only, in lexicographic order of their values (exact: every comparison is
    of the floats themselves). A few points least in a weighted sum of the quantities are non-dominated
    and remove most others first."""
    n = len(values)
    if not n:
        return []
    alive = np.ones(n, dtype=bool)
    scale = np.maximum(np.abs(values).max(axis=0), 1e-300)
    weights = np.vstack([np.eye(values.shape[1]), np.ones(values.shape[1])])
    for w in weights:
        pivot = values[np.lexsort(((values / scale) @ w,))[0]]
        alive &= ~((pivot <= values).all(axis=1) & (pivot < values).any(axis=1))
    idx = np.flatnonzero(alive)
    idx = idx[np.lexsort(values[idx].T[::-1])]
    front: list = []
    kept = np.empty((0, values.shape[1]))
    for start in range(0, len(idx), 512):
        block = idx[start : start + 512]
        v = values[block]
        dominated = np.zeros(len(block), dtype=bool)
        for s in range(0, len(kept), 512):
            dominated |= (kept[s : s + 512, None, :] <= v[None, :, :]).all(axis=2).any(axis=0)
        block, v = block[~dominated], v[~dominated]
        within = np.triu((v[:, None, :] <= v[None, :, :]).all(axis=2), k=1).any(
            axis=0
        )  # an earlier row (lexicographic) dominates or equals
        front += block[~within].tolist()
        kept = np.concatenate([kept, v[~within]])
    return front


class _Pool:
    """The blocks of one level waiting to be refined or enumerated: their decisions' values (``frame``),
    their points and their lower bounds."""

    def __init__(self, space: Space, decisions: tuple):
        self.space, self.decisions = space, decisions
        self.frame = pd.DataFrame({k: np.zeros(0, dtype=np.int64) for k in decisions})
        self.counts = np.zeros(0, dtype=np.int64)
        self.lower = np.zeros((0, 1))
        self._space = None

    def add(self, blocks: tuple) -> None:
        frame, counts, lower = blocks
        if len(frame):
            self.frame = pd.concat([self.frame, frame[list(self.frame.columns)]], ignore_index=True) if len(self.frame) else frame
            self.counts = np.concatenate([self.counts, counts])
            self.lower = np.concatenate([self.lower, lower]) if len(self.lower) else lower
            self._space = None

    def least(self) -> float:
        """The least lower end of the first quantity over the blocks (inf: none left)."""
        return float(self.lower[:, 0].min()) if len(self.lower) else np.inf

    def keep(self, mask: np.ndarray) -> None:
        if not mask.all():
            self.frame, self.counts, self.lower = self.frame[mask].reset_index(drop=True), self.counts[mask], self.lower[mask]
            self._space = None

    def take(self, search: _Search, points: int) -> np.ndarray:
        """The blocks of least bound (first quantity) that hold about ``points`` points together (at least one)."""
        order = np.argsort(self.lower[:, 0], kind="stable")
        order = order[search.goal.may_improve(self.lower[order])]
        return order[: max(1, int(np.searchsorted(np.cumsum(self.counts[order]), points, side="right")))]

    def pop(self, rows: np.ndarray) -> pd.DataFrame:
        """The blocks ``rows``' frame, the blocks removed from the pool."""
        taken = self.frame.iloc[rows].reset_index(drop=True)
        mask = np.ones(len(self.frame), dtype=bool)
        mask[rows] = False
        self.keep(mask)
        return taken

    def block_space(self) -> Space:
        """The space with the blocks as its first relation (the points of a block: its row's), without
        the relations the blocks' decisions hold whole."""
        if self._space is None:
            rest = tuple(r for r in self.space.relations if not set(r.frame.columns) <= set(self.frame.columns))
            self._space = Space((Relation("blocks", self.frame),) + rest, self.space.domains)
        return self._space


def _refine(space: Space, parent: pd.DataFrame | None, decisions: tuple) -> tuple:
    """The combinations of ``parent``'s decisions (None: none) and ``decisions`` that the relations allow
    together (each relation projected on the decisions it holds), those some point of the space takes,
    with the points each holds: (frame, points)."""
    frame = parent
    fixed = set(decisions) | (set(parent.columns) if parent is not None else set())
    for rel in space.relations:
        if not any(c in decisions and (frame is None or c not in frame.columns) for c in rel.frame.columns):
            continue
        part = rel.frame[[c for c in rel.frame.columns if c in fixed]].drop_duplicates()
        if frame is None:
            frame = part
            continue
        on = [c for c in part.columns if c in frame.columns]
        frame = frame.merge(part, on=on) if on else frame.merge(part, how="cross")
    counts = space.counts_at(frame)
    return frame[counts > 0].reset_index(drop=True), counts[counts > 0]


def _free_ranges(space: Space, frame: pd.DataFrame) -> dict:
    """{decision: (lo, hi) arrays}: per block, the range each decision it does not fix takes in every
    relation that holds it, given the block's values of that relation's other decisions."""
    columns = set(frame.columns)
    ranges = {}
    for rel in space.relations:
        shared = [c for c in rel.frame.columns if c in columns]
        for key in rel.frame.columns:
            if key in columns:
                continue
            if shared:
                grouped = rel.frame.groupby(shared, sort=False)[key].agg(["min", "max"]).reset_index()
                at = frame[shared].merge(grouped, on=shared, how="left")
                lo, hi = at["min"].to_numpy(dtype=float), at["max"].to_numpy(dtype=float)
            else:
                lo = np.full(len(frame), float(rel.frame[key].min()))
                hi = np.full(len(frame), float(rel.frame[key].max()))
            if key in ranges:
                lo, hi = np.maximum(lo, ranges[key][0]), np.minimum(hi, ranges[key][1])
            ranges[key] = (lo, hi)
    return ranges


def _feed(goal, cols: dict, size: int, out) -> None:
    """The feasible points of a chunk (``cols``, ``size`` points, the composition's ``out``) to ``goal``,
    with their values of the goal's quantities (points x quantities)."""
    idx = np.flatnonzero(np.broadcast_to(feasible_mask(out), (size,)))
    if len(idx):
        columns = [np.broadcast_to(np.asarray(out.minimised[k], dtype=float), (size,))[idx] for k in goal.names]
        goal.add(cols, idx, np.stack(columns, axis=1))


def _lower(q):
    return q.lo if hasattr(q, "lo") else q


def _report(search: _Search, left: int) -> None:
    sink = progress.current()
    if sink.due():
        found = "a plan found" if search.goal.rows else "no plan yet"
        sink.update(f"solve (bound): {search.evaluated:,} points enumerated, {left:,} blocks left, {found}")
