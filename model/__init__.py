"""parasol's analytical model: one concrete mapping in, times, memory and breakdowns out.

Pure functions and frozen dataclasses in SI units; no solver code lives here.
"""

from .errors import ProblemError
from .evaluation import Evaluation
from .serving_step import evaluate_inference
from .specs import (
    DeviceSpec,
    InferenceWorkload,
    Mapping,
    ModelSpec,
    NetworkTier,
    PoolMapping,
    ServingMapping,
    SystemSpec,
    Workload,
)
from .training_step import evaluate_training

__all__ = [
    "DeviceSpec",
    "Evaluation",
    "InferenceWorkload",
    "Mapping",
    "ModelSpec",
    "NetworkTier",
    "PoolMapping",
    "ProblemError",
    "ServingMapping",
    "SystemSpec",
    "Workload",
    "evaluate_inference",
    "evaluate_training",
]
