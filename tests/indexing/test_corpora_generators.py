"""The seeded generators: determinism, chunking, and plausible distributions on small corpora."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pytest

from indexing.corpora import generate
from indexing.corpora.blocks import BLOCK, id_width
from indexing.corpora.emails import NOW, generate_emails
from indexing.corpora.files import arrow_schema
from indexing.corpora.products import generate_products
from indexing.corpora.vocab import GENERAL, email_vocab, facets, find_facets, find_visual, product_vocab
from indexing.errors import CorpusError
from indexing.schema import EMAILS, PRODUCTS

SIZE = 3 * BLOCK + 17  # several blocks and a partial one


def _all(tables: Any) -> pa.Table:
    return pa.concat_tables(list(tables)).combine_chunks()


@pytest.fixture(scope="module")
def products() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _all(generate_products(SIZE, seed=11)).to_pylist()
    return rows


@pytest.fixture(scope="module")
def emails() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = _all(generate_emails(SIZE, seed=11)).to_pylist()
    return rows


@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_same_seed_same_corpus_for_any_chunking(domain: str) -> None:
    whole = _all(generate(domain, SIZE, seed=5, chunk_rows=SIZE))
    tables = list(generate(domain, SIZE, seed=5, chunk_rows=333))
    assert [t.num_rows for t in tables[:-1]] == [333] * (len(tables) - 1)
    assert _all(tables).equals(whole)
    assert _all(generate(domain, SIZE, seed=5, chunk_rows=7 * BLOCK)).equals(whole)
    assert not _all(generate(domain, SIZE, seed=6)).equals(whole)


@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_a_document_does_not_depend_on_corpus_size(domain: str) -> None:
    small = _all(generate(domain, BLOCK + 5, seed=2))
    big = _all(generate(domain, 2 * BLOCK + 100, seed=2))
    assert big.slice(0, small.num_rows).equals(small)


@pytest.mark.parametrize(("domain", "schema"), [("ecommerce", PRODUCTS), ("email", EMAILS)])
def test_columns_and_ids(domain: str, schema: Any) -> None:
    table = _all(generate(domain, 12, seed=0))
    assert table.schema.equals(arrow_schema(schema))
    assert table.column("id").to_pylist()[:3] == [f"{schema.id_prefix}0000{k}" for k in (1, 2, 3)]
    assert (id_width(99_999), id_width(100_000), id_width(1_000_000)) == (5, 6, 7)


@pytest.mark.parametrize("bad", [{"size": 0}, {"size": -3}, {"seed": -1}, {"chunk_rows": 0}, {"size": 2.5}])
def test_bad_arguments_are_typed_errors(bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"size": 10, "seed": 0, "chunk_rows": 10, **bad}
    for gen in (generate_products, generate_emails):
        with pytest.raises(CorpusError) as err:
            gen(**args)
        assert err.value.code == "bad_argument"


def test_products_are_consistent_with_the_vocabulary(products: list[dict[str, Any]]) -> None:
    pv = product_vocab()
    for p in products:
        cat = pv.categories[p["category"]]
        assert p["brand"] in cat.brands
        assert cat.price.low <= p["price"] <= cat.price.high
        assert 1.0 <= p["rating"] <= 5.0
        assert p["review_count"] >= 1
        assert p["color"] in cat.colors
        assert p["title"].startswith(p["brand"] + " ")
        terms = find_visual(p["image"], p["category"])
        assert [t.value for t in terms if t.kind == "color"] == [p["color"]]
        assert {t.kind for t in terms} == {"finish", "color", "shape", "material", "setting"}


def test_product_distributions_are_plausible(products: list[dict[str, Any]]) -> None:
    pv = product_vocab()
    by_cat: dict[str, list[float]] = defaultdict(list)
    for p in products:
        by_cat[p["category"]].append(p["price"])
    assert set(by_cat) == set(pv.categories)
    for name, prices in by_cat.items():
        median = pv.categories[name].price.median
        assert median / 2 < statistics.median(prices) < median * 2, name
    counts = sorted(p["review_count"] for p in products)
    assert counts[-1] > 20 * statistics.median(counts)  # heavy tail
    in_stock = sum(p["in_stock"] for p in products) / len(products)
    assert 0.8 < in_stock < 0.9
    years = {p["release_date"].year for p in products}
    assert len(years) >= 5 and min(years) >= 2018 and max(years) <= 2024
    ratings = [p["rating"] for p in products]
    assert 3.6 < statistics.mean(ratings) < 4.5 and min(ratings) < 3.0


def test_texts_carry_facets_of_their_category(products: list[dict[str, Any]]) -> None:
    fs = facets("ecommerce")
    cons_low: list[int] = []
    cons_high: list[int] = []
    for p in products:
        group = p["category"].replace(" ", "_")
        found = find_facets("ecommerce", p["description"])
        assert 2 <= len(found) <= 4
        assert all(fs[k].group in (group, GENERAL) and fs[k].polarity == "pro" for k, _ in found)
        review = find_facets("ecommerce", p["review"])
        assert 2 <= len(review) <= 3 and all(fs[k].group in (group, GENERAL) for k, _ in review)
        n_cons = sum(fs[k].polarity == "con" for k, _ in review)
        (cons_low if p["rating"] < 3.5 else cons_high).append(n_cons)
    assert statistics.mean(cons_low) > statistics.mean(cons_high) + 0.5


def test_a_facet_appears_in_different_wordings(
    products: list[dict[str, Any]], emails: list[dict[str, Any]]
) -> None:
    for domain, rows, fields in (
        ("ecommerce", products, ("description", "review")),
        ("email", emails, ("body",)),
    ):
        wordings: dict[str, set[str]] = defaultdict(set)
        for row in rows:
            for field in fields:
                for key, phrasing in find_facets(domain, row[field]):
                    wordings[key].add(phrasing)
        assert len(wordings) > 0.9 * len(facets(domain))
        assert sum(len(w) >= 2 for w in wordings.values()) > 0.9 * len(wordings)


def test_emails_dates_people_and_flags(emails: list[dict[str, Any]]) -> None:
    ev = email_vocab()
    owners = {o.address for o in ev.owners}
    known = {p.address for p in ev.people}
    dates = [e["date"] for e in emails]
    assert {d.year for d in dates} == set(range(2019, 2025))
    assert sum(d.weekday() < 5 for d in dates) / len(dates) > 0.8
    assert sum(7 <= d.hour < 20 for d in dates) / len(dates) > 0.8
    for e in emails:
        assert e["sender"] in known and e["recipient"] in known
        assert e["sender_domain"] == e["sender"].split("@")[1]
        assert e["folder"] in ev.folders
        if e["folder"] == "sent":
            assert e["sender"] in owners and e["is_read"]
        else:
            assert e["recipient"] in owners
        topics = {k.split(".")[0] for k, _ in find_facets("email", e["body"])}
        assert len(topics) == 1
    starred = sum(e["is_starred"] for e in emails) / len(emails)
    assert 0.03 < starred < 0.15
    old = [e["is_read"] for e in emails if e["date"] < NOW.replace(tzinfo=None) - timedelta(days=365)]
    new = [e["is_read"] for e in emails if e["date"] > NOW.replace(tzinfo=None) - timedelta(days=120)]
    assert sum(old) / len(old) > 0.9 and sum(old) / len(old) > sum(new) / len(new)
    assert 0.1 < sum(e["has_attachment"] for e in emails) / len(emails) < 0.6


def test_threads_share_subjects_and_move_forward_in_time(emails: list[dict[str, Any]]) -> None:
    threads: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in emails:
        threads[e["thread_id"]].append(e)
    replies = 0
    for tid, mails in threads.items():
        root = next(m for m in mails if m["id"] == "E" + tid[1:])
        assert not root["subject"].startswith("Re: ")
        for m in mails:
            if m is root:
                continue
            replies += 1
            assert m["subject"] == f"Re: {root['subject']}"
            assert m["date"] > root["date"]
            assert {m["sender"], m["recipient"]} == {root["sender"], root["recipient"]}
    assert 0.15 < replies / len(emails) < 0.45
    assert Counter(len(m) for m in threads.values())[1] < len(threads)


def test_dates_are_plain_utc_datetimes(emails: list[dict[str, Any]], products: list[dict[str, Any]]) -> None:
    assert all(isinstance(e["date"], datetime) and e["date"].tzinfo is None for e in emails[:10])
    assert all(isinstance(p["release_date"], date) for p in products[:10])
