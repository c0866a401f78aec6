"""Step 2 of synthesis: leaf conditions made from one gold document's own fields.

Structured leaves compare a field with a value taken from the gold document (rounded to values a
person would say: "under $200", "rated 4.5 or higher"); date conditions stay within the corpus's
dates. Semantic leaves name a vocabulary facet the document carries in a text or image field; a
negated semantic leaf names a facet it lacks. How a facet is said depends on the template family:
a *paraphrasing* family uses a query paraphrase (never the document's own words), an *extractive*
one the document's own phrasing, as an LLM rewriting a program built from the document would. Which
leaves hold for the gold document is decided here, so every filled tree is true for it by construction.
"""

from __future__ import annotations

import datetime as dt
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from indexing.schema import CorpusSchema, DType, Role
from rl.datasets.structure import SAnd, Shape, SNot, SOr
from rl.datasets.tree import And, Leaf, Modality, Node, Not, Or, Value

CATEGORICAL: dict[str, tuple[str, ...]] = {
    "ecommerce": ("brand", "category", "color"),
    "email": ("sender_domain", "folder", "sender", "recipient"),
}
"""String fields a person filters on by value (ids and thread ids are not among them)."""

FIELD_WEIGHTS: dict[str, dict[str, float]] = {
    "ecommerce": {
        "brand": 0.22,
        "category": 0.14,
        "color": 0.12,
        "price": 0.2,
        "rating": 0.1,
        "review_count": 0.06,
        "in_stock": 0.07,
        "release_date": 0.09,
    },
    "email": {
        "sender_domain": 0.2,
        "folder": 0.14,
        "sender": 0.1,
        "recipient": 0.03,
        "date": 0.25,
        "is_read": 0.1,
        "is_starred": 0.08,
        "has_attachment": 0.1,
    },
}
"""How often each structured field is picked for a condition."""

MODALITY_WEIGHTS: dict[str, dict[str, float]] = {
    "ecommerce": {"structured": 0.45, "text": 0.35, "image": 0.2},
    "email": {"structured": 0.55, "text": 0.45},
}
"""How often a condition is structured, text or image (each domain uses every modality it has)."""

L1_MODALITY_WEIGHTS: dict[str, dict[str, float]] = {
    "ecommerce": {"structured": 0.1, "text": 0.6, "image": 0.3},
    "email": {"structured": 0.15, "text": 0.85},
}
"""A single structured condition rarely singles out one document, so L1 leans on semantic ones."""

SINGLE_DAY_SHARE = 0.7
"""Share of one-condition structured leaves that name the document's date to the day."""
NUMERIC_OPS: tuple[tuple[str, float], ...] = (
    ("<", 0.3),
    ("<=", 0.1),
    (">", 0.2),
    (">=", 0.1),
    ("between", 0.3),
)
DATE_OPS: tuple[tuple[str, float], ...] = (
    ("=", 0.25),
    ("<", 0.15),
    (">=", 0.2),
    (">", 0.1),
    ("between", 0.3),
)


class PhraseBook(Protocol):
    """What leaves need from the vocabulary (see :mod:`rl.datasets.phrases`)."""

    def carried(self, fieldname: str, text: str, category: str | None = None) -> list[str]:
        """Facet keys ``text`` of ``fieldname`` carries (``category`` narrows visual terms)."""

    def found(self, fieldname: str, text: str, category: str | None = None) -> list[tuple[str, str]]:
        """``(facet key, the text's own words for it)`` for every facet ``text`` carries."""

    def doc_phrasings(self, facet: str) -> tuple[str, ...]:
        """The phrasings documents use for ``facet``."""

    def paraphrases(self, facet: str, ood: bool) -> tuple[str, ...]:
        """Query paraphrases of ``facet``: the OOD set or the train set."""


class Ranks(Protocol):
    """Where a document ranks in the gold-width retrieval of (field, phrase)."""

    def rank(self, fieldname: str, phrase: str, doc_id: str) -> int | None:
        """1-based rank of ``doc_id``, or ``None`` when it is not retrieved."""


@dataclass(frozen=True)
class DomainFacts:
    """What leaf making knows about a corpus besides the gold document."""

    schema: CorpusSchema
    values: Mapping[str, tuple[str, ...]]
    """Distinct values of each categorical field, most frequent first."""
    by_category: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)
    """For products: values of brand and color within each category, so alternatives are plausible."""
    facets: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Facets found in each text or image field of the corpus (the pool of absent facets)."""
    dates: Mapping[str, tuple[dt.date, dt.date]] = field(default_factory=dict)
    """First and last day of each date field in the corpus: date conditions stay within them."""

    @property
    def domain(self) -> str:
        return self.schema.domain

    def semantic_fields(self, modality: str) -> tuple[str, ...]:
        """Text (or image) fields that carry at least one facet somewhere in the corpus."""
        role = Role.IMAGE if modality == "image" else Role.TEXT
        return tuple(f for f in self.schema.names(role) if self.facets.get(f))


def _pick(rng: random.Random, weighted: Mapping[str, float], exclude: set[str] = frozenset()) -> str | None:  # type: ignore[assignment]
    options = [(k, w) for k, w in weighted.items() if k not in exclude and w > 0]
    if not options:
        return None
    return rng.choices([k for k, _ in options], weights=[w for _, w in options], k=1)[0]


def _step(x: float) -> float:
    """A round step for thresholds near ``x``: 5, 10, 50, 100, ... as a person would say them."""
    for bound, step in ((20, 5), (100, 10), (500, 50), (2000, 100), (10_000, 500)):
        if x < bound:
            return step
    return float(10 ** max(3, int(math.log10(x)) - 1))


def _num(x: float, integral: bool) -> Value:
    return round(x) if integral else round(x, 2)


def _threshold(
    v: float, op: str, truth: bool, rng: random.Random, step: float, integral: bool
) -> tuple[Value, ...] | None:
    """Values of ``field op values`` that is ``truth`` for a document whose field is ``v``."""
    lo = math.floor(v / step) * step
    hi = math.ceil(v / step) * step
    extra = step * rng.choice((0, 0, 1))
    if op == "between":
        if truth:
            a, b = lo - extra, max(hi, lo + step) + step * rng.choice((0, 1))
        else:
            a, b = hi + step + extra, hi + 2 * step + extra
        return None if a < 0 else (_num(a, integral), _num(b, integral))
    # For each operator: a threshold that makes the comparison hold, and one that makes it fail.
    holds = {"<": lo + step + extra, "<=": hi + extra, ">": hi - step - extra, ">=": lo - extra}
    fails = {"<": lo - extra, "<=": lo - step - extra, ">": hi + extra, ">=": hi + step + extra}
    t = (holds if truth else fails)[op]
    if t <= 0:
        return None
    return (_num(t, integral),)


NUMERIC_RANGES: dict[str, tuple[float, float]] = {"rating": (1.0, 5.0)}
"""Closed ranges of bounded numeric fields; a threshold outside says nothing ("rated 5.5 or lower")."""


def _vacuous(name: str, op: str, values: Sequence[Value]) -> bool:
    """Whether ``name op values`` names a value the field cannot take, or holds for all or none."""
    lo, hi = NUMERIC_RANGES.get(name, (0.0, math.inf))
    x = [float(y) for y in values]  # type: ignore[arg-type]
    if any(not lo <= y <= hi for y in x):
        return True
    if op == "between":
        return (x[0] <= lo and x[1] >= hi) or x[0] > hi or x[1] < lo
    return {
        "<": x[0] > hi or x[0] <= lo,
        "<=": x[0] >= hi or x[0] < lo,
        ">": x[0] < lo or x[0] >= hi,
        ">=": x[0] <= lo or x[0] > hi,
    }.get(op, False)


def _check(v: float, op: str, values: Sequence[Value]) -> bool:
    x = [float(y) for y in values]  # type: ignore[arg-type]
    return {
        "<": lambda: v < x[0],
        "<=": lambda: v <= x[0],
        ">": lambda: v > x[0],
        ">=": lambda: v >= x[0],
        "=": lambda: v == x[0],
        "between": lambda: x[0] <= v <= x[1],
    }[op]()


def _as_date(value: Any) -> dt.date:
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    return dt.date.fromisoformat(str(value)[:10])


def _parts(facet: str) -> set[str]:
    """What a facet says: itself, or each term of a visual pair (``visual:color=red+shape=round``)."""
    head, _, rest = facet.partition(":")
    return {f"{head}:{p}" for p in rest.split("+")} if rest else {facet}


class LeafMaker:
    """Makes leaves for one gold document. Every method returns ``None`` when it cannot."""

    def __init__(
        self,
        facts: DomainFacts,
        book: PhraseBook,
        ranks: Ranks,
        doc: Mapping[str, Any],
        rng: random.Random,
        *,
        ood: bool,
        extractive: bool = False,
    ) -> None:
        self.facts, self.book, self.ranks, self.doc, self.rng, self.ood = facts, book, ranks, doc, rng, ood
        self.extractive = extractive
        """Say facets with the document's own phrasing (an extractive family) instead of paraphrases."""
        self.used_fields: set[str] = set()
        self.used_facets: set[str] = set()
        """Facet parts already said (a visual pair uses both of its terms)."""
        self._carried: dict[str, list[str]] = {}

    def _fresh(self, facet: str) -> bool:
        return not (_parts(facet) & self.used_facets)

    # -- facets of the gold document -------------------------------------------------------------
    def carried(self, fieldname: str) -> list[str]:
        if fieldname not in self._carried:
            category = self.doc.get("category")
            self._carried[fieldname] = self.book.carried(
                fieldname, str(self.doc[fieldname]), None if category is None else str(category)
            )
        return self._carried[fieldname]

    def carried_any(self, modality: str) -> set[str]:
        return {f for name in self.facts.semantic_fields(modality) for f in self.carried(name)}

    # -- structured ------------------------------------------------------------------------------
    def structured(self, truth: bool, *, categorical_only: bool = False) -> Leaf | None:
        weights = FIELD_WEIGHTS[self.facts.domain]
        if categorical_only:
            weights = {k: w for k, w in weights.items() if k in CATEGORICAL[self.facts.domain]}
        name = _pick(self.rng, weights, self.used_fields)
        if name is None:
            return None
        leaf = self.structured_on(name, truth)
        if leaf is not None:
            self.used_fields.add(name)
        return leaf

    def structured_on(self, name: str, truth: bool) -> Leaf | None:
        dtype = self.facts.schema.field(name).dtype
        v = self.doc[name]
        if name in CATEGORICAL[self.facts.domain]:
            return self._categorical(name, str(v), truth)
        if dtype is DType.BOOL:
            return Leaf("structured", name, "=", (bool(v) == truth,))
        if dtype in (DType.DATE, DType.DATETIME):
            return self._date(name, _as_date(v), truth, dtype)
        if dtype in (DType.INT, DType.FLOAT):
            return self._numeric(name, float(v), truth, dtype is DType.INT)
        return None

    def _others(self, name: str, gold: str) -> list[str]:
        pool: Sequence[str] = ()
        category = self.doc.get("category")
        if category is not None:
            pool = self.facts.by_category.get(str(category), {}).get(name, ())
        others = [x for x in pool if x != gold]
        if len(others) < 2:
            others += [x for x in self.facts.values.get(name, ())[:50] if x != gold and x not in others]
        return others

    def _categorical(self, name: str, gold: str, truth: bool) -> Leaf | None:
        others = self._others(name, gold)
        if not truth:
            if not others:
                return None
            return Leaf("structured", name, "=", (self.rng.choice(others[:12]),))
        if name in ("sender", "recipient") or not others or self.rng.random() < 0.75:
            return Leaf("structured", name, "=", (gold,))
        picked = self.rng.sample(others[:12], k=min(len(others[:12]), self.rng.choice((1, 1, 2))))
        values = [gold, *picked]
        self.rng.shuffle(values)
        return Leaf("structured", name, "in", tuple(values))

    def _numeric(self, name: str, v: float, truth: bool, integral: bool) -> Leaf | None:
        if name == "rating":
            step, integral = 0.5, False
        else:
            step = _step(max(v, 1.0))
        ops = [o for o, _ in NUMERIC_OPS]
        op = self.rng.choices(ops, weights=[w for _, w in NUMERIC_OPS], k=1)[0]
        values = _threshold(v, op, truth, self.rng, step, integral)
        if values is None or _check(v, op, values) != truth or _vacuous(name, op, values):
            return None
        return Leaf("structured", name, op, values)

    def _date(self, name: str, d: dt.date, truth: bool, dtype: DType) -> Leaf | None:
        leaf = self._date_leaf(name, d, truth, dtype)
        first, last = self.facts.dates.get(name, (dt.date.min, dt.date.max))
        if leaf is None:
            return None
        if leaf.transform == "year":
            inside = all(first.year <= int(v) <= last.year for v in leaf.values)  # type: ignore[call-overload]
        else:
            inside = all(first <= dt.date.fromisoformat(str(v)) <= last for v in leaf.values)
        return leaf if inside else None

    def _date_leaf(self, name: str, d: dt.date, truth: bool, dtype: DType) -> Leaf | None:
        first, last = self.facts.dates.get(name, (dt.date.min, dt.date.max))
        op = self.rng.choices([o for o, _ in DATE_OPS], weights=[w for _, w in DATE_OPS], k=1)[0]
        if self.rng.random() < 0.45:
            years = {
                "=": (d.year if truth else d.year + self.rng.choice((-1, 1)),),
                "<": (d.year + 1 + self.rng.choice((0, 1)),) if truth else (d.year,),
                ">=": (d.year - self.rng.choice((0, 1)),) if truth else (d.year + 1,),
                ">": (d.year - 1,) if truth else (d.year,),
                "between": (d.year - self.rng.choice((0, 1)), d.year + self.rng.choice((0, 1)))
                if truth
                else (d.year + 1, d.year + 2),
            }[op]
            leaf = Leaf("structured", name, op, years, "year")
            return leaf if _check(d.year, op, years) == truth else None
        transform = "date" if dtype is DType.DATETIME else None
        day = dt.timedelta(days=1)
        op = "between" if op == "=" else op
        if truth:
            month = d.replace(day=1)
            lo = month if self.rng.random() < 0.5 else d - day * self.rng.randint(1, 45)
            hi = (
                (month + 32 * day).replace(day=1) - day
                if self.rng.random() < 0.5
                else d + day * self.rng.randint(1, 45)
            )
            lo, hi = max(lo, first), min(hi, last)
            values = {
                "between": (lo, hi),
                "<": (min(hi + day, last),),
                ">=": (lo,),
                ">": (max(lo - day, first),),
            }[op]
        else:
            shift = day * self.rng.randint(20, 120)
            width = day * self.rng.randint(14, 60)
            lo = d + shift if self.rng.random() < 0.5 else d - shift - width
            values = {
                "between": (lo, lo + width),
                "<": (d - day * self.rng.randint(0, 60),),
                ">=": (d + day * self.rng.randint(1, 60),),
                ">": (d + day * self.rng.randint(0, 60),),
            }[op]
        holds = {
            "<": lambda: d < values[0],
            ">=": lambda: d >= values[0],
            ">": lambda: d > values[0],
            "between": lambda: values[0] <= d <= values[1],
        }[op]()
        if holds != truth:
            return None
        return Leaf("structured", name, op, tuple(x.isoformat() for x in values), transform)

    # -- semantic --------------------------------------------------------------------------------
    def semantic(self, modality: Modality, truth: bool, *, top1: bool = False) -> Leaf | None:
        """A text or image leaf: a facet the document carries (``truth``) or one it lacks."""
        doc_id = str(self.doc["id"])
        options: list[tuple[str, str, str, float]] = []
        if truth:
            for name in self.facts.semantic_fields(modality):
                own = str(self.doc[name]).lower()
                for facet in self.carried(name):
                    if not self._fresh(facet):
                        continue
                    for phrase in self.phrases(facet, name):
                        if phrase.lower() in own and not self.extractive:
                            continue  # a paraphrasing request never copies the document's words
                        r = self.ranks.rank(name, phrase, doc_id)
                        if r is not None and (r == 1 or not top1):
                            options.append((name, facet, phrase, 1.0 / r**2))
        else:
            present = self.carried_any(modality)
            for name in self.facts.semantic_fields(modality):
                absent = [f for f in self.facts.facets.get(name, ()) if f not in present and self._fresh(f)]
                for facet in self.rng.sample(absent, k=min(len(absent), 6)):
                    for phrase in self.phrases(facet):
                        if self.ranks.rank(name, phrase, doc_id) is None:
                            options.append((name, facet, phrase, 1.0))
        if not options:
            return None
        name, facet, phrase, _ = self.rng.choices(options, weights=[o[3] for o in options], k=1)[0]
        self.used_facets |= _parts(facet)
        return Leaf(modality, name, "sim", (phrase,), facet=facet)

    def phrases(self, facet: str, fieldname: str | None = None) -> tuple[str, ...]:
        """How this request may say ``facet``: the split's paraphrases, or (extractive) the document's own
        phrasing of it in ``fieldname`` where it carries it there, else the vocabulary's document phrasings."""
        if not self.extractive:
            return self.book.paraphrases(facet, self.ood)
        if fieldname is not None:
            category = self.doc.get("category")
            own = tuple(
                words
                for key, words in self.book.found(
                    fieldname, str(self.doc[fieldname]), None if category is None else str(category)
                )
                if key == facet
            )
            if own:
                return own
        return self.book.doc_phrasings(facet)

    def alternative(self, leaf: Leaf) -> Leaf | None:
        """Another option beside ``leaf`` under an ``Or``: the same field with another value or facet."""
        if leaf.semantic:
            pool = [f for f in self.facts.facets.get(leaf.field, ()) if self._fresh(f)]
            for facet in self.rng.sample(pool, k=min(len(pool), 4)):
                phrases = self.phrases(facet)
                if phrases:
                    self.used_facets |= _parts(facet)
                    return Leaf(leaf.modality, leaf.field, "sim", (self.rng.choice(phrases),), facet=facet)
            return None
        if leaf.field in CATEGORICAL[self.facts.domain] and leaf.op == "=":
            return self._categorical(leaf.field, str(self.doc[leaf.field]), truth=False)
        return None

    # -- filling a shape ---------------------------------------------------------------------------
    def modality(self, level: int, *, negated: bool = False) -> Modality:
        weights = dict((L1_MODALITY_WEIGHTS if level == 1 else MODALITY_WEIGHTS)[self.facts.domain])
        for m in ("text", "image"):
            if m in weights and not self.facts.semantic_fields(m):
                weights[m] = 0.0
        if negated:
            # Negating a number reads badly ("not under $50"); negate values, flags and meanings.
            weights["structured"] *= 0.6
        return _pick(self.rng, weights) or "structured"  # type: ignore[return-value]

    def leaf(self, modality: Modality, truth: bool, *, top1: bool = False) -> Leaf | None:
        if modality == "structured":
            if top1 and truth and self.rng.random() < SINGLE_DAY_SHARE:
                return self.single_day()
            return self.structured(truth, categorical_only=not truth)
        return self.semantic(modality, truth, top1=top1)

    def single_day(self) -> Leaf | None:
        """The document's date to the day ("sent on March 3, 2023"): alone, often enough to single it out."""
        dates = [f.name for f in self.facts.schema.fields if f.dtype in (DType.DATE, DType.DATETIME)]
        if not dates:
            return None
        name = self.rng.choice(dates)
        dtype = self.facts.schema.field(name).dtype
        self.used_fields.add(name)
        day = _as_date(self.doc[name]).isoformat()
        return Leaf("structured", name, "=", (day,), "date" if dtype is DType.DATETIME else None)

    def fill(self, shape: Shape, level: int) -> Node | None:
        """A tree of ``shape`` for the gold document, or ``None`` when a slot cannot be filled."""
        if isinstance(shape, str):
            truth = shape != "-"
            if shape == "?":
                truth = self.rng.random() < 0.3
            mod = self.modality(level, negated=not truth)
            return self.leaf(mod, truth, top1=level == 1)
        if isinstance(shape, SNot):
            inner = self.fill(shape.part, level)
            return None if inner is None else Not(inner)
        parts: list[Node] = []
        for i, part in enumerate(shape.parts):
            if isinstance(shape, SOr) and part == "?" and i > 0 and isinstance(parts[0], Leaf):
                node: Node | None = self.alternative(parts[0]) if self.rng.random() < 0.7 else None
                node = node or self.fill(part, level)
            else:
                node = self.fill(part, level)
            if node is None:
                return None
            parts.append(node)
        return And(tuple(parts)) if isinstance(shape, SAnd) else Or(tuple(parts))
