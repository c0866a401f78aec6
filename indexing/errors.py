"""The one root error type of the project.

Every error a user can provoke is a :class:`ProReError` with a stable ``code``. The CLI prints it as
one line, ``error <code>: <message>``, and exits non-zero; it never shows a traceback for bad input.
Errors say whether a retry can help (``retryable``), as kopf's temporary/permanent errors do.
"""

from __future__ import annotations


class ProReError(Exception):
    """Root of every typed error. ``code`` is stable and machine-readable."""

    code: str = "error"
    retryable: bool = False

    def __init__(self, message: str, *, code: str | None = None, position: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.position = position

    def one_line(self) -> str:
        """The single line the CLI prints: ``error <code>: <message>``."""
        where = f" (at {self.position})" if self.position is not None else ""
        text = " ".join(self.message.split())
        return f"error {self.code}: {text}{where}"


class ConfigError(ProReError):
    """A config file or flag is wrong: unknown key, bad type, missing file."""

    code = "config"


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


class MissingExtra(ProReError):
    """An optional dependency is not installed; the message names the pip extra."""

    code = "missing_extra"

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(f"{module} is not installed; run: pip install 'proretrieval[{extra}]'")


def require(module: str, extra: str) -> object:
    """Import ``module`` lazily, or raise :class:`MissingExtra` naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtra(module, extra) from exc
