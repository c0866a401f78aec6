"""RPL's verified structural mutation on the real engine: nearest mutants first, the budget, no leak."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from indexing.config import Config
from indexing.schema import PRODUCTS
from rl.mutate import MAX_OUTPUT, MAX_QUERIES, MutationError, mutants, repair, verified_mutation
from serving.dsl import DEFAULT_LIMITS, Program, Retrieval, validate
from serving.engine import Engine, ExecutionResult, PlanningOptions


@pytest.fixture(scope="module")
def engine(small_index_cfg: Config) -> Iterator[Engine]:
    # Fixed K: mutation widens an entry's K, and the tests build programs whose gold sits just past it.
    e = Engine.open(small_index_cfg, "ecommerce", planning=PlanningOptions.fixed_k())
    yield e
    e.close()


def _ranking(engine: Engine, query: str) -> tuple[str, ...]:
    p = Program("SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", query, k=50),))
    return engine.execute(p, k=50).ids


def test_a_width_3_program_missing_a_gold_ranked_5th_is_repaired_by_the_width_5_mutant(
    engine: Engine,
) -> None:
    ranked = _ranking(engine, "comfortable and sturdy")
    gold, above = ranked[4], ranked[:4]
    excluded = ", ".join(f"'{i}'" for i in above)
    program = Program(f"SELECT id FROM products WHERE id NOT IN ({excluded}) AND id IN <text_1>",
                      (Retrieval("text", "review", "comfortable and sturdy", k=3),))  # fmt: skip
    assert gold not in engine.execute(program).ids

    seen: list[ExecutionResult] = []

    def verifier(result: ExecutionResult) -> bool:
        seen.append(result)
        return result.ids[:1] == (gold,)

    found = repair(program, verifier, engine=engine, budget=8)
    assert found.mutant is not None
    entry = found.mutant.program.retrieval_list[0]
    assert (entry.k, entry.mode, entry.rerank) == (5, "dense", 0)
    assert found.mutant.distance == (0, 0, 0, 1, 0)
    assert found.mutant.program.sql == program.sql
    assert verified_mutation(program, verifier, 8, engine=engine) == found.mutant


def test_the_budget_holds(engine: Engine) -> None:
    program = Program("SELECT id FROM products WHERE price < 100 AND id IN <text_1> AND id IN <image_2>",
                      (Retrieval("text", "review", "quiet"), Retrieval("image", "image", "black")))  # fmt: skip
    calls = 0

    def never(result: ExecutionResult) -> bool:
        nonlocal calls
        calls += 1
        return False

    for budget in (1, 5, 37):
        calls = 0
        found = repair(program, never, engine=engine, budget=budget)
        assert found.mutant is None and found.executed == budget and calls <= budget
    for bad in (0, 257, True):
        with pytest.raises(MutationError, match="budget"):
            repair(program, never, engine=engine, budget=bad)  # type: ignore[arg-type]


def test_nothing_of_the_gold_leaks_into_the_mutants(engine: Engine) -> None:
    ranked = _ranking(engine, "long battery life")
    program = Program(
        "SELECT id FROM products WHERE id IN <text_1>", (Retrieval("text", "review", "long battery life"),)
    )
    before = [m.program for m in itertools.islice(mutants(program, PRODUCTS), 64)]
    for gold in ranked[:3]:
        got: list[object] = []

        def verifier(result: ExecutionResult, got: list[object] = got) -> bool:
            got.append(result)
            return False

        repair(program, verifier, engine=engine, budget=64)
        assert all(isinstance(r, ExecutionResult) for r in got)
        assert [m.program for m in itertools.islice(mutants(program, PRODUCTS), 64)] == before
        assert not any(gold in p.to_json() for p in before)


def test_mutants_are_nearest_first_and_stay_in_the_grammar() -> None:
    program = Program(
        "SELECT id FROM products WHERE price < 50 AND id IN <text_1> AND id NOT IN <image_2> AND id IN <text_3>",
        (Retrieval("text", "review", "quiet", k=3), Retrieval("image", "image", "white"),
         Retrieval("text", "title", "desk lamp", mode="sparse", k=10, rerank=5)),
    )  # fmt: skip
    stream = list(itertools.islice(mutants(program, PRODUCTS), 256))
    keys = [(m.distance, m.candidates, m.calls) for m in stream]
    assert keys == sorted(keys), "nearest first, ties by candidate and call counts"
    assert len({m.program for m in stream}) == len(stream) and program not in {m.program for m in stream}
    fused = [m for m in stream if " OR " in m.program.sql]
    assert fused, "a positive slot fuses several of the program's queries"
    for m in stream:
        v = validate(m.program, PRODUCTS)
        entries = m.program.retrieval_list
        assert len(set(entries)) == len(entries), "no duplicate calls"
        assert len({e.query for e in entries}) <= MAX_QUERIES
        assert {e.query for e in entries} <= {"quiet", "white", "desk lamp"}, "no query comes from outside"
        assert all(e.k in DEFAULT_LIMITS.k_ladder and e.rerank <= e.k for e in entries)
        assert v.normalized_sql.count("price < 50") == 1, "the SQL conditions stay"
        assert all((e.rerank or e.k) <= MAX_OUTPUT for e in entries if e != program.retrieval_list[2])
    assert stream[0].distance == (0, 0, 0, 0, 1), "a rerank step is nearer than a width step"
