"""The JSON Schema of the language: valid programs conform, programs off the ladders or fields do not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings

from indexing.schema import EMAILS, PRODUCTS, schema_for_table
from serving.dsl import program_json_schema
from tests.serving.strategies import programs

DATA = Path(__file__).parent / "data"


def _conforms(value: Any, schema: dict[str, Any]) -> bool:
    """The subset of JSON Schema that :func:`program_json_schema` emits, checked strictly."""
    known = {
        "$schema", "title", "type", "additionalProperties", "required", "properties",
        "items", "anyOf", "const", "enum", "minLength", "maxLength", "maxItems",
    }  # fmt: skip
    assert set(schema) <= known, set(schema) - known
    if "anyOf" in schema:
        return any(_conforms(value, option) for option in schema["anyOf"])
    kind = schema.get("type")
    checks = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    }
    if kind is not None and not checks[kind](value):
        return False
    if "const" in schema and value != schema["const"]:
        return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, str) and not schema.get("minLength", 0) <= len(value) <= schema.get(
        "maxLength", 1 << 30
    ):
        return False
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", 1 << 30):
            return False
        return all(_conforms(item, schema["items"]) for item in value)
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if any(key not in value for key in schema.get("required", ())):
            return False
        if schema.get("additionalProperties") is False and set(value) - set(properties):
            return False
        return all(_conforms(value[key], properties[key]) for key in value if key in properties)
    return True


GOLDEN = [json.loads(line) for line in (DATA / "golden_valid.jsonl").read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_golden_programs_conform(case: dict[str, Any]) -> None:
    assert _conforms(case["program"], program_json_schema(schema_for_table(case.get("table", "products"))))


@settings(max_examples=40, deadline=None)
@given(program=programs(PRODUCTS))
def test_grammar_programs_conform(program: Any) -> None:
    schema = program_json_schema(PRODUCTS)
    assert _conforms(program.to_dict(), schema)
    assert _conforms(program.to_dict(explicit=True), schema)


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "text", "field": "image", "query": "x"},
        {"type": "image", "field": "title", "query": "x"},
        {"type": "text", "field": "brand", "query": "x"},
        {"type": "text", "field": "review", "query": ""},
        {"type": "text", "field": "review", "query": "x", "k": 7},
        {"type": "text", "field": "review", "query": "x", "rerank": 4},
        {"type": "text", "field": "review", "query": "x", "mode": "hybrid"},
        {"type": "text", "field": "review", "query": "x", "weight": 1},
        {"type": "video", "field": "review", "query": "x"},
        {"field": "review", "query": "x"},
    ],
)
def test_entries_off_the_language_do_not_conform(entry: dict[str, Any]) -> None:
    program = {"sql": "SELECT id FROM products WHERE id IN <text_1>", "retrieval_list": [entry]}
    assert not _conforms(program, program_json_schema(PRODUCTS))


def test_schema_follows_the_corpus() -> None:
    products = program_json_schema(PRODUCTS)
    emails = program_json_schema(EMAILS)
    variants = products["properties"]["retrieval_list"]["items"]["anyOf"]  # type: ignore[index]
    assert [v["properties"]["field"]["enum"] for v in variants] == [list(PRODUCTS.text_fields), ["image"]]
    assert "anyOf" not in emails["properties"]["retrieval_list"]["items"]  # type: ignore[index]
    assert not _conforms({"sql": "SELECT id FROM products", "retrieval_list": [], "x": 1}, products)
    assert json.loads(json.dumps(products)) == products
