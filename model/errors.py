"""Exceptions shared by the model and the solver.

A ``ProblemError`` is a user mistake (a bad file, an unknown name, an impossible degree):
the CLI prints its one-line message and exits with status 2. It is never raised for a plan
that merely does not fit; that is an answer, reported by ``fits`` and by the planner.
"""


class ProblemError(ValueError):
    """A user-facing error: the message names the file, the field and what is allowed."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        parts = [p for p in (source, field) if p]
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)

    _KEEP = object()

    def located(self, source=_KEEP, field=_KEEP) -> "ProblemError":
        """The same message placed in ``source`` (a file) and/or at ``field``; an argument left out
        keeps this error's own. Callers that know the file raise it ``from None``."""
        return ProblemError(
            self.message,
            source=self.source if source is ProblemError._KEEP else source,
            field=self.field if field is ProblemError._KEEP else field,
        )
