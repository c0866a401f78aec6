"""The corpus vocabulary: structure, unambiguous phrasings, facets found by meaning, lookups."""

from __future__ import annotations

import re

import pytest

from indexing.corpora.vocab import (
    GENERAL,
    check_vocab,
    email_vocab,
    facets,
    find_facets,
    find_visual,
    product_vocab,
    visual_terms,
)
from indexing.errors import CorpusError

_STOP_WORDS = (
    "a an the and or of to in on for with it is are be was were that this my me i you your at by from as not "
    "no so too very its but into out up than then there their they them we our us has have had can will would "
    "all any each every per just more most less much many few some"
)
STOP = set(_STOP_WORDS.split(" "))


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP and len(w) > 2}


@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_phrasings_are_unambiguous(domain: str) -> None:
    assert check_vocab(domain) == []


@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_every_facet_has_phrasings_and_a_disjoint_ood_split(domain: str) -> None:
    for f in facets(domain).values():
        assert len(f.doc_phrasings) >= 2, f.key
        assert f.query_train and f.query_ood, f.key
        assert not set(f.query_train) & set(f.query_ood), f.key
        assert f.key == f"{f.group}.{f.name}"


@pytest.mark.parametrize("domain", ["ecommerce", "email"])
def test_queries_share_few_words_with_document_phrasings(domain: str) -> None:
    shares = []
    for f in facets(domain).values():
        doc_words = set().union(*(_words(p) for p in f.doc_phrasings))
        for q in f.query_train + f.query_ood:
            words = _words(q)
            if words:
                share = len(words & doc_words) / len(words)
                assert share <= 0.5, (f.key, q, words & doc_words)
                shares.append(share)
    assert sum(shares) / len(shares) < 0.2


def test_categories_have_8_to_15_facets_with_pros_and_cons() -> None:
    pv = product_vocab()
    assert 12 <= len(pv.categories) <= 16
    for c in pv.categories.values():
        assert 8 <= len(c.facets) <= 15, c.name
        assert len(c.pros) >= 4 + 3 and c.cons, c.name  # descriptions take up to 4, reviews up to 3
        assert all(f.group in (c.name.replace(" ", "_"), GENERAL) for f in c.facets)


def test_brands_sell_in_one_to_four_categories_and_quotes_are_exercised() -> None:
    pv = product_vocab()
    for b in pv.brands.values():
        assert 1 <= len(b.categories) <= 4, b.name
        assert all(b.name in pv.categories[c].brands for c in b.categories)
    assert sum("'" in name for name in pv.brands) >= 2
    for c in pv.categories.values():
        assert 0 < c.price.low < c.price.median < c.price.high
        assert 1.0 <= c.rating_mean <= 5.0


def test_every_phrasing_is_found_where_generators_put_it() -> None:
    for f in facets("ecommerce").values():
        for p in f.doc_phrasings:
            assert find_facets("ecommerce", f"Honestly, it {p}. Would recommend.") == [(f.key, p)]
    for f in facets("email").values():
        for p in f.doc_phrasings:
            text = f"Hi Sam,\n\nFYI, {p}. Also, nothing else.\n\nBest,\nKate"
            assert find_facets("email", text) == [(f.key, p)]
            assert find_facets("email", f"{p[0].upper()}{p[1:]}.") == [(f.key, p)]


def test_find_facets_needs_whole_words_and_keeps_order() -> None:
    assert find_facets("ecommerce", "It has excellent ANCs.") == []
    text = "It has excellent ANC. Unfortunately, it traps heat around the ears."
    assert [k for k, _ in find_facets("ecommerce", text)] == [
        "headphones.noise_cancelling",
        "headphones.sweaty_ears",
    ]


def test_visual_terms_found_in_order_and_inner_words_hidden() -> None:
    found = find_visual("Two-tone navy foldable headphones against a plain white background.", "headphones")
    assert [(t.kind, t.value) for t in found] == [
        ("finish", "two-tone"),
        ("color", "navy"),
        ("shape", "foldable"),
        ("setting", "against a plain white background"),
    ]
    for term in visual_terms("speakers"):
        assert term.paraphrases and term.value not in term.paraphrases
    with pytest.raises(CorpusError):
        visual_terms("spaceships")


def test_email_roster_and_topics() -> None:
    ev = email_vocab()
    addresses = [p.address for p in ev.people]
    assert len(addresses) == len(set(addresses))
    assert all(o.kind == "internal" and not o.vip for o in ev.owners)
    assert sum(p.vip for p in ev.people) >= 1
    assert {"inbox", "sent", "archive", "projects"} <= set(ev.folders)
    for t in ev.topics.values():
        assert 4 <= len(t.facets) <= 8 and t.subjects, t.name
        assert t.style in ev.styles and set(t.sender_kinds) <= {p.kind for p in ev.people}
        assert all("{p}" in s for s in ev.styles[t.style].sentences)
    with pytest.raises(CorpusError):
        facets("music")
