"""The rule-based query parser of the self-querying retriever (:mod:`serving.self_query`).

It does what LangChain's self-querying retriever asks an LLM to do, with rules instead: pull
key-value filters out of a natural-language request, using the corpus schema and the vocabulary of
its categorical fields (brands, categories, colors, sender domains, folders), and leave the rest as
one semantic query. Like that retriever it has no OR, no NOT and one vector query:

* a condition that is one branch of an OR ("either ... or ...", "in stock or ...") cannot become a
  filter, since a filter on it would drop the documents matching the other branch;

* a value under a negation cue ("not", "except", "outside", ...) cannot become a filter; it is
  dropped from the query text so that the embedding is not pulled towards it (a negated flag such
  as "not starred" is simply the flag's other value, which a key-value filter can say);
* two or more values for one field ("Sony or Bose") would need an OR, so that field gets no filter.

>>> from indexing.schema import PRODUCTS
>>> vocab = Vocabulary({"brand": ("Sony", "Bose"), "category": ("headphones",)})
>>> parsed = parse_query("Sony headphones under $200 that reviewers call comfortable", PRODUCTS, vocab)
>>> [str(c) for c in parsed.conditions]
['brand == Sony', 'category == headphones', 'price < 200.0']
>>> parsed.query
'reviewers call comfortable'
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import lru_cache

from indexing.schema import CorpusSchema, DType, Role

Scalar = str | int | float | bool | date


@dataclass(frozen=True)
class Condition:
    """One key-value filter: ``field op value``; ``op`` is one of ==, <, <=, >, >=."""

    field: str
    op: str
    value: Scalar

    def __str__(self) -> str:
        return f"{self.field} {self.op} {self.value}"


@dataclass(frozen=True)
class ParsedQuery:
    """The filters found and the semantic query that remains."""

    query: str
    conditions: tuple[Condition, ...]
    dropped: tuple[str, ...] = ()
    """Values seen but not usable as filters (negated, or one of several for a field)."""


@dataclass(frozen=True)
class Vocabulary:
    """Distinct values of categorical string fields, read from the corpus table."""

    values: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


_I = re.IGNORECASE
# A negation cue at most two words before a value ("not from Sony", "excluding anything by Sony").
_NEGATION = re.compile(
    r"(?:\b(?:not|no|non|never|without|except|excluding|exclude|outside|other\s+than|isn't|aren't|wasn't|"
    r"weren't|don't|doesn't|avoid|avoiding|neither|nor|none\s+of|leaving\s+out|nothing)\b|!=)"
    r"(?:[\s-]+[\w'@.]+){0,2}[\s:-]*$",
    _I,
)
# Values of these fields are everyday words ("sent", "archive"): they count only next to a cue.
_CUE_BEFORE: dict[str, re.Pattern[str]] = {
    "folder": re.compile(r"(?:\bin\s+(?:the|my)|\bfiled\s+under|\bfolder\s*[:=]?|\bneither)\s*$", _I),
}
_CUE_AFTER: dict[str, re.Pattern[str]] = {"folder": re.compile(r"^\s*(?:folders?|mailbox)\b", _I)}

_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_LESS = r"under|below|less\s+than|cheaper\s+than|lower\s+than|fewer\s+than|at\s+most|no\s+more\s+than|up\s+to|does\s+not\s+exceed|<=?"
_MORE = r"over|above|more\s+than|greater\s+than|higher\s+than|at\s+least|no\s+less\s+than|>=?"
_OPS: dict[str, str] = {
    "under": "<", "below": "<", "less than": "<", "cheaper than": "<", "lower than": "<", "fewer than": "<",
    "at most": "<=", "no more than": "<=", "up to": "<=", "does not exceed": "<=", "<": "<", "<=": "<=",
    "over": ">", "above": ">", "more than": ">", "greater than": ">", "higher than": ">",
    "at least": ">=", "no less than": ">=", ">": ">", ">=": ">=",
}  # fmt: skip
_UP = ("more", "higher", "above", "up", "better", "later", "after")

_MONTH_NAMES = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
                "october", "november", "december")  # fmt: skip
_MONTHS = {**{m: i for i, m in enumerate(_MONTH_NAMES, 1)}, **{m[:3]: i for i, m in enumerate(_MONTH_NAMES, 1)},
           "sept": 9}  # fmt: skip
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATE = (
    rf"(?:\d{{4}}-\d{{2}}-\d{{2}}|(?:{_MONTH_RE})\.?(?:\s+\d{{1,2}}(?:st|nd|rd|th)?,?)?\s+\d{{4}}|\d{{4}})"
)

_FILLER = re.compile(
    r"\b(?:priced|price|prices|cost(?:s|ing)?|dollars?|usd|rated|rating|ratings|stars?|released|launched|"
    r"sent|received|dated|emails?|messages?|mails?|products?|items?|things?|show|find|want|need|list|looking|"
    r"search|get|such|where|range|category|categories|folder|with|and|or|of|in|the|a|an|from|at|whose|that|"
    r"which|is|are|was|were|be|been|do|does|have|has|had|i|i'm|any|some|me|my|to|for|by|on|about|not|no|"
    r"ones?|also|but|it|can|you|them|again|there|filter|track|down|help|remember|brand|color|outside|filed|"
    r"under|someone|anyone|address|year|times|release|date|reviewed|i'm|m)\b|[$,;:.!?()\"'\[\]{}~=<>-]",
    _I,
)


def _norm_op(text: str) -> str:
    return _OPS[" ".join(text.lower().split())]


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _typed(value: float, dtype: DType) -> int | float:
    return int(value) if dtype is DType.INT else value


class _Scan:
    """The request being parsed; used spans are masked so no text is read twice."""

    def __init__(self, nl: str) -> None:
        self.text = nl
        self.mask = [False] * len(nl)
        # Spans of positive vocabulary values: removed from the query unless nothing else would remain.
        self.soft = [False] * len(nl)
        self.found: list[tuple[Condition, int, int]] = []
        self.dropped: list[str] = []
        # Where the request said "A or B" of one field's values: that OR is settled (no filter).
        self.settled: list[tuple[int, int]] = []

    def add(self, span: tuple[int, int], *conditions: Condition) -> None:
        """Record ``conditions`` read from the text at ``span`` (start, end)."""
        self.found += [(c, span[0], span[1]) for c in conditions]

    def take(self, m: re.Match[str], *, soft: bool = False) -> None:
        self.mask[m.start() : m.end()] = [True] * (m.end() - m.start())
        if soft:
            self.soft[m.start() : m.end()] = [True] * (m.end() - m.start())

    def negated(self, m: re.Match[str]) -> bool:
        return bool(_NEGATION.search(self.text[max(0, m.start() - 40) : m.start()]))

    def finditer(self, pattern: str | re.Pattern[str]) -> Iterator[re.Match[str]]:
        regex = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, _I)
        for m in regex.finditer(self.text):
            if m.end() > m.start() and not any(self.mask[m.start() : m.end()]):
                yield m

    def remainder(self) -> str:
        """The request without used spans and filler words; the category words when nothing else is left."""
        for keep_soft in (False, True):
            kept = "".join(
                ch if not masked or (keep_soft and soft) else " "
                for ch, masked, soft in zip(self.text, self.mask, self.soft, strict=True)
            )
            words = " ".join(_FILLER.sub(" ", kept).split())
            if re.search(r"\w", words):
                return words
        return ""


def _variants(value: str) -> str:
    """A pattern for a vocabulary value: plural or singular; spaces, underscores and hyphens alike."""
    tokens = [re.escape(t) for t in re.split(r"[\s_-]+", value.strip()) if t]
    base = r"[\s_-]+".join(tokens)
    forms = [base + "(?:s|es)?"]
    if value.endswith("s") and len(value) > 3:
        forms.append(base[:-1])
    # "jet-black" describes a look, not the color field: a hyphen joins a value to its neighbour.
    return r"(?<![\w@.-])(?:" + "|".join(forms) + r")(?![\w@-]|\.\w)"


@lru_cache(maxsize=1 << 16)
def _value_pattern(value: str) -> re.Pattern[str]:
    """The compiled :func:`_variants` pattern of ``value``. Compiled once per value: ``re``'s own cache
    holds 512 patterns, and a vocabulary of thousands of values (the email corpus's thread ids)
    recompiled every pattern for every request."""
    return re.compile(_variants(value), _I)


def _vocab_values(scan: _Scan, schema: CorpusSchema, vocab: Vocabulary) -> None:
    entries = [
        (value, name)
        for name, values in vocab.values.items()
        if schema.has(name) and schema.field(name).role is Role.STRUCTURED
        for value in values
        if len(value) > 1
    ]
    found: dict[str, list[tuple[str, bool, tuple[int, int]]]] = {}
    # Longest first, so "Bose Pro" wins over "Bose" and a domain over its last label.
    for value, name in sorted(entries, key=lambda e: (-len(e[0]), e[0])):
        for m in scan.finditer(_value_pattern(value)):
            before, after = _CUE_BEFORE.get(name), _CUE_AFTER.get(name)
            if (
                before
                and after
                and not (before.search(scan.text[: m.start()]) or after.search(scan.text[m.end() :]))
            ):
                continue
            negated = scan.negated(m)
            scan.take(m, soft=not negated)
            found.setdefault(name, []).append((value, negated, m.span()))
    for name, hits in found.items():
        positive = sorted({v for v, neg, _ in hits if not neg})
        scan.dropped += [v for v, neg, _ in hits if neg]
        if len(positive) == 1:
            scan.add(next(span for _, neg, span in hits if not neg), Condition(name, "==", positive[0]))
        else:
            scan.dropped += positive
            spans = [span for _, neg, span in hits if not neg]
            if spans:
                scan.settled.append((min(a for a, _ in spans), max(b for _, b in spans)))


def _addresses(scan: _Scan, schema: CorpusSchema) -> None:
    if not schema.has("sender"):
        return
    for m in scan.finditer(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"):
        scan.take(m)
        to_recipient = re.search(
            r"\b(?:to|addressed\s+to|recipient(?:\s+is)?)\s*[:=]?\s*$", scan.text[: m.start()], _I
        )
        name = "recipient" if to_recipient and schema.has("recipient") else "sender"
        if scan.negated(m):
            scan.dropped.append(m.group(0))
        else:
            scan.add(m.span(), Condition(name, "==", m.group(0).lower()))


BARE_PRICE_ABOVE = 5
"""A comparison and a number with no cue at all ("headphones under 200") is a price when the number is above
this, the top of the rating scale, and the corpus has prices; "under 4" stays unread."""


def _bounds(scan: _Scan, name: str, dtype: DType, pre: str, post: str, *, dollars: bool = False) -> None:
    """``between X and Y``, ``X to Y``, ``under X``, ``X or more`` and ``X+`` for a numeric field.

    A number counts only with a cue: ``pre`` before it ("rated"), ``post`` after it ("stars") or,
    for prices, a dollar sign. For prices, a comparison alone is a cue when the number is above
    :data:`BARE_PRICE_ABOVE` (the other numeric fields have been read by then, with their cues).
    """
    unit = r"(?P<unit>\$\s?)?" if dollars else r"(?P<unit>)"
    head = rf"(?P<pre>\b(?:{pre})\s+(?:is\s+|lies\s+|of\s+|at\s+|with\s+a\s+)?)?"
    tail = rf"(?P<post>\s*(?:{post})\b)?"
    forms = (
        rf"{head}(?:between\s+|from\s+)?{unit}(?P<lo>{_NUM})\s*(?:and|to|-)\s*\$?\s?(?P<hi>{_NUM}){tail}",
        rf"{head}(?P<op>{_LESS}|{_MORE})\s+{unit}(?P<num>{_NUM}){tail}",
        rf"{head}{unit}(?P<num>{_NUM}){tail}\s*(?:or|and)\s+(?P<dir>more|higher|above|up|better|less|lower|below|under|cheaper|fewer)\b",
        rf"{head}{unit}(?P<num>{_NUM})\s*(?P<plus>\+){tail}",
    )
    for form in forms:
        for m in scan.finditer(form):
            g = m.groupdict()
            bare = dollars and g.get("op") is not None and _num(g["num"]) > BARE_PRICE_ABOVE
            if not (g.get("pre") or g.get("post") or g.get("unit") or bare):
                continue
            scan.take(m)
            if scan.negated(m):
                scan.dropped.append(m.group(0).strip())
            elif g.get("lo") is not None:
                scan.add(m.span(), Condition(name, ">=", _typed(_num(g["lo"]), dtype)),
                         Condition(name, "<=", _typed(_num(g["hi"]), dtype)))  # fmt: skip
            elif g.get("op") is not None:
                scan.add(m.span(), Condition(name, _norm_op(g["op"]), _typed(_num(g["num"]), dtype)))
            else:
                up = g.get("plus") is not None or g["dir"].lower() in _UP
                scan.add(m.span(), Condition(name, ">=" if up else "<=", _typed(_num(g["num"]), dtype)))


def _numbers(scan: _Scan, schema: CorpusSchema) -> None:
    if schema.has("review_count"):
        _bounds(scan, "review_count", DType.INT, r"reviewed|review\s+count|number\s+of\s+reviews",
                r"(?:customer\s+|user\s+)?reviews")  # fmt: skip
    if schema.has("rating"):
        _bounds(scan, "rating", DType.FLOAT, r"rated|rating|review\s+score", r"stars?(?:\s+rating)?")
    if schema.has("price"):
        _bounds(
            scan, "price", DType.FLOAT, r"priced|price|costs?|costing", r"dollars?|usd|bucks", dollars=True
        )


def _parse_date(text: str) -> tuple[date, date]:
    """The first day a date expression covers and the first day after it."""
    t = re.sub(r"(?<=\d)(?:st|nd|rd|th)\b|[.,]", "", text.lower())
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", t):
        d = date.fromisoformat(t)
        return d, date.fromordinal(d.toordinal() + 1)
    if re.fullmatch(r"\d{4}", t):
        y = int(t)
        return date(y, 1, 1), date(y + 1, 1, 1)
    parts = t.split()
    mo, y = _MONTHS[parts[0]], int(parts[-1])
    if len(parts) == 3:
        d = date(y, mo, int(parts[1]))
        return d, date.fromordinal(d.toordinal() + 1)
    return date(y, mo, 1), (date(y + 1, 1, 1) if mo == 12 else date(y, mo + 1, 1))


# Cue before a date -> how (first day, day after) become conditions.
_DATE_CUES: tuple[tuple[str, str], ...] = (
    (r"on\s+or\s+before|no\s+later\s+than|at\s+most|until|up\s+to|<=", "<end"),
    (r"on\s+or\s+after|since|no\s+earlier\s+than|at\s+least|>=", ">=start"),
    (r"before|prior\s+to|earlier\s+than|below|under|less\s+than|<", "<start"),
    (r"after|later\s+than|above|over|more\s+than|>", ">=end"),
    (r"in|during|on|from|is|=", "range"),
)


def _date_conditions(name: str, how: str, span: tuple[date, date]) -> list[Condition]:
    start, end = span
    if how == "<end":
        return [Condition(name, "<", end)]
    if how == ">=start":
        return [Condition(name, ">=", start)]
    if how == "<start":
        return [Condition(name, "<", start)]
    if how == ">=end":
        return [Condition(name, ">=", end)]
    return [Condition(name, ">=", start), Condition(name, "<", end)]


def _dates(scan: _Scan, schema: CorpusSchema) -> None:
    names = [
        f.name for f in schema.fields if f.dtype in (DType.DATE, DType.DATETIME) and f.role is Role.STRUCTURED
    ]
    if len(names) != 1:
        return  # with several date fields a bare date would be ambiguous
    name = names[0]
    for m in scan.finditer(rf"\b(?:between|from|dated)\s+({_DATE})\s*(?:and|to|until|through|-)\s*({_DATE})"):
        scan.take(m)
        if scan.negated(m):
            scan.dropped.append(m.group(0))
        else:
            scan.add(m.span(), Condition(name, ">=", _parse_date(m.group(1))[0]),
                     Condition(name, "<", _parse_date(m.group(2))[1]))  # fmt: skip
    cues = "|".join(c for c, _ in _DATE_CUES)
    pattern = (
        rf"(?<![\w-])({cues})\s+(?:the\s+year\s+)?({_DATE})(?:\s+or\s+(earlier|before|later|after))?(?![\w-])"
    )
    for m in scan.finditer(pattern):
        if re.fullmatch(r"is|=", m.group(1), _I) and not re.search(
            r"(?:date|year|sent)\s*$", scan.text[: m.start()], _I
        ):
            continue
        scan.take(m)
        if scan.negated(m):
            scan.dropped.append(m.group(0))
            continue
        cue = " ".join(m.group(1).lower().split())
        how = next(h for c, h in _DATE_CUES if re.fullmatch(c, cue, _I))
        if m.group(3):
            how = ">=start" if m.group(3).lower() in _UP else "<end"
        scan.add(m.span(), *_date_conditions(name, how, _parse_date(m.group(2))))


# field -> (phrases meaning False, phrases meaning True); tried in that order, so "unread" is not "read".
_FLAGS: dict[str, tuple[str, str]] = {
    "in_stock": (
        r"out\s+of\s+stock|unavailable|sold\s+out|can(?:not|'t)\s+be\s+ordered",
        r"in[\s-]stock|available(?:\s+now)?|ready\s+to\s+ship|can\s+be\s+ordered",
    ),
    "is_read": (
        r"unread|unopened|never\s+(?:been\s+)?(?:read|opened)|(?:i\s+)?haven'?t\s+(?:yet\s+)?(?:read|opened)",
        r"(?:i've|i\s+have|already|been|was|were)\s+(?:already\s+)?(?:read|opened)|opened|read\s+(?:emails|messages|mails)",
    ),
    "is_starred": (
        r"unstarred|(?:is\s+|are\s+|aren't\s+|isn't\s+)?not\s+starred|(?:aren't|isn't)\s+starred|without\s+a\s+star|(?:has\s+)?no\s+star",
        r"starred|(?:with|carr(?:y|ies))\s+a\s+star|flagged",
    ),
    "has_attachment": (
        r"without\s+(?:an?\s+|any\s+)?attachments?|(?:has\s+)?no\s+(?:file\s+)?attach(?:ment|ments|ed)|"
        r"nothing\s+is\s+attached|no\s+files?\s+attached",
        r"attachments?|attached|carr(?:y|ies)\s+a\s+file|files?\s+(?:is\s+)?attached",
    ),
}  # fmt: skip


def _flags(scan: _Scan, schema: CorpusSchema) -> None:
    for name, (false_words, true_words) in _FLAGS.items():
        if not schema.has(name):
            continue
        decided: tuple[bool, tuple[int, int]] | None = None
        spoken = name.replace("_", r"[\s_]")
        for value, pattern in (
            (None, rf"\b{spoken}\s*:\s*(?P<yn>yes|no|true|false)\b"),
            (False, rf"\b(?:{false_words})\b"),
            (True, rf"\b(?:{true_words})\b"),
        ):
            for m in scan.finditer(pattern):
                scan.take(m)
                if value is None:
                    truth = m.group("yn").lower() in ("yes", "true")
                else:
                    # "doesn't have an attachment": a negated flag is the flag's other value.
                    truth = value != (value and scan.negated(m))
                decided = (truth, m.span()) if decided is None else decided
        if decided is not None:
            scan.add(decided[1], Condition(name, "==", decided[0]))


# "excluding anything A or B", "but nothing that is A": every condition up to the clause's end is negated.
_NEGATED_SCOPE = re.compile(
    r"\b(?:but\s+nothing|nothing\s+that|excluding\s+anything|leaving\s+out\s+anything|but\s+not|except(?:\s+for)?)\b",
    _I,
)
# A condition next to "or" / "either" is one branch of a disjunction.
_OR_BEFORE = re.compile(r"\b(?:either|or)\b(?:[\s-]+[\w'$.]+){0,4}[\s:-]*$", _I)
_OR_AFTER = re.compile(r"^[\s,]*or\b", _I)


def _scope(scan: _Scan) -> list[Condition]:
    """The conditions a key-value filter can hold: none from an OR branch; negated flags flipped."""
    text = scan.text
    for a, b in scan.settled:
        text = text[:a] + " " * (b - a) + text[b:]
    kept = []
    for cond, start, end in scan.found:
        clause = re.split(r"[,;.]", text[:start])[-1]
        if _OR_BEFORE.search(clause) or _OR_AFTER.search(text[end:]):
            scan.dropped.append(scan.text[start:end])
        elif _NEGATED_SCOPE.search(clause) and not _NEGATION.search(text[max(0, start - 40) : start]):
            # (a cue right before the condition was already applied where it was read)
            if isinstance(cond.value, bool):
                kept.append(Condition(cond.field, cond.op, not cond.value))
            else:
                scan.dropped.append(scan.text[start:end])
        else:
            kept.append(cond)
    return kept


def parse_query(nl: str, schema: CorpusSchema, vocab: Vocabulary) -> ParsedQuery:
    """Split ``nl`` into key-value filters on ``schema`` fields and the semantic query that remains.

    When no word of the request is left, the whole request is the semantic query.
    """
    scan = _Scan(nl)
    _addresses(scan, schema)
    _dates(scan, schema)
    _numbers(scan, schema)
    _flags(scan, schema)
    _vocab_values(scan, schema, vocab)
    query = scan.remainder() or " ".join(nl.split())
    order = {name: i for i, name in enumerate(schema.columns)}
    conditions = sorted(dict.fromkeys(_scope(scan)), key=lambda c: (order[c.field], c.op))
    return ParsedQuery(query=query, conditions=tuple(conditions), dropped=tuple(dict.fromkeys(scan.dropped)))
