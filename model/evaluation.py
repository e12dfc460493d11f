"""What the model answers for one plan: metrics, breakdowns and per-stage detail."""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 2.0**30


@dataclass(frozen=True)
class Evaluation:
    """The model's answer for one mapping: ``metrics`` (floats, SI units unless the name says
    otherwise), ``breakdown`` (time and memory by component) and ``stages`` (per pipeline stage)."""

    metrics: dict
    breakdown: dict
    stages: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"metrics": self.metrics, "breakdown": self.breakdown, "stages": self.stages}
