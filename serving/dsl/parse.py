"""From text (or an already decoded mapping) to a typed :class:`Program`; every failure is a FormatError.

Only the shape is checked here, as :mod:`serving.dsl.shape` declares it: exactly the keys of the language,
values of the right JSON types, entry types and modes the language has; and, before decoding, what the decoder
must never see (duplicate keys, deep nesting, huge integers). Whether the program follows the rules is
:func:`validate`'s question.

>>> parse_program('{"sql": "SELECT id FROM products", "retrieval_list": []}').sql
'SELECT id FROM products'
>>> extract_program('<think>cheap ones</think>```json\\n{"sql": "SELECT id FROM products", "retrieval_list": []}\\n```').sql
'SELECT id FROM products'
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import NoReturn

from serving.dsl.errors import Code, FormatError
from serving.dsl.json_text import json_runs
from serving.dsl.limits import DEFAULT_LIMITS, DslLimits
from serving.dsl.program import Program, Retrieval
from serving.dsl.shape import ENTRY, PROGRAM, json_type_of, read_object

# Longest integer literal the decoder will turn into an int; keeps int() away from huge digit strings.
_MAX_INT_DIGITS = 18

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_BRACKET = re.compile(r"[\[\]{}]")
_FENCE = re.compile(r"\A```(?:json)?[ \t]*\r?\n(?P<body>.*?)\r?\n?```\Z", re.DOTALL)


def _fail(message: str, code: Code, path: str | None = None, position: int | None = None) -> NoReturn:
    raise FormatError(message, code=code, path=path, position=position)


def _json_depth_exceeds(text: str, limit: int) -> int | None:
    """Offset where bracket nesting first passes ``limit`` (outside strings), else None.

    Checked before decoding so that a nesting bomb never reaches the recursive decoder.
    """
    depth = 0
    for start, end, where in json_runs(text):
        if where != "code":
            continue
        for bracket in _BRACKET.finditer(text, start, end):
            if bracket.group() in "[{":
                depth += 1
                if depth > limit:
                    return bracket.start()
            else:
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
        _fail(f"a program is a JSON object, not {json_type_of(value)}", Code.NOT_OBJECT)
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


def _from_mapping(obj: Mapping[str, object], limits: DslLimits) -> Program:
    """The program of a decoded object, its shape checked against the declaration (:mod:`serving.dsl.shape`)."""
    values = read_object(obj, PROGRAM, "", limits)
    entries = values["retrieval_list"]
    return Program(
        sql=values["sql"],
        retrieval_list=tuple(
            Retrieval(**read_object(e, ENTRY, f"retrieval_list[{i}]", limits)) for i, e in enumerate(entries)
        ),
    )
