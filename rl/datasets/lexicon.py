"""Words for verbalizing leaf conditions, per field and per style.

Three styles: ``post`` phrases attach after a noun ("headphones *under $200*"), ``clause`` phrases are
statements about a field ("*the price is under $200*"), ``spec`` phrases are terse specifications
("*price < $200*"). ``{v}`` is one rendered value, ``{a}``/``{b}`` the bounds of a range, ``{p}`` the
searched phrase of a text or image condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Phrases = tuple[str, ...]


@dataclass(frozen=True)
class Words:
    """How one field is spoken about."""

    name: str
    """Its name in a clause: "the price", "the sender's domain"."""
    pos: dict[str, Phrases] = field(default_factory=dict)
    """Post-modifier phrases per operator (``=``, ``in``, ``<``, ..., ``true``, ``false``, ``sim``)."""
    neg: dict[str, Phrases] = field(default_factory=dict)
    """Post-modifier phrases of the negated condition, per operator."""
    unit: str = ""
    """How a number is shown: ``$`` in front for prices, or a suffix such as " stars"."""


_CMP_CLAUSE: dict[str, Phrases] = {
    "=": ("is {v}",),
    "<": ("is below {v}", "is under {v}", "is less than {v}"),
    "<=": ("is at most {v}", "is {v} or less", "does not exceed {v}"),
    ">": ("is above {v}", "is over {v}", "is more than {v}"),
    ">=": ("is at least {v}", "is {v} or more"),
    "between": ("is between {a} and {b}", "lies between {a} and {b}"),
    "in": ("is {v}", "is either {v}"),
}
_CMP_CLAUSE_NEG: dict[str, Phrases] = {
    "=": ("is not {v}", "isn't {v}"),
    "in": ("is neither {v}", "is none of {v}"),
}
_SPEC: dict[str, str] = {
    "=": "{n}: {v}",
    "<": "{n} < {v}",
    "<=": "{n} <= {v}",
    ">": "{n} > {v}",
    ">=": "{n} >= {v}",
    "between": "{n} in [{a}, {b}]",
    "in": "{n} in {{{v}}}",
    "sim": '{n} ~ "{p}"',
}
_SPEC_NEG: dict[str, str] = {"=": "{n} != {v}", "in": "{n} not in {{{v}}}", "sim": 'not {n} ~ "{p}"'}


def clause_phrases(op: str, negated: bool) -> Phrases:
    """Predicates for the ``clause`` style of a comparison (the field's name goes in front)."""
    table = _CMP_CLAUSE_NEG if negated else _CMP_CLAUSE
    return table.get(op, ())


def spec_phrase(op: str, negated: bool) -> str:
    """The ``spec`` style pattern of an operator (``{n}`` is the field's short name)."""
    return (_SPEC_NEG if negated else _SPEC)[op]


PRODUCT_WORDS: dict[str, Words] = {
    "brand": Words(
        "the brand",
        pos={"=": ("from {v}", "made by {v}", "by {v}"), "in": ("from {v}", "made by {v}")},
        neg={"=": ("not from {v}", "not made by {v}"), "in": ("from neither {v}", "not made by {v}")},
    ),
    "category": Words(
        "the category",
        pos={"=": ("in the {v} category", "listed under {v}"), "in": ("in the {v} categories",)},
        neg={
            "=": ("outside the {v} category", "not listed under {v}"),
            "in": ("outside the {v} categories",),
        },
    ),
    "color": Words(
        "the color",
        pos={"=": ("in {v}", "colored {v}", "that come in {v}"), "in": ("in {v}", "colored {v}")},
        neg={"=": ("not in {v}", "that aren't {v}"), "in": ("in neither {v}", "not colored {v}")},
    ),
    "price": Words(
        "the price",
        unit="$",
        pos={
            "<": ("under {v}", "below {v}", "cheaper than {v}", "for less than {v}"),
            "<=": ("{v} or less", "at most {v}", "no more than {v}"),
            ">": ("over {v}", "above {v}", "costing more than {v}"),
            ">=": ("{v} or more", "at least {v}", "costing {v} or more"),
            "between": ("between {a} and {b}", "priced {a} to {b}", "in the {a}-{b} range"),
        },
    ),
    "rating": Words(
        "the rating",
        pos={
            "<": ("rated below {v}", "rated under {v} stars"),
            "<=": ("rated {v} or lower", "with a rating of at most {v}"),
            ">": ("rated above {v}", "rated higher than {v} stars"),
            ">=": ("rated {v} or higher", "rated at least {v} stars", "with {v}+ stars"),
            "between": ("rated between {a} and {b}", "with a {a} to {b} star rating"),
        },
    ),
    "review_count": Words(
        "the number of reviews",
        pos={
            "<": ("with fewer than {v} reviews", "reviewed fewer than {v} times"),
            "<=": ("with at most {v} reviews", "with no more than {v} reviews"),
            ">": ("with more than {v} reviews", "reviewed over {v} times"),
            ">=": ("with at least {v} reviews", "with {v}+ reviews"),
            "between": ("with {a} to {b} reviews", "with between {a} and {b} reviews"),
        },
    ),
    "in_stock": Words(
        "availability",
        pos={
            "true": ("in stock", "available now", "ready to ship"),
            "false": ("out of stock", "currently unavailable"),
        },
    ),
    "release_date": Words(
        "the release date",
        pos={
            "=": ("released in {v}", "launched in {v}"),
            "on": ("released on {v}", "launched on {v}", "that came out on {v}"),
            "<": ("released before {v}", "launched before {v}"),
            "<=": ("released in {v} or earlier", "released no later than {v}"),
            ">": ("released after {v}", "launched after {v}"),
            ">=": ("released in {v} or later", "released since {v}"),
            "between": ("released between {a} and {b}", "launched between {a} and {b}"),
        },
    ),
    "title": Words(
        "the title",
        pos={"sim": ("with {p} in the name", "named like {p}", "whose title suggests {p}")},
        neg={"sim": ("whose title doesn't suggest {p}", "not named like {p}")},
    ),
    "description": Words(
        "the description",
        pos={
            "sim": (
                "whose description mentions {p}",
                "with {p} in the description",
                "whose listing talks about {p}",
            )
        },
        neg={"sim": ("whose description doesn't mention {p}", "without {p} in the description")},
    ),
    "review": Words(
        "the review",
        pos={
            "sim": ("whose reviews mention {p}", "with reviews about {p}", "where reviewers talk about {p}")
        },
        neg={"sim": ("whose reviews don't mention {p}", "without reviews about {p}")},
    ),
    "image": Words(
        "the photo",
        pos={
            "sim": ("pictured with {p}", "whose photo shows {p}", "with {p} in the picture"),
            "look": ("that look {p}", "with a {p} look", "that appear {p} in the photo"),
            "scene": ("photographed {p}", "pictured {p}", "shown {p}"),
        },
        neg={
            "sim": ("not pictured with {p}", "whose photo doesn't show {p}"),
            "look": ("that don't look {p}", "without a {p} look"),
            "scene": ("not photographed {p}", "not pictured {p}"),
        },
    ),
}

EMAIL_WORDS: dict[str, Words] = {
    "sender": Words(
        "the sender",
        pos={"=": ("from {v}", "sent by {v}"), "in": ("from {v}", "sent by {v}")},
        neg={"=": ("not from {v}", "not sent by {v}"), "in": ("from neither {v}",)},
    ),
    "sender_domain": Words(
        "the sender's domain",
        pos={"=": ("from someone at {v}", "sent from {v}", "from an {v} address"), "in": ("sent from {v}",)},
        neg={"=": ("not from anyone at {v}", "not sent from {v}"), "in": ("sent from neither {v}",)},
    ),
    "recipient": Words(
        "the recipient",
        pos={"=": ("sent to {v}", "addressed to {v}"), "in": ("sent to {v}",)},
        neg={"=": ("not sent to {v}",), "in": ("sent to neither {v}",)},
    ),
    "folder": Words(
        "the folder",
        pos={"=": ("in the {v} folder", "filed under {v}"), "in": ("in the {v} folders", "filed under {v}")},
        neg={"=": ("outside the {v} folder", "not filed under {v}"), "in": ("in neither {v} folder",)},
    ),
    "thread_id": Words("the thread", pos={"=": ("in thread {v}",)}, neg={"=": ("outside thread {v}",)}),
    "date": Words(
        "the date",
        pos={
            "=": ("sent in {v}", "from {v}"),
            "on": ("sent on {v}", "from {v}", "received on {v}"),
            "<": ("sent before {v}", "dated before {v}"),
            "<=": ("sent on or before {v}", "sent no later than {v}"),
            ">": ("sent after {v}", "dated after {v}"),
            ">=": ("sent on or after {v}", "received since {v}"),
            "between": ("sent between {a} and {b}", "dated {a} to {b}"),
        },
    ),
    "is_read": Words(
        "read status",
        pos={
            "true": ("that I've already read", "that were opened"),
            "false": ("that I haven't read", "still unread"),
        },
    ),
    "is_starred": Words(
        "the star",
        pos={
            "true": ("that I starred", "marked with a star"),
            "false": ("that aren't starred", "without a star"),
        },
    ),
    "has_attachment": Words(
        "attachments",
        pos={
            "true": ("with an attachment", "that carry a file"),
            "false": ("without attachments", "with no file attached"),
        },
    ),
    "subject": Words(
        "the subject",
        pos={"sim": ("with a subject about {p}", "whose subject line is about {p}", "titled about {p}")},
        neg={"sim": ("whose subject isn't about {p}", "not titled about {p}")},
    ),
    "body": Words(
        "the message",
        pos={
            "sim": (
                "that mention {p}",
                "talking about {p}",
                "whose body discusses {p}",
                "about {p}",
                "where someone writes about {p}",
            )
        },
        neg={"sim": ("that don't mention {p}", "not talking about {p}", "with nothing about {p}")},
    ),
}

WORDS: dict[str, dict[str, Words]] = {"ecommerce": PRODUCT_WORDS, "email": EMAIL_WORDS}

BOOL_CLAUSES: dict[str, tuple[Phrases, Phrases]] = {
    "in_stock": (
        ("it is in stock", "it can be ordered now"),
        ("it is out of stock", "it cannot be ordered now"),
    ),
    "is_read": (("it has been read", "it was opened"), ("it is unread", "it was never opened")),
    "is_starred": (("it is starred", "it carries a star"), ("it is not starred", "it has no star")),
    "has_attachment": (
        ("it has an attachment", "a file is attached"),
        ("it has no attachment", "nothing is attached"),
    ),
}
"""Clause-style statements of a boolean field: (when true, when false)."""

IMAGE_CLAUSES: dict[str, tuple[Phrases, Phrases]] = {
    "sim": (("the photo shows {p}",), ("the photo does not show {p}",)),
    "look": (("it looks {p}", "it appears {p} in the photo"), ("it does not look {p}",)),
    "scene": (("it is photographed {p}", "the photo was taken {p}"), ("it is not photographed {p}",)),
}
"""Clause-style statements of an image condition, by what its phrase describes: (positive, negated)."""

VISUAL_WORDING: dict[str, str] = {
    "color": "look",
    "finish": "look",
    "shape": "look",
    "material": "sim",
    "setting": "scene",
}
"""Which wording fits a visual term: adjectives (colors, finishes, shapes) *look*, materials are
*shown*, settings are where the photo was *taken*."""

NOUNS: dict[str, Phrases] = {
    "ecommerce": ("products", "items", "things", "listings"),
    "email": ("emails", "messages", "mails", "e-mails"),
}
