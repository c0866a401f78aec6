"""The one registry of the project: values by name, for embedders, evaluation methods and plugins.

A :class:`Registry` maps names to values (factories, specs). Registering a name twice is an error,
so one plugin cannot shadow another (as in verl's registries). Looking up an unknown name is an error
that lists the known names. *Providers* are modules imported on the first lookup, so that the values
they register at import time are present; entry points of an optional group are loaded too.

>>> shapes: Registry[type] = Registry("shape")
>>> @shapes.register("box")
... class Box: ...
>>> shapes.get("box") is Box
True
>>> numbers: Registry[int] = Registry("number")
>>> numbers.add("one", 1)
>>> numbers.get("one"), numbers.names(), "two" in numbers
(1, ('one',), False)
>>> numbers.get("two")
Traceback (most recent call last):
...
core.errors.ConfigError: unknown number 'two'; known numbers: one
>>> numbers.add("one", 2)
Traceback (most recent call last):
...
core.errors.ConfigError: number 'one' is already registered
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

from core.errors import ConfigError, ProReError

T = TypeVar("T")


class Registry(Generic[T]):
    """Values of type ``T`` by name.

    Args:
        kind: what the values are, singular (``"embedder"``, ``"method"``); used in messages.
        providers: modules imported before the first lookup (``get``, ``names``, ``in``,
            iteration) so that the values they register exist. They are imported in order, once.
            If one fails to import, its exception propagates to that lookup and the next lookup
            tries again; a broken provider never shows up as an unknown name.
        entry_point_group: an ``importlib.metadata`` entry-point group whose entry points are
            loaded after the providers (a distribution registers values by being installed).
        unknown: the error raised for an unknown name, called with the message and ``unknown_code``.
        duplicate: the error raised for a name registered twice, with the message and ``duplicate_code``.
        unknown_code, duplicate_code: the ``code`` of those errors; ``None`` keeps the error
            class's own code.

    Messages are ``unknown <kind> 'x'; known <kind>s: a, b`` (``none`` when empty) and
    ``<kind> 'x' is already registered``.

    Use :meth:`register` as a decorator on the value itself (a factory function), or :meth:`add`
    for a value built around it (a spec holding the function and its description). Safe to use
    from several threads.
    """

    def __init__(
        self,
        kind: str,
        *,
        providers: Sequence[str] = (),
        entry_point_group: str | None = None,
        unknown: type[ProReError] = ConfigError,
        duplicate: type[ProReError] = ConfigError,
        unknown_code: str | None = None,
        duplicate_code: str | None = "duplicate_name",
    ) -> None:
        self.kind = kind
        self.providers = tuple(providers)
        self.entry_point_group = entry_point_group
        self._unknown, self._unknown_code = unknown, unknown_code
        self._duplicate, self._duplicate_code = duplicate, duplicate_code
        self._values: dict[str, T] = {}
        self._lock = threading.RLock()
        self._loaded = False
        self._loading = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding the decorated value under ``name`` and returning it unchanged."""

        def add(value: T) -> T:
            self.add(name, value)
            return value

        return add

    def add(self, name: str, value: T) -> None:
        """Add ``value`` under ``name``; a name already taken raises the ``duplicate`` error."""
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.kind} name must be a non-empty string, got {name!r}")
        with self._lock:
            if name in self._values:
                raise self._duplicate(
                    f"{self.kind} {name!r} is already registered", code=self._duplicate_code
                )
            self._values[name] = value

    def get(self, name: str) -> T:
        """The value registered as ``name``, or the ``unknown`` error listing the known names."""
        self.load()
        with self._lock:
            try:
                return self._values[name]
            except KeyError:
                pass
        known = ", ".join(self.names()) or "none"
        raise self._unknown(
            f"unknown {self.kind} {name!r}; known {self.kind}s: {known}", code=self._unknown_code
        )

    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        self.load()
        with self._lock:
            return tuple(sorted(self._values))

    def load(self) -> None:
        """Import the providers and load the entry points, once; a failure is raised and retried next time."""
        with self._lock:
            if self._loaded or self._loading:
                return  # a provider looking names up while it is being imported sees what exists so far
            self._loading = True
            try:
                for module in self.providers:
                    importlib.import_module(module)
                if self.entry_point_group:
                    for ep in importlib.metadata.entry_points(group=self.entry_point_group):
                        ep.load()
                self._loaded = True
            finally:
                self._loading = False

    def __contains__(self, name: object) -> bool:
        self.load()
        with self._lock:
            return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._values)} registered)"
