"""Reading programs: JSON text, bytes and mappings, model completions, and the error types."""

from __future__ import annotations

import pytest

from serving.dsl import (
    DslError,
    FormatError,
    Program,
    Retrieval,
    ValidationError,
    extract_program,
    parse_program,
)
from serving.dsl.errors import CALLER_CODES, FORMAT_CODES, VALIDATION_CODES, Code

PROGRAM = (
    '{"sql": "SELECT id FROM products WHERE id IN <text_1>", '
    '"retrieval_list": [{"type": "text", "field": "review", "query": "quiet"}]}'
)
EXPECTED = Program(
    "SELECT id FROM products WHERE id IN <text_1>",
    (Retrieval("text", "review", "quiet"),),
)


def test_parse_text_bytes_and_mapping_agree() -> None:
    assert parse_program(PROGRAM) == EXPECTED
    assert parse_program(PROGRAM.encode("utf-8")) == EXPECTED
    assert parse_program(EXPECTED.to_dict()) == EXPECTED


def test_rpl_defaults_are_filled_and_kept_out_of_compact_json() -> None:
    entry = parse_program(PROGRAM).retrieval_list[0]
    assert (entry.mode, entry.k, entry.rerank) == ("dense", 20, 0)
    assert '"k"' not in EXPECTED.to_json()
    explicit = EXPECTED.to_json(explicit=True)
    assert '"mode": "dense"' in explicit and '"k": 20' in explicit and '"rerank": 0' in explicit
    assert parse_program(explicit) == EXPECTED


def test_rpl_fields_round_trip() -> None:
    program = Program(
        "SELECT id FROM products WHERE id IN <text_1>",
        (Retrieval("text", "title", "usb hub", mode="fuse", k=50, rerank=10),),
    )
    assert parse_program(program.to_json()) == program


def test_placeholder_helper_counts_from_one() -> None:
    assert Program.placeholder(0, Retrieval("image", "image", "red")) == "<image_1>"


@pytest.mark.parametrize(
    ("source", "code"),
    [
        (b"\xff\xfe{}", Code.NOT_JSON),
        ("", Code.NOT_JSON),
        ("   ", Code.NOT_JSON),
        ("null", Code.NOT_OBJECT),
        ("42", Code.NOT_OBJECT),
    ],
)
def test_not_a_program(source: str | bytes, code: Code) -> None:
    with pytest.raises(FormatError) as caught:
        parse_program(source)
    assert caught.value.code == code


def test_wrong_python_type_is_a_format_error() -> None:
    with pytest.raises(FormatError) as caught:
        parse_program(42)  # type: ignore[arg-type]
    assert caught.value.code == Code.NOT_JSON


def test_format_error_names_the_json_path() -> None:
    source = {
        "sql": "SELECT id FROM products",
        "retrieval_list": [
            {"type": "text", "field": "review", "query": "a"},
            {"type": "text", "field": "review", "query": "b", "k": "ten"},
        ],
    }
    with pytest.raises(FormatError) as caught:
        parse_program(source)
    assert caught.value.path == "retrieval_list[1].k"
    assert caught.value.one_line().endswith("(at retrieval_list[1].k)")


def test_json_decode_error_carries_its_offset() -> None:
    with pytest.raises(FormatError) as caught:
        parse_program('{"sql": "SELECT id FROM products", "retrieval_list": [}')
    assert caught.value.code == Code.NOT_JSON
    assert caught.value.position == 54


@pytest.mark.parametrize(
    "completion",
    [
        PROGRAM,
        f"  \n{PROGRAM}\n  ",
        f"<think>The user wants quiet ones.</think>{PROGRAM}",
        f"<think>\nmulti\nline {'{'} reasoning\n</think>\n\n{PROGRAM}",
        f"```json\n{PROGRAM}\n```",
        f"```\n{PROGRAM}\n```",
        f"<think>hm</think>\n```json\n{PROGRAM}\n```\n",
    ],
    ids=["bare", "whitespace", "think", "think_with_braces", "json_fence", "plain_fence", "think_and_fence"],
)
def test_extract_accepts_think_and_fence(completion: str) -> None:
    assert extract_program(completion) == EXPECTED


@pytest.mark.parametrize(
    ("completion", "code"),
    [
        (f"Here is the program: {PROGRAM}", Code.SURROUNDING_TEXT),
        (f"{PROGRAM}\nThis finds quiet products.", Code.SURROUNDING_TEXT),
        (f"{PROGRAM}{PROGRAM}", Code.SURROUNDING_TEXT),
        (f"<think>never closed {PROGRAM}", Code.SURROUNDING_TEXT),
        (f"```json\n{PROGRAM}\n``` and more", Code.SURROUNDING_TEXT),
        (f"```python\n{PROGRAM}\n```", Code.SURROUNDING_TEXT),
        (f"<think>a</think><think>b</think>{PROGRAM}", Code.SURROUNDING_TEXT),
        (f"prefix <think>a</think>{PROGRAM}", Code.SURROUNDING_TEXT),
        ("", Code.NOT_JSON),
        ("<think>only thoughts</think>", Code.NOT_JSON),
        ("I cannot help with that.", Code.NOT_JSON),
        ('["not", "an", "object"]', Code.NOT_JSON),
    ],
)
def test_extract_rejects_anything_around_the_program(completion: str, code: Code) -> None:
    with pytest.raises(FormatError) as caught:
        extract_program(completion)
    assert caught.value.code == code


def test_code_sets_partition_every_code() -> None:
    assert frozenset(Code) == FORMAT_CODES | VALIDATION_CODES | CALLER_CODES
    assert not FORMAT_CODES & VALIDATION_CODES
    assert not CALLER_CODES & (FORMAT_CODES | VALIDATION_CODES)


def test_an_error_kind_refuses_a_code_of_the_other_kind() -> None:
    with pytest.raises(TypeError):
        FormatError("x", code=Code.UNKNOWN_COLUMN)
    with pytest.raises(TypeError):
        ValidationError("x", code=Code.NOT_JSON)
    with pytest.raises(TypeError):
        DslError("x", code=Code.BAD_K)


def test_error_one_line_and_dict() -> None:
    err = ValidationError("no column\n'colour'", code=Code.UNKNOWN_COLUMN, path="sql", position=30)
    assert err.one_line() == "error unknown_column: no column 'colour' (at sql:30)"
    assert err.to_dict() == {
        "kind": "ValidationError",
        "code": "unknown_column",
        "message": "no column\n'colour'",
        "path": "sql",
        "position": 30,
    }
    assert DslError("x", code=Code.MISSING_ID_SET).one_line() == "error missing_id_set: x"


def test_an_unknown_key_with_a_newline_stays_on_one_line() -> None:
    """Found by hypothesis in CI: a model's key such as 'rera\\nk' reached the error's path unescaped."""
    import json as _json

    from serving.dsl.errors import FormatError
    from serving.dsl.parse import parse_program

    text = _json.dumps({"sql": "SELECT id FROM products WHERE id IN <text_1>",
                        "retrieval_list": [{"type": "text", "field": "title", "query": "x", "rera\nk": 1}]})  # fmt: skip
    with pytest.raises(FormatError) as err:
        parse_program(text)
    assert err.value.code == "unknown_key" and "\n" not in err.value.one_line()
