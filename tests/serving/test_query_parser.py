"""The self-query parser: which filters it pulls out of sample requests, and what query remains."""

from __future__ import annotations

from datetime import date

import pytest

from indexing.schema import EMAILS, PRODUCTS, DType
from serving.query_parser import Condition, Vocabulary, parse_query

PRODUCT_VOCAB = Vocabulary(
    {
        "brand": ("Sony", "Bose", "Apple", "Levi's", "Bose Pro"),
        "category": ("headphones", "laptop", "running_shoes"),
        "color": ("black", "white", "matte white", "red"),
    }
)
EMAIL_VOCAB = Vocabulary(
    {"sender_domain": ("acme.com", "globex.org"), "folder": ("inbox", "sent", "archive")}
)


def _c(spec: str) -> Condition:
    name, op, raw = spec.split(" ", 2)
    dtype = (PRODUCTS if PRODUCTS.has(name) else EMAILS).field(name).dtype
    value: object = raw
    if dtype in (DType.DATE, DType.DATETIME):
        value = date.fromisoformat(raw)
    elif dtype is DType.FLOAT:
        value = float(raw)
    elif dtype is DType.INT:
        value = int(raw)
    elif dtype is DType.BOOL:
        value = raw == "true"
    return Condition(name, op, value)  # type: ignore[arg-type]


PRODUCT_CASES = [
    (  # a comparison alone, with a number past the rating scale, is a price
        "wireless headphones under 200",
        ["category == headphones", "price < 200"],
        "wireless",
    ),
    (  # ... but not a number a rating could be, nor one another field's cue has read
        "headphones at least 4 with over 100 reviews",
        ["category == headphones", "review_count > 100"],
        None,
    ),
    (
        "Sony headphones under $200 that reviewers call comfortable",
        ["brand == Sony", "category == headphones", "price < 200"],
        "reviewers call comfortable",
    ),
    (
        "Black laptops priced between $500 and $900 rated at least 4 stars",
        ["category == laptop", "color == black", "price >= 500", "price <= 900", "rating >= 4"],
        "Black laptops",
    ),
    (
        "running shoes with a rating of 4.5 or higher, in stock, released after 2021",
        ["category == running_shoes", "rating >= 4.5", "in_stock == true", "release_date >= 2022-01-01"],
        "running shoes",
    ),
    (
        "Levi's jeans, not Apple, costing no more than 80 dollars with over 100 reviews",
        ["brand == Levi's", "price <= 80", "review_count > 100"],
        "jeans",
    ),
    (
        "Find products where the price is at most $120 and the rating is 4 or more, released in March 2022",
        ["price <= 120", "rating >= 4", "release_date >= 2022-03-01", "release_date < 2022-04-01"],
        None,
    ),
    (
        "Show me headphones with a 3 to 4.5 star rating in the $50-$150 range that are out of stock",
        [
            "category == headphones",
            "price >= 50",
            "price <= 150",
            "rating >= 3",
            "rating <= 4.5",
            "in_stock == false",
        ],
        "headphones",
    ),
]

EMAIL_CASES = [
    (
        "unread emails from acme.com about the quarterly budget sent before June 2021",
        ["sender_domain == acme.com", "date < 2021-06-01", "is_read == false"],
        "quarterly budget",
    ),
    (
        "starred messages from jane.doe@globex.org with an attachment in the archive folder",
        [
            "sender == jane.doe@globex.org",
            "folder == archive",
            "is_starred == true",
            "has_attachment == true",
        ],
        None,
    ),
    (
        "Emails sent to bob@acme.com dated March 3, 2021 to April 2021 that were opened",
        ["recipient == bob@acme.com", "date >= 2021-03-03", "date < 2021-05-01", "is_read == true"],
        None,
    ),
    (
        "Find messages where it is not starred, nothing is attached and the year it was sent is 2022.",
        ["date >= 2022-01-01", "date < 2023-01-01", "is_starred == false", "has_attachment == false"],
        None,
    ),
]


@pytest.mark.parametrize(("nl", "expected", "query"), PRODUCT_CASES)
def test_product_filters(nl: str, expected: list[str], query: str | None) -> None:
    parsed = parse_query(nl, PRODUCTS, PRODUCT_VOCAB)
    assert set(parsed.conditions) == {_c(e) for e in expected}
    if query is not None:
        assert parsed.query == query


@pytest.mark.parametrize(("nl", "expected", "query"), EMAIL_CASES)
def test_email_filters(nl: str, expected: list[str], query: str | None) -> None:
    parsed = parse_query(nl, EMAILS, EMAIL_VOCAB)
    assert set(parsed.conditions) == {_c(e) for e in expected}
    if query is not None:
        assert parsed.query == query


def test_no_or_and_no_not() -> None:
    parsed = parse_query(
        "Sony or Bose wireless headphones whose reviews praise the noise cancelling, not the matte-white ones",
        PRODUCTS,
        PRODUCT_VOCAB,
    )
    # Two brands would need OR, a negated color would need NOT: neither becomes a filter.
    assert parsed.conditions == (_c("category == headphones"),)
    assert set(parsed.dropped) == {"Sony", "Bose", "matte white"}
    assert "white" not in parsed.query and "Sony" not in parsed.query
    assert "noise cancelling" in parsed.query


def test_negated_flag_is_its_other_value() -> None:
    parsed = parse_query("emails from globex.org that don't have an attachment", EMAILS, EMAIL_VOCAB)
    assert set(parsed.conditions) == {_c("sender_domain == globex.org"), _c("has_attachment == false")}


def test_everyday_words_need_a_cue() -> None:
    # "sent" is a folder, but here it is a verb.
    parsed = parse_query("emails sent after 2020 about the launch", EMAILS, EMAIL_VOCAB)
    assert set(parsed.conditions) == {_c("date >= 2021-01-01")}
    assert parsed.query == "launch"


def test_numbers_without_a_cue_are_not_filters() -> None:
    parsed = parse_query("a tent for 2 to 3 people with 4 poles", PRODUCTS, PRODUCT_VOCAB)
    assert parsed.conditions == ()
    assert "tent" in parsed.query


def test_all_filters_leave_category_words_or_the_request() -> None:
    only = parse_query("black laptops under $900", PRODUCTS, PRODUCT_VOCAB)
    assert only.query == "black laptops"
    nothing = parse_query("under $900", PRODUCTS, PRODUCT_VOCAB)
    assert nothing.query == "under $900"


def test_a_branch_of_an_or_is_not_a_filter() -> None:
    parsed = parse_query(
        "Items released in 2021 or later, either priced between $250 and $400 or in the laptop category",
        PRODUCTS,
        PRODUCT_VOCAB,
    )
    assert parsed.conditions == (_c("release_date >= 2021-01-01"),)
    stock = parse_query("red headphones in stock or whose reviews praise the bass", PRODUCTS, PRODUCT_VOCAB)
    assert set(stock.conditions) == {_c("category == headphones"), _c("color == red")}


def test_negation_scope_covers_the_clause() -> None:
    parsed = parse_query(
        "Sony items with good reviews, but nothing that looks bulky or in black", PRODUCTS, PRODUCT_VOCAB
    )
    assert parsed.conditions == (_c("brand == Sony"),)
    assert "black" in parsed.dropped
    flags = parse_query("emails about the launch, excluding anything starred", EMAILS, EMAIL_VOCAB)
    assert flags.conditions == (_c("is_starred == false"),)
