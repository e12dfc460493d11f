"""Float-to-integer scaling for CP-SAT, in one place.

Time rounds to the nearest unit; memory rounds UP, so the solver never under-counts memory and
every plan it accepts fits on the model's unscaled numbers. The time unit is chosen per problem
so that the smallest per-layer time spans ``TIME_STEPS_PER_LAYER`` units: measured on the
benchmark ladder, 10^4 keeps the step-time rounding error under 10^-4 relative while products
such as micro-batches x stage time stay far inside int64.
"""

from __future__ import annotations

import math

TIME_STEPS_PER_LAYER = 10_000
# 16 KiB: activation terms are multiplied by in-flight chunks x layers and divided by vpp, so a
# fine unit keeps the rounded-up total within a few MiB of the model's bytes.
MEMORY_UNIT_BYTES = 2**14


class Scale:
    def __init__(self, smallest_layer_time_s: float):
        self.time_unit_s = max(smallest_layer_time_s, 1e-9) / TIME_STEPS_PER_LAYER
        self.memory_unit_bytes = MEMORY_UNIT_BYTES

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
