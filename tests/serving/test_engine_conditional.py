"""Conditional evaluation of conjunctions: which placeholders form the chain, and on the real stores (chDB,
Milvus Lite with FLAT indexes, in-process BM25) that a chained entry's list is its own top-K among the previous
entry's candidates, checked against the store's vectors and an unrestricted BM25 ranking; that a dense search
among candidates scored in process ranks them as the store's own search does; that K covering the corpus
changes no row; that OR / NOT programs are untouched; the same answer alone and in a batch; and composition
with pushdown and adaptive K. The store-level facts it stands on, on both Milvus deployments, are in
``test_store_candidates.py``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import sqlglot
import yaml
from sqlglot import exp

from core.errors import ConfigError
from indexing.config import Config, load_config
from serving.dsl import Program, Retrieval
from serving.dsl.placeholders import mark_placeholders
from serving.engine import Engine
from serving.engine.conditional import condition, conditional_chain, conditional_plan
from serving.engine.pushdown import conjoin, id_filter
from serving.engine.retrieval import SCORE_TOLERANCE, RetrievalRequest
from serving.settings import SECTIONS, PlanningOptions, ServingSettings
from tests.serving.conditional_support import (
    HEAD,
    PAIR,
    TAIL,
    WIDE,
    N,
    assert_top_k_among,
    engine_of,
    lists,
    pair,
)

# -- which entries form the chain ----------------------------------------------------------------


def chain_of(sql: str, reranked: Sequence[int] = ()) -> tuple[int, ...]:
    tree = sqlglot.parse_one(mark_placeholders(sql)[0], read="clickhouse")
    assert isinstance(tree, exp.Select)
    requests = [RetrievalRequest("title", "dense", "q", 20, 5 if i in reranked else 0) for i in range(4)]
    return conditional_chain(tree, "products", requests)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("id IN <text_1> AND id IN <text_2>", (0, 1)),
        ("id IN <text_2> AND id IN <text_1>", (0, 1)),  # retrieval_list order, not SQL order
        ("price < 9 AND id IN <text_3> AND (rating > 4 AND (id IN <text_1>)) AND id IN <text_2>", (0, 1, 2)),
        ("id IN <text_1> AND (id IN <text_2> OR price < 9) AND id IN <text_3>", (0, 2)),
        ("id IN <text_1> AND id IN (SELECT id FROM products WHERE rating > 4 AND id IN <text_2>)", (0, 1)),
        ("id IN <text_1> AND id IN <text_2> ORDER BY price LIMIT 3", (0, 1)),
        # Under OR or NOT, or below a subquery that cuts, a placeholder keeps its fixed-K meaning.
        ("id IN <text_1> OR id IN <text_2>", ()),
        ("id IN <text_1> AND id NOT IN <text_2>", ()),
        ("NOT (id IN <text_1> AND id IN <text_2>)", ()),
        ("NOT NOT (id IN <text_1> AND id IN <text_2>)", ()),  # positive, but not a conjunct: left alone
        ("id IN <text_1> AND id NOT IN (SELECT id FROM products WHERE id IN <text_2>)", ()),
        ("id IN <text_1> AND id IN (SELECT id FROM products WHERE id IN <text_2> ORDER BY price LIMIT 40)", ()),
        # An entry used twice does not join; one entry alone is no chain.
        ("id IN <text_1> AND id IN <text_2> AND (id IN <text_1> OR price < 9)", ()),
        ("id IN <text_1> AND id IN <text_1>", ()),
    ],
)  # fmt: skip
def test_the_chain_is_the_positive_conjuncts_of_the_outer_where(
    where: str, expected: tuple[int, ...]
) -> None:
    assert chain_of(f"SELECT id FROM products WHERE {where}") == expected


def plan_of(sql: str, disjuncts: bool = True) -> tuple[tuple[int, ...], tuple[int, ...]]:
    tree = sqlglot.parse_one(mark_placeholders(sql)[0], read="clickhouse")
    assert isinstance(tree, exp.Select)
    requests = [RetrievalRequest("title", "dense", "q", 20, 0) for _ in range(4)]
    return conditional_plan(tree, "products", requests, disjuncts=disjuncts)


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("id IN <text_1> AND (id IN <text_2> OR id IN <text_3>)", ((0,), (1, 2))),
        ("id IN <text_1> AND id IN <text_3> AND (id IN <text_2> OR price < 9)", ((0, 2), (1,))),
        ("id IN <text_1> AND (price < 9 OR (rating > 4 AND id IN <text_2>))", ((0,), (1,))),
        ("id IN <text_1> AND id IN (SELECT id FROM products WHERE id IN <text_2> OR id IN <text_3>)", ((0,), (1, 2))),
        # No conjunct to search among; under NOT; used twice: not conditioned.
        ("id IN <text_1> OR id IN <text_2>", ((), ())),
        ("id IN <text_1> AND NOT (id IN <text_2> OR id IN <text_3>)", ((), ())),
        ("id IN <text_1> AND (id IN <text_2> OR id IN <text_2>)", ((), ())),
        ("id IN <text_1> AND id IN <text_2>", ((0, 1), ())),
    ],
)  # fmt: skip
def test_the_tail_is_the_positive_uses_under_or(
    where: str, expected: tuple[tuple[int, ...], tuple[int, ...]]
) -> None:
    sql = f"SELECT id FROM products WHERE {where}"
    assert plan_of(sql) == expected
    chain = expected[0] if len(expected[0]) > 1 else ()
    assert plan_of(sql, disjuncts=False) == ((chain, ()) if chain else ((), ()))


def test_reranked_entries_do_not_join_the_chain() -> None:
    sql = "SELECT id FROM products WHERE id IN <text_1> AND id IN <text_2> AND id IN <text_3>"
    assert chain_of(sql, reranked=(1,)) == (0, 2)
    assert chain_of(sql, reranked=(0, 1)) == ()


def test_the_id_filter_and_the_pushed_filter_are_conjoined() -> None:
    within = ("P00001", 'P"2', "P\\3")
    assert id_filter(within) == r'id in ["P00001", "P\"2", "P\\3"]'
    assert conjoin("price < 9.0", id_filter(within)) == r'price < 9.0 and id in ["P00001", "P\"2", "P\\3"]'
    assert (
        conjoin('brand == "a" or rating > 4.0', id_filter(["P1"]))
        == '(brand == "a" or rating > 4.0) and id in ["P1"]'
    )
    assert conjoin(None, id_filter(["P1"])) == 'id in ["P1"]'
    assert id_filter(["bell\x07"]) is None and id_filter([]) is None


# -- the real stores -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cfg(hashing_index: Callable[..., Config]) -> Config:
    return hashing_index("conditional", N, seed=7)


@pytest.fixture(scope="module")
def engines(cfg: Config) -> Iterator[dict[str, Engine]]:
    out = {
        "off": engine_of(cfg),
        "on": engine_of(cfg, conditional=True),
        "local": engine_of(cfg, conditional=True, candidates_in_process=True),
        "pushed": engine_of(cfg, conditional=True, pushdown=True),
        "adaptive": engine_of(cfg, conditional=True, adaptive_k=True, adaptive_k_max=50),
        "all": engine_of(cfg, conditional=True, pushdown=True, adaptive_k=True, adaptive_k_max=50),
    }
    yield out
    for e in out.values():
        e.close()


def ids_where(engine: Engine, cond: str) -> set[str]:
    return {str(r[0]) for r in engine.handle.sql.query(f"SELECT id FROM {engine.handle.table} WHERE {cond}")}


def test_a_conjunction_whose_top_k_lists_miss_each_other_returns_rows(engines: dict[str, Engine]) -> None:
    off, on = engines["off"], engines["on"]
    program = pair(HEAD, TAIL)
    fixed = off.execute(program)
    assert not set(lists(fixed)[0]) & set(lists(fixed)[1])
    assert fixed.ids == ()
    assert on.prepare(program).chain == (0, 1)
    result = on.execute(program)
    head, tail = lists(result)
    assert head == lists(fixed)[0]  # the first entry is searched as without the pass
    assert result.ids and set(result.ids) == set(tail) and set(tail) <= set(head)
    assert_top_k_among(on, TAIL, head, tail)
    assert all(score > 0 for score in result.scores)  # every row scores from both lists


def test_a_chain_of_three_narrows_step_by_step(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    second, third = dataclasses.replace(TAIL, k=5), Retrieval("text", "review", "long battery life", k=3)
    program = Program(pair(HEAD, second).sql + " AND id IN <text_3>", (HEAD, second, third))
    result = on.execute(program)
    one, two, three = lists(result)
    assert_top_k_among(on, second, one, two)
    assert_top_k_among(on, third, two, three)
    assert set(result.ids) == set(three) and len(three) == 3


def test_sparse_and_fuse_entries_are_searched_among_the_candidates(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    sparse = Retrieval("text", "review", "battery", mode="sparse", k=3)
    result = on.execute(pair(HEAD, sparse))
    assert_top_k_among(on, sparse, *lists(result))
    # A BM25-first chain: the dense entry ranks only the lexical hits.
    first = Retrieval("text", "review", "battery", mode="sparse", k=10)
    result = on.execute(pair(first, HEAD))
    assert_top_k_among(on, HEAD, *lists(result))
    fused = Retrieval("text", "review", "long battery", mode="fuse", k=3)
    result = on.execute(pair(HEAD, fused))
    head, tail = lists(result)
    assert set(tail) <= set(head) and len(tail) == 3 and result.ids


def test_an_empty_first_list_leaves_nothing_to_search(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    nothing = Retrieval("text", "review", "zzzqqq", mode="sparse", k=10)
    on.clear_caches()
    before = on.retriever.calls["ann"]
    result = on.execute(pair(nothing, TAIL))
    assert result.ids == () and lists(result) == [(), ()]
    assert on.retriever.calls["ann"] == before  # the dense entry had no candidate to search among


Mode = Literal["dense", "sparse", "fuse"]

WIDE_PROGRAMS: list[tuple[str, tuple[Mode, Mode]]] = [
    (PAIR, ("dense", "dense")),
    (PAIR, ("sparse", "dense")),
    (PAIR, ("dense", "fuse")),
    ("SELECT id FROM products WHERE price < 250 AND id IN <B> AND id IN <A>", ("dense", "sparse")),
    ("SELECT id FROM products WHERE id IN <A> AND id IN (SELECT id FROM products WHERE rating > 3 AND id IN <B>)",
     ("dense", "dense")),
    (PAIR + " ORDER BY price DESC LIMIT 7", ("fuse", "dense")),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "modes"), WIDE_PROGRAMS)
def test_with_k_covering_the_corpus_the_rows_are_unchanged(
    engines: dict[str, Engine], sql: str, modes: tuple[Mode, Mode]
) -> None:
    off, on = engines["off"], engines["on"]
    program = pair(
        Retrieval("text", "title", "Bose speaker", mode=modes[0], k=WIDE),
        Retrieval("text", "review", "sturdy build", mode=modes[1], k=WIDE),
        sql,
    )
    assert on.prepare(program).chain == (0, 1)
    a, b = off.execute(program, k=N), on.execute(program, k=N)
    assert a.ids, sql
    assert sorted(a.ids) == sorted(b.ids)
    if modes[0] != "sparse":  # the first list holds the corpus: the second ranks every document, as before
        assert a.ids == b.ids and a.scores == b.scores


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM products WHERE id IN <A> OR id IN <B>",
        "SELECT id FROM products WHERE id IN <A> AND id NOT IN <B>",
        "SELECT id FROM products WHERE NOT (id IN <A> AND id IN <B>)",
        "SELECT id FROM products WHERE price < 300 AND (id IN <A> OR (brand = 'Sony' AND id IN <B>))",
        "SELECT id FROM products WHERE id IN <A> AND id IN (SELECT id FROM products WHERE id IN <B> ORDER BY price LIMIT 40)",
    ],
)  # fmt: skip
def test_or_and_not_programs_are_unchanged(engines: dict[str, Engine], sql: str) -> None:
    off, on = engines["off"], engines["on"]
    program = pair(dataclasses.replace(HEAD, k=20), dataclasses.replace(TAIL, k=20), sql)
    assert on.prepare(program).chain == ()
    assert on.execute(program) == off.execute(program)


OR_TAIL = "SELECT id FROM products WHERE id IN <text_1> AND (id IN <image_2> OR id IN <text_3>)"
THIRD = Retrieval("text", "review", "long battery life", k=3)


def test_placeholders_under_or_are_searched_among_the_chains_last_list(engines: dict[str, Engine]) -> None:
    off, on = engines["off"], engines["on"]
    program = Program(OR_TAIL, (HEAD, TAIL, THIRD))
    assert on.prepare(program).chain == (0,) and on.prepare(program).tail == (1, 2)
    fixed = off.execute(program)
    result = on.execute(program)
    head, second, third = lists(result)
    assert head == lists(fixed)[0]
    assert_top_k_among(on, TAIL, head, second)
    assert_top_k_among(on, THIRD, head, third)
    assert result.ids and set(result.ids) == set(second) | set(third)
    assert len(result.ids) > len(fixed.ids)
    conjuncts_only = engine_of(engines["on"].handle.cfg, conditional=True, conditional_disjuncts=False)
    try:
        assert conjuncts_only.prepare(program).tail == ()
        assert conjuncts_only.execute(program) == fixed
    finally:
        conjuncts_only.close()


def test_with_k_covering_the_corpus_a_tail_changes_no_row(engines: dict[str, Engine]) -> None:
    off, on = engines["off"], engines["on"]
    program = Program(OR_TAIL, tuple(dataclasses.replace(r, k=WIDE) for r in (HEAD, TAIL, THIRD)))
    a, b = off.execute(program, k=N), on.execute(program, k=N)
    assert a.ids and sorted(a.ids) == sorted(b.ids)


def batch() -> list[Program]:
    three = Program(
        pair(HEAD, TAIL).sql + " AND id IN <text_3>", (HEAD, TAIL, Retrieval("text", "review", "sturdy", k=5))
    )
    return [
        pair(HEAD, TAIL),
        pair(Retrieval("text", "title", "Bose speaker", k=20), TAIL),
        pair(HEAD, Retrieval("text", "review", "battery", mode="sparse", k=3)),
        pair(HEAD, TAIL, "SELECT id FROM products WHERE price < 200 AND id IN <A> AND id IN <B>"),
        pair(HEAD, TAIL, "SELECT id FROM products WHERE id IN <A> OR id IN <B>"),
        three,
        Program(OR_TAIL, (HEAD, TAIL, THIRD)),
    ]


@pytest.mark.parametrize("name", ["on", "pushed", "adaptive", "all"])
def test_the_same_alone_and_in_a_batch(engines: dict[str, Engine], name: str) -> None:
    engine = engines[name]
    programs = batch()
    engine.clear_caches()
    alone = [engine.execute(p, k=10) for p in programs]
    assert sum(bool(engine.prepare(p).chain) for p in programs) == 6  # all but the OR program
    engine.clear_caches()
    assert engine.execute_many(programs, k=10) == alone
    assert engine.execute_many(programs[::-1], k=10) == alone[::-1]


def test_it_composes_with_pushdown(engines: dict[str, Engine]) -> None:
    pushed = engines["pushed"]
    program = pair(HEAD, TAIL, "SELECT id FROM products WHERE price < 150 AND id IN <A> AND id IN <B>")
    prepared = pushed.prepare(program)
    assert prepared.chain == (0, 1)
    assert [r.filter for r in prepared.requests] == ["price < 150.0", "price < 150.0"]
    result = pushed.execute(program)
    head, tail = lists(result)
    cheap = ids_where(pushed, "price < 150")
    assert len(head) == 10 and set(head) <= cheap  # the pushed filter
    assert set(tail) <= set(head)  # and the candidates, both in the second entry's filter
    assert_top_k_among(pushed, TAIL, head, tail)
    assert set(result.ids) == set(tail)


def test_adaptive_k_searches_the_chain_again_at_the_new_widths(engines: dict[str, Engine]) -> None:
    adaptive = engines["adaptive"]
    sql = "SELECT id FROM products WHERE price < 100 AND id IN <A> AND id IN <B>"
    first, second = dataclasses.replace(HEAD, k=5), dataclasses.replace(TAIL, k=3)
    program = pair(first, second, sql)
    assert len(engines["on"].execute(program, k=10).ids) < 10
    result = adaptive.execute(program, k=10)
    head, tail = lists(result)
    assert len(head) > 5 and len(tail) > 3  # both widened, the second within the first's wider list
    assert_top_k_among(adaptive, dataclasses.replace(second, k=len(tail)), head, tail)
    assert set(result.ids) == set(tail) & ids_where(adaptive, "price < 100")


def test_conditioned_searches_cache_on_their_candidates(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    on.clear_caches()
    a = on.execute(pair(HEAD, TAIL))
    b = on.execute(pair(Retrieval("text", "title", "Anker charger", k=10), TAIL))
    assert set(lists(a)[1]).isdisjoint(lists(b)[1])  # the same request, among other candidates
    assert on.cache_stats()["requests"]["size"] == 4
    assert on.execute(pair(HEAD, TAIL)) == a
    assert on.cache_stats()["requests"]["size"] == 4


def test_a_refused_pushed_filter_is_dropped_but_never_the_candidates(engines: dict[str, Engine]) -> None:
    retriever = engines["on"].retriever
    within = tuple(sorted(f"P{i:05d}" for i in range(0, N, 7)))
    bad = RetrievalRequest("title", "dense", "Sony headphones", 10, 0, filter="price <<< 3", within=within)
    good = dataclasses.replace(bad, filter=None)
    before = retriever.calls["filter_refused"]
    out = retriever.resolve([bad, good], {})
    assert retriever.calls["filter_refused"] == before + 1
    assert out[bad] == out[good] and len(out[good]) == 10 and {d for d, _ in out[good]} <= set(within)


def test_a_conditioned_dense_search_is_scored_in_process_as_the_store_ranks_it(
    engines: dict[str, Engine],
) -> None:
    """Under ``candidates_in_process``, a dense search among candidates without a pushed filter makes no store
    search: one fetch of the batch's candidates' vectors (cached), scored by the store's metric. It answers what
    the store's own search among the same ids answers (the store path, through a filter every document
    passes), scores and the id order of ties included, at a cut inside the list and past it."""
    retriever = engines["local"].retriever
    retriever.clear()
    within = tuple(sorted(f"P{i:05d}" for i in range(0, N, 3)))
    queries = ["Sony headphones", "glossy black speaker", "cheap charger", "red running shoes"]
    plain = [
        RetrievalRequest("title", "dense", q, k, 0, within=within) for q in queries for k in (5, 20, WIDE)
    ]
    stored = [dataclasses.replace(r, filter="price >= 0.0") for r in plain]
    before = retriever.calls
    ours = retriever.resolve(plain, {})
    after = retriever.calls
    assert after["ann"] == before["ann"] and after["band"] == before["band"]  # no store search
    assert after["scored_within"] - before["scored_within"] == 3  # one per (width, candidates) group
    assert after["fetch_vectors"] - before["fetch_vectors"] == 1  # the candidates' vectors, fetched once
    theirs = retriever.resolve(stored, {})
    assert retriever.calls["ann"] > after["ann"]
    for mine, store in zip(plain, stored, strict=True):
        got, want = ours[mine], theirs[store]
        assert [d for d, _ in got] == [d for d, _ in want], mine
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=SCORE_TOLERANCE)
        assert len(got) == min(mine.k, len(within)) and {d for d, _ in got} <= set(within)
    # the vectors stay cached: the same candidates for other phrases fetch nothing
    retriever.resolve([dataclasses.replace(r, query=r.query + " case") for r in plain], {})
    assert retriever.calls["fetch_vectors"] == after["fetch_vectors"]


def test_candidates_scored_by_the_store_give_the_same_rows(cfg: Config, engines: dict[str, Engine]) -> None:
    """``candidates_in_process`` on (in process) and off (the default: the store, one search per candidate
    set) give the same lists and rows."""
    programs = [
        pair(HEAD, TAIL),
        pair(
            Retrieval("text", "title", "Anker charger", k=20),
            Retrieval("text", "description", "fast usb", k=5),
        ),
        Program(
            "SELECT id FROM products WHERE id IN <text_1> AND id IN <image_2> AND id IN <text_3>",
            (HEAD, dataclasses.replace(TAIL, k=5), Retrieval("text", "description", "noise cancelling", k=3)),
        ),
    ]
    local = engines["local"]
    with engine_of(cfg, conditional=True) as remote:
        assert not remote.planning.candidates_in_process
        before = remote.retriever.calls["ann"]
        for program in programs:
            got, want = local.execute(program), remote.execute(program)
            assert (got.ids, lists(got)) == (want.ids, lists(want)) and lists(got)[-1]
        # every entry a store search: 7 entries, the head of the first and the last the same search (cached)
        assert remote.retriever.calls["ann"] - before == 6
        assert not remote.retriever.calls["scored_within"]


def test_a_chained_entry_with_its_heads_filter_drops_it_and_one_with_its_own_keeps_it(
    engines: dict[str, Engine],
) -> None:
    """Under pushdown every chained entry carries the outer WHERE's guards; the head's list already passed
    them, so the next entry is searched among it without a filter. A filter of its own, in an OR branch of
    the tail, stays (and goes to the store, in process or not)."""
    pushed = engines["pushed"]
    first, second = dataclasses.replace(HEAD, k=20), dataclasses.replace(TAIL, k=3)
    chained = pushed.prepare(pair(first, second, PAIR + " AND price < 200")).requests
    assert chained[0].filter == chained[1].filter == "price < 200.0"
    assert condition(chained[1], chained[0], [("P00001", 1.0)]).filter is None
    result = pushed.execute(pair(first, second, PAIR + " AND price < 200"))
    head, tail = lists(result)
    assert set(tail) <= set(head) and set(head) <= ids_where(pushed, "price < 200")
    assert_top_k_among(pushed, second, head, tail)
    program = Program(
        "SELECT id FROM products WHERE id IN <text_1> AND price < 200 AND "
        "(id IN <image_2> AND rating >= 4.0 OR brand = 'Sony')",
        (first, second),
    )
    used = pushed.prepare(program).requests
    assert used[0].filter is not None and used[1].filter not in (None, used[0].filter)
    assert condition(used[1], used[0], [("P00001", 1.0)]).filter == used[1].filter
    before = pushed.retriever.calls
    rows = pushed.execute(program)
    assert pushed.retriever.calls["ann"] > before["ann"]  # the tail's own filter reached the store
    head, tail = lists(rows)
    assert set(tail) <= set(head) & ids_where(pushed, "price < 200 AND rating >= 4.0")


def test_the_conditional_pass_is_the_default_and_fixed_k_is_a_named_mode(cfg: Config, tmp_path: Path) -> None:
    """The default engine chains a conjunction; ``mode: fixed-k`` in the config file is the paper's meaning,
    every pass off even where a switch says on."""
    with Engine.open(cfg, "ecommerce") as default:
        assert default.planning.conditional and default.planning.pushdown
        assert default.prepare(pair(HEAD, TAIL)).chain == (0, 1)
        assert default.execute(pair(HEAD, TAIL)).ids
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump({"serving": {"planning": {"mode": "fixed-k", "conditional": True}}}))
    settings = load_config(path, sections=SECTIONS).section(ServingSettings)
    assert settings.planning == PlanningOptions.fixed_k()
    with Engine.open(cfg.with_section(settings), "ecommerce") as paper:
        assert not (paper.planning.conditional or paper.planning.pushdown or paper.planning.adaptive_k)
        assert paper.prepare(pair(HEAD, TAIL)).chain == ()
    path.write_text(yaml.safe_dump({"serving": {"planning": {"mode": "paper"}}}))
    with pytest.raises(
        ConfigError, match=r"^serving\.planning\.mode must be one of default, fixed-k, got str 'paper'$"
    ):
        load_config(path, sections=SECTIONS)


def test_a_wider_head_searches_the_next_entries_among_more_candidates(
    engines: dict[str, Engine], cfg: Config, tmp_path: Path
) -> None:
    """``chain_head_docs``: on a corpus larger than it, the head's k is read as a share of a corpus of that size
    (at most ``chain_head_max``) and the next entry takes its own top-K among the wider list; the narrow head's
    list is the wide one's prefix, so the next entry's best score can only rise. At or below that size nothing
    changes, which is the default here (N documents, under 5,000)."""
    narrow = engines["on"]
    program = pair(HEAD, TAIL)
    assert narrow.planning.chain_head_docs == 5000 and narrow.handle.rows == N
    assert [r.k for r in narrow.prepare(program).requests] == [HEAD.k, TAIL.k]
    with engine_of(cfg, conditional=True, chain_head_docs=N // 4) as wide:  # k read at N / 4: 4k here
        assert [r.k for r in wide.prepare(program).requests] == [4 * HEAD.k, TAIL.k]
        result, before = wide.execute(program), narrow.execute(program)
        head, tail = lists(result)
        assert len(head) == 4 * HEAD.k and head[: HEAD.k] == lists(before)[0]
        assert_top_k_among(wide, TAIL, head, tail)
        assert set(result.ids) == set(tail) and max(result.scores) > 0
        # A wider pool: the next entry's best match scores at least as high as among the narrow head.
        query = np.asarray(wide.handle.embedder(TAIL.field).embed([TAIL.query]))[0]
        stored = wide.handle.vectors.fetch_vectors(
            wide.handle.collection, TAIL.field, [*tail, *lists(before)[1]]
        )
        assert (
            float(np.dot(stored[tail[0]], query))
            >= float(np.dot(stored[lists(before)[1][0]], query)) - SCORE_TOLERANCE
        )
        # a single entry is no chain: nothing is widened
        single = Program("SELECT id FROM products WHERE id IN <text_1>", (HEAD,))
        assert [r.k for r in wide.prepare(single).requests] == [HEAD.k]
    with engine_of(cfg, conditional=True, chain_head_docs=N // 10, chain_head_max=25) as capped:
        assert [r.k for r in capped.prepare(program).requests] == [25, TAIL.k]  # 10k, at most 25
    with engine_of(cfg, conditional=True, chain_head_docs=N // 10, chain_head_max=0) as off:
        assert [r.k for r in off.prepare(program).requests] == [HEAD.k, TAIL.k]
    assert PlanningOptions(mode="fixed-k", chain_head_docs=10).chain_head_docs == 0
    path = tmp_path / "prore.yaml"
    path.write_text(yaml.safe_dump({"serving": {"planning": {"chain_head_max": -1}}}))
    with pytest.raises(
        ConfigError, match=r"^serving\.planning\.chain_head_max must be between 0 and 16000, got -1$"
    ):
        load_config(path, sections=SECTIONS)
    path.write_text(yaml.safe_dump({"serving": {"planning": {"chain_head_docs": -5}}}))
    with pytest.raises(ConfigError, match=r"^serving\.planning\.chain_head_docs must be 0 or more, got -5$"):
        load_config(path, sections=SECTIONS)
