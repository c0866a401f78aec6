"""Filter pushdown: the translation into Milvus expressions (checked against ClickHouse on the same
rows, on Milvus Lite and on the Milvus standalone server), which guards reach which placeholder, and
exactness: with FLAT indexes and K at least the corpus, a pushed program returns what it returns
unpushed."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import sqlglot
from hypothesis import HealthCheck, example, given, settings
from sqlglot import exp

from core.errors import ConfigError, ProReError
from indexing.build import build_index
from indexing.config import Config, MilvusConfig, config_from_mapping
from indexing.corpora.files import write_corpus
from indexing.embedders.hashing import HashingEmbedder
from indexing.schema import EMAILS, PRODUCTS, CorpusSchema
from indexing.stores.milvus import MilvusStore, epoch_seconds
from indexing.workspace import Workspace
from serving.dsl import DslLimits, Program, Retrieval
from serving.dsl.placeholders import mark_placeholders
from serving.engine import Engine
from serving.engine.pushdown import pushdown_filters, to_milvus
from serving.engine.retrieval import RetrievalRequest
from serving.settings import SECTIONS, PlanningOptions, ServingSettings
from tests.serving.strategies import Generated, generated_programs

N = 300
WIDE = 400
"""A rung past the corpus: an entry of this width retrieves every document."""
LADDER = (3, 5, 10, 20, 50, WIDE)
ODD = [
    "Levi's", 'say "hi"', "back\\slash", "Café ü", "emoji 😀", "tab\there", "new\nline", "单词",
    "a'b\"c\\d", '\\"', "''", "%_", "x\u2028y", "carriage\rreturn", " lead and trail ", "",
]  # fmt: skip
"""Brand values the corpus holds besides the generator's: quotes, backslashes, unicode, whitespace."""
UNPUSHABLE = ["bell\x07", "nul\x00x", "del\x7f"]
"""Control characters Milvus Lite and the server escape differently: such literals are never pushed."""


def where(sql: str, table: str = "products") -> exp.Expr:
    tree = sqlglot.parse_one(f"SELECT id FROM {table} WHERE {sql}", read="clickhouse")
    condition = tree.args["where"].this
    assert isinstance(condition, exp.Expr)
    return condition


def quote(text: str) -> str:
    """``text`` as a ClickHouse string literal, written by sqlglot."""
    return str(exp.Literal.string(text).sql(dialect="clickhouse"))


# -- translation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "sql", "expected"),
    [
        (PRODUCTS, "price < 200", "price < 200.0"),
        (PRODUCTS, "200 > price", "price < 200.0"),
        (PRODUCTS, "price >= -5.5", "price >= -5.5"),
        (PRODUCTS, "price > 1e2", "price > 100.0"),
        (PRODUCTS, "review_count <> 3", "review_count != 3"),
        (PRODUCTS, "review_count > 2.0", "review_count > 2"),
        (PRODUCTS, "rating BETWEEN 3.5 AND 4", "rating >= 3.5 and rating <= 4.0"),
        (PRODUCTS, "brand = 'Sony'", 'brand == "Sony"'),
        (PRODUCTS, "brand = 'Levi''s'", 'brand == "Levi\'s"'),
        (PRODUCTS, r"brand = 'a\\b\"c'", r'brand == "a\\b\"c"'),
        (PRODUCTS, "brand = 'Café 单词 😀'", 'brand == "Café 单词 😀"'),
        (PRODUCTS, r"brand = 'x\ny\tz'", r'brand == "x\ny\tz"'),
        (PRODUCTS, "brand IN ('Sony', 'Bose')", 'brand in ["Sony", "Bose"]'),
        (PRODUCTS, "brand NOT IN ('Sony')", 'not (brand in ["Sony"])'),
        (PRODUCTS, "id IN ('P00001', 'P00002')", 'id in ["P00001", "P00002"]'),
        (PRODUCTS, "products.color != 'red'", 'color != "red"'),
        (PRODUCTS, "in_stock = true", "in_stock == true"),
        (PRODUCTS, "in_stock = 0", "in_stock == false"),
        (PRODUCTS, "NOT (in_stock = true OR price < 3)", "not (in_stock == true or price < 3.0)"),
        (PRODUCTS, "release_date >= '2024-01-01'", "release_date >= 1704067200"),
        (PRODUCTS, "release_date < toDate('2024-01-01') - INTERVAL 1 DAY", "release_date < 1703980800"),
        (PRODUCTS, "toYear(release_date) = 2023", "release_date >= 1672531200 and release_date < 1704067200"),
        (PRODUCTS, "YEAR(release_date) > 2023", "release_date >= 1704067200"),
        (
            PRODUCTS,
            "toYear(release_date) IN (2021, 2023)",
            "(release_date >= 1609459200 and release_date < 1640995200) or "
            "(release_date >= 1672531200 and release_date < 1704067200)",
        ),
        (EMAILS, "date >= '2023-05-01'", "date >= 1682899200"),
        (EMAILS, "date < '2023-05-01 12:30:00'", "date < 1682944200"),
        (EMAILS, "date > toDateTime('2024-05-01 12:30:00', 'UTC') - INTERVAL '7' DAY", "date > 1713961800"),
        (EMAILS, "date <= toDateTime(toDateTime('2024-05-01 00:00:00', 'UTC'), 'Asia/Tokyo')", "date <= 1714521600"),
        (EMAILS, "toDate(date) = '2023-05-01'", "date >= 1682899200 and date < 1682985600"),
        (EMAILS, "toDate(date) <= '2023-05-01'", "date < 1682985600"),
        (EMAILS, "toDate(date) BETWEEN '2023-05-01' AND '2023-05-31'", "date >= 1682899200 and date < 1685577600"),
        (EMAILS, "is_read = false AND (folder = 'inbox' OR sender_domain = 'acme.com')",
         'is_read == false and (folder == "inbox" or sender_domain == "acme.com")'),
    ],
)  # fmt: skip
def test_translates_exact_conditions(schema: CorpusSchema, sql: str, expected: str) -> None:
    assert to_milvus(where(sql, schema.table), schema) == expected


@pytest.mark.parametrize(
    "sql",
    [
        "brand LIKE 'S%'", "brand < 'M'", "lower(brand) = 'sony'", "price * 2 < 100", "price < rating",
        "review_count > 2.5", "review_count < 99999999999999999999", "price < 9007199254740993",
        "in_stock", "NOT in_stock", "in_stock = 2", "in_stock IN (true)", "brand = 5", "price < '200'",
        "brand IS NULL", "price > NULL", "release_date > '2024-01-01 10:00:00'", "release_date > '2024-1-1'",
        "release_date > '2024-02-30'", "release_date > now()", "toYear(release_date) = 1900",
        "toMonth(release_date) = 3", "release_date > toDate('2024-01-01') - INTERVAL 1 MONTH",
        "release_date > toDate('2024-01-01') - INTERVAL 3 HOUR", "p.price < 3", "other.products.price < 3",
        "brand IN (SELECT brand FROM products)", "id IN text_1", "price < 3 OR brand LIKE 'x'",
        "NOT brand LIKE 'x'", "price < 0x10", "brand = $$x$$", "brand = 'bell\x07'", "brand = 'del\x7f'",
        "toYear(price) = 2020", "toDate(brand) = '2020-01-01'",
    ],
)  # fmt: skip
def test_does_not_push_what_it_cannot_translate_exactly(sql: str) -> None:
    assert to_milvus(where(sql), PRODUCTS) is None


def test_a_datetime_literal_in_another_zone_is_not_pushed() -> None:
    assert (
        to_milvus(where("date > toDateTime('2024-05-01 00:00:00', 'Asia/Tokyo')", "emails"), EMAILS) is None
    )
    assert to_milvus(where("date > toDate('2024-05-01')", "emails"), EMAILS) is None


# -- which guards reach which placeholder ------------------------------------------------------


def filters(
    sql: str,
    schema: CorpusSchema = PRODUCTS,
    nullable: frozenset[str] | None = None,
    *,
    negative: bool = True,
) -> dict[int, str]:
    """The filters of ``sql``'s placeholders (negative ones too, unless told), read by the DSL's own
    placeholder pass."""
    tree = sqlglot.parse_one(mark_placeholders(sql)[0], read="clickhouse")
    assert isinstance(tree, exp.Select)
    return pushdown_filters(tree, schema, nullable, negative=negative)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        # Top-level conjuncts reach every placeholder, negated ones too; untranslatable ones are left out.
        ("SELECT id FROM products WHERE price < 9 AND brand LIKE 'S%' AND id IN <text_1> AND id NOT IN <text_2>",
         {0: "price < 9.0", 1: "price < 9.0"}),
        # An OR sibling is not a guard; a conjunct inside the placeholder's own branch is.
        ("SELECT id FROM products WHERE color = 'red' OR (brand = 'Sony' AND id IN <text_1>)",
         {0: 'brand == "Sony"'}),
        ("SELECT id FROM products WHERE price < 9 AND (color = 'red' OR id IN <text_1>)", {0: "price < 9.0"}),
        ("SELECT id FROM products WHERE (brand = 'a' AND id IN <text_1>) OR (brand = 'b' AND id IN <text_2>)",
         {0: 'brand == "a"', 1: 'brand == "b"'}),
        # Under NOT, the AND of the branch still guards: where it is false the NOT is constant.
        ("SELECT id FROM products WHERE NOT (color = 'red' AND id IN <text_1>)", {0: 'color == "red"'}),
        # A whole translatable OR is one guard.
        ("SELECT id FROM products WHERE (brand = 'a' OR brand = 'b') AND id IN <text_1>",
         {0: '(brand == "a" or brand == "b")'}),
        # A plain self-subquery is crossed; one that limits is not, but its own guards stay.
        ("SELECT id FROM products WHERE price < 9 AND id IN (SELECT id FROM products WHERE rating > 4 AND id IN <text_1>)",
         {0: "price < 9.0 and rating > 4.0"}),
        ("SELECT id FROM products WHERE price < 9 AND id IN (SELECT id FROM products WHERE rating > 4 AND id IN <text_1> ORDER BY price LIMIT 3)",
         {0: "rating > 4.0"}),
        # An entry used twice keeps only the guards of both uses.
        ("SELECT id FROM products WHERE (brand = 'a' AND price < 9 AND id IN <text_1>) OR (brand = 'b' AND price < 9 AND id IN <text_1>)",
         {0: "price < 9.0"}),
        ("SELECT id FROM products WHERE (brand = 'a' AND id IN <text_1>) OR id IN <text_1>", {}),
        # A conjunct holding another placeholder is never translated.
        ("SELECT id FROM products WHERE (brand = 'a' OR id IN <text_2>) AND id IN <text_1>", {}),
        # Nothing to push.
        ("SELECT id FROM products WHERE id IN <text_1> ORDER BY price LIMIT 3", {}),
    ],
)  # fmt: skip
def test_guards_reach_exactly_the_placeholders_they_guard(sql: str, expected: dict[int, str]) -> None:
    assert filters(sql) == expected


def test_entries_with_a_negative_use_get_no_filter_by_default() -> None:
    sql = "SELECT id FROM products WHERE price < 9 AND id IN <text_1> AND id NOT IN <text_2>"
    assert filters(sql, negative=False) == {0: "price < 9.0"}
    assert filters(sql) == {0: "price < 9.0", 1: "price < 9.0"}
    # Two NOTs make a positive use; one use of each kind makes the entry negative.
    twice = "SELECT id FROM products WHERE price < 9 AND NOT (brand = 'a' AND NOT id IN <text_1>)"
    assert filters(twice, negative=False) == {0: 'brand == "a" and price < 9.0'}
    mixed = "SELECT id FROM products WHERE price < 9 AND (id IN <text_1> OR NOT id IN <text_1>)"
    assert filters(mixed, negative=False) == {}


def test_a_nullable_guard_under_not_is_dropped() -> None:
    sql = "SELECT id FROM products WHERE price < 9 AND NOT (color = 'red' AND id IN <text_1>)"
    assert filters(sql, nullable=frozenset({"color"})) == {0: "price < 9.0"}
    # Above every NOT a NULL guard is as false as a false one: WHERE drops the row either way.
    assert filters(sql, nullable=frozenset({"price"})) == {0: 'color == "red" and price < 9.0'}


def test_the_pass_does_not_change_the_tree() -> None:
    sql = "SELECT id FROM products WHERE price < 9 AND id IN <text_1>"
    tree = sqlglot.parse_one(mark_placeholders(sql)[0], read="clickhouse")
    before = tree.sql(dialect="clickhouse")
    assert isinstance(tree, exp.Select)
    pushdown_filters(tree, PRODUCTS)
    assert tree.sql(dialect="clickhouse") == before


# -- the real stores ---------------------------------------------------------------------------


def odd_table(synthetic_table: Callable[..., Any]) -> pa.Table:
    table = synthetic_table("ecommerce", N, seed=3)
    brands = table.column("brand").to_pylist()
    for i, value in enumerate(ODD + UNPUSHABLE):
        brands[2 * i] = brands[2 * i + 1] = value
    return table.set_column(table.schema.get_field_index("brand"), "brand", pa.array(brands))


@pytest.fixture(scope="module")
def odd_cfg(workspace_config: Callable[..., Config], synthetic_table: Callable[..., Any]) -> Config:
    """A 300-product index (ClickHouse, Milvus Lite with FLAT indexes, hashing vectors) whose brands
    include the odd values."""
    cfg = workspace_config(
        "pushdown", milvus=MilvusConfig(index_type="FLAT"), text="hashing", image="hashing", hashing_dim=32
    )
    write_corpus(
        Workspace(cfg.workspace),
        PRODUCTS,
        [odd_table(synthetic_table)],
        {"generator": "synthetic", "seed": 3},
    )
    build_index(cfg, "ecommerce", progress=False)
    return cfg


def engine_of(cfg: Config, *, pushdown: bool, adaptive_k: bool = False, adaptive_k_max: int = 50) -> Engine:
    return Engine.open(
        cfg,
        "ecommerce",
        dsl_limits=DslLimits(k_ladder=LADDER),
        planning=PlanningOptions(
            pushdown=pushdown, conditional=False, adaptive_k=adaptive_k, adaptive_k_max=adaptive_k_max
        ),
    )


@pytest.fixture(scope="module")
def engines(odd_cfg: Config) -> Iterator[tuple[Engine, Engine]]:
    """An unpushed and a pushed engine on the odd index."""
    plain, pushed = engine_of(odd_cfg, pushdown=False), engine_of(odd_cfg, pushdown=True)
    yield plain, pushed
    plain.close()
    pushed.close()


def conditions() -> list[str]:
    """Conditions whose translation is checked against ClickHouse on the same rows."""
    odd = [f"brand = {quote(v)}" for v in ODD] + [f"brand != {quote(v)}" for v in ODD[:4]]
    return [
        *odd,
        f"brand IN ({', '.join(quote(v) for v in ODD)})",
        "price < 200", "price >= 250.5 AND price <= 251", "rating BETWEEN 2 AND 3.5", "review_count > 2500",
        "review_count IN (1, 2, 3)", "NOT (price < 100 OR in_stock = true)", "in_stock = false",
        "release_date >= '2022-03-01'", "release_date < toDate('2021-06-15') - INTERVAL 2 WEEK",
        "toYear(release_date) = 2022", "toYear(release_date) BETWEEN 2021 AND 2022", "toYear(release_date) < 2021",
        "toYear(release_date) <> 2023", "toYear(release_date) IN (2020, 2023)",
        "toDate(release_date) = '2021-02-03'", "id IN ('P00001', 'P00299', 'nope')",
        "(brand = 'Sony' OR color = 'red') AND NOT rating > 4", "color NOT IN ('red', 'blue')",
    ]  # fmt: skip


def clickhouse_ids(engine: Engine, sql: str) -> set[str]:
    rows = engine.handle.sql.query(f"SELECT id FROM {engine.handle.table} WHERE {sql}")
    return {str(r[0]) for r in rows}


def milvus_ids(store: Any, collection: str, expr: str) -> set[str]:
    query = HashingEmbedder(32).embed(["anything"])
    return {doc for doc, _ in store.search(collection, "title", np.asarray(query), N + 10, filter=expr)[0]}


def test_every_translation_selects_what_clickhouse_selects_on_milvus_lite(
    engines: tuple[Engine, Engine],
) -> None:
    plain, _ = engines
    checked = 0
    for sql in conditions():
        expr = to_milvus(where(sql), PRODUCTS)
        assert expr is not None, sql
        assert milvus_ids(plain.handle.vectors, plain.handle.collection, expr) == clickhouse_ids(
            plain, sql
        ), sql
        checked += 1
    assert checked == len(conditions())
    for value in UNPUSHABLE:
        assert to_milvus(where(f"brand = {quote(value)}"), PRODUCTS) is None
        assert len(clickhouse_ids(plain, f"brand = {quote(value)}")) == 2


@pytest.mark.server
def test_every_translation_selects_what_clickhouse_selects_on_the_milvus_server(
    engines: tuple[Engine, Engine], milvus_standalone: str, synthetic_table: Callable[..., Any]
) -> None:
    plain, _ = engines
    table = odd_table(synthetic_table)
    emb = HashingEmbedder(32)
    name = "pushdown_odd__v0001"
    with MilvusStore(milvus_standalone, MilvusConfig(index_type="FLAT")) as store:
        store.drop_collection(name)
        store.create_collection(name, PRODUCTS, {f: 32 for f in PRODUCTS.vector_fields})
        store.upsert(
            name, PRODUCTS, table, {f: emb.embed(table.column(f).to_pylist()) for f in PRODUCTS.vector_fields}
        )
        store.flush(name)
        try:
            for sql in conditions():
                expr = to_milvus(where(sql), PRODUCTS)
                assert expr is not None, sql
                assert milvus_ids(store, name, expr) == clickhouse_ids(plain, sql), sql
        finally:
            store.drop_collection(name)


def _widened(program: Program) -> Program:
    """``program`` with every entry retrieving the whole corpus: dense or fuse, no reranking."""
    entries = tuple(
        dataclasses.replace(e, k=WIDE, rerank=0, mode="dense" if e.mode == "sparse" else e.mode)
        for e in program.retrieval_list
    )
    return dataclasses.replace(program, retrieval_list=entries)


def _outcome(engine: Engine, program: Program) -> tuple[str, Any, dict[str, tuple[str, ...]]]:
    try:
        result = engine.execute(program, k=N)
    except ProReError as exc:
        return ("error", exc.code, {})
    return ("ok", result.ids, {name: tuple(ids) for name, ids in result.candidates.items()})


def _one_list_order(plain: tuple[str, ...], searched: tuple[str, ...]) -> tuple[str, ...]:
    """The order a pushed program with one positive list gives, from the unpushed order ``plain``.

    Unpushed, a list as wide as the corpus ranks every row. Pushed, it ranks only the rows its guards
    let through (``searched``), in the same relative order; a row the program reaches another way
    (``id IN <p> OR brand != ''``, a ``NOT`` of an ``AND``) scores 0 and comes after, by id.
    """
    kept = set(searched)
    return tuple([r for r in plain if r in kept] + sorted(r for r in plain if r not in kept))


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(generated=generated_programs(PRODUCTS))
@example(  # a row reached through the OR that De Morgan makes of NOT (... AND brand = '') is unranked when pushed
    generated=Generated(
        program=Program(
            sql="SELECT id FROM products WHERE NOT ((id NOT IN (SELECT id FROM products WHERE id IN <image_1>) AND brand = ''))",
            retrieval_list=(Retrieval(type="image", field="image", query="0", mode="dense", k=3, rerank=0),),
        ),
        positive_entries=(0,),
    )
)
def test_pushed_programs_return_what_unpushed_ones_do_when_k_covers_the_corpus(
    engines: tuple[Engine, Engine], generated: Any
) -> None:
    plain, pushed = engines
    program = _widened(generated.program)
    (status, a, _), (pushed_status, b, searched) = _outcome(plain, program), _outcome(pushed, program)
    assert status == pushed_status, (program, a, b)
    if status == "error":
        assert a == b
        return
    assert sorted(a) == sorted(b), program  # the same rows, always
    prepared = plain.prepare(program)
    if prepared.ordered:
        assert a == b, program  # the SQL's order wins
    elif len(prepared.positive) <= 1:
        listed = searched.get(prepared.names[prepared.positive[0]], ()) if prepared.positive else ()
        assert b == _one_list_order(a, listed), program  # one ranked list: its order, guarded rows first
    # several lists re-rank under a filter: the same rows, in an order of their own


EXACT = [
    "SELECT id FROM products WHERE price < 200 AND id IN <text_1>",
    "SELECT id FROM products WHERE brand IN ('Levi''s', 'say \"hi\"', 'Café ü') AND id IN <text_1> AND id NOT IN <text_2>",
    "SELECT id FROM products WHERE (brand = 'Sony' AND id IN <text_1>) OR (color = 'red' AND id IN <text_2>)",
    "SELECT id FROM products WHERE toYear(release_date) = 2022 AND NOT (in_stock = true AND id IN <text_2>) AND id IN <text_1>",
    "SELECT id FROM products WHERE rating > 3 AND id IN (SELECT id FROM products WHERE price < 300 AND id IN <text_1> ORDER BY price LIMIT 40)",
    "SELECT id FROM products WHERE review_count BETWEEN 100 AND 4000 AND id IN <text_1> ORDER BY price DESC LIMIT 7",
]  # fmt: skip


@pytest.mark.parametrize("sql", EXACT)
def test_pushed_filters_reach_milvus_and_keep_the_rows(engines: tuple[Engine, Engine], sql: str) -> None:
    plain, pushed = engines
    program = Program(
        sql,
        (
            Retrieval("text", "title", "headphones", k=WIDE),
            Retrieval("text", "review", "sturdy build", k=WIDE),
        ),
    )
    if "<text_2>" not in sql:
        program = dataclasses.replace(program, retrieval_list=program.retrieval_list[:1])
    assert any(r.filter for r in pushed.prepare(program).requests)
    assert not any(r.filter for r in plain.prepare(program).requests)
    a, b = plain.execute(program, k=N), pushed.execute(program, k=N)
    assert sorted(a.ids) == sorted(b.ids)
    assert a.ids or "NOT IN" in sql, sql  # a full-width NOT IN leaves nothing
    # The pushed candidate lists hold only documents that pass their filter, and fewer of them.
    assert sum(map(len, b.candidates.values())) < sum(map(len, a.candidates.values()))


def test_at_the_default_width_pushdown_keeps_every_guarded_candidate(engines: tuple[Engine, Engine]) -> None:
    plain, pushed = engines
    program = Program(
        "SELECT id FROM products WHERE price < 60 AND id IN <text_1>",
        (Retrieval("text", "title", "headphones", k=10),),
    )
    a, b = plain.execute(program, k=20), pushed.execute(program, k=20)
    assert set(a.ids) <= set(b.ids)
    assert len(b.ids) == 10 > len(a.ids)  # the filtered top-10 are all cheap; the unfiltered one was not
    assert set(b.ids) == clickhouse_ids(pushed, "price < 60") & set(b.candidates["text_1"])


def test_the_search_caches_key_on_the_filter(engines: tuple[Engine, Engine]) -> None:
    _, pushed = engines
    pushed.clear_caches()
    entry = (Retrieval("text", "title", "headphones", k=10),)
    cheap = pushed.execute(
        Program("SELECT id FROM products WHERE price < 60 AND id IN <text_1>", entry), k=20
    )
    dear = pushed.execute(
        Program("SELECT id FROM products WHERE price > 400 AND id IN <text_1>", entry), k=20
    )
    assert set(cheap.candidates["text_1"]).isdisjoint(dear.candidates["text_1"])
    assert pushed.retriever.calls["ann"] >= 2
    assert pushed.cache_stats()["searches"]["size"] == 2


def test_a_filter_the_store_refuses_runs_unfiltered(engines: tuple[Engine, Engine]) -> None:
    _, pushed = engines
    retriever = pushed.retriever
    bad = RetrievalRequest("title", "dense", "headphones", 10, 0, filter="price <<< 3")
    good = RetrievalRequest("title", "dense", "headphones", 10, 0)
    before = retriever.calls["filter_refused"]
    out = retriever.resolve([bad, good], {})
    assert retriever.calls["filter_refused"] == before + 1
    assert out[bad] == out[good]


def test_sparse_entries_are_not_filtered(engines: tuple[Engine, Engine]) -> None:
    plain, pushed = engines
    program = Program(
        "SELECT id FROM products WHERE price < 60 AND id IN <text_1>",
        (Retrieval("text", "review", "sturdy build", mode="sparse", k=10),),
    )
    assert pushed.prepare(program).requests[0].filter == "price < 60.0"
    assert pushed.execute(program).candidates == plain.execute(program).candidates


def test_pushdown_reads_the_config(odd_cfg: Config) -> None:
    with Engine.open(odd_cfg, "ecommerce") as default:
        assert default.planning == PlanningOptions() and default.planning.pushdown
    on = odd_cfg.with_section(
        config_from_mapping(
            {"serving": {"planning": {"pushdown": True, "conditional": False}}}, sections=SECTIONS
        ).section(ServingSettings)
    )
    with Engine.open(on, "ecommerce") as engine:
        assert engine.planning.pushdown
        program = Program(
            "SELECT id FROM products WHERE price < 9 AND id IN <text_1>", (Retrieval("text", "title", "x"),)
        )
        assert engine.prepare(program).requests[0].filter == "price < 9.0"


def test_adaptive_k_max_below_the_ladder_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"serving\.planning\.adaptive_k_max"):
        config_from_mapping({"serving": {"planning": {"adaptive_k_max": 2}}}, sections=SECTIONS).section(
            ServingSettings
        )


def test_dates_in_the_mirror_are_utc_epoch_seconds() -> None:
    # The translation writes what indexing.stores.milvus stores.
    day = dt.date(2024, 1, 1)
    assert (
        to_milvus(where("release_date = '2024-01-01'"), PRODUCTS) == f"release_date == {epoch_seconds(day)}"
    )
