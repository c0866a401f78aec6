"""Typed resource definitions: one dataclass field gives the CRD's OpenAPI schema and the loader's check.

A spec is a frozen dataclass whose fields are declared with :func:`spec_field` (help text, enum,
bounds, pattern). :func:`openapi` turns the class into the structural ``openAPIV3Schema`` the CRD
carries, and :func:`load` reads a resource's dict into the class, refusing what the schema refuses
with one :class:`~operators.errors.SpecError` naming the field. The API server applies the schema
first; the loader is the same rule for ``prore k8s render`` and for resources an older CRD let in.

JSON names are the camelCase of the field names (``gpus_per_node`` -> ``gpusPerNode``).

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Demo:
...     gpus_per_node: int = spec_field("GPUs on each node.", default=1, minimum=1)
>>> openapi(Demo)["properties"]["gpusPerNode"]
{'type': 'integer', 'description': 'GPUs on each node.', 'minimum': 1, 'default': 1}
>>> load(Demo, {"gpusPerNode": 0}, "spec")
Traceback (most recent call last):
...
operators.errors.SpecError: spec.gpusPerNode: must be at least 1, got 0
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from operators.errors import SpecError

T = TypeVar("T")
_MISSING: Any = dataclasses.MISSING


def spec_field(
    help: str,
    *,
    default: Any = _MISSING,
    default_factory: Any = _MISSING,
    enum: tuple[str, ...] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    pattern: str | None = None,
    min_length: int | None = None,
) -> Any:
    """A dataclass field with what its schema says: ``help`` becomes the CRD's description."""
    meta = {"help": help, "enum": enum, "minimum": minimum, "maximum": maximum, "pattern": pattern,
            "min_length": min_length}  # fmt: skip
    if default_factory is not _MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def json_name(name: str) -> str:
    """camelCase of a snake_case field name; ``url`` is written ``URL`` (``dashboardURL``, as KubeRay spells it)."""
    head, *rest = name.split("_")
    return head + "".join(w.upper() if w == "url" else w.capitalize() for w in rest)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    if get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _type_schema(tp: Any) -> dict[str, Any]:
    tp, _ = _unwrap_optional(tp)
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
        meta = f.metadata
        if meta.get("help"):
            schema["description"] = meta["help"]
        if meta.get("enum"):
            schema["enum"] = list(meta["enum"])
        for key, name in (("minimum", "minimum"), ("maximum", "maximum"), ("pattern", "pattern"),
                          ("min_length", "minLength")):  # fmt: skip
            if meta.get(key) is not None:
                schema[name] = meta[key]
        if f.default is not _MISSING and f.default is not None:
            schema["default"] = list(f.default) if isinstance(f.default, tuple) else f.default
        elif f.default_factory is not _MISSING and dataclasses.is_dataclass(_unwrap_optional(hints[f.name])[0]):
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


def _describe(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else f"'{value}'"


def _check_scalar(value: Any, meta: typing.Mapping[str, Any], path: str) -> None:
    if meta.get("enum") and value not in meta["enum"]:
        raise SpecError(f"must be one of {', '.join(meta['enum'])}; got {_describe(value)}", path=path)
    if meta.get("minimum") is not None and value < meta["minimum"]:
        raise SpecError(f"must be at least {meta['minimum']}, got {value}", path=path)
    if meta.get("maximum") is not None and value > meta["maximum"]:
        raise SpecError(f"must be at most {meta['maximum']}, got {value}", path=path)
    if meta.get("min_length") is not None and len(value) < meta["min_length"]:
        raise SpecError(f"must have at least {meta['min_length']} character(s)", path=path)
    if meta.get("pattern") is not None and not re.search(meta["pattern"], value):
        raise SpecError(f"{_describe(value)} does not match {meta['pattern']}", path=path)


def _load_value(tp: Any, value: Any, meta: typing.Mapping[str, Any], path: str) -> Any:
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise SpecError("must not be null", path=path)
    origin = get_origin(tp)
    if tp is bool:
        if not isinstance(value, bool):
            raise SpecError(f"must be true or false, got {_describe(value)}", path=path)
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(f"must be an integer, got {_describe(value)}", path=path)
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(f"must be a number, got {_describe(value)}", path=path)
        value = float(value)
    elif tp is str or origin is typing.Literal:
        if not isinstance(value, str):
            raise SpecError(f"must be a string, got {_describe(value)}", path=path)
        if origin is typing.Literal and value not in get_args(tp):
            raise SpecError(f"must be one of {', '.join(get_args(tp))}; got '{value}'", path=path)
    elif origin in (list, tuple):
        if not isinstance(value, list):
            raise SpecError(f"must be a list, got {_describe(value)}", path=path)
        items = [_load_value(get_args(tp)[0], v, {}, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    elif origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"must be a mapping, got {_describe(value)}", path=path)
        return {str(k): _load_value(get_args(tp)[1], v, {}, f"{path}.{k}") for k, v in value.items()}
    elif dataclasses.is_dataclass(tp):
        return load(typing.cast(type, tp), value, path)
    _check_scalar(value, meta, path)
    return value


def load(cls: type[T], data: Any, path: str = "spec") -> T:
    """Read ``data`` (a resource's spec, or part of it) into ``cls``; unknown or bad fields raise SpecError."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise SpecError(f"must be a mapping, got {_describe(data)}", path=path)
    hints = get_type_hints(cls)
    fields = {json_name(f.name): f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise SpecError(f"unknown field; known fields are {', '.join(fields)}", path=f"{path}.{unknown[0]}")
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is _MISSING and f.default_factory is _MISSING:
                raise SpecError("is required", path=f"{path}.{name}")
            continue
        kwargs[f.name] = _load_value(hints[f.name], data[name], f.metadata, f"{path}.{name}")
    return cls(**kwargs)


def dump(obj: Any) -> Any:
    """The resource dict of a spec object (camelCase keys, None fields left out): :func:`load`'s inverse."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {json_name(f.name): dump(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if getattr(obj, f.name) is not None}  # fmt: skip
    if isinstance(obj, list | tuple):
        return [dump(v) for v in obj]
    if isinstance(obj, dict):
        return {k: dump(v) for k, v in obj.items()}
    return obj
