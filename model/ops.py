"""The operations the model's compositions are written against, and their plain-number backend.

A composition (``training_step.compose``, ``serving_step.compose``) turns *terms* - model
functions of a few decisions, tabulated by ``Factor`` - into a step time, a memory peak, a latency
or a cost with a handful of operations. The same function runs on three backends:

- plain numbers (``FloatOps``, here): one mapping, as ``evaluate`` reports it;
- numpy arrays (``parasol.solver.numpy_ops``): every mapping of a space at once (``enumerate``);
- CP-SAT (``parasol.solver.cpsat_ops``): scaled integer variables and exact constraints (``solve``,
  ``pareto``).

The operations (sums, differences and integer multiples are written with ``+``, ``-``, ``*``):

=================================  ===================================================================
``decision(key)``                  the value of a decision (tp, pp, the micro-batch count, ...)
``lookup(factor)``                 a term tabulated over the decisions it depends on: a row of outputs
``product(a, b)``                  a product, one factor a count (layers, micro-batches, GPUs)
``quotient(a, d, rounding)``       division by a count; ``rounding`` says which side the solver's
                                   integers may err on (time DOWN, memory UP: never under-counted)
``maximum(*xs)``, ``minimum(*xs)``  the largest, the smallest
``where(cond, a, b)``              a where cond holds, else b
``equals(x, c)``, ``at_least(x, c)``  a condition on a decision
``implied_at_least(q, bound)``     a redundant inequality the composition knows to hold, q >= bound,
                                   where ``bound`` (an ``ImpliedBound``) is linear in lookup outputs:
                                   the integer backend adds it, computed on its own integers and
                                   rounded down (unless it holds on exact numbers only); the interval
                                   backend raises lower ends to it; the others ignore it
=================================  ===================================================================

No backend adds or assumes anything: the integer backend scales each table to integers
(``parasol.solver.scaling``) and encodes each operation exactly; every plan it returns is
evaluated again here, on floats.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum


class Unit(Enum):
    """What a quantity measures, which fixes how the integer backend scales it."""

    TIME = "s"  # seconds: scaled to the problem's time unit, nearest
    MEMORY = "B"  # bytes: scaled to 16 KiB units, rounded up
    COUNT = "1"  # whole numbers (layers, micro-batches, GPUs): exact
    PRICE = "$/h"  # dollars per hour: scaled to a fraction of the cheapest price
    COST = "s$/h"  # time x price (the product of the two)


class Rounding(Enum):
    """Which side a quotient may be rounded to by an integer backend."""

    DOWN = "down"
    UP = "up"


@dataclass(frozen=True)
class Output:
    """One output of a factor: its name, unit, and whether it sets the time resolution of the integer
    backend (the per-layer times: their smallest value spans ``scaling.TIME_STEPS_PER_LAYER`` units)."""

    name: str
    unit: Unit
    reference: bool = False


@dataclass(frozen=True, eq=False)
class Factor:
    """A model term tabulated over the decisions it depends on.

    ``fn(ctx, *values)`` returns one float per output (a tuple, or a float for one output), where
    ``values`` are the keys' values in order (model values: ints, choices, ``placement.Layout``s) and
    ``ctx`` is the problem's context (model, system, workload). ``keys`` are decision names.
    """

    name: str
    keys: tuple
    outputs: tuple
    fn: Callable
    row: type = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "row", namedtuple(f"{self.name}_row", [o.name for o in self.outputs]))

    def evaluate(self, ctx, values: dict) -> tuple:
        """The factor's outputs at ``values`` (a mapping with at least its keys), floats."""
        return self.evaluate_at(ctx, [values[k] for k in self.keys])

    def evaluate_at(self, ctx, args) -> tuple:
        """The factor's outputs at ``args``, its keys' values in order, floats."""
        out = self.fn(ctx, *args)
        return tuple(out) if isinstance(out, tuple) else (out,)


@dataclass(frozen=True)
class Limit:
    """A feasibility limit of a composition: ``quantity`` <= ``bound`` (in the quantity's unit,
    seconds or bytes). ``name`` identifies it to the planner that explains what binds."""

    name: str
    quantity: object
    bound: float
    unit: Unit


@dataclass(frozen=True, eq=False)
class ImpliedBound:
    """A lower bound tabulated over ``keys`` (decisions) and the rows of ``factors``:
    ``fn(values, *rows)`` with ``values`` the decisions' values and one row of outputs per factor;
    ``fn`` must be linear with non-negative coefficients in the outputs, so that it stays a lower
    bound when the integer backend evaluates it on its rounded values (and rounds it down).
    ``integer`` False: it holds on exact numbers only (its quantity passes a quotient the integer
    backend rounds down), so the integer backend leaves it out."""

    name: str
    keys: tuple
    factors: tuple
    fn: Callable
    integer: bool = True


class FloatOps:
    """The operations on plain numbers: one mapping whose decision values are given."""

    def __init__(self, ctx, decisions: dict):
        self.ctx = ctx
        self.decisions = decisions

    def decision(self, key):
        return self.decisions[key]

    def lookup(self, factor: Factor):
        return factor.row(*factor.evaluate(self.ctx, self.decisions))

    @staticmethod
    def product(a, b):
        return a * b

    @staticmethod
    def quotient(a, d, rounding: Rounding, fine: bool = False):
        return a / d

    @staticmethod
    def maximum(*xs):
        return max(xs)

    @staticmethod
    def minimum(*xs):
        return min(xs)

    @staticmethod
    def where(cond, a, b):
        return a if cond else b

    @staticmethod
    def equals(x, c) -> bool:
        return x == c

    @staticmethod
    def at_least(x, c) -> bool:
        return x >= c

    @staticmethod
    def implied_at_least(q, bound: ImpliedBound) -> None:
        return None
