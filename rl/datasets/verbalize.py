"""Step 4 of synthesis: say a condition tree in natural language.

Templates are organized in *families*: a family fixes the sentence frames, the phrasing style of the
conditions (see :mod:`rl.datasets.lexicon`), how conditions are joined and its lexical overlap with the
documents: an ``extractive`` family says each facet with the document's own phrasing, as an LLM
rewriting a program built from the document's phrases would (the paper's benchmarks read so); the
others paraphrase. Families marked ``ood`` are used only by the OOD split, so that split tests
wordings never seen in training; they all paraphrase, with held-out paraphrases. On top of any
family, a share of requests goes through the noisy wording of :mod:`rl.datasets.noise`.

>>> from rl.datasets.tree import And, Leaf, Not
>>> t = And((Leaf("structured", "brand", "=", ("Sony",)), Leaf("structured", "price", "<", (200,)),
...          Not(Leaf("image", "image", "sim", ("matte white finish",)))))
>>> text = verbalize(t, "ecommerce", family("imperative"), random.Random(1))
>>> "Sony" in text and "$200" in text and "matte white finish" in text
True
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Sequence
from dataclasses import dataclass

from rl.datasets.errors import BenchError
from rl.datasets.lexicon import (
    BOOL_CLAUSES,
    IMAGE_CLAUSES,
    NOUNS,
    VISUAL_WORDING,
    WORDS,
    Words,
    clause_phrases,
    spec_phrase,
)
from rl.datasets.tree import And, Leaf, Node, Not, Or, Value


@dataclass(frozen=True)
class Family:
    """One template family: frames (``{np}`` noun phrase, ``{conds}`` joined conditions) and a style."""

    name: str
    style: str
    """``post``, ``clause`` or ``spec`` (see :mod:`rl.datasets.lexicon`)."""
    frames: tuple[str, ...]
    joiner: str = "prose"
    """``prose`` joins "a, b and c"; ``comma`` joins "a, b, c"; ``semicolon`` joins "a; b; c"."""
    ood: bool = False
    extractive: bool = False
    """Say facets with the document's own phrasing instead of a query paraphrase."""


FAMILIES: tuple[Family, ...] = (
    Family(
        "request",
        "post",
        (
            "I'm looking for {np} {conds}.",
            "Looking for {np} {conds}.",
            "I want {np} {conds}.",
            "I'd like to see {np} {conds}.",
            "I need {np} {conds}.",
        ),
    ),
    Family(
        "imperative",
        "post",
        (
            "Show me {np} {conds}.",
            "Find {np} {conds}.",
            "Get me {np} {conds}.",
            "List {np} {conds}.",
            "Pull up {np} {conds}.",
        ),
        extractive=True,
    ),
    Family(
        "question",
        "post",
        (
            "Do you have any {np} {conds}?",
            "Are there {np} {conds}?",
            "Any {np} {conds}?",
            "Which {np} are there {conds}?",
            "Can you find {np} {conds}?",
        ),
    ),
    Family(
        "terse", "post", ("{np} {conds}", "{np}: {conds}", "{np} - {conds}"), joiner="comma", extractive=True
    ),
    Family(
        "where",
        "clause",
        (
            "Find {np} where {conds}.",
            "{NP} where {conds}.",
            "Search for {np} where {conds}.",
            "Show {np} where {conds}.",
        ),
        extractive=True,
    ),
    Family(
        "constraints",
        "clause",
        (
            "I need {np} such that {conds}.",
            "List {np} for which {conds}.",
            "Give me {np} for which {conds}.",
            "Which {np} satisfy this: {conds}?",
        ),
    ),
    Family(
        "spec",
        "spec",
        ("{NP}: {conds}", "filter {np} by {conds}", "{np} | {conds}"),
        joiner="semicolon",
        ood=True,
    ),
    Family(
        "recall",
        "post",
        (
            "I remember some {np} {conds} - can you find them again?",
            "Help me track down the {np} {conds}.",
            "There were some {np} {conds}; where are they?",
        ),
        ood=True,
    ),
)
_BY_NAME = {f.name: f for f in FAMILIES}


def family(name: str) -> Family:
    """The family called ``name``."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise BenchError(f"unknown template family {name!r}", code="bench_family") from None


def families(ood: bool) -> tuple[Family, ...]:
    """The families of the OOD split (``ood=True``) or of train and test."""
    return tuple(f for f in FAMILIES if f.ood == ood)


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _number(v: Value, unit: str) -> str:
    x = float(v)  # type: ignore[arg-type]
    text = f"{int(x)}" if x == int(x) else f"{x:.2f}".rstrip("0").rstrip(".")
    if unit == "$":
        return "$" + text
    return text + unit


def _date(v: Value, style: str) -> str:
    text = str(v)
    try:
        d = dt.date.fromisoformat(text)
    except ValueError:
        return text  # a year
    if style == "spec":
        return d.isoformat()
    return f"{_MONTHS[d.month - 1]} {d.day}, {d.year}"


def _render(leaf: Leaf, v: Value, words: Words, style: str) -> str:
    if leaf.transform is not None or leaf.field in ("date", "release_date"):
        return _date(v, style)
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int | float):
        return _number(v, words.unit)
    return str(v)


def _alternatives(items: Sequence[str], word: str) -> str:
    if len(items) <= 2:
        return f" {word} ".join(items)
    return ", ".join(items[:-1]) + f" {word} " + items[-1]


def _words(domain: str, fieldname: str) -> Words:
    try:
        return WORDS[domain][fieldname]
    except KeyError:
        raise BenchError(f"no wording for field {fieldname!r} of {domain}", code="bench_wording") from None


def _image_wording(leaf: Leaf) -> str:
    """``look``, ``scene`` or ``sim``: how the visual terms of an image leaf are best said."""
    facet = leaf.facet or ""
    kinds = [part.split("=", 1)[0] for part in facet.split(":", 1)[-1].split("+") if "=" in part]
    wordings = {VISUAL_WORDING.get(k, "sim") for k in kinds}
    return wordings.pop() if len(wordings) == 1 else "sim"


def leaf_phrase(
    leaf: Leaf, negated: bool, domain: str, style: str, rng: random.Random, *, extractive: bool = False
) -> str:
    """One condition in ``style``; ``negated`` says the condition is said negatively. ``extractive``: the
    phrase is a document's own words (a predicate of "it" for products, a clause for email), said as
    "that it <phrase>" / "that <phrase>" in prose."""
    words = _words(domain, leaf.field)
    if leaf.semantic:
        p = leaf.phrase
        if extractive and leaf.modality == "text" and style != "spec":
            p = f"that it {p}" if domain == "ecommerce" else f"that {p}"
        if style == "spec":
            name = "photo" if leaf.modality == "image" else leaf.field
            return spec_phrase("sim", negated).format(n=name, p=p)
        wording = _image_wording(leaf) if leaf.modality == "image" else "sim"
        if style == "clause":
            if leaf.modality == "image":
                return rng.choice(IMAGE_CLAUSES[wording][1 if negated else 0]).format(p=p)
            verb = "does not mention" if negated else rng.choice(("mentions", "talks about", "discusses"))
            return f"{words.name} {verb} {p}"
        table = words.neg if negated else words.pos
        return rng.choice(table[wording]).format(p=p)
    if leaf.op == "=" and isinstance(leaf.values[0], bool):
        truth = bool(leaf.values[0]) != negated
        if style == "spec":
            return f"{leaf.field.replace('_', ' ')}: {'yes' if truth else 'no'}"
        if style == "clause":
            return rng.choice(BOOL_CLAUSES[leaf.field][0 if truth else 1])
        return rng.choice(words.pos["true" if truth else "false"])
    rendered = [_render(leaf, v, words, style) for v in leaf.values]
    a, b = (rendered + rendered)[:2]
    if leaf.op == "in":
        v = _alternatives(rendered, "nor" if negated and style != "spec" else "or")
        if style == "spec":
            v = ", ".join(rendered)
    else:
        v = rendered[0]
    if style == "spec":
        return spec_phrase(leaf.op, negated).format(n=leaf.field.replace("_", " "), v=v, a=a, b=b)
    if style == "clause":
        name = "the release year" if leaf.transform == "year" and leaf.field == "release_date" else words.name
        if leaf.transform == "year" and leaf.field == "date":
            name = "the year it was sent"
        options = clause_phrases(leaf.op, negated)
        if not options:
            raise BenchError(f"no clause wording for {leaf.op} (negated={negated})", code="bench_wording")
        return f"{name} {rng.choice(options).format(v=v, a=a, b=b)}"
    table = words.neg if negated else words.pos
    if leaf.op == "=" and leaf.transform != "year" and leaf.field in ("date", "release_date"):
        return rng.choice(table["on"]).format(v=v)  # one day: "sent on March 3, 2023"
    if leaf.op not in table:
        raise BenchError(f"no wording for {leaf.field} {leaf.op} (negated={negated})", code="bench_wording")
    return rng.choice(table[leaf.op]).format(v=v, a=a, b=b)


def _merge_or(node: Or) -> Leaf | None:
    """``brand = 'A' OR brand = 'B'`` is said as one choice: "from A or B"."""
    kids = node.children
    if all(
        isinstance(k, Leaf) and not k.semantic and k.op == "=" and not isinstance(k.values[0], bool)
        for k in kids
    ):
        leaves_ = [k for k in kids if isinstance(k, Leaf)]
        if len({(k.field, k.transform) for k in leaves_}) == 1:
            first = leaves_[0]
            return Leaf("structured", first.field, "in", tuple(k.values[0] for k in leaves_), first.transform)
    return None


class _Speaker:
    def __init__(self, domain: str, fam: Family, rng: random.Random) -> None:
        self.domain, self.fam, self.rng = domain, fam, rng

    @property
    def style(self) -> str:
        return self.fam.style

    def say(self, node: Node, negated: bool = False) -> str:
        if isinstance(node, Leaf):
            return leaf_phrase(
                node, negated, self.domain, self.style, self.rng, extractive=self.fam.extractive
            )
        if isinstance(node, Not):
            if isinstance(node.child, Or):
                return self.say_nor(node.child)
            return self.say(node.child, not negated)
        if isinstance(node, Or):
            merged = _merge_or(node)
            if merged is not None:
                return self.say(merged, negated)
            parts = [self.say(c) for c in node.children]
            if self.style == "spec":
                return "(" + " or ".join(parts) + ")"
            # Prose needs explicit bounds for a choice among other conditions, or "a and b or c"
            # reads two ways.
            if any(isinstance(c, And) for c in node.children):
                return "either " + ", or ".join(parts)
            return "either " + " or ".join(parts)
        parts = [self.say(c) for c in node.children]
        if self.style == "spec":
            return "(" + " and ".join(parts) + ")"
        return " and ".join(parts)

    def say_nor(self, node: Or) -> str:
        merged = _merge_or(node)
        if merged is not None:
            return self.say(merged, negated=True)
        if self.style == "spec":
            return "not (" + " or ".join(self.say(c) for c in node.children) + ")"
        if self.style == "post" and self.rng.random() < 0.5:
            lead = self.rng.choice(("excluding anything", "but nothing", "leaving out anything"))
            return f"{lead} " + " or ".join(self.say(c) for c in node.children)
        return " and ".join(self.say(c, negated=True) for c in node.children)


def _plural(noun: str) -> str:
    if noun.endswith(("s", "x")):
        return noun
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _join(parts: list[str], joiner: str) -> str:
    if joiner == "comma":
        return ", ".join(parts)
    if joiner == "semicolon":
        return "; ".join(parts)
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def verbalize(tree: Node, domain: str, fam: Family, rng: random.Random) -> str:
    """The natural-language request for ``tree`` in family ``fam``; random choices come from ``rng``."""
    speaker = _Speaker(domain, fam, rng)
    conds = list(tree.children) if isinstance(tree, And) else [tree]
    noun = rng.choice(NOUNS[domain])
    head: list[str] = []
    if fam.style == "post":
        # Positive category and brand conditions read best in front of the noun: "Sony headphones".
        for fieldname in ("category", "brand"):
            hit = next(
                (c for c in conds if isinstance(c, Leaf) and c.field == fieldname and c.op == "="), None
            )
            if hit is not None and (fieldname == "category" or rng.random() < 0.6):
                conds.remove(hit)
                if fieldname == "category":
                    noun = _plural(str(hit.values[0]))
                else:
                    head.append(str(hit.values[0]))
    rng.shuffle(conds)
    np_ = " ".join([*head, noun])
    parts = [speaker.say(c) for c in conds]
    text = rng.choice(fam.frames).format(np=np_, NP=np_[:1].upper() + np_[1:], conds=_join(parts, fam.joiner))
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] if fam.name != "terse" else text
