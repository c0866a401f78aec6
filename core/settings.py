"""Typed settings: frozen dataclasses read from decoded YAML, environment variables and flags, by pydantic.

The machinery every layer's settings share; which sections a config file holds, and in what order the sources
are laid over each other, is :func:`indexing.config.load_config`'s. A value read from a file is checked by
pydantic's strict JSON rules (:func:`load_section`), a value read from text (an environment variable, a flag)
by its lax ones (:func:`parse_text`); unknown keys are refused, and each mistake is one
:class:`~core.errors.ConfigError` line naming the dotted key (``serving.dsl.default_k``).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Greeting:
...     word: str = "hello"
...     times: int = 1
>>> load_section(Greeting, {"times": 3}, "greeting")
Greeting(word='hello', times=3)
>>> load_section(Greeting, {"times": "three"}, "greeting")
Traceback (most recent call last):
...
core.errors.ConfigError: greeting.times must be an integer, got str 'three'
>>> load_section(Greeting, {"time": 3}, "greeting")
Traceback (most recent call last):
...
core.errors.ConfigError: unknown key greeting.time; known keys: times, word
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, NamedTuple, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, to_json

from core.errors import ConfigError

S = TypeVar("S")


class Section(NamedTuple):
    """A top-level key of the config file and the frozen dataclass it is read into; each layer above indexing
    declares its own in a tuple ``SECTIONS`` of its settings module (:func:`indexing.config.load_config`)."""

    name: str
    cls: type[Any]


def field_type(cls: type[Any], key: str) -> Any:
    """The annotation of the dotted ``key`` in the dataclass ``cls``, ``None`` taken out of an optional one.

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Server:
    ...     timeout_s: float | None = None
    >>> field_type(Server, "timeout_s")
    <class 'float'>
    >>> field_type(Server, "timeout")
    Traceback (most recent call last):
    ...
    core.errors.ConfigError: no key timeout in Server
    """
    tp: Any = cls
    for part in key.split("."):
        tp = _not_none(tp)
        hints = typing.get_type_hints(tp) if dataclasses.is_dataclass(tp) else {}
        if part not in hints or part not in {f.name for f in dataclasses.fields(tp)}:
            raise ConfigError(f"no key {part} in {getattr(tp, '__name__', tp)}")
        tp = hints[part]
    return _not_none(tp)


def environment(cls: type[Any], prefix: str = "") -> dict[str, str]:
    """The environment variables that set keys of the dataclass ``cls``: each class's ``ENVIRONMENT``, nested
    classes' included, with their keys made dotted from ``cls`` (after ``prefix``).

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class Client:
    ...     ENVIRONMENT = {"PRORE_CLIENT_URL": "url"}  # a class attribute, not a field
    ...     url: str = ""
    >>> environment(Client)
    {'PRORE_CLIENT_URL': 'url'}
    """
    out = {var: prefix + key for var, key in getattr(cls, "ENVIRONMENT", {}).items()}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        inner = _not_none(hints[f.name])
        if dataclasses.is_dataclass(inner) and isinstance(inner, type):
            out.update(environment(inner, f"{prefix}{f.name}."))
    return out


def parse_text(tp: Any, text: str, where: str = "") -> Any:
    """``text``, an environment variable's or a flag's value, read as the type ``tp`` by pydantic's lax rules
    (the file's are strict JSON ones): ``"4"`` is an integer, ``"true"`` or ``"1"`` a bool; a tuple is
    comma-separated. A mistake is a :class:`ConfigError` naming ``where``.

    >>> from typing import Literal
    >>> parse_text(int, "4"), parse_text(bool, "off"), parse_text(tuple[str, ...], "a, b")
    (4, False, ('a', 'b'))
    >>> parse_text(Literal["json", "free"], "yaml", "output")
    Traceback (most recent call last):
    ...
    core.errors.ConfigError: output must be one of json, free, got str 'yaml'
    """
    value: Any = text
    if typing.get_origin(tp) is tuple:
        value = [part.strip() for part in text.split(",") if part.strip()]
    try:
        return _adapter(tp).validate_python(value, strict=False)
    except ValidationError as exc:
        raise ConfigError(_message(exc.errors()[0], tp, where).strip()) from None


# -- typed loading: pydantic over the frozen dataclasses -------------------------------------------

_KIND: dict[str, str] = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "string": "a string",
    "list": "a list",
    "tuple": "a list",
    "dict": "a mapping",
    "dataclass": "a mapping",
}
"""What a value must be, by the first word of pydantic's error type (``int_type``, ``dataclass_exact_type``)."""

_UNKNOWN_KEY = "unexpected_keyword_argument"
"""pydantic's error type for a key that is no field of the dataclass."""

_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[S]) -> TypeAdapter[S]:
    """The pydantic adapter of ``cls``, built once (it costs milliseconds)."""
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _not_none(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return args[0] if typing.get_origin(tp) in (typing.Union, types.UnionType) and len(args) == 1 else tp


def _type_at(tp: Any, loc: tuple[int | str, ...]) -> Any:
    """The annotation at ``loc`` (a pydantic error's location) in ``tp``: a field, an item, a value."""
    for part in loc:
        tp = _not_none(tp)
        tp = typing.get_type_hints(tp)[str(part)] if dataclasses.is_dataclass(tp) else typing.get_args(tp)[-1]
    return _not_none(tp)


def _message(error: ErrorDetails, tp: Any, where: str) -> str:
    """One line for pydantic's ``error`` in a value read as ``tp`` under the key ``where``, naming the dotted key."""
    loc, kind, value = error["loc"], error["type"], error["input"]
    at = where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc)
    if kind == _UNKNOWN_KEY:
        known = sorted(f.name for f in dataclasses.fields(_type_at(tp, loc[:-1])) if f.init)
        return f"unknown key {at}; known keys: {', '.join(known)}"
    if kind == "literal_error":
        choices = ", ".join(map(str, typing.get_args(_type_at(tp, loc))))
        return f"{at} must be one of {choices}, got {_got(value)}"
    if kind == "value_error":  # raised by a __post_init__
        return f"{at}: {error['ctx']['error']}"
    if kind.split("_")[0] in _KIND:
        return f"{at} must be {_KIND[kind.split('_')[0]]}, got {_got(value)}"
    return f"{at}: {error['msg']}"


def _over_defaults(raw: Any, default: Any) -> Any:
    """``raw`` (decoded YAML for ``default``'s dataclass) with each nested section it gives completed from
    ``default``: a key left out of a nested section keeps the value of the enclosing field's default, where
    pydantic alone would take the nested class's own (``serving.planner`` decodes with ``output: grounded``
    and evaluation's ``schema_limits``, not ``PlannerSettings()``'s ``json`` and the language's limits)."""
    if not (isinstance(raw, Mapping) and dataclasses.is_dataclass(default) and not isinstance(default, type)):
        return raw
    out = dict(raw)
    for f in dataclasses.fields(default):
        inner = getattr(default, f.name)
        given = raw.get(f.name)
        if (
            f.init
            and isinstance(given, Mapping)
            and dataclasses.is_dataclass(inner)
            and not isinstance(inner, type)
        ):
            kept = {
                g.name: getattr(inner, g.name)
                for g in dataclasses.fields(inner)
                if g.init and g.name not in given
            }
            out[f.name] = _over_defaults({**kept, **given}, inner)
    return out


def load_section(cls: type[S], raw: Any, where: str) -> S:
    """``raw`` (decoded YAML) read as ``cls``, a frozen dataclass (or the workspace's ``Path``), by pydantic.

    YAML holds JSON's kinds of value, so they are checked by pydantic's strict JSON rules: a bool is not an
    integer, nor a string a number; an integer is a float, a list a tuple, a string a path. Unknown keys are
    refused, keys left out keep their defaults (in a nested section, the enclosing field's default's). A check
    in the class's ``__post_init__`` may raise its own :class:`ConfigError`; a ``ValueError`` or ``TypeError``
    there becomes one. The first mistake (an unknown key before any other) is the error, on one line.
    """
    adapter = _adapter(cls)
    if dataclasses.is_dataclass(cls) and isinstance(raw, Mapping):
        raw = _over_defaults(raw, cls())
    try:
        return adapter.validate_json(to_json(raw, inf_nan_mode="constants"), strict=True, extra="forbid")
    except ValidationError as exc:
        errors = exc.errors()
        error = next((e for e in errors if e["type"] == _UNKNOWN_KEY), errors[0])
        raise ConfigError(_message(error, cls, where)) from None
    except TypeError as exc:  # pydantic passes a __post_init__'s TypeError through
        raise ConfigError(f"{where}: {exc}") from None


def has_key(raw: Mapping[str, Any], key: str) -> bool:
    """Whether ``raw`` holds the dotted ``key``."""
    node: Any = raw
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def put_key(raw: dict[str, Any], key: str, value: Any) -> None:
    """Set the dotted ``key`` of ``raw`` to ``value``, making the mappings on the way (an empty section's ``None``
    included); a value in the way that is no mapping stays, for the file's own error."""
    *path, last = key.split(".")
    node = raw
    for part in path:
        if node.get(part) is None:
            node[part] = {}
        elif isinstance(node[part], Mapping):
            node[part] = dict(node[part])
        else:
            return
        node = node[part]
    node[last] = value
