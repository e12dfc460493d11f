"""parasol's analytical model: one concrete mapping in, times, memory and breakdowns out.

Pure functions and frozen dataclasses in SI units; no solver code lives here.
"""

from .errors import ProblemError
from .specs import DeviceSpec, Mapping, ModelSpec, NetworkTier, SystemSpec, Workload
from .training import Evaluation, evaluate_training

__all__ = ["DeviceSpec", "Evaluation", "Mapping", "ModelSpec", "NetworkTier", "ProblemError", "SystemSpec",
           "Workload", "evaluate_training"]
