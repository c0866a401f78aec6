"""The SQL the passes render runs on ClickHouse (chDB) and means what the language says.

chDB binds one data path per process, and other tests own theirs, so the queries run in one child process
over a small seeded table per corpus. Every golden program, every allow-listed function and the empty-set
and quoting rules are executed; results are checked against the rows in Python where the meaning is plain.
"""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from collections.abc import Callable
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from indexing.schema import EMAILS, PRODUCTS, CorpusSchema, DType, schema_for_table
from serving.dsl import Program, Retrieval, parse_program, strip_retrievals, substitute, validate
from serving.dsl.placeholders import sentinel_of
from serving.dsl.safety import ALLOWED_ANONYMOUS, ALLOWED_FUNCTIONS
from serving.dsl.validate import ValidatedProgram

pytestmark = pytest.mark.skipif(importlib.util.find_spec("chdb") is None, reason="chdb is not installed")

DATA = Path(__file__).parent / "data"
DB = "dsl_exec"
CH_TYPES = {
    DType.STRING: "String",
    DType.INT: "Int64",
    DType.FLOAT: "Float64",
    DType.BOOL: "Bool",
    DType.DATE: "Date",
    DType.DATETIME: "DateTime",
}
CHILD = r"""
import json, sys, tempfile
from chdb import session

job = json.load(sys.stdin)
out = {}
with tempfile.TemporaryDirectory() as path:
    s = session.Session(path)
    s.query(f"CREATE DATABASE {job['db']}")
    for ddl, rows in job["tables"]:
        s.query(ddl[0])
        s.query(f"INSERT INTO {ddl[1]} FORMAT JSONEachRow\n" + "\n".join(json.dumps(r) for r in rows))
    for sql in job["queries"]:
        try:
            text = s.query(sql, "JSONCompact").bytes().decode()
            out[sql] = {"ids": [row[0] for row in json.loads(text)["data"]]}
        except Exception as exc:
            out[sql] = {"error": str(exc)[:500]}
    s.close()
json.dump(out, sys.stdout)
"""

BRANDS = ["Sony", "Bose", "Levi's", "Apple", "Nestlé", "Samsung"]
CATEGORIES = ["headphones", "jeans", "laptops", "sneakers", "mugs"]
COLORS = ["black", "white", "matte white", "blue"]


def _products() -> list[dict[str, Any]]:
    rng = random.Random(7)
    start = date(2020, 1, 1)
    rows = []
    for n in range(1, 41):
        rows.append(
            {
                "id": f"P{n:05d}",
                "brand": BRANDS[n % len(BRANDS)],
                "category": CATEGORIES[n % len(CATEGORIES)],
                "price": round(rng.uniform(5, 400), 2),
                "rating": round(rng.uniform(1, 5), 1),
                "review_count": rng.randint(0, 300),
                "color": COLORS[n % len(COLORS)],
                "in_stock": n % 3 != 0,
                "release_date": (start + timedelta(days=37 * n)).isoformat(),
                "title": f"Pro item {n} Max",
                "description": "wireless and waterproof" if n % 2 else "wired",
                "review": "great sound" if n % 4 else "broke quickly",
                "image": f"{COLORS[n % len(COLORS)]} product photo",
            }
        )
    # Ids a store could hold that would break a program pasted as text.
    rows[0]["id"], rows[1]["id"] = "P'00001", "P\\00002"
    return rows


def _emails() -> list[dict[str, Any]]:
    return [
        {
            "id": f"E{n:05d}",
            "sender": f"user{n}@{'enron.com' if n % 2 else 'acme.com'}",
            "sender_domain": "enron.com" if n % 2 else "acme.com",
            "recipient": "jane@enron.com",
            "date": f"2001-0{1 + n % 9}-1{n % 10} 10:00:00",
            "folder": "inbox",
            "is_read": n % 2 == 0,
            "is_starred": n % 3 == 0,
            "has_attachment": n % 4 == 0,
            "thread_id": f"T{n % 5}",
            "subject": "contract draft",
            "body": "quarterly budget review",
        }
        for n in range(1, 16)
    ]


ROWS = {PRODUCTS.table: _products(), EMAILS.table: _emails()}


def _physical(schema: CorpusSchema) -> str:
    return f"{DB}.{schema.table}_v1"


def _ddl(schema: CorpusSchema) -> tuple[str, str]:
    columns = ", ".join(f"`{f.name}` {CH_TYPES[f.dtype]}" for f in schema.fields)
    table = _physical(schema)
    return f"CREATE TABLE {table} ({columns}) ENGINE = MergeTree ORDER BY id", table


def _run(queries: list[str]) -> dict[str, dict[str, Any]]:
    job = {
        "db": DB,
        "tables": [[_ddl(s), ROWS[s.table]] for s in (PRODUCTS, EMAILS)],
        "queries": sorted(set(queries)),
    }
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        input=json.dumps(job),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return result


def _id_sets(v: ValidatedProgram, seed: str) -> dict[int, list[str]]:
    rng = random.Random(seed)
    ids = [r["id"] for r in ROWS[v.table]]
    sets = {}
    for i in range(len(v.retrieval_list)):
        size = rng.choice([0, 3, 8, 15])
        sets[i] = rng.sample(ids, size)
    return sets


def _golden() -> list[tuple[str, ValidatedProgram]]:
    out = []
    for line in (DATA / "golden_valid.jsonl").read_text(encoding="utf-8").splitlines():
        case = json.loads(line)
        schema = schema_for_table(case.get("table", PRODUCTS.table))
        out.append((case["name"], validate(parse_program(case["program"]), schema)))
    return out


GOLDEN = _golden()

# One use of each allow-listed function; a function added to the allow-list needs an example here.
FUNCTION_EXAMPLES: dict[str, str] = {
    "Case": "CASE WHEN in_stock THEN 1 ELSE 0 END = 1",
    "If": "if(in_stock, 1, 0) = 1",
    "Coalesce": "coalesce(color, 'none') <> 'x' AND ifNull(color, 'x') <> 'y'",
    "Greatest": "greatest(price, rating) > 1",
    "Least": "least(price, rating) < 400",
    "Cast": "CAST(rating AS Int64) >= 1 AND CAST(release_date AS String) > '2000'",
    "Lower": "lower(brand) = 'sony'",
    "Upper": "upper(brand) = 'SONY'",
    "Length": "length(title) > 3",
    "StrPosition": "position(title, 'Max') > 0",
    "StartsWith": "startsWith(title, 'Pro')",
    "EndsWith": "endsWith(title, 'Max')",
    "Substring": "substring(brand, 1, 2) = 'So'",
    "Concat": "concat(brand, ' ', color) <> ''",
    "Abs": "abs(price - 100) < 50",
    "Round": "round(price, 1) > 10",
    "Floor": "floor(rating) = 4",
    "Ceil": "ceil(rating) = 4",
    "DateDiff": "dateDiff('day', release_date, today()) > 30",
    "DateAdd": "date_add(DAY, 30, release_date) < today()",
    "DateSub": "date_sub(DAY, 30, release_date) > '2019-01-01'",
    "TimestampTrunc": "toStartOfMonth(release_date) = toDate('2021-03-01')",
    "DateTrunc": "DATE_TRUNC('month', release_date) >= toDate('2020-01-01')",
    "DayOfWeekIso": "toDayOfWeek(release_date) = 1",
    "Year": "YEAR(release_date) = 2021",
    "Month": "MONTH(release_date) = 3",
    "Day": "DAY(release_date) = 1",
    "Extract": "EXTRACT(YEAR FROM release_date) = 2022",
    "Count": "brand IN (SELECT brand FROM products GROUP BY brand HAVING count() > 2 AND count(DISTINCT color) > 1)",
    "Min": "price = (SELECT min(price) FROM products)",
    "Max": "price < (SELECT max(price) FROM products)",
    "Avg": "price < (SELECT avg(price) FROM products)",
    "Sum": "review_count * 10 < (SELECT sum(review_count) FROM products)",
    "toDate": "release_date > toDate('2021-01-01')",
    "toDateTime": "toDateTime(release_date) > toDateTime('2021-01-01 00:00:00')",
    "toYear": "toYear(release_date) = 2021",
    "toMonth": "toMonth(release_date) = 2",
    "toDayOfMonth": "toDayOfMonth(release_date) < 15",
    "toDayOfWeek": "toDayOfWeek(release_date, 1) = 2",
    "toDayOfYear": "toDayOfYear(release_date) < 100",
    "toQuarter": "toQuarter(release_date) = 1",
    "toHour": "toHour(toDateTime(release_date)) = 0",
    "toStartOfWeek": "toStartOfWeek(release_date) <= release_date",
    "toYYYYMM": "toYYYYMM(release_date) = 202103",
    "now": "toDateTime(release_date) < now()",
    "today": "release_date < today()",
    "yesterday": "release_date < yesterday()",
    "addDays": "addDays(release_date, 7) > '2022-01-01'",
    "addWeeks": "addWeeks(release_date, 2) > '2022-01-01'",
    "addMonths": "addMonths(release_date, 1) > '2022-01-01'",
    "addYears": "addYears(release_date, 1) > '2022-01-01'",
    "subtractDays": "subtractDays(today(), 30) > release_date",
    "subtractWeeks": "subtractWeeks(today(), 4) > release_date",
    "subtractMonths": "subtractMonths(today(), 6) > release_date",
    "subtractYears": "subtractYears(today(), 1) > release_date",
    "lowerUTF8": "lowerUTF8(brand) = 'nestlé'",
    "upperUTF8": "upperUTF8(brand) = 'NESTLÉ'",
    "lengthUTF8": "lengthUTF8(brand) = 6",
    "positionCaseInsensitive": "positionCaseInsensitive(description, 'WIRELESS') > 0",
    "empty": "NOT empty(title)",
    "notEmpty": "notEmpty(color)",
    "toString": "toString(review_count) = '3'",
    "toInt64": "toInt64(rating) = 4",
    "toFloat64": "toFloat64(review_count) > 10.5",
}


def _function_programs() -> dict[str, ValidatedProgram]:
    return {
        name: validate(Program(f"SELECT id FROM products WHERE {where}"), PRODUCTS)
        for name, where in FUNCTION_EXAMPLES.items()
    }


def _monotone(v: ValidatedProgram) -> bool:
    """Whether the structure-only query must be a superset (see ``strip_retrievals``)."""
    if v.tree.args.get("limit"):
        return False
    for select in v.tree.find_all(exp.Select):
        holds = any(sentinel_of(c) for c in select.find_all(exp.Column))
        if select is not v.tree and holds and any(select.args.get(k) for k in ("limit", "group", "having")):
            return False
    return True


def _matching(table: str, keep: Callable[[dict[str, Any]], bool]) -> set[str]:
    return {r["id"] for r in ROWS[table] if keep(r)}


@pytest.fixture(scope="module")
def executed() -> dict[str, dict[str, Any]]:
    queries = []
    for name, v in GOLDEN:
        schema = schema_for_table(v.table)
        queries.append(substitute(v, _id_sets(v, name), table=_physical(schema)))
        queries.append(strip_retrievals(v, table=_physical(schema)))
    for v in _function_programs().values():
        queries.append(substitute(v, {}, table=_physical(PRODUCTS)))
    queries.extend(q for q, _ in _semantic_cases())
    return _run(queries)


def _semantic_cases() -> list[tuple[str, set[str]]]:
    table = _physical(PRODUCTS)
    ids = [r["id"] for r in ROWS["products"]]
    s1, s2 = set(ids[:12]), set(ids[6:20])
    design = validate(
        Program(
            "SELECT DISTINCT id FROM products WHERE price < 200 AND (brand = 'Sony' OR brand = 'Levi''s') "
            "AND id IN <text_1> AND id NOT IN <image_2>",
            (Retrieval("text", "review", "great sound"), Retrieval("image", "image", "matte white")),
        ),
        PRODUCTS,
    )
    one = validate(
        Program("SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", "x"),)), PRODUCTS
    )
    negated = validate(
        Program("SELECT id FROM products WHERE id NOT IN <text_1>", (Retrieval("text", "review", "x"),)),
        PRODUCTS,
    )
    return [
        (
            substitute(design, {0: sorted(s1), 1: sorted(s2)}, table=table),
            _matching(
                "products",
                lambda r: r["price"] < 200 and r["brand"] in ("Sony", "Levi's") and r["id"] in s1 - s2,
            ),
        ),
        (
            substitute(design, {0: sorted(s1), 1: []}, table=table),
            _matching(
                "products", lambda r: r["price"] < 200 and r["brand"] in ("Sony", "Levi's") and r["id"] in s1
            ),
        ),
        (substitute(one, {0: []}, table=table), set()),
        (substitute(negated, {0: []}, table=table), set(ids)),
        (
            substitute(one, {0: ["P'00001", "P\\00002", "nope'); DROP TABLE x; --"]}, table=table),
            {"P'00001", "P\\00002"},
        ),
    ]


@pytest.mark.parametrize(("name", "validated"), GOLDEN, ids=[n for n, _ in GOLDEN])
def test_golden_program_executes(
    executed: dict[str, dict[str, Any]], name: str, validated: ValidatedProgram
) -> None:
    physical = _physical(schema_for_table(validated.table))
    full = executed[substitute(validated, _id_sets(validated, name), table=physical)]
    stripped = executed[strip_retrievals(validated, table=physical)]
    assert "error" not in full, full
    assert "error" not in stripped, stripped
    if _monotone(validated):
        assert set(full["ids"]) <= set(stripped["ids"])


def test_every_allowed_function_has_an_example() -> None:
    seen: set[str] = set()
    for where in FUNCTION_EXAMPLES.values():
        for node in sqlglot.parse_one(f"SELECT id FROM products WHERE {where}", read="clickhouse").walk():
            seen.add(node.name if isinstance(node, exp.Anonymous) else type(node).__name__)
    assert {cls.__name__ for cls in ALLOWED_FUNCTIONS} <= seen
    assert set(ALLOWED_ANONYMOUS) <= seen


@pytest.mark.parametrize("name", sorted(FUNCTION_EXAMPLES))
def test_allowed_function_executes(executed: dict[str, dict[str, Any]], name: str) -> None:
    sql = substitute(_function_programs()[name], {}, table=_physical(PRODUCTS))
    assert "error" not in executed[sql], executed[sql]


def test_substituted_programs_mean_what_the_language_says(executed: dict[str, dict[str, Any]]) -> None:
    for sql, expected in _semantic_cases():
        got = executed[sql]
        assert "error" not in got, got
        assert set(got["ids"]) == expected, sql
