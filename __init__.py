"""parasol: plan how to map a large language model onto a machine, and which machine to buy.

The package is the repository itself: setuptools maps ``parasol`` to the repository root,
``parasol.model`` to ``model/`` (the analytical model), ``parasol.solver`` to ``solver/`` (the
planner, the command line) and ``parasol.data`` to ``problems/`` (the built-in library).
"""

__version__ = "0.2.0"
