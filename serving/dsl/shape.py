"""The shape of a program, declared once: its keys, their JSON types, which are required, what an optional
key means when absent, and which values each key may take (per corpus schema and DSL limits).

Everything that checks or describes a program's shape reads :data:`PROGRAM` and :data:`ENTRY`:

- the parser (:mod:`serving.dsl.parse`): :func:`read_object` checks the keys and the JSON types of a decoded
  object and fills in the defaults. What must run before decoding (duplicate keys, nesting depth, digit
  limits) stays in the parser;
- the validator's typed check of a program built in code (:func:`check_attributes`, the same checks on a
  :class:`~serving.dsl.program.Program`'s attributes), and its rules on an entry's field and ladders
  (:meth:`ObjectShape.choices`);
- the JSON schema for structured decoding (:mod:`serving.dsl.json_schema`), written from the declaration.

The program grammar (:mod:`serving.dsl.grammar`) writes its own EBNF (it also shapes the SQL, and carries
``rerank <= k``); ``tests/serving/test_dsl_shape.py`` checks that it admits every key and value declared
here, and refuses undeclared keys and values outside the choices.

A *closed* key (``type``, ``mode``) takes only its choices whatever the corpus: a value outside them is not
a program (a :class:`~serving.dsl.errors.FormatError` with the key's own code). The choices of the other keys
depend on the corpus or the limits; breaking them is a validation failure.

>>> PROGRAM.names, ENTRY.required, ENTRY.optional
(('sql', 'retrieval_list'), ('type', 'field', 'query'), ('mode', 'k', 'rerank'))
>>> from indexing.schema import EMAILS
>>> ENTRY.choices("field", Scope(schema=EMAILS, modality="text")), ENTRY.choices("k", Scope())
(('subject', 'body'), (3, 5, 10, 20, 50))
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, NoReturn

from indexing.schema import CorpusSchema
from serving.dsl.errors import Code, FormatError
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.program import MODALITIES, MODES, ROLE_OF, Modality, corpus_modalities

JsonType = Literal["string", "integer", "array"]
Value = str | int


@dataclass(frozen=True)
class Scope:
    """What a key's choices depend on: the limits, and (for the JSON schema and validation) the corpus schema
    and the modality of the entry (the variant of :data:`ENTRY`)."""

    limits: DslLimits = DEFAULT_LIMITS
    schema: CorpusSchema | None = None
    modality: Modality | None = None


def _any(scope: Scope) -> None:
    return None


@dataclass(frozen=True)
class Key:
    """One key of a JSON object of the language."""

    name: str
    json_type: JsonType
    required: bool = True
    choices: Callable[[Scope], tuple[Value, ...] | None] = _any
    """The values the key may take in a scope; None: any value of its JSON type."""
    closed: Code | None = None
    """Set for a key whose choices do not depend on the corpus or the limits: a value outside them is refused
    with this code when the shape is checked (parser and typed check)."""
    default: Callable[[DslLimits], Value] | None = None
    """An optional key's value when absent."""
    max_chars: Callable[[DslLimits], int] | None = None
    """A string key's longest value; such a string is non-empty too."""
    max_items: Callable[[DslLimits], int] | None = None
    """An array key's most items."""
    items: ObjectShape | None = None
    """The shape of an array key's items."""

    def __post_init__(self) -> None:
        if self.required == (self.default is not None):
            raise ValueError(f"key {self.name!r}: an optional key has a default and a required one none")

    @functools.cached_property
    def closed_choices(self) -> tuple[Value, ...]:
        """The choices of a closed key (they hold in every scope); empty for another key."""
        return (self.choices(Scope()) or ()) if self.closed is not None else ()


@dataclass(frozen=True)
class ObjectShape:
    """The keys of one JSON object, in the order they are written; ``variant`` names the key whose value, a
    modality, picks the object's variant (an entry's ``type``: its modality decides its fields)."""

    keys: tuple[Key, ...]
    variant: str | None = None
    checking_order: tuple[Key, ...] = field(init=False, repr=False, compare=False)
    """The keys in the order their values are checked: the closed ones first (an entry's ``type`` and
    ``mode`` say what the rest means), then the others as written."""
    _by_name: dict[str, Key] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {key.name: key for key in self.keys})
        object.__setattr__(
            self, "checking_order", tuple(sorted(self.keys, key=lambda key: key.closed is None))
        )

    def __getitem__(self, name: str) -> Key:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys)

    @functools.cached_property
    def required(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys if key.required)

    @functools.cached_property
    def optional(self) -> tuple[str, ...]:
        return tuple(key.name for key in self.keys if not key.required)

    def variants(self, scope: Scope) -> tuple[Scope, ...]:
        """``scope`` narrowed to each variant it allows: for an entry, one scope per modality of the corpus
        (``scope`` alone when it names its modality, or when the shape has no variants)."""
        if self.variant is None or scope.modality is not None:
            return (scope,)
        return tuple(replace(scope, modality=m) for m in _modalities(scope))

    def choices(self, name: str, scope: Scope) -> tuple[Value, ...]:
        """The values key ``name`` may take in ``scope``; a key without choices is an error."""
        got = self[name].choices(scope)
        if got is None:
            raise ValueError(f"key {name!r} takes any {self[name].json_type}")
        return got


def _modalities(scope: Scope) -> tuple[Modality, ...]:
    if scope.modality is not None:
        return (scope.modality,)
    return MODALITIES if scope.schema is None else corpus_modalities(scope.schema)


def _fields(scope: Scope) -> tuple[str, ...] | None:
    """The fields an entry may search: those of its modality's role in the corpus (any string without one)."""
    if scope.schema is None:
        return None
    schema = scope.schema
    return tuple(name for m in _modalities(scope) for name in schema.names(ROLE_OF[m]))


ENTRY = ObjectShape(
    (
        Key("type", "string", choices=_modalities, closed=Code.BAD_TYPE),
        Key("field", "string", choices=_fields),
        Key("query", "string", max_chars=lambda limits: limits.max_query_chars),
        Key("mode", "string", required=False, choices=lambda scope: MODES, closed=Code.BAD_MODE,
            default=lambda limits: MODES[0]),
        Key("k", "integer", required=False, choices=lambda scope: scope.limits.k_ladder,
            default=lambda limits: limits.default_k),
        Key("rerank", "integer", required=False, choices=lambda scope: scope.limits.rerank_ladder,
            default=lambda limits: 0),
    ),
    variant="type",
)  # fmt: skip
"""A retrieval entry (DESIGN.md section 3): its keys are :class:`~serving.dsl.program.Retrieval`'s fields."""

PROGRAM = ObjectShape(
    (
        Key("sql", "string", max_chars=lambda limits: limits.max_sql_chars),
        Key("retrieval_list", "array", max_items=lambda limits: limits.max_entries, items=ENTRY),
    )
)
"""A program: its keys are :class:`~serving.dsl.program.Program`'s fields."""


def _fail(message: str, code: Code, path: str | None = None) -> NoReturn:
    raise FormatError(message, code=code, path=path)


def json_type_of(value: object) -> str:
    """What ``value`` is, in JSON's words, for a message: ``a string``, ``an array``, ``null``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Sequence):
        return "an array"
    if isinstance(value, Mapping):
        return "an object"
    return type(value).__name__


def join_path(path: str, key: object) -> str:
    """``path.key``; a key that is not a plain name (a model may write any string) is quoted, so that a path
    never carries a newline or another control character into a one-line error.

    >>> join_path("retrieval_list[1]", "rerank"), join_path("retrieval_list[1]", "re rank")
    ('retrieval_list[1].rerank', "retrieval_list[1].'re rank'")
    """
    name = str(key)
    if not name.isidentifier():
        name = repr(name)
    return f"{path}.{name}" if path else name


_IS: dict[JsonType, Callable[[object], bool]] = {
    "string": lambda value: isinstance(value, str),
    # bool is an int in Python but not a number in the language.
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "array": lambda value: isinstance(value, list | tuple),
}
_A: dict[JsonType, str] = {"string": "a string", "integer": "an integer", "array": "an array"}


def check_value(key: Key, value: object, path: str) -> Any:
    """``value`` of ``key`` in the object at ``path``, if it has the key's JSON type and (for a closed key)
    is among its choices; else a :class:`FormatError`."""
    if not _IS[key.json_type](value):
        _fail(f"{key.name} must be {_A[key.json_type]}, not {json_type_of(value)}", Code.BAD_VALUE_TYPE,
              join_path(path, key.name))  # fmt: skip
    if key.closed is not None and value not in key.closed_choices:
        listed = ", ".join(map(str, key.closed_choices))
        _fail(f"{key.name} must be one of {listed}, not {value!r}", key.closed, join_path(path, key.name))
    return value


def check_keys(obj: Mapping[Any, object], shape: ObjectShape, path: str) -> None:
    """Every key of ``obj`` is one of ``shape``'s, and every required one is there; else a FormatError."""
    where = path or "the program"
    for key in obj:
        if not isinstance(key, str) or key not in shape:
            _fail(f"unknown key {key!r} in {where}; allowed: {', '.join(shape.names)}", Code.UNKNOWN_KEY,
                  join_path(path, key))  # fmt: skip
    for name in shape.required:
        if name not in obj:
            _fail(f"{where} has no {name!r}", Code.MISSING_KEY, join_path(path, name))


def read_object(
    obj: object, shape: ObjectShape, path: str, limits: DslLimits = DEFAULT_LIMITS
) -> dict[str, Any]:
    """The values of a decoded JSON object ``obj`` (at ``path``) by key name, checked against ``shape``, with
    the defaults of the optional keys it lacks; a :class:`FormatError` if it does not have the shape. An
    array's items are returned as they are: the caller reads them with their own shape."""
    if not isinstance(obj, Mapping):
        _fail(f"{path} must be an object, not {json_type_of(obj)}", Code.BAD_VALUE_TYPE, path)
    check_keys(obj, shape, path)
    out: dict[str, Any] = {}
    for key in shape.checking_order:
        if key.name in obj:
            out[key.name] = check_value(key, obj[key.name], path)
        elif key.default is not None:
            out[key.name] = key.default(limits)
    return out


def check_attributes(obj: object, shape: ObjectShape, path: str) -> None:
    """The checks of :func:`read_object` on the attributes of a typed object built in code (a
    :class:`~serving.dsl.program.Program` or a :class:`~serving.dsl.program.Retrieval`, whose fields are the
    shape's keys) rather than parsed: it may still hold values its types forbid. Arrays are the caller's."""
    for key in shape.checking_order:
        if key.json_type != "array":
            check_value(key, getattr(obj, key.name), path)
