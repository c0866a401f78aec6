"""Grammar-based properties of the program language (programs drawn by tests/serving/strategies.py)."""

from __future__ import annotations

import pytest
import sqlglot
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from indexing.schema import EMAILS, PRODUCTS, CorpusSchema
from serving.dsl import (
    DslError,
    Program,
    ValidatedProgram,
    parse_program,
    strip_retrievals,
    substitute,
    validate,
)
from tests.serving.strategies import Generated, generated_programs, near_valid_programs, program_sources

SCHEMAS = [PRODUCTS, EMAILS]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ids = st.lists(st.text(st.characters(codec="utf-8"), max_size=12), max_size=6)


def _validate_or_dsl_error(program: Program, schema: CorpusSchema) -> ValidatedProgram | None:
    try:
        return validate(program, schema)
    except DslError as err:
        assert err.code and "\n" not in err.one_line()
        return None


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.table)
@FAST
@given(data=st.data())
def test_grammar_programs_validate_and_round_trip(schema: CorpusSchema, data: st.DataObject) -> None:
    generated: Generated = data.draw(generated_programs(schema))
    validated = validate(generated.program, schema)
    assert validated.positive_entries == generated.positive_entries
    again = validate(parse_program(validated.normalized_program().to_json()), schema)
    assert again.normalized_sql == validated.normalized_sql
    assert again.positive_entries == validated.positive_entries
    assert [(u.entry, u.modality, u.positive) for u in again.placeholders] == [
        (u.entry, u.modality, u.positive) for u in validated.placeholders
    ]
    # The structure-only query is itself a program, with no entries.
    stripped = strip_retrievals(validated)
    bare = validate(Program(stripped), schema)
    assert bare.placeholders == () and bare.normalized_sql == stripped


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.table)
@FAST
@given(data=st.data())
def test_validate_returns_or_raises_a_dsl_error(schema: CorpusSchema, data: st.DataObject) -> None:
    _validate_or_dsl_error(data.draw(near_valid_programs(schema)), schema)


@FAST
@given(source=program_sources(PRODUCTS))
def test_parsing_text_returns_or_raises_a_dsl_error(source: str) -> None:
    try:
        program = parse_program(source)
    except DslError:
        return
    _validate_or_dsl_error(program, PRODUCTS)


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.table)
@FAST
@given(data=st.data())
def test_substitute_renders_one_select_over_the_physical_table(
    schema: CorpusSchema, data: st.DataObject
) -> None:
    validated = validate(data.draw(generated_programs(schema)).program, schema)
    id_sets = {i: data.draw(ids) for i in range(len(validated.retrieval_list))}
    sql = substitute(validated, id_sets, table=f"prore.{schema.table}__v0001")
    statements = sqlglot.parse(sql, read="clickhouse")
    assert len(statements) == 1 and isinstance(statements[0], exp.Select)
    tree = statements[0]
    assert {(t.db, t.name, t.alias) for t in tree.find_all(exp.Table)} == {
        ("prore", f"{schema.table}__v0001", schema.table)
    }
    # Every id of a non-empty set is in the SQL as a literal of an IN list, quoted by sqlglot.
    literals = {
        lit.this for node in tree.find_all(exp.In) for lit in node.expressions if isinstance(lit, exp.Literal)
    }
    for entry in {u.entry for u in validated.placeholders}:
        assert set(id_sets[entry]) <= literals
