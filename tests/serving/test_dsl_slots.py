"""The allow-list against SQL smuggled through function-argument slots.

sqlglot renders some argument slots from a literal's text, unquoted (the unit of three-argument
``DATE_ADD`` / ``DATE_SUB`` / ``DATE_DIFF``): a string literal wrapped in CAST, parentheses, ``lower`` and
the like once reached ClickHouse as SQL text. Here:

* the reported escape and its variants (each wrapper, each function, four payloads) are refused, by the
  unit rule and, with that rule switched off, by the round trip alone;
* a grammar-based fuzzer fills every argument position of every allow-listed function with literals,
  wrappers and raw SQL fragments; every program the validator accepts must survive the round trip and,
  read by ClickHouse's own parser (``EXPLAIN AST`` on chDB), be one SELECT over the corpus table that calls
  only functions the allow-list stands for.

``PRORE_FUZZ_EXAMPLES`` sets the fuzzer's example count (default 300; the long run is documented in the
README).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

import serving.dsl.safety as safety
from indexing.schema import PRODUCTS
from indexing.stores.clickhouse import ChdbStore
from serving.dsl import ValidationError
from serving.dsl.errors import Code
from serving.dsl.safety import check_sql

DATA = Path(__file__).parent / "data"
HOSTILE = [json.loads(line) for line in (DATA / "hostile.jsonl").read_text().splitlines() if line.strip()]
ESCAPES = [c for c in HOSTILE if c["name"].startswith("unit_escape_")]
REPORTED = (
    "SELECT DISTINCT id FROM products WHERE DATE_DIFF(CAST('DAY, now(), now()) = 1 UNION ALL SELECT name FROM "
    "system.databases WHERE 1 OR DATE_DIFF(DAY' AS DATE), now(), now()) = 0"
)
EXAMPLES = int(os.environ.get("PRORE_FUZZ_EXAMPLES", "300"))


def test_the_reported_escape_is_refused_with_its_position() -> None:
    with pytest.raises(ValidationError) as info:
        check_sql(REPORTED, PRODUCTS)
    assert info.value.code == Code.BAD_UNIT
    assert REPORTED[info.value.position or 0 :].startswith("'DAY, now()")  # inside the unit slot


def test_every_wrapper_function_and_payload_has_a_case() -> None:
    names = {c["name"] for c in ESCAPES}
    for fn in ("date_diff", "date_add", "date_sub"):
        for wrapper in ("cast", "paren", "lower", "upper", "coalesce", "substring", "not", "concat"):
            for payload in ("system_databases", "numbers", "version", "sleep"):
                assert f"unit_escape_{fn}_{wrapper}_{payload}" in names
    assert "unit_escape_reported_example" in names


@pytest.mark.parametrize("case", ESCAPES, ids=[c["name"] for c in ESCAPES])
def test_the_round_trip_alone_refuses_every_escape(
    case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the unit rule switched off, what sqlglot renders reads as another statement and is refused."""
    monkeypatch.setattr(safety, "_check_slots", lambda node: None)
    with pytest.raises(ValidationError) as info:
        check_sql(case["program"]["sql"], PRODUCTS)
    assert info.value.code in (Code.ROUND_TRIP, Code.SQL_SYNTAX)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM products WHERE id IN (, )",
        "SELECT id FROM products WHERE id IN (+)",
        "SELECT id FROM products WHERE id IN ('P1', )",
        "SELECT id FROM products WHERE price > 1 AND",
        "SELECT id FROM products WHERE price = ",
        "SELECT id FROM products WHERE brand IN ('a',, 'b')",
    ],
)
def test_operands_sqlglot_would_drop_are_refused(sql: str) -> None:
    with pytest.raises(ValidationError) as info:
        check_sql(sql, PRODUCTS)
    assert info.value.code == Code.SQL_SYNTAX
    assert info.value.position is not None


@pytest.mark.parametrize(
    ("sql", "code"),
    [
        (
            "SELECT id FROM products WHERE dateTrunc(lower('month'), release_date) = release_date",
            Code.BAD_UNIT,
        ),
        ("SELECT id FROM products WHERE DATE_ADD(lower('DAY'), 1, release_date) > now()", Code.BAD_UNIT),
        ("SELECT id FROM products WHERE DATE_ADD(FORTNIGHT, 1, release_date) > now()", Code.BAD_UNIT),
    ],
)
def test_unit_slots_hold_bare_unit_words(sql: str, code: Code) -> None:
    with pytest.raises(ValidationError) as info:
        check_sql(sql, PRODUCTS)
    assert info.value.code == code


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM products WHERE DATE_ADD(DAY, 1, release_date) > now()",
        "SELECT id FROM products WHERE dateDiff('day', release_date, now()) < 30",
        "SELECT id FROM products WHERE DATE_TRUNC('month', release_date) = toDate('2024-03-01')",
        "SELECT id FROM products WHERE toStartOfMonth(release_date) = toDate('2024-03-01')",
        "SELECT id FROM products WHERE release_date > now() - INTERVAL 3 DAY",
        "SELECT id FROM products WHERE EXTRACT(YEAR FROM release_date) = 2020",
        "SELECT id FROM products WHERE NOT (id IN <text_1> OR NOT id IN <text_2>)",
    ],
)
def test_legitimate_units_and_normalisations_pass(sql: str) -> None:
    check_sql(sql, PRODUCTS)


# -- the slot fuzzer ------------------------------------------------------------------------------

FRAGMENTS = (
    "DAY, now(), now()) = 1 UNION ALL SELECT name FROM system.databases WHERE 1 OR DATE_DIFF(DAY",
    "1 UNION ALL SELECT toString(number) FROM numbers(3)",
    "version()",
    "sleep(3)",
    "x') OR 1 = 1 OR ('",
    "DAY",
    "day",
    "SETTINGS readonly = 0",
    "system.tables",
)
UNITS = ("DAY", "MONTH", "YEAR", "WEEK", "HOUR", "'day'", "'month'")
COLUMNS = ("price", "rating", "brand", "title", "release_date", "in_stock", "review_count")


def _quoted(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "''") + "'"


leaves = st.one_of(
    st.sampled_from(COLUMNS),
    st.integers(-5, 100).map(str),
    st.sampled_from(FRAGMENTS).map(_quoted),
    st.sampled_from(FRAGMENTS),  # raw, unquoted: the tokenizer, parser and allow-list must all hold
    st.sampled_from(UNITS),
    st.just("now()"),
    st.just("INTERVAL 3 DAY"),
)


def _wrap(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    wrappers = (
        "CAST({} AS DATE)", "CAST({} AS String)", "CAST({} AS Int64)", "({})", "lower({})", "upper({})",
        "coalesce({}, {})", "substring({}, 1)", "NOT {}", "concat({}, '')", "toString({})", "-{}",
    )  # fmt: skip
    return st.tuples(st.sampled_from(wrappers), inner).map(lambda t: t[0].replace("{}", t[1]))


arguments = st.recursive(leaves, _wrap, max_leaves=4)

FUNCTIONS = (
    ("DATE_DIFF", 3), ("DATE_ADD", 3), ("DATE_SUB", 3), ("dateDiff", 3), ("dateAdd", 3), ("date_trunc", 2),
    ("dateTrunc", 2), ("toStartOfMonth", 1), ("if", 3), ("coalesce", 2), ("greatest", 2), ("least", 2),
    ("lower", 1), ("upper", 1), ("length", 1), ("position", 2), ("startsWith", 2), ("endsWith", 2),
    ("substring", 3), ("concat", 2), ("abs", 1), ("round", 2), ("floor", 1), ("ceil", 1), ("toYear", 1),
    ("toMonth", 1), ("toDayOfWeek", 1), ("toDate", 1), ("toString", 1), ("addDays", 2), ("lowerUTF8", 1),
    ("positionCaseInsensitive", 2), ("notEmpty", 1),
)  # fmt: skip


@st.composite
def slot_programs(draw: st.DrawFn) -> str:
    name, arity = draw(st.sampled_from(FUNCTIONS))
    args = [draw(arguments) for _ in range(arity)]
    call = f"{name}({', '.join(args)})"
    shape = draw(
        st.sampled_from(("{} = 1", "{} > {}", "NOT {} = 0", "id IN (SELECT id FROM products WHERE {} = 0)"))
    )
    other = draw(arguments)
    return "SELECT DISTINCT id FROM products WHERE " + shape.format(call, other)


_FUNCTION = re.compile(r"^\s*Function (\w+)")
_TABLE = re.compile(r"^\s*TableIdentifier (\S+)")
# Operators and the functions ClickHouse's parser names for the allow-list's constructs.
CLICKHOUSE_FUNCTIONS = frozenset(
    """and or not equals notEquals less lessOrEquals greater greaterOrEquals in notIn like notLike ilike notILike
    plus minus multiply divide modulo negate isNull isNotNull tuple CAST if multiIf coalesce greatest least
    lower upper length position positionCaseInsensitive startsWith endsWith substring concat abs round floor ceil
    dateDiff DATE_DIFF date_diff DATE_ADD DATE_SUB date_add date_sub dateTrunc DATE_TRUNC toStartOfMonth toYear
    toMonth toDayOfMonth toDayOfWeek toDate toDateTime toString toInt64 toFloat64 now today yesterday addDays
    addWeeks addMonths addYears subtractDays subtractWeeks subtractMonths subtractYears lowerUTF8 upperUTF8
    lengthUTF8 empty notEmpty toStartOfWeek toYYYYMM toQuarter toHour toDayOfYear toIntervalDay toIntervalMonth
    toIntervalYear toIntervalWeek toIntervalHour toIntervalMinute toIntervalSecond toIntervalQuarter
    count countDistinct min max avg sum YEAR MONTH DAY QUARTER WEEK HOUR MINUTE SECOND toRelativeDayNum""".split()  # noqa: SIM905
)


@pytest.fixture(scope="module")
def chdb(chdb_path: Path) -> ChdbStore:
    return ChdbStore(chdb_path)


def clickhouse_reading(store: ChdbStore, sql: str) -> list[str]:
    """ClickHouse's own parse of ``sql``: the lines of ``EXPLAIN AST`` (parses only, runs nothing)."""
    return [str(r[0]) for r in store._trusted("EXPLAIN AST " + sql)]


def assert_reads_only_the_corpus(lines: list[str]) -> None:
    tables = [m.group(1) for line in lines if (m := _TABLE.match(line))]
    assert tables and set(tables) == {"products"}, tables
    # ClickHouse's parser keeps the case a function was written in; most names are case-insensitive.
    functions = {m.group(1).casefold() for line in lines if (m := _FUNCTION.match(line))}
    allowed = {name.casefold() for name in CLICKHOUSE_FUNCTIONS}
    assert functions <= allowed, functions - allowed
    for i, line in enumerate(lines):
        if line.strip().startswith("SelectWithUnionQuery"):
            assert lines[i + 1].strip() == "ExpressionList (children 1)", "a set operation reached ClickHouse"
        if line.strip().startswith("TableExpression"):
            assert _TABLE.match(lines[i + 1]), f"FROM reads something else: {lines[i + 1].strip()}"


def test_the_checker_sees_what_an_escape_would_run(chdb: ChdbStore) -> None:
    """The reading check itself catches what the escape rendered before the fix (so it is not vacuous)."""
    rendered = (
        "SELECT DISTINCT id FROM products WHERE DATE_DIFF(DAY, now(), now()) = 1 UNION ALL "
        "SELECT name FROM system.databases WHERE 1 OR DATE_DIFF(DAY, now(), now()) = 0"
    )
    with pytest.raises(AssertionError):
        assert_reads_only_the_corpus(clickhouse_reading(chdb, rendered))
    with pytest.raises(AssertionError):
        assert_reads_only_the_corpus(
            clickhouse_reading(chdb, "SELECT id FROM products WHERE version() = '1'")
        )


def test_golden_programs_read_only_the_corpus(chdb: ChdbStore) -> None:
    golden = [
        json.loads(line) for line in (DATA / "golden_valid.jsonl").read_text().splitlines() if line.strip()
    ]
    checked = 0
    for case in golden:
        if case["table"] != "products":
            continue
        tree, _ = check_sql(case["program"]["sql"], PRODUCTS)
        if list(tree.find_all(exp.Column)) and any(
            c.name.startswith(("text_", "image_")) for c in tree.find_all(exp.Column)
        ):
            continue  # placeholders are not SQL until substituted
        assert_reads_only_the_corpus(clickhouse_reading(chdb, tree.sql(dialect="clickhouse")))
        checked += 1
    assert checked >= 5


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sql=slot_programs())
def test_fuzzed_slots_accept_only_what_reads_back_the_same(sql: str, chdb: ChdbStore) -> None:
    try:
        tree, _ = check_sql(sql, PRODUCTS)
    except ValidationError:
        return  # refused with a typed error: fine; anything else raised fails the test
    rendered = tree.sql(dialect="clickhouse")
    again, _ = check_sql(rendered, PRODUCTS)
    assert again.sql(dialect="clickhouse") == rendered
    assert_reads_only_the_corpus(clickhouse_reading(chdb, rendered))


def test_the_fuzzer_reaches_programs_the_validator_accepts() -> None:
    """Not vacuous: the grammar draws accepted programs too, with a function call in a slot."""
    from hypothesis import find

    def accepted(sql: str) -> bool:
        try:
            check_sql(sql, PRODUCTS)
        except ValidationError:
            return False
        return "now()" in sql or "CAST(" in sql

    assert accepted(find(slot_programs(), accepted, settings=settings(max_examples=2000, database=None)))


def test_prore_execute_refuses_the_reported_escape(
    small_index_cfg: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from prore.cli import main

    path = tmp_path / "escape.json"
    path.write_text(json.dumps({"sql": REPORTED, "retrieval_list": []}))
    assert main(["--workspace", str(small_index_cfg.workspace), "execute", "--program", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error bad_unit: "), captured.err


def test_a_bad_json_path_is_one_typed_error_and_nothing_on_stderr() -> None:
    """In a fresh process (pytest's own log capture would hide sqlglot's warning): stderr stays empty."""
    import subprocess
    import sys

    code = (
        "from indexing.schema import PRODUCTS\n"
        "from serving.dsl.safety import check_sql\n"
        "from serving.dsl import ValidationError\n"
        "try:\n"
        "    check_sql(\"SELECT id FROM products WHERE JSON_EXTRACT(title, '$[.a') = 'x'\", PRODUCTS)\n"
        "except ValidationError as exc:\n"
        "    print(exc.code)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == Code.FORBIDDEN_FUNCTION
    assert done.stderr == ""
