"""Typed resource definitions: one dataclass field gives the CRD's OpenAPI schema and the loader's check.

A spec is a frozen dataclass, configured with :data:`SPEC` (``@with_config(SPEC)``), whose fields are
declared with :func:`spec_field` (help text, bounds, pattern; a choice is a ``Literal`` type).
:func:`openapi` turns the class into the structural ``openAPIV3Schema`` the CRD carries, and :func:`load`
reads a resource's dict into the class through pydantic, refusing what the schema refuses with one
:class:`~operators.errors.SpecError` naming the field. The API server applies the schema first; the loader
is the same rule for ``prore k8s render`` and for resources an older CRD let in.

JSON names are the camelCase of the field names (``gpus_per_node`` -> ``gpusPerNode``).

>>> from dataclasses import dataclass
>>> from pydantic import with_config
>>> @with_config(SPEC)
... @dataclass(frozen=True)
... class Demo:
...     gpus_per_node: int = spec_field("GPUs on each node.", default=1, minimum=1)
>>> openapi(Demo)["properties"]["gpusPerNode"]
{'type': 'integer', 'description': 'GPUs on each node.', 'minimum': 1, 'default': 1}
>>> load(Demo, {"gpusPerNode": 3})
Demo(gpus_per_node=3)
>>> load(Demo, {"gpusPerNode": 0}, "spec")
Traceback (most recent call last):
...
operators.errors.SpecError: spec.gpusPerNode: must be at least 1, got 0
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from pydantic import ConfigDict, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, to_json

from operators.errors import SpecError

T = TypeVar("T")
_MISSING: Any = dataclasses.MISSING


def json_name(name: str) -> str:
    """camelCase of a snake_case field name; ``url`` is written ``URL`` (``dashboardURL``, as KubeRay spells it)."""
    head, *rest = name.split("_")
    return head + "".join(w.upper() if w == "url" else w.capitalize() for w in rest)


SPEC = ConfigDict(alias_generator=json_name, strict=True, extra="forbid")
"""How a spec class reads JSON: camelCase names, strict JSON types (a bool is not an integer, a string not a
number; an integer is a number), no unknown field. A nested spec class without a config of its own inherits it."""

_SCHEMA_KEYS = (("ge", "minimum"), ("le", "maximum"), ("pattern", "pattern"), ("min_length", "minLength"))
"""The OpenAPI name of each pydantic constraint a :func:`spec_field` can carry."""


def spec_field(
    help: str,
    *,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    minimum: float | None = None,
    maximum: float | None = None,
    pattern: str | None = None,
    min_length: int | None = None,
) -> Any:
    """A dataclass field with what its schema says: ``help`` becomes the CRD's description.

    The metadata uses pydantic's ``Field`` names (``description``, ``ge``, ``le``, ...): pydantic reads them
    from a dataclass field, so the loader checks the bounds the schema declares.
    """
    given = {"description": help, "ge": minimum, "le": maximum, "pattern": pattern, "min_length": min_length}
    meta = {key: value for key, value in given.items() if value is not None}
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _unwrap_optional(tp: Any) -> Any:
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _type_schema(tp: Any) -> dict[str, Any]:
    tp = _unwrap_optional(tp)
    origin = get_origin(tp)
    if tp is str:
        return {"type": "string"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if origin is typing.Literal:
        return {"type": "string", "enum": list(get_args(tp))}
    if origin in (list, tuple):
        return {"type": "array", "items": _type_schema(get_args(tp)[0])}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(get_args(tp)[1])}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return openapi(tp)
    raise TypeError(f"no schema for type {tp!r}")


def openapi(cls: type) -> dict[str, Any]:
    """The structural OpenAPI v3 schema of spec class ``cls`` (descriptions, enums, bounds, defaults)."""
    hints = get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        schema = _type_schema(hints[f.name])
        if f.metadata.get("description"):
            schema["description"] = f.metadata["description"]
        schema.update({name: f.metadata[key] for key, name in _SCHEMA_KEYS if key in f.metadata})
        if f.default is not _MISSING and f.default is not None:
            schema["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        elif f.default_factory is not _MISSING and dataclasses.is_dataclass(_unwrap_optional(hints[f.name])):
            schema["default"] = {}  # so the API server fills the nested defaults
        if f.default is _MISSING and f.default_factory is _MISSING:
            required.append(json_name(f.name))
        props[json_name(f.name)] = schema
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__:
        out["description"] = " ".join(cls.__doc__.split())
    out["properties"] = props
    if required:
        out["required"] = required
    return out


# -- loading: pydantic over the spec classes -----------------------------------------------------

_KIND = {"int": "an integer", "float": "a number", "bool": "true or false", "string": "a string",
         "list": "a list", "dict": "a mapping", "dataclass": "a mapping"}  # fmt: skip
"""What a value must be, by the first word of pydantic's error type (``int_type``, ``dataclass_exact_type``)."""

_UNKNOWN_FIELD = "unexpected_keyword_argument"
"""pydantic's error type for a key that is no field of the dataclass."""


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(cls: type[T]) -> TypeAdapter[T]:
    """The pydantic adapter of ``cls``, built once (it costs milliseconds)."""
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def _describe(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f"'{value}'"


def _json_fields(cls: Any) -> dict[str, Any]:
    """The type of each field of spec class ``cls``, by JSON name, in declaration order."""
    hints = get_type_hints(cls)
    return {json_name(f.name): hints[f.name] for f in dataclasses.fields(cls)}


def _type_at(cls: Any, loc: tuple[int | str, ...]) -> Any:
    """The type at ``loc`` (a pydantic error's location, in JSON names) inside spec class ``cls``."""
    tp = cls
    for part in loc:
        tp = _unwrap_optional(tp)
        tp = _json_fields(tp)[str(part)] if dataclasses.is_dataclass(tp) else get_args(tp)[-1]
    return _unwrap_optional(tp)


def message(error: ErrorDetails, cls: Any) -> str:
    """What is wrong, in one line, for pydantic's ``error`` in data read as ``cls`` (the path is the caller's)."""
    kind, value, ctx = error["type"], error["input"], error.get("ctx", {})
    if kind == "missing":
        return "is required"
    if kind == _UNKNOWN_FIELD:
        return f"unknown field; known fields are {', '.join(_json_fields(_type_at(cls, error['loc'][:-1])))}"
    if value is None:
        return "must not be null"
    if kind == "literal_error":
        return f"must be one of {', '.join(get_args(_type_at(cls, error['loc'])))}; got {_describe(value)}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}, got {value}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}, got {value}"
    if kind == "string_too_short":
        return f"must have at least {ctx['min_length']} character(s)"
    if kind == "string_pattern_mismatch":
        return f"{_describe(value)} does not match {ctx['pattern']}"
    if kind.split("_")[0] in _KIND:
        return f"must be {_KIND[kind.split('_')[0]]}, got {_describe(value)}"
    return str(error["msg"])


def load(cls: type[T], data: Any, path: str = "spec") -> T:
    """Read ``data`` (a resource's spec, or part of it) into ``cls``; unknown or bad fields raise SpecError.

    The data is JSON (from the API server, or YAML), checked by pydantic's strict JSON rules under ``cls``'s
    :data:`SPEC` config. ``None`` is an empty mapping. The first mistake (an unknown field before any other)
    is the error.
    """
    adapter = _adapter(cls)
    try:
        return adapter.validate_json(to_json({} if data is None else data, inf_nan_mode="constants"))
    except ValidationError as exc:
        errors = exc.errors()
        error = next((e for e in errors if e["type"] == _UNKNOWN_FIELD), errors[0])
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
        raise SpecError(message(error, cls), path=path + where) from None


def dump(obj: Any) -> Any:
    """The resource dict of a spec object (camelCase keys, None fields left out): :func:`load`'s inverse."""
    return _adapter(type(obj)).dump_python(obj, mode="json", by_alias=True, exclude_none=True)
