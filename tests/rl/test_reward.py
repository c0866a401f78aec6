"""The layered reward against the real small index: hand-made completions per layer, accuracy modes,
length units, determinism across batches, and a property test of the combination."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import indexing.stores.clickhouse_faults as faults
from indexing.config import Config
from rl.reward import (
    RewardConfig,
    RewardError,
    RewardItem,
    RewardScorer,
    Terms,
    combine,
    length_term,
    score_one,
)
from serving.dsl import parse_program

DOMAIN = "ecommerce"


@pytest.fixture(scope="module")
def scorer(small_index_cfg: Config) -> Iterator[RewardScorer]:
    s = RewardScorer.open(small_index_cfg, [DOMAIN])
    yield s
    s.close()


def review_program(handle: Any, offset: int) -> dict[str, Any]:
    """A program built from one document's review and price, as a planner would write it."""
    price, review = handle.sql.query(
        f"SELECT price, review FROM {handle.table} ORDER BY id LIMIT 1 OFFSET {offset}"
    )[0]
    phrase = " ".join(str(review).split()[:6])
    return {
        "sql": f"SELECT DISTINCT id FROM products WHERE price <= {float(price) + 1} AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "review", "query": phrase}],
    }


@pytest.fixture(scope="module")
def cases(scorer: RewardScorer) -> dict[str, Any]:
    """Two programs and their real results: gold ids come from running them first."""
    engine = scorer.engines[DOMAIN]
    a, b = review_program(engine.handle, 40), review_program(engine.handle, 200)
    ids_a = engine.execute(parse_program(a), k=20).ids
    ids_b = engine.execute(parse_program(b), k=20).ids
    assert len(ids_a) >= 2 and ids_b and ids_a[0] != ids_b[0]
    return {"a": json.dumps(a), "b": json.dumps(b), "ids_a": ids_a, "ids_b": ids_b}


def item(completion: str, gold: str | None, **kw: Any) -> RewardItem:
    return RewardItem(completion=completion, domain=DOMAIN, gold_id=gold, **kw)


# -- one completion per layer ----------------------------------------------------------------------


def test_garbage_scores_zero(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    r = score_one(scorer, item("The cheapest Sony headphones, I think.", cases["ids_a"][0]))
    assert (r.terms.s_f, r.terms.s_e, r.terms.s_r, r.total) == (0.0, 0.0, 0.0, 0.0)
    assert r.error == "not_json" and r.terms.failed_layer == "format" and r.ids == ()


def test_text_around_the_program_is_not_a_program(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    r = score_one(scorer, item("Here you go: " + cases["a"], cases["ids_a"][0]))
    assert r.total == 0.0 and r.error == "surrounding_text"


def test_json_that_is_not_a_program(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    r = score_one(scorer, item('{"query": "cheap headphones", "k": 5}', cases["ids_a"][0]))
    assert r.terms.s_f == 0.0 and r.total == 0.0 and r.error == "unknown_key"


def test_program_failing_validation_earns_format_only(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    bad = {"sql": "SELECT id FROM products WHERE colour = 'red' AND id IN <text_1>",
           "retrieval_list": [{"type": "text", "field": "review", "query": "sturdy build"}]}  # fmt: skip
    r = score_one(scorer, item(json.dumps(bad), cases["ids_a"][0]))
    assert (r.terms.s_f, r.terms.s_e, r.total) == (1.0, 0.0, 1.0)
    assert r.error == "unknown_column" and r.terms.failed_layer == "execution"


def test_program_failing_at_runtime_earns_format_only(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    bad = {"sql": "SELECT id FROM products WHERE price < 'cheap' AND id IN <text_1>",
           "retrieval_list": [{"type": "text", "field": "review", "query": "sturdy build"}]}  # fmt: skip
    r = score_one(scorer, item(json.dumps(bad), cases["ids_a"][0]))
    assert r.total == 1.0 and r.error is not None and r.error.startswith("exec_")


def test_program_that_runs_and_misses(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    r = score_one(scorer, item(cases["a"], cases["ids_b"][0]))
    assert (r.terms.s_f, r.terms.s_e, r.terms.s_r, r.total) == (1.0, 1.0, 0.0, 2.0)
    assert r.error is None and r.terms.failed_layer == "accuracy" and r.ids == cases["ids_a"][:10]


def test_program_that_hits(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    completion = f"<think>a review phrase and a price cap</think>\n```json\n{cases['a']}\n```"
    r = score_one(scorer, item(completion, cases["ids_a"][0]))
    assert r.terms.as_dict() == {"s_f": 1.0, "s_e": 1.0, "s_r": 1.0, "s_l": 1.0, "total": 4.0}
    assert r.error is None and r.terms.failed_layer is None
    assert r.length == len(completion) and r.length_unit == "chars"
    assert set(r.timings) == {"parse", "execute", "total"}


def test_program_that_hits_but_is_too_long(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    budget = len(cases["a"])
    # Half a budget of thinking on top of a program of exactly the budget: S_l = 0.5.
    think = "<think>" + "x" * (budget // 2 - len("<think></think>")) + "</think>"
    completion = think + cases["a"]
    r = score_one(scorer, item(completion, cases["ids_a"][0], budget=budget))
    assert r.length == budget + budget // 2
    assert (r.terms.s_r, r.terms.s_l) == (1.0, length_term(r.length, budget))
    assert r.total == pytest.approx(3.0 + length_term(r.length, budget)) and r.terms.failed_layer == "length"
    far = score_one(
        scorer, item("<think>" + "x" * 3 * budget + "</think>" + cases["a"], cases["ids_a"][0], budget=budget)
    )
    assert (far.terms.s_l, far.total) == (0.0, 3.0)


# -- accuracy modes and length units ---------------------------------------------------------------


def test_mrr_scores_the_reciprocal_rank(
    small_index_cfg: Config, scorer: RewardScorer, cases: dict[str, Any]
) -> None:
    mrr = RewardScorer(scorer.engines, RewardConfig(accuracy="mrr"))
    assert score_one(mrr, item(cases["a"], cases["ids_a"][1])).terms.s_r == 0.5
    assert score_one(mrr, item(cases["a"], "P99999")).terms.s_r == 0.0


def test_satisfy_needs_a_relevant_set(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    sat = RewardScorer(scorer.engines, RewardConfig(accuracy="satisfy"))
    with pytest.raises(RewardError) as err:
        sat.score([item(cases["a"], cases["ids_a"][0])])
    assert err.value.code == "no_relevant_set"
    top = cases["ids_a"][0]
    assert score_one(sat, item(cases["a"], None, relevant=frozenset({top, "P99999"}))).total == 4.0
    assert score_one(sat, item(cases["a"], None, relevant=frozenset({cases["ids_a"][1]}))).terms.s_r == 0.0


def test_execution_credit_stops_paying_a_wrong_program_for_running(
    scorer: RewardScorer, cases: dict[str, Any]
) -> None:
    """At credit 0 a program that runs and misses earns what a program that fails to run earns (S_f alone);
    an accurate program still earns 4, and a partial credit pays its share of the execution layer."""
    gated = RewardScorer(scorer.engines, RewardConfig(execution_credit=0.0))
    half = RewardScorer(scorer.engines, RewardConfig(execution_credit=0.5))
    wrong, right = item(cases["a"], cases["ids_a"][1]), item(cases["a"], cases["ids_a"][0])
    failing = item(
        '{"sql": "SELECT id FROM products WHERE colour = 1", "retrieval_list": []}', cases["ids_a"][0]
    )
    assert [r.total for r in scorer.score([wrong, right, failing])] == [2.0, 4.0, 1.0]
    assert [r.total for r in gated.score([wrong, right, failing])] == [1.0, 4.0, 1.0]
    assert [r.total for r in half.score([wrong, right, failing])] == [1.5, 4.0, 1.0]
    w = gated.score([wrong])[0].terms  # the terms themselves are unchanged: only what the layer pays
    assert (w.s_f, w.s_e, w.s_r) == (1.0, 1.0, 0.0)
    with pytest.raises(RewardError) as err:
        RewardConfig(execution_credit=1.5)
    assert err.value.code == "bad_reward_config"


def test_hit1_needs_a_gold_id(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    with pytest.raises(RewardError) as err:
        scorer.score([item(cases["a"], None)])
    assert err.value.code == "no_gold"
    with pytest.raises(RewardError) as err:
        scorer.score([RewardItem(cases["a"], "email", gold_id="E00001")])
    assert err.value.code == "unknown_domain"


def test_budget_in_tokens_with_a_tokenizer(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    tok = Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    tokens = RewardScorer(scorer.engines, RewardConfig(budget_tokens=8), tokenizer=tok)
    completion = "<think>" + " ".join(["w"] * 11) + "</think>" + cases["a"]
    r = score_one(tokens, item(completion, cases["ids_a"][0]))
    assert r.length_unit == "tokens" and r.budget == 8
    assert r.length == len(completion.split())
    assert r.terms.s_l == length_term(r.length, 8)


# -- determinism -----------------------------------------------------------------------------------


def test_same_item_same_score_in_any_batch(scorer: RewardScorer, cases: dict[str, Any]) -> None:
    gold = cases["ids_a"][0]
    items = [item(cases["a"], gold), item("nope", gold), item(cases["b"], gold), item(cases["a"], gold),
             item('{"sql": "SELECT id FROM products WHERE colour = 1", "retrieval_list": []}', gold)]  # fmt: skip
    alone = [score_one(scorer, i).score_key() for i in items]
    scorer.engines[DOMAIN].clear_caches()
    together = [r.score_key() for r in scorer.score(items)]
    reversed_ = [r.score_key() for r in scorer.score(items[::-1])][::-1]
    assert alone == together == reversed_


def test_a_program_that_clickhouse_refuses_never_fails_its_batch(
    scorer: RewardScorer, cases: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 27: the reported program passed validation, ClickHouse refused it with code 20, and the whole
    # batch failed retryably (the training step stalled). Now it is refused at validation; a program
    # ClickHouse refuses with a code the store does not classify fails alone too.
    monkeypatch.setattr(faults, "STATEMENT_FAULTS", faults.LIMIT_FAULTS)
    gold = cases["ids_a"][0]
    reported = '{"sql": "SELECT DISTINCT id FROM products WHERE id IN (SELECT id, brand FROM products)", "retrieval_list": []}'
    runtime = '{"sql": "SELECT id FROM products WHERE toDate(\'abc\') > release_date", "retrieval_list": []}'
    items = [item(cases["a"], gold), item(reported, gold), item(cases["b"], gold), item(runtime, gold)]
    alone = [score_one(scorer, i).score_key() for i in items]
    scorer.engines[DOMAIN].clear_caches()
    together = scorer.score(items)
    assert [r.score_key() for r in together] == alone
    assert together[1].error == "subquery_columns" and together[1].terms.failed_layer == "execution"
    assert together[3].error == "exec_failed" and together[3].total == 1.0
    assert together[0].total > 1.0 and together[2].total > 1.0


# -- properties ------------------------------------------------------------------------------------

unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@given(unit, unit, unit, unit)
def test_combination_is_bounded_and_gated(s_f: float, s_e: float, s_r: float, s_l: float) -> None:
    r = combine(s_f, s_e, s_r, s_l)
    assert 0.0 <= r <= 4.0
    assert combine(0.0, s_e, s_r, s_l) == 0.0
    assert combine(s_f, 0.0, s_r, s_l) == s_f
    assert combine(s_f, s_e, 0.0, s_l) == s_f + s_f * s_e
    assert combine(s_f, s_e, s_r, s_l) >= combine(s_f, s_e, s_r, 0.0)
    assert Terms(s_f, s_e, s_r, s_l).total == r


@given(unit, unit, unit, unit, unit)
def test_execution_credit_only_lowers_what_a_miss_earns(
    s_f: float, s_e: float, s_r: float, s_l: float, c: float
) -> None:
    gated = combine(s_f, s_e, s_r, s_l, execution_credit=c)
    assert combine(s_f, s_e, s_r, s_l, execution_credit=0.0) <= gated <= combine(s_f, s_e, s_r, s_l) + 1e-12
    assert combine(s_f, s_e, 1.0, s_l, execution_credit=c) == pytest.approx(combine(s_f, s_e, 1.0, s_l))
    assert combine(s_f, s_e, 0.0, s_l, execution_credit=c) == pytest.approx(s_f + c * s_f * s_e)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3), st.text(max_size=12), st.text(max_size=12), st.integers(1, 400))
def test_scored_completions_are_bounded_and_gated(
    scorer: RewardScorer, cases: dict[str, Any], which: int, before: str, after: str, budget: int
) -> None:
    """Mutated completions through the real engine: R in [0, 4], and a failed layer zeroes all after it."""
    base = cases["a"]
    text = [base, before + base + after, base[: len(base) // 2], base.replace("price", before or "price")][
        which
    ]
    r = score_one(scorer, item(text, cases["ids_a"][0], budget=budget))
    t = r.terms
    assert 0.0 <= r.total <= 4.0
    assert all(0.0 <= v <= 1.0 for v in (t.s_f, t.s_e, t.s_r, t.s_l))
    if t.s_f == 0.0:
        assert r.total == 0.0 and r.error is not None
    if t.s_e == 0.0:
        assert r.total == t.s_f and t.s_r == 0.0
    if t.s_r == 0.0:
        assert r.total == t.s_f + t.s_e * t.s_f
    assert r.total == combine(t.s_f, t.s_e, t.s_r, t.s_l)


def test_the_scorers_engines_take_the_configs_serving_section(small_index_cfg: Config) -> None:
    """A reward is the program's meaning under the same engine settings as ``prore serve`` and evaluation:
    the config's ``serving.planning`` (here the paper's fixed K) and its DSL limits, not the defaults."""
    from serving.dsl import DslLimits
    from serving.settings import PlanningOptions, ServingSettings

    cfg = small_index_cfg.with_section(
        ServingSettings(planning=PlanningOptions.fixed_k(), dsl=DslLimits(max_entries=2))
    )
    s = RewardScorer.open(cfg, [DOMAIN])
    try:
        engine = s.engines[DOMAIN]
        assert engine.planning == PlanningOptions.fixed_k() and engine.dsl_limits.max_entries == 2
    finally:
        s.close()
