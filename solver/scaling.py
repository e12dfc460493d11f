"""Float-to-integer scaling for CP-SAT, in one place.

Time rounds to the nearest unit; memory rounds UP, so the solver never under-counts memory and
every plan it accepts fits on the model's unscaled numbers. The time unit is chosen per problem
so that the smallest per-layer time spans ``TIME_STEPS_PER_LAYER`` units: measured on the
benchmark ladder, 10^4 keeps the step-time rounding error under 10^-4 relative while products
such as micro-batches x stage time stay far inside int64. Prices are in units of 1/1,000 of the
cheapest price of the problem (a relative rounding under 5e-4; finer units put step x price near
1e17-1e18, where CP-SAT 9.15's presolve wrongly reported feasible problems INFEASIBLE; measured).
"""

from __future__ import annotations

import math

import numpy as np

from parasol.model.ops import Unit

TIME_STEPS_PER_LAYER = 10_000
# 16 KiB: activation terms are multiplied by in-flight chunks x layers and divided by vpp, so a
# fine unit keeps the rounded-up total within a few MiB of the model's bytes.
MEMORY_UNIT_BYTES = 2**14
PRICE_STEPS = 1000


class Scale:
    """The size of one integer unit of each ``Unit``: seconds, bytes, dollars per hour."""

    def __init__(self, smallest_layer_time_s: float, cheapest_price: float = 1.0):
        self.time_unit_s = max(smallest_layer_time_s, 1e-9) / TIME_STEPS_PER_LAYER
        self.memory_unit_bytes = MEMORY_UNIT_BYTES
        self.price_unit = max(cheapest_price, 1e-12) / PRICE_STEPS

    def unit(self, unit: Unit) -> float:
        """Model units (s, B, $/h, s·$/h) per integer unit."""
        return {
            Unit.TIME: self.time_unit_s,
            Unit.MEMORY: self.memory_unit_bytes,
            Unit.COUNT: 1.0,
            Unit.PRICE: self.price_unit,
            Unit.COST: self.time_unit_s * self.price_unit,
        }[unit]

    def to_int(self, unit: Unit, value: float) -> int:
        """A table value in integer units: memory up, counts exact, the rest nearest."""
        if unit is Unit.MEMORY:
            return self.memory(value)
        return int(round(value / self.unit(unit)))

    def to_ints(self, unit: Unit, values):
        """``to_int`` of an array of values (numpy int64)."""
        values = np.asarray(values, dtype=float)
        if unit is Unit.MEMORY:
            return np.ceil(values / self.memory_unit_bytes - 1e-9).astype(np.int64)
        return np.round(values / self.unit(unit)).astype(np.int64)

    def cap(self, unit: Unit, bound: float) -> int:
        """A limit in integer units, rounded down (a quantity within it is within the float limit)."""
        return int(math.floor(bound / self.unit(unit) + (1e-9 if unit is Unit.COUNT else 0.0)))

    def time(self, seconds: float) -> int:
        """Seconds to time units, nearest."""
        return int(round(seconds / self.time_unit_s))

    def memory(self, nbytes: float) -> int:
        """Bytes to memory units, rounded up."""
        return int(math.ceil(nbytes / self.memory_unit_bytes - 1e-9))

    def memory_cap(self, nbytes: float) -> int:
        """A capacity in memory units, rounded down."""
        return int(math.floor(nbytes / self.memory_unit_bytes))

    def seconds(self, units: float) -> float:
        return units * self.time_unit_s

    def gib(self, units: float) -> float:
        return units * self.memory_unit_bytes / 2**30
