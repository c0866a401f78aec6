"""The noisy wording family: requests as people type them, seeded and deterministic.

Real requests have typos, abbreviations ("w/", "vac", "hdphones"), missing function words, lowercase
brand names and run-on phrasing. :func:`add_noise` rewrites a templated request that way with a given
random stream, so a benchmark stays a pure function of its seed.

The noise never drops or changes a value of the request: numbers, dates, months, addresses, domains
and every structured value of the condition tree are *protected* spans that no pattern touches, except
that a brand or category may be lowercased and a category noun may take its common abbreviation
("vacuum cleaners" -> "vacs"), which still names it. Negations ("not", "without", "neither", ...) are
never dropped. :func:`keeps_values` checks a noisy request against the values; a request that fails
the check is kept clean.

Patterns come in two disjoint sets: :data:`TRAIN_PATTERNS` for the train and test splits, and
:data:`OOD_PATTERNS`, held out of training, for the OOD split (other typo kinds and other
abbreviations).

>>> import random
>>> text = add_noise("Show me Sony headphones with a long battery life under $200.", ["Sony"], random.Random(3))
>>> keeps_values(text, ["Sony", "$200"])
True
>>> text != "Show me Sony headphones with a long battery life under $200."
True
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

NOISY_SHARE = 0.2
"""Share of the train, test and OOD requests that go through the noisy family."""

TRAIN_PATTERNS: tuple[str, ...] = (
    "swap",
    "drop_letter",
    "abbreviate",
    "function_words",
    "lowercase",
    "run_on",
)
"""Noise of the train and test splits."""
OOD_PATTERNS: tuple[str, ...] = ("neighbor_key", "double_letter", "abbreviate_ood", "vowels", "lowercase_all")
"""Noise held out of training, for the OOD split only."""

ABBREVIATIONS: dict[str, str] = {
    "with": "w/",
    "without": "w/o",
    "headphones": "hdphones",
    "vacuum": "vac",
    "vacuum cleaners": "vacs",
    "and": "&",
    "reviews": "revs",
    "description": "desc",
    "messages": "msgs",
    "please": "pls",
    "something": "smth",
    "you": "u",
    "are": "r",
    "because": "bc",
    "laptops": "lappys",
    "speakers": "spkrs",
}
"""Training abbreviations (whole words, case-insensitive)."""
ABBREVIATIONS_OOD: dict[str, str] = {
    "with": "wth",
    "before": "b4",
    "about": "abt",
    "between": "btwn",
    "people": "ppl",
    "coffee makers": "coffee machines",
    "office chairs": "desk chairs",
    "running shoes": "runners",
    "emails": "mails",
    "attachment": "attchmt",
    "products": "prods",
    "photo": "pic",
}
"""Held-out abbreviations, for the OOD split only."""
CATEGORY_FORMS: dict[str, str] = {"vacuum cleaners": "vacs", "headphones": "hdphones", "laptops": "lappys",
                                  "speakers": "spkrs", "coffee makers": "coffee machines",
                                  "office chairs": "desk chairs", "running shoes": "runners"}  # fmt: skip
"""Abbreviations a category value may take: the value is still said."""
FUNCTION_WORDS = frozenset({"the", "a", "an", "that", "some", "any", "me", "please", "i'm", "which", "are"})
"""Words people leave out; never a negation, a bound ("to", "and" in a range) or a comparison."""
NEGATIONS = frozenset({"not", "no", "without", "neither", "nor", "none", "don't", "doesn't", "isn't", "aren't",
                       "haven't", "never", "excluding", "outside", "w/o"})  # fmt: skip
_NEIGHBORS = {
    "a": "s", "s": "a", "d": "f", "e": "r", "r": "e", "t": "y", "i": "o", "o": "i", "n": "m", "m": "n", "l": "k",
    "c": "v", "u": "y", "h": "j", "g": "h",
}  # fmt: skip
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip
_TOKEN = re.compile(r"\S+")
_PROTECTED_TOKEN = re.compile(r"[\d@$]|\w\.\w")
TYPO_RATE = 0.18
"""Chance that an unprotected word of five letters or more gets a typo, when a typo pattern is on."""
DROP_RATE = 0.6
"""Chance that a function word is left out, when that pattern is on."""


def _spans(text: str, values: Sequence[str]) -> list[tuple[int, int]]:
    """Character spans of ``text`` that must stay as they are (case aside)."""
    low = text.lower()
    spans = []
    forms = {str(x) for x in values if str(x).strip()}
    forms |= {CATEGORY_FORMS[f.lower()] for f in forms if f.lower() in CATEGORY_FORMS}
    for v in sorted(forms, key=len, reverse=True):
        for m in re.finditer(re.escape(v.lower()), low):
            spans.append((m.start(), m.end()))
    for m in re.finditer(r"\b(?:" + "|".join(_MONTHS) + r")\b", low):
        spans.append((m.start(), m.end()))
    return spans


def _inside(start: int, end: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(start < b and a < end for a, b in spans)


def _typo(word: str, kind: str, rng: random.Random) -> str:
    letters = [i for i, ch in enumerate(word) if ch.isalpha()]
    if len(letters) < 5:
        return word
    i = rng.choice(letters[1:-1])
    if kind == "swap" and i + 1 < len(word) and word[i + 1].isalpha():
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if kind == "drop_letter":
        return word[:i] + word[i + 1 :]
    if kind == "double_letter":
        return word[:i] + word[i] + word[i:]
    if kind == "neighbor_key" and word[i].lower() in _NEIGHBORS:
        return word[:i] + _NEIGHBORS[word[i].lower()] + word[i + 1 :]
    if kind == "vowels":
        head, rest = word[:1], word[1:]
        return head + re.sub(r"[aeiou]", "", rest, count=1)
    return word


def _abbreviate(
    text: str, table: dict[str, str], spans: Sequence[tuple[int, int]], values: Sequence[str]
) -> str:
    categories = {str(v).lower() for v in values}
    for long in sorted(table, key=len, reverse=True):
        short = table[long]
        pattern = re.compile(rf"(?<![\w/]){re.escape(long)}(?![\w/])", re.IGNORECASE)
        out, pos = [], 0
        for m in pattern.finditer(text):
            protected = _inside(m.start(), m.end(), spans)
            if protected and not (long in categories and CATEGORY_FORMS.get(long) == short):
                continue
            out.append(text[pos : m.start()] + short)
            pos = m.end()
        text = "".join(out) + text[pos:]
        spans = _spans(text, values)
    return text


def add_noise(nl: str, values: Sequence[str], rng: random.Random, *, ood: bool = False) -> str:
    """``nl`` as a person might type it: two to four patterns of the split's set, applied with ``rng``.

    ``values`` are the request's structured values (brands, categories, colors, addresses, ...), which
    stay untouched apart from case and a category's common abbreviation.
    """
    patterns = OOD_PATTERNS if ood else TRAIN_PATTERNS
    chosen = set(rng.sample(patterns, k=rng.randint(2, min(4, len(patterns)))))
    text = nl
    if "abbreviate" in chosen or "abbreviate_ood" in chosen:
        table = ABBREVIATIONS_OOD if ood else ABBREVIATIONS
        text = _abbreviate(text, table, _spans(text, values), values)
    spans = _spans(text, values)
    words: list[str] = []
    for m in _TOKEN.finditer(text):
        word = m.group()
        bare = word.strip(".,;:!?").lower()
        protected = _inside(m.start(), m.end(), spans) or bool(_PROTECTED_TOKEN.search(word))
        if not protected and bare not in NEGATIONS:
            if "function_words" in chosen and bare in FUNCTION_WORDS and rng.random() < DROP_RATE:
                trail = word[len(word.rstrip(".,;:!?")) :]
                if trail and words:
                    words[-1] += trail
                continue
            for kind in ("swap", "drop_letter", "double_letter", "neighbor_key", "vowels"):
                if kind in chosen and rng.random() < TYPO_RATE:
                    word = _typo(word, kind, rng)
                    break
        words.append(word)
    text = " ".join(words)
    if "run_on" in chosen:
        # Conditions run together: no commas, semicolons or final stop (a date's comma is a value's).
        spans = _spans(text, values)
        text = "".join(
            ch
            for i, ch in enumerate(text)
            if ch not in ",;" or _inside(i, i + 1, spans) or _date_comma(text, i)
        ).rstrip(".")
    if "lowercase" in chosen or "lowercase_all" in chosen:
        text = text.lower()
    return " ".join(text.split())


def _date_comma(text: str, i: int) -> bool:
    """Whether the comma at ``i`` belongs to a date such as "March 3, 2023"."""
    return bool(re.match(r", \d{4}", text[i:])) and bool(re.search(r"\d$", text[:i]))


def keeps_values(noisy: str, values: Sequence[str]) -> bool:
    """Whether every value is still said in ``noisy`` (case aside; a category in its abbreviated form)."""
    low = noisy.lower()
    for v in values:
        forms = {str(v).lower(), CATEGORY_FORMS.get(str(v).lower(), str(v).lower())}
        if not any(re.search(rf"(?<![\w]){re.escape(f)}(?![\w])", low) for f in forms):
            return False
    return True
