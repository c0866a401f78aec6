"""The errors of the indexing layer: corpora and stores. Each is a :class:`~core.errors.ProReError`."""

from __future__ import annotations

from core.errors import ProReError


class CorpusError(ProReError):
    """A corpus is missing, or a source file is broken (the message names file and line)."""

    code = "corpus"


class StoreError(ProReError):
    """A store failed: a server went away, a table is missing, counts disagree."""

    code = "store"


class StoreUnavailable(StoreError):
    """A store server could not be reached. Retrying later may help."""

    code = "store_unavailable"
    retryable = True


class QueryRejected(StoreError):
    """The store refused a statement for what the statement itself says: its syntax or types, a name it
    does not know, a value that does not parse, or a cap it ran into. The same statement fails the same
    way again, so a retry cannot help. ``number`` is the store's own error number (ClickHouse's code)."""

    code = "sql"

    def __init__(self, message: str, *, code: str | None = None, number: int | None = None) -> None:
        super().__init__(message, code=code)
        self.number = number


class StoreFailure(StoreError):
    """A store failed for a reason that is not the statement's: a table that vanished, an engine fault,
    a bug of ours. The whole call fails; retrying it later may help.

    ``number`` is the store's own error number, when it gave one. ``unclassified`` marks an error number
    the project knows neither as a statement's fault nor as the store's: the statement may have caused
    it, so a caller running untrusted statements finds out whose it is before failing a whole call
    (the engine runs the statement alone and a statement it knows to be good)."""

    code = "store_failure"
    retryable = True

    def __init__(
        self, message: str, *, code: str | None = None, number: int | None = None, unclassified: bool = False
    ) -> None:
        super().__init__(message, code=code)
        self.number = number
        self.unclassified = unclassified
