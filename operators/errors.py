"""The operator's typed errors: each says whether a retry can help, as kopf's own errors do.

The operator imports none of the product packages, so it has its own small root type rather than
``core.errors.ProReError``; the shape is the same (a stable ``code``, one line for a person).
The kopf handlers turn :class:`SpecError` into ``kopf.PermanentError`` (the resource is wrong: retrying
cannot fix it) and :class:`ChildNotReady` / :class:`ApiUnavailable` into ``kopf.TemporaryError`` with
their ``delay``.
"""

from __future__ import annotations


class OperatorError(Exception):
    """Root of the operator's errors. ``code`` is stable; ``retryable`` says whether to try again."""

    code: str = "operator"
    retryable: bool = False
    delay_s: float = 0.0

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def one_line(self) -> str:
        """``error <code>: <message>`` on one line."""
        return f"error {self.code}: {' '.join(self.message.split())}"


class SpecError(OperatorError):
    """A custom resource is invalid (the message names the field). Permanent: fix the resource."""

    code = "spec"

    def __init__(self, message: str, *, path: str = "", code: str | None = None) -> None:
        super().__init__(f"{path}: {message}" if path else message, code=code)
        self.path = path


class ChildNotReady(OperatorError):
    """A child the next step needs is not there yet (a RayJob still starting). Temporary."""

    code = "child_not_ready"
    retryable = True
    delay_s = 30.0


class ApiUnavailable(OperatorError):
    """The Kubernetes API or a Ray dashboard could not be reached or refused for now. Temporary."""

    code = "api_unavailable"
    retryable = True
    delay_s = 15.0
