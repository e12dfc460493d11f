"""parasol's analytical model: one concrete mapping in, times, memory and breakdowns out.

Pure functions and frozen dataclasses in SI units; no solver code lives here.
"""

# Imported on first use (PEP 562): ``import parasol.model.choices`` (the command line's parser) stays free of
# numpy and of the model's compositions.
_EXPORTS = {
    "ProblemError": "errors",
    "Evaluation": "evaluation",
    "evaluate_inference": "serving_step",
    "evaluate_training": "training_step",
    **dict.fromkeys(
        (
            "DeviceSpec",
            "InferenceWorkload",
            "Mapping",
            "ModelSpec",
            "NetworkTier",
            "PoolMapping",
            "ServingMapping",
            "SystemSpec",
            "Workload",
        ),
        "specs",
    ),
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
