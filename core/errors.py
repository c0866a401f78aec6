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
