"""From text (or an already decoded mapping) to a typed :class:`Program`; every failure is a FormatError.

Only the shape is checked here: exactly the keys of the language, values of the right JSON types, entry
types and modes the language has. Whether the program follows the rules is :func:`validate`'s question.

>>> parse_program('{"sql": "SELECT id FROM products", "retrieval_list": []}').sql
'SELECT id FROM products'
>>> extract_program('<think>cheap ones</think>```json\\n{"sql": "SELECT id FROM products", "retrieval_list": []}\\n```').sql
'SELECT id FROM products'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import NoReturn

from serving.dsl.errors import Code, FormatError
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.program import MODALITIES, MODES, Program, Retrieval

PROGRAM_KEYS = ("sql", "retrieval_list")
ENTRY_REQUIRED = ("type", "field", "query")
ENTRY_OPTIONAL = ("mode", "k", "rerank")

# Longest integer literal the decoder will turn into an int; keeps int() away from huge digit strings.
_MAX_INT_DIGITS = 18

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\r?\n(?P<body>.*?)\r?\n?```\Z", re.DOTALL)


def _fail(message: str, code: Code, path: str | None = None, position: int | None = None) -> NoReturn:
    raise FormatError(message, code=code, path=path, position=position)


def _json_depth_exceeds(text: str, limit: int) -> int | None:
    """Offset where bracket nesting first passes ``limit`` (outside strings), else None.

    Checked before decoding so that a nesting bomb never reaches the recursive decoder.
    """
    depth = 0
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return i
        elif ch in "]}":
            depth -= 1
    return None


def _pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            # Two readers of one program could disagree on which value wins; refuse instead.
            _fail(f"key {key!r} appears twice in one object", Code.DUPLICATE_KEY, path=key)
        out[key] = value
    return out


def _int(text: str) -> int:
    if len(text.lstrip("-")) > _MAX_INT_DIGITS:
        _fail(f"integer with {len(text)} digits is too large", Code.BAD_NUMBER)
    return int(text)


def _constant(name: str) -> NoReturn:
    _fail(f"{name} is not a JSON number", Code.BAD_NUMBER)


_DECODER = json.JSONDecoder(object_pairs_hook=_pairs, parse_int=_int, parse_constant=_constant)


def _decode(text: str, limits: DslLimits) -> tuple[object, int]:
    """Decode the first JSON value of ``text``; returns it and the offset just past it."""
    if len(text) > limits.max_program_chars:
        _fail(
            f"program has {len(text)} characters; at most {limits.max_program_chars}", Code.PROGRAM_TOO_LARGE
        )
    deep = _json_depth_exceeds(text, limits.max_json_depth)
    if deep is not None:
        _fail(f"JSON nests deeper than {limits.max_json_depth} levels", Code.JSON_TOO_DEEP, position=deep)
    try:
        return _DECODER.raw_decode(text)
    except json.JSONDecodeError as exc:
        _fail(f"not JSON: {exc.msg}", Code.NOT_JSON, position=exc.pos)
    except (ValueError, RecursionError) as exc:
        _fail(f"not JSON: {exc}", Code.NOT_JSON)


def _text_of(source: str | bytes) -> str:
    if isinstance(source, bytes):
        try:
            return source.decode("utf-8")
        except UnicodeDecodeError as exc:
            _fail(f"not UTF-8 text: {exc.reason}", Code.NOT_JSON, position=exc.start)
    return source


def parse_program(
    source: str | bytes | Mapping[str, object], *, limits: DslLimits = DEFAULT_LIMITS
) -> Program:
    """Read a program from JSON text, UTF-8 bytes or a decoded mapping; raise :class:`FormatError` if it is none."""
    if isinstance(source, Mapping):
        return _from_mapping(source, limits)
    if not isinstance(source, str | bytes):
        _fail(f"a program is JSON text or a mapping, not {type(source).__name__}", Code.NOT_JSON)
    text = _text_of(source).strip()
    value, end = _decode(text, limits)
    if text[end:].strip():
        _fail("text follows the JSON value", Code.NOT_JSON, position=end)
    if not isinstance(value, Mapping):
        _fail(f"a program is a JSON object, not {_json_type(value)}", Code.NOT_OBJECT)
    return _from_mapping(value, limits)


def extract_program(completion: str, *, limits: DslLimits = DEFAULT_LIMITS) -> Program:
    """Read the program a model wrote: an optional leading ``<think>`` block, an optional json fence, nothing else.

    This is the reward's format check (``S_f``, DESIGN.md section 5).
    """
    text = completion.strip()
    if text.startswith(_THINK_OPEN):
        close = text.find(_THINK_CLOSE)
        if close < 0:
            _fail("the <think> block is not closed", Code.SURROUNDING_TEXT)
        text = text[close + len(_THINK_CLOSE) :].strip()
    if text.startswith("```"):
        fenced = _FENCE.match(text)
        if fenced is None:
            _fail(
                "a code fence must hold the program alone: ```json, the program, ```", Code.SURROUNDING_TEXT
            )
        text = fenced.group("body").strip()
    if not text:
        _fail("no program in the completion", Code.NOT_JSON)
    if not text.startswith("{"):
        code = Code.SURROUNDING_TEXT if "{" in text else Code.NOT_JSON
        _fail("text precedes the program", code, position=0)
    value, end = _decode(text, limits)
    if text[end:].strip():
        _fail("text follows the program", Code.SURROUNDING_TEXT, position=end)
    assert isinstance(value, Mapping)  # text starts with "{" and decoded
    return _from_mapping(value, limits)


def _json_type(value: object) -> str:
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


def _join(path: str, key: object) -> str:
    """``path.key``; a key that is not a plain name (a model may write any string) is quoted, so that a path
    never carries a newline or another control character into a one-line error.

    >>> _join("retrieval_list[1]", "rerank"), _join("retrieval_list[1]", "re rank")
    ('retrieval_list[1].rerank', "retrieval_list[1].'re rank'")
    """
    name = str(key)
    if not name.isidentifier():
        name = repr(name)
    return f"{path}.{name}" if path else name


def _check_keys(
    obj: Mapping[str, object], required: Sequence[str], optional: Sequence[str], path: str
) -> None:
    where = path or "the program"
    for key in obj:
        if not isinstance(key, str) or (key not in required and key not in optional):
            allowed = ", ".join((*required, *optional))
            _fail(
                f"unknown key {key!r} in {where}; allowed: {allowed}", Code.UNKNOWN_KEY, path=_join(path, key)
            )
    for key in required:
        if key not in obj:
            _fail(f"{where} has no {key!r}", Code.MISSING_KEY, path=_join(path, key))


def _string(obj: Mapping[str, object], key: str, path: str) -> str:
    value = obj[key]
    if not isinstance(value, str):
        _fail(f"{key} must be a string, not {_json_type(value)}", Code.BAD_VALUE_TYPE, path=_join(path, key))
    return value


def _integer(obj: Mapping[str, object], key: str, path: str, default: int) -> int:
    if key not in obj:
        return default
    value = obj[key]
    # bool is an int in Python but not a number in the language.
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(
            f"{key} must be an integer, not {_json_type(value)}", Code.BAD_VALUE_TYPE, path=_join(path, key)
        )
    return value


def _entry(obj: object, index: int, limits: DslLimits) -> Retrieval:
    path = f"retrieval_list[{index}]"
    if not isinstance(obj, Mapping):
        _fail(f"{path} must be an object, not {_json_type(obj)}", Code.BAD_VALUE_TYPE, path=path)
    _check_keys(obj, ENTRY_REQUIRED, ENTRY_OPTIONAL, path)
    kind = _string(obj, "type", path)
    modality = next((m for m in MODALITIES if m == kind), None)
    if modality is None:
        _fail(
            f"type must be one of {', '.join(MODALITIES)}, not {kind!r}", Code.BAD_TYPE, path=f"{path}.type"
        )
    mode_text = _string(obj, "mode", path) if "mode" in obj else "dense"
    mode = next((m for m in MODES if m == mode_text), None)
    if mode is None:
        _fail(
            f"mode must be one of {', '.join(MODES)}, not {mode_text!r}", Code.BAD_MODE, path=f"{path}.mode"
        )
    return Retrieval(
        type=modality,
        field=_string(obj, "field", path),
        query=_string(obj, "query", path),
        mode=mode,
        k=_integer(obj, "k", path, limits.default_k),
        rerank=_integer(obj, "rerank", path, 0),
    )


def _from_mapping(obj: Mapping[str, object], limits: DslLimits) -> Program:
    _check_keys(obj, PROGRAM_KEYS, (), "")
    sql = _string(obj, "sql", "")
    entries = obj["retrieval_list"]
    if not isinstance(entries, list | tuple):
        _fail(
            f"retrieval_list must be an array, not {_json_type(entries)}",
            Code.BAD_VALUE_TYPE,
            path="retrieval_list",
        )
    return Program(sql=sql, retrieval_list=tuple(_entry(e, i, limits) for i, e in enumerate(entries)))
