"""Structured leaves made from a document hold for it exactly when asked to, and always say something."""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from indexing.schema import EMAILS, PRODUCTS
from rl.datasets.leaves import DomainFacts, LeafMaker
from rl.datasets.phrases import PhraseBook
from rl.datasets.tree import Leaf, Value

PRODUCT_FACTS = DomainFacts(
    PRODUCTS,
    values={"brand": ("Sony", "Bose", "JBL", "Levi's"), "category": ("headphones", "speakers"),
            "color": ("black", "white", "red")},
    by_category={"headphones": {"brand": ("Sony", "Bose"), "color": ("black", "white")}},
)  # fmt: skip
EMAIL_FACTS = DomainFacts(
    EMAILS,
    values={"sender_domain": ("globex.com", "hooli.com"), "folder": ("inbox", "archive", "sent"),
            "sender": ("a@globex.com", "b@hooli.com"), "recipient": ("me@northwind-labs.com", "you@northwind-labs.com")},
)  # fmt: skip


class NoRanks:
    def rank(self, fieldname: str, phrase: str, doc_id: str) -> int | None:
        return None


def _value(leaf: Leaf, doc: dict[str, Any]) -> Any:
    v = doc[leaf.field]
    if leaf.transform == "year":
        return v.year
    if isinstance(v, dt.datetime):
        return v.date()
    return v


def _as(v: Value, like: Any) -> Any:
    if isinstance(like, dt.date):
        return dt.date.fromisoformat(str(v))
    return v


def holds(leaf: Leaf, doc: dict[str, Any]) -> bool:
    x = _value(leaf, doc)
    vals = [_as(v, x) for v in leaf.values]
    if leaf.op == "between":
        return bool(vals[0] <= x <= vals[1])
    if leaf.op == "in":
        return x in vals
    ops = {"=": x == vals[0], "<": x < vals[0], "<=": x <= vals[0], ">": x > vals[0], ">=": x >= vals[0]}
    return bool(ops[leaf.op])


dates = st.dates(min_value=dt.date(2018, 1, 1), max_value=dt.date(2024, 12, 31))


@settings(max_examples=150, deadline=None)
@given(
    price=st.floats(min_value=1.0, max_value=5000.0),
    rating=st.floats(min_value=1.0, max_value=5.0).map(lambda r: round(r, 1)),
    reviews=st.integers(min_value=0, max_value=250_000),
    stock=st.booleans(),
    released=dates,
    seed=st.integers(min_value=0, max_value=2**31),
    truth=st.booleans(),
)
def test_product_leaves_hold_exactly_when_asked(
    price: float, rating: float, reviews: int, stock: bool, released: dt.date, seed: int, truth: bool
) -> None:
    doc = {"id": "P00001", "brand": "Sony", "category": "headphones", "color": "black", "price": round(price, 2),
           "rating": rating, "review_count": reviews, "in_stock": stock, "release_date": released}  # fmt: skip
    maker = LeafMaker(PRODUCT_FACTS, PhraseBook("ecommerce"), NoRanks(), doc, random.Random(seed), ood=False)
    for name in ("brand", "category", "color", "price", "rating", "review_count", "in_stock", "release_date"):
        leaf = maker.structured_on(name, truth)
        if leaf is None:
            continue
        assert holds(leaf, doc) == truth, leaf
        if leaf.field == "rating":
            assert all(1.0 <= float(v) <= 5.0 for v in leaf.values), leaf  # type: ignore[arg-type]
    day = maker.single_day()
    assert day is not None and day.op == "=" and holds(day, doc)


@settings(max_examples=150, deadline=None)
@given(
    sent=st.datetimes(min_value=dt.datetime(2019, 1, 1), max_value=dt.datetime(2024, 12, 31)),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    seed=st.integers(min_value=0, max_value=2**31),
    truth=st.booleans(),
)
def test_email_leaves_hold_exactly_when_asked(
    sent: dt.datetime, flags: tuple[bool, bool, bool], seed: int, truth: bool
) -> None:
    doc = {"id": "E00001", "sender": "a@globex.com", "sender_domain": "globex.com", "recipient": "me@northwind-labs.com",
           "date": sent, "folder": "inbox", "is_read": flags[0], "is_starred": flags[1], "has_attachment": flags[2]}  # fmt: skip
    maker = LeafMaker(EMAIL_FACTS, PhraseBook("email"), NoRanks(), doc, random.Random(seed), ood=False)
    made = 0
    for name in ("sender", "sender_domain", "folder", "date", "is_read", "is_starred", "has_attachment"):
        leaf = maker.structured_on(name, truth)
        if leaf is None:
            continue
        made += 1
        assert holds(leaf, doc) == truth, leaf
    assert made >= 4
    day = maker.single_day()
    assert day is not None and day.transform == "date" and holds(day, doc)
