"""parasol: plan how to map a large language model onto a machine, and which machine to buy.

The Python API (docs/api.md), for training and serving alike::

    import parasol
    problem = parasol.load("problems/examples/gpt3-175b-a100-free.yaml")   # or a dict with the file's keys
    result = parasol.solve(problem, top=3)      # also evaluate, enumerate, pareto
    result.to_frame()                           # a pandas DataFrame

The package is the repository itself: setuptools maps ``parasol`` to the repository root,
``parasol.model`` to ``model/`` (the analytical model), ``parasol.solver`` to ``solver/`` (the
planner, the command line) and ``parasol.data`` to ``problems/`` (the built-in library). The API
is imported on first use, so ``import parasol.model`` stays light.
"""

__version__ = "0.3.0"

API = (
    "load",
    "evaluate",
    "solve",
    "enumerate",
    "pareto",
    "accuracy",
    "Plan",
    "PlanResult",
    "ParetoResult",
    "Problem",
    "ProblemError",
)
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name in API:
        from parasol.solver import api  # noqa: PLC0415 (lazy: the planner pulls in OR-Tools and pandas)

        return getattr(api, name)
    raise AttributeError(f"module 'parasol' has no attribute {name!r}")


def __dir__() -> list:
    return sorted(__all__)
