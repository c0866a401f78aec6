"""What the engine's rendering relies on: validated trees render without sqlglot's defensive copy, and the
token positions validation drops change neither what runs nor the placeholders' order."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from sqlglot import exp

from indexing.schema import PRODUCTS, schema_for_table
from serving.dsl import ValidatedProgram, ValidationError, parse_program, substitute, validate
from serving.dsl.limits import DEFAULT_LIMITS
from serving.dsl.placeholders import placeholder_sites, sentinel_of
from serving.dsl.safety import check_sql

DATA = Path(__file__).parent / "data"
VALID = [json.loads(line) for line in (DATA / "golden_valid.jsonl").read_text().splitlines() if line.strip()]
POSITIONS = {"line", "col", "start", "end"}


def _validated(case: dict[str, Any]) -> ValidatedProgram:
    return validate(parse_program(case["program"]), schema_for_table(case.get("table", PRODUCTS.table)))


@pytest.mark.parametrize("case", VALID, ids=[c["name"] for c in VALID])
def test_rendering_without_a_copy_renders_what_the_copying_render_does(case: dict[str, Any]) -> None:
    # Batch statements are rendered without sqlglot's copy (serving.engine.sqlrun). Rendering may rewrite
    # the tree it renders (ClickHouse's wraps NOT x IN y in parentheses), which is why shared trees are
    # never rendered that way; the text must be the same, and rendering the rewritten tree again too.
    tree = _validated(case).tree.copy()
    copying = tree.sql(dialect="clickhouse", comments=False)
    assert tree.sql(dialect="clickhouse", comments=False, copy=False) == copying
    assert tree.sql(dialect="clickhouse", comments=False, copy=False) == copying


@pytest.mark.parametrize("case", VALID, ids=[c["name"] for c in VALID])
def test_dropped_positions_change_no_rendering_and_no_placeholder_order(case: dict[str, Any]) -> None:
    validated = _validated(case)
    fresh, _ = check_sql(validated.program.sql, schema_for_table(validated.table), DEFAULT_LIMITS)
    # Only the placeholders' own nodes still say where their tokens were.
    kept = {id(n) for c in validated.tree.find_all(exp.Column) if sentinel_of(c) for n in c.walk()}
    for node in validated.tree.walk():
        assert not (set(node._meta or ()) & POSITIONS) or id(node) in kept, (type(node).__name__, node._meta)
    # Other meta (a function's name as written) survives: both trees render alike and substitute alike.
    assert validated.tree.sql(dialect="clickhouse") == fresh.sql(dialect="clickhouse")
    assert list(validated.placeholders) == [use for _, use in placeholder_sites(fresh)]
    assert [use for _, use in placeholder_sites(validated.tree.copy())] == list(validated.placeholders)
    ids = {use.entry: [f"P{use.entry}", "it's"] for use in validated.placeholders}
    with_positions = dataclasses.replace(validated, tree=fresh)
    assert substitute(validated, ids, table="prore.products") == substitute(
        with_positions, ids, table="prore.products"
    )


def test_positions_are_dropped_only_after_every_check_used_them() -> None:
    # A refusal still points at the offending token.
    program = parse_program({"sql": "SELECT id FROM products WHERE nosuch = 1", "retrieval_list": []})
    with pytest.raises(ValidationError) as caught:
        validate(program, PRODUCTS)
    assert caught.value.position is not None
