"""The program's shape, declared once (serving.dsl.shape): the parser, the validator's typed check, the JSON
schema and the program grammar all say what it says; and the one scanner of JSON text."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from indexing.schema import EMAILS, PRODUCTS, CorpusSchema
from serving.dsl import (
    DEFAULT_LIMITS,
    DslError,
    FormatError,
    Program,
    Retrieval,
    parse_program,
    program_json_schema,
    validate,
)
from serving.dsl.errors import Code
from serving.dsl.grammar import program_grammar_ebnf
from serving.dsl.json_schema import SEPARATORS
from serving.dsl.json_text import json_runs
from serving.dsl.parse import _json_depth_exceeds
from serving.dsl.program import placeholder_of
from serving.dsl.shape import ENTRY, PROGRAM, Key, Scope, Value
from serving.planner import _escape_control_chars

BASE: dict[str, object] = {"type": "text", "field": "review", "query": "quiet"}
SQL = "SELECT DISTINCT id FROM products WHERE id IN <text_1>"
WRONG_TYPE: dict[str, object] = {"string": 7, "integer": "20", "array": {"type": "text"}}
"""A value of another JSON type than each declared one."""


def _default(name: str) -> Value:
    default = ENTRY[name].default
    assert default is not None
    return default(DEFAULT_LIMITS)


def _entry_program(entry: Mapping[str, object], sql: str = SQL, **top: object) -> dict[str, object]:
    return {"sql": sql, "retrieval_list": [entry], **top}


def _built(name: str, value: object) -> Program:
    """A program built in code whose entry's ``name`` is ``value``, whatever its type."""
    changes: dict[str, Any] = {name: value}
    return Program(SQL, (dataclasses.replace(Retrieval("text", "review", "quiet"), **changes),))


def _format_error(source: object) -> FormatError:
    with pytest.raises(FormatError) as caught:
        parse_program(source)  # type: ignore[arg-type]
    return caught.value


def test_the_declaration_is_the_typed_programs_fields() -> None:
    assert PROGRAM.names == tuple(f.name for f in dataclasses.fields(Program))
    assert ENTRY.names == tuple(f.name for f in dataclasses.fields(Retrieval))
    defaults = {f.name: f.default for f in dataclasses.fields(Retrieval) if f.name in ENTRY.optional}
    assert defaults == {name: _default(name) for name in ENTRY.optional}
    assert set(Retrieval("text", "review", "q").to_dict(explicit=True)) == set(ENTRY.names)
    assert PROGRAM["retrieval_list"].items is ENTRY


def test_a_key_must_be_optional_with_a_default_or_required_without() -> None:
    with pytest.raises(ValueError, match="optional key"):
        Key("x", "integer", required=False)
    with pytest.raises(ValueError, match="optional key"):
        Key("x", "integer", default=lambda limits: 0)


@pytest.mark.parametrize("name", ENTRY.required)
def test_the_parser_requires_the_required_entry_keys(name: str) -> None:
    entry = {key: value for key, value in BASE.items() if key != name}
    error = _format_error(_entry_program(entry))
    assert (error.code, error.path) == (Code.MISSING_KEY, f"retrieval_list[0].{name}")


@pytest.mark.parametrize("name", PROGRAM.required)
def test_the_parser_requires_the_required_program_keys(name: str) -> None:
    error = _format_error({key: value for key, value in _entry_program(BASE).items() if key != name})
    assert (error.code, error.path) == (Code.MISSING_KEY, name)


def test_the_parser_fills_in_the_declared_defaults() -> None:
    entry = parse_program(_entry_program(BASE)).retrieval_list[0]
    assert {name: getattr(entry, name) for name in ENTRY.optional} == {
        name: _default(name) for name in ENTRY.optional
    }


def test_the_parser_refuses_undeclared_keys() -> None:
    error = _format_error(_entry_program({**BASE, "weight": 2}))
    assert (error.code, error.path) == (Code.UNKNOWN_KEY, "retrieval_list[0].weight")
    assert error.message.endswith("allowed: " + ", ".join(ENTRY.names))
    error = _format_error(_entry_program(BASE, explain="x"))
    assert (error.code, error.path) == (Code.UNKNOWN_KEY, "explain")


@pytest.mark.parametrize("name", ENTRY.names)
def test_the_parser_and_the_typed_check_agree_on_an_entry_value_of_the_wrong_type(name: str) -> None:
    value = WRONG_TYPE[ENTRY[name].json_type]
    parsed = _format_error(_entry_program({**BASE, name: value}))
    assert (parsed.code, parsed.path) == (Code.BAD_VALUE_TYPE, f"retrieval_list[0].{name}")
    built = _built(name, value)
    with pytest.raises(FormatError) as caught:
        validate(built, PRODUCTS)
    assert (caught.value.code, caught.value.path, caught.value.message) == (
        parsed.code,
        parsed.path,
        parsed.message,
    )


@pytest.mark.parametrize("name", [key.name for key in ENTRY.keys if key.closed is not None])
def test_a_closed_key_refuses_a_value_outside_its_choices_in_both_checks(name: str) -> None:
    parsed = _format_error(_entry_program({**BASE, name: "other"}))
    assert (parsed.code, parsed.path) == (ENTRY[name].closed, f"retrieval_list[0].{name}")
    built = _built(name, "other")
    with pytest.raises(FormatError) as caught:
        validate(built, PRODUCTS)
    assert (caught.value.code, caught.value.message) == (parsed.code, parsed.message)


def test_the_typed_check_sees_the_sql_too() -> None:
    with pytest.raises(FormatError) as caught:
        validate(Program(["SELECT id FROM products"], ()), PRODUCTS)  # type: ignore[arg-type]
    assert (caught.value.code, caught.value.path) == (Code.BAD_VALUE_TYPE, "sql")


@pytest.mark.parametrize("schema", [EMAILS, PRODUCTS], ids=lambda s: s.domain)
def test_the_json_schema_is_written_from_the_declaration(schema: CorpusSchema) -> None:
    node: Any = program_json_schema(schema)
    assert (list(node["properties"]), node["required"]) == (list(PROGRAM.names), list(PROGRAM.required))
    items = node["properties"]["retrieval_list"]["items"]
    variants = items.get("anyOf", [items])
    scopes = ENTRY.variants(Scope(DEFAULT_LIMITS, schema))
    assert [v["properties"]["type"]["const"] for v in variants] == [s.modality for s in scopes]
    for variant, scope in zip(variants, scopes, strict=True):
        assert list(variant["properties"]) == list(ENTRY.names)
        assert variant["required"] == list(ENTRY.required)
        for key in ENTRY.keys:
            assert variant["properties"][key.name]["type"] == key.json_type
            if key.name != ENTRY.variant and key.choices(scope) is not None:
                assert variant["properties"][key.name]["enum"] == list(ENTRY.choices(key.name, scope))


# -- the grammar agrees with the declaration ----------------------------------------------------------------


@pytest.fixture(scope="module")
def grammars() -> Any:
    xgrammar = pytest.importorskip(
        "xgrammar", reason="the grammar is compiled by xgrammar (installed with vLLM)"
    )
    vocab = [chr(c) for c in range(32, 127)] + ["</s>"]
    compiler = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo(vocab, stop_token_ids=[len(vocab) - 1]))
    compiled = {s.domain: compiler.compile_grammar(program_grammar_ebnf(s)) for s in (EMAILS, PRODUCTS)}

    def admits(schema: CorpusSchema, text: str) -> bool:
        matcher = xgrammar.GrammarMatcher(compiled[schema.domain])
        return bool(matcher.accept_string(text)) and bool(matcher.accept_token(len(vocab) - 1))

    return admits


def _written(program: Mapping[str, object]) -> str:
    """A program as the grammar writes it: keys in the order given, the programs' separators."""
    return json.dumps(program, separators=SEPARATORS)


def _declared_entries(schema: CorpusSchema) -> list[tuple[str, dict[str, object]]]:
    """For each modality of the corpus, an entry with its required keys only, one with each optional key
    alone, then one with each declared choice of each key (every key present, in the declared order; ``k`` the widest, so that every rerank
    depth fits it)."""
    out: list[tuple[str, dict[str, object]]] = []
    for scope in ENTRY.variants(Scope(DEFAULT_LIMITS, schema)):
        assert scope.modality is not None
        fields = ENTRY.choices("field", scope)
        full: dict[str, object] = {"type": scope.modality, "field": fields[0], "query": "quiet"}
        full |= {name: _default(name) for name in ENTRY.optional}
        full["k"] = max(int(k) for k in ENTRY.choices("k", scope))
        out.append((scope.modality, {name: full[name] for name in ENTRY.required}))
        for alone in ENTRY.optional:  # each optional key without the others
            out.append(
                (scope.modality, {n: full[n] for n in ENTRY.names if n in ENTRY.required or n == alone})
            )
        for key in ENTRY.keys:
            for value in key.choices(scope) or ():
                out.append((scope.modality, {**full, key.name: value}))
    return out


@pytest.mark.parametrize("schema", [EMAILS, PRODUCTS], ids=lambda s: s.domain)
def test_the_grammar_admits_every_declared_key_and_value(grammars: Any, schema: CorpusSchema) -> None:
    for modality, entry in _declared_entries(schema):
        sql = f"SELECT DISTINCT id FROM {schema.table} WHERE id IN {placeholder_of(modality, 0)}"
        program: dict[str, object] = {"sql": sql, "retrieval_list": [entry]}
        assert list(program) == list(PROGRAM.names)
        assert grammars(schema, _written(program)), entry
        validate(parse_program(program), schema)  # and the parser and the validator take it


FULL = {**BASE, "mode": "dense", "k": 20, "rerank": 0}


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        ({**FULL, "weight": 2}, Code.UNKNOWN_KEY),  # an undeclared key
        ({**FULL, "type": "video"}, Code.BAD_TYPE),  # outside a closed key's choices
        ({**FULL, "mode": "hybrid"}, Code.BAD_MODE),
        ({**FULL, "field": "brand"}, Code.BAD_FIELD),  # outside the corpus's choices
        ({**FULL, "k": 7}, Code.BAD_K),
        ({**FULL, "rerank": 4}, Code.BAD_RERANK),
        ({**FULL, "k": "20"}, Code.BAD_VALUE_TYPE),  # another JSON type
        ({**FULL, "query": 7}, Code.BAD_VALUE_TYPE),
        *[({k: v for k, v in FULL.items() if k != name}, Code.MISSING_KEY) for name in ENTRY.required],
    ],
)
def test_the_grammar_refuses_what_the_declaration_refuses(
    grammars: Any, entry: dict[str, object], code: Code
) -> None:
    program = _entry_program(entry)
    assert not grammars(PRODUCTS, _written(program))
    with pytest.raises(DslError) as caught:
        validate(parse_program(program), PRODUCTS)
    assert caught.value.code == code


def test_the_grammar_refuses_an_undeclared_program_key_and_a_modality_the_corpus_lacks(grammars: Any) -> None:
    assert not grammars(PRODUCTS, _written(_entry_program(BASE, explain="x")))
    image = {"type": "image", "field": "image", "query": "logo"}
    assert ENTRY.choices("type", Scope(schema=EMAILS)) == ("text",)
    sql = "SELECT DISTINCT id FROM emails WHERE id IN <image_1>"
    assert not grammars(EMAILS, _written(_entry_program(image, sql)))


# -- the one scanner of JSON text ---------------------------------------------------------------------------


def _reference(text: str) -> list[str]:
    """Where each character stands, read one at a time as a JSON reader reads them (the oracle)."""
    out: list[str] = []
    inside = escaped = False
    for ch in text:
        if not inside:
            out.append("quoting" if ch == '"' else "code")
            inside = ch == '"'
        elif escaped or ch == "\\":
            out.append("quoting")
            escaped = not escaped
        else:
            out.append("quoting" if ch == '"' else "text")
            inside = ch != '"'
    return out


@given(st.text(alphabet='"\\{}[]a\n\x01 ', max_size=40))
def test_the_runs_cover_the_text_as_a_json_reader_reads_it(text: str) -> None:
    pieces, runs = list(json_runs(text, split_strings=True)), list(json_runs(text))
    for spans in (pieces, runs):
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))
        assert (spans[0][0], spans[-1][1]) == (0, len(text)) if spans else text == ""
    assert [where for start, end, where in pieces for _ in range(start, end)] == _reference(text)
    whole = ["code" if where == "code" else "string" for where in _reference(text)]
    assert [where for start, end, where in runs for _ in range(start, end)] == whole


def test_one_scanner_reads_strings_for_the_depth_check_and_the_repair() -> None:
    text = '{"a": "[[\\"{{", "b\n": ["\\\n", 1]}'
    assert [text[s:e] for s, e, where in json_runs(text) if where == "code"] == [
        "{",
        ": ",
        ", ",
        ": [",
        ", 1]}",
    ]
    assert _json_depth_exceeds(text, 1) == text.index('["')
    assert _escape_control_chars(text) == text.replace('b\n"', 'b\\u000a"')
