"""Bounded adaptive K: the widths an entry is widened through, which entries widen, and that the engine
widens a program only while its SQL returns too few rows, never past the configured maximum, in a
bounded number of rounds, with the same answer alone and in a batch."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlglot
from sqlglot import exp

from indexing.config import Config
from serving.dsl import Program, Retrieval
from serving.engine import Engine
from serving.engine.adaptive import rows_needed, widen, widths
from serving.engine.retrieval import RetrievalRequest
from serving.settings import PlanningOptions

LADDER = (3, 5, 10, 20, 50)
N = 300

RARE = "SELECT id FROM products WHERE price < 40 AND id IN <text_1>"
"""About 7% of the synthetic products cost under 40: a top-3 search rarely finds one."""


def req(k: int, rerank: int = 0) -> RetrievalRequest:
    return RetrievalRequest("title", "dense", "q", k, rerank)


@pytest.mark.parametrize(
    ("k", "top", "expected"),
    [
        (3, 50, (5, 10, 20, 50)),
        (20, 50, (50,)),
        (20, 20, ()),
        (50, 400, (100, 200, 400)),
        (20, 150, (50, 100)),
        (7, 10, (10,)),
        (60, 200, (100, 200)),
    ],
)
def test_widths_climb_the_ladder_then_double(k: int, top: int, expected: tuple[int, ...]) -> None:
    assert widths(k, LADDER, top) == expected


def test_widen_moves_positive_unreranked_entries_one_step() -> None:
    requests = (req(3), req(3), req(10, rerank=5), req(50))
    out = widen(requests, positive=(0, 2, 3), ladder=LADDER, top=50)
    assert out is not None
    assert [r.k for r in out] == [5, 3, 10, 50]  # entry 1 is negative, 2 reranked, 3 at the top
    assert widen((req(50),), positive=(0,), ladder=LADDER, top=50) is None
    assert widen((req(3),), positive=(), ladder=LADDER, top=50) is None


@pytest.mark.parametrize(
    ("sql", "k", "needed"),
    [
        ("SELECT id FROM products WHERE price < 9", 20, 20),
        ("SELECT id FROM products WHERE price < 9 LIMIT 3", 20, 3),
        ("SELECT id FROM products WHERE price < 9 ORDER BY price LIMIT 50", 20, 20),
        ("SELECT id FROM products WHERE price < 9 LIMIT 2 OFFSET 5", 20, 2),
    ],
)
def test_rows_needed_is_the_calls_k_or_the_programs_limit(sql: str, k: int, needed: int) -> None:
    tree = sqlglot.parse_one(sql, read="clickhouse")
    assert isinstance(tree, exp.Select)
    assert rows_needed(tree, k) == needed


@pytest.fixture(scope="module")
def cfg(hashing_index: Callable[..., Config]) -> Config:
    return hashing_index("adaptive", N, seed=5)


def engine_of(cfg: Config, **planning: Any) -> Engine:
    return Engine.open(
        cfg, "ecommerce", planning=PlanningOptions(**{"pushdown": False, "conditional": False, **planning})
    )


@pytest.fixture(scope="module")
def engines(cfg: Config) -> Iterator[dict[str, Engine]]:
    out = {
        "off": engine_of(cfg),
        "on": engine_of(cfg, adaptive_k=True, adaptive_k_max=50),
        "capped": engine_of(cfg, adaptive_k=True, adaptive_k_max=10),
        "both": engine_of(cfg, adaptive_k=True, adaptive_k_max=50, pushdown=True),
    }
    yield out
    for e in out.values():
        e.close()


def rare(k: int = 3, query: str = "wireless headphones") -> Program:
    return Program(RARE, (Retrieval("text", "title", query, k=k),))


def cheap_ids(engine: Engine) -> set[str]:
    return {
        str(r[0]) for r in engine.handle.sql.query(f"SELECT id FROM {engine.handle.table} WHERE price < 40")
    }


def test_a_program_with_too_few_rows_is_widened_up_to_the_maximum(engines: dict[str, Engine]) -> None:
    off, on, capped = engines["off"], engines["on"], engines["capped"]
    program = rare()
    narrow = off.execute(program, k=5)
    assert len(narrow.ids) < 5 and len(narrow.candidates["text_1"]) == 3
    wide = on.execute(program, k=5)
    width = len(wide.candidates["text_1"])
    assert width in (5, 10, 20, 50)
    assert len(wide.ids) >= 5 or width == 50  # it stops when the rows suffice or at the top
    # the rows are the cheap candidates, best ranked first, cut at k (ranking contract)
    cheap = cheap_ids(on)
    assert list(wide.ids) == [d for d in wide.candidates["text_1"] if d in cheap][:5]
    assert len(capped.execute(program, k=50).candidates["text_1"]) == 10


def test_widening_takes_a_bounded_number_of_rounds(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    on.clear_caches()
    before = on.retriever.calls["ann"]
    result = on.execute(rare(query="never matches anything at all"), k=300)
    rounds = on.retriever.calls["ann"] - before
    assert len(result.candidates["text_1"]) == 50
    assert rounds == 1 + len(widths(3, LADDER, 50))  # the first search, then one per width, then it stops


def test_enough_rows_means_no_widening(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    program = Program(
        "SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "title", "lamp", k=10),)
    )
    result = on.execute(program, k=5)
    assert len(result.candidates["text_1"]) == 10 and len(result.ids) == 5
    limited = Program(RARE + " LIMIT 1", (Retrieval("text", "title", "lamp", k=3),))
    got = on.execute(limited, k=20)
    needed_one = engines["off"].execute(limited, k=20)
    if needed_one.ids:  # one row is all a LIMIT 1 program needs
        assert got == needed_one


def test_negative_and_reranked_entries_keep_their_width(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    program = Program(
        RARE + " AND id NOT IN <text_2> AND id IN <text_3>",
        (
            Retrieval("text", "title", "wireless headphones", k=3),
            Retrieval("text", "review", "too loud", k=5),
            Retrieval("text", "description", "sturdy", k=10, rerank=5),
        ),
    )
    result = on.execute(program, k=20)
    assert len(result.candidates["text_1"]) == 50
    assert len(result.candidates["text_2"]) == 5
    assert len(result.candidates["text_3"]) == 5


def test_widening_is_the_same_alone_and_in_a_batch(engines: dict[str, Engine]) -> None:
    on = engines["on"]
    # One phrase: each width is then one single-vector search alone and in the batch, so the store's
    # order of tied scores (batched and single dot products round apart) plays no part.
    entry = (Retrieval("text", "title", "wireless headphones", k=3),)
    wheres = ["price < 40", "price < 120", "rating > 4.5 AND in_stock = true", "price > 0"]
    programs = [Program(f"SELECT id FROM products WHERE {w} AND id IN <text_1>", entry) for w in wheres]
    alone = [on.execute(p, k=10) for p in programs]
    assert len({len(r.candidates["text_1"]) for r in alone}) > 1  # widened to different widths
    on.clear_caches()
    assert on.execute_many(programs, k=10) == alone
    assert on.execute_many(programs[::-1], k=10) == alone[::-1]


def test_adaptive_k_and_pushdown_compose(engines: dict[str, Engine]) -> None:
    both = engines["both"]
    result = both.execute(rare(), k=5)
    # The filtered top-3 already holds three cheap products; two more need one step, to 5.
    assert len(result.candidates["text_1"]) == 5
    assert set(result.candidates["text_1"]) <= cheap_ids(both)
    assert len(result.ids) == 5
