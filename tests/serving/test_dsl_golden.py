"""Golden files of the program language: valid programs with their canonical SQL, invalid and hostile
programs with their error codes (tests/serving/data/*.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from indexing.schema import PRODUCTS, CorpusSchema, schema_for_table
from serving.dsl import (
    DslError,
    FormatError,
    Program,
    ValidatedProgram,
    ValidationError,
    parse_program,
    validate,
)
from serving.dsl.errors import FORMAT_CODES, VALIDATION_CODES, Code

DATA = Path(__file__).parent / "data"


def _load(name: str) -> list[dict[str, Any]]:
    lines = (DATA / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


VALID = _load("golden_valid.jsonl")
INVALID = _load("golden_invalid.jsonl")
HOSTILE = _load("hostile.jsonl")


def _schema(case: dict[str, Any]) -> CorpusSchema:
    return schema_for_table(case.get("table", PRODUCTS.table))


def _check(case: dict[str, Any]) -> ValidatedProgram:
    return validate(parse_program(case["program"]), _schema(case))


def test_golden_files_are_big_enough_and_names_unique() -> None:
    assert len(VALID) >= 30 and len(INVALID) >= 40 and len(HOSTILE) >= 70
    for cases in (VALID, INVALID, HOSTILE):
        names = [c["name"] for c in cases]
        assert len(names) == len(set(names))


@pytest.mark.parametrize("case", VALID, ids=[c["name"] for c in VALID])
def test_golden_valid(case: dict[str, Any]) -> None:
    validated = _check(case)
    assert validated.normalized_sql == case["normalized_sql"]
    assert list(validated.positive_entries) == case["positive_entries"]
    # The canonical SQL is a fixed point: validating it again renders it unchanged.
    again = validate(validated.normalized_program(), _schema(case))
    assert again.normalized_sql == validated.normalized_sql
    assert again.positive_entries == validated.positive_entries
    # And the program survives its own JSON form.
    assert parse_program(validated.program.to_json()) == validated.program


@pytest.mark.parametrize("case", INVALID, ids=[c["name"] for c in INVALID])
def test_golden_invalid(case: dict[str, Any]) -> None:
    with pytest.raises(DslError) as caught:
        _check(case)
    err = caught.value
    assert err.code == case["code"]
    expected_kind = FormatError if Code(err.code) in FORMAT_CODES else ValidationError
    assert isinstance(err, expected_kind)
    assert "\n" not in err.one_line()


@pytest.mark.parametrize("case", HOSTILE, ids=[c["name"] for c in HOSTILE])
def test_hostile_program_is_rejected_with_its_code(case: dict[str, Any]) -> None:
    with pytest.raises(DslError) as caught:
        _check(case)
    err = caught.value
    assert err.code == case["code"], err.one_line()
    assert Code(err.code) in FORMAT_CODES | VALIDATION_CODES
    line = err.one_line()
    assert line.startswith(f"error {err.code}: ") and "\n" not in line
    assert len(line) < 400  # a hostile program never gets echoed back whole


def test_design_example_validates_against_products() -> None:
    design = (
        "{\"sql\": \"SELECT DISTINCT id FROM products WHERE price < 200 AND (brand = 'Sony' OR brand = 'Bose') "
        'AND id IN <text_1> AND id NOT IN <image_2>",\n'
        ' "retrieval_list": [{"type": "text", "field": "review", "query": "great noise cancelling"},\n'
        '                    {"type": "image", "field": "image", "query": "matte white over-ear headphones"}]}'
    )
    validated = validate(parse_program(design), PRODUCTS)
    assert validated.positive_entries == (0,)
    assert [(u.entry, u.modality, u.positive) for u in validated.placeholders] == [
        (0, "text", True),
        (1, "image", False),
    ]
    assert not validated.has_order_by
    assert isinstance(validated.program, Program)
