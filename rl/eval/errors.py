"""Typed errors of the evaluation harness; each has a stable code and prints as one line."""

from __future__ import annotations

from core.errors import ProReError


class EvalError(ProReError):
    """An evaluation cannot run as asked: bad flag, missing benchmark or run, no queries."""

    code = "eval"


class UnknownMethod(EvalError):
    """The method name is not registered; the message lists the known names."""

    code = "unknown_method"


class DuplicateMethod(EvalError):
    """A second method tried to register under a name already taken."""

    code = "duplicate_method"


class OracleMismatch(EvalError):
    """The gold program, executed again, did not rank the gold id first: the benchmark or engine drifted."""

    code = "oracle_mismatch"
