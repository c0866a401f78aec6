"""The vocabulary of the generated corpora, defined once.

The words live in two data files beside this module, ``vocab_products.yaml`` and
``vocab_emails.yaml``; this module loads them once, types them and offers the lookups that the
generators and benchmark synthesis share. Nothing else reads those files.

**Facets.** A facet is one thing a text can say about a document: a quality of a product
("noise_cancelling", "sweaty_ears") or a point an email makes ("hiring_freeze"). Each facet has

- ``doc_phrasings``: several wordings of the same thing. Generators put exactly one of them,
  verbatim, into a text. Product phrasings are predicates that follow "it" ("blocks out plane
  noise"); email phrasings are clauses that follow a lead-in ("FYI, ...").
- ``query_train`` and ``query_ood``: query paraphrases for benchmark synthesis only, split once
  in the data file into a training set and a held-out out-of-distribution set (at least one each).
  They share few words with the document phrasings, so a facet is found by meaning.

Facet keys are ``<group>.<name>``: the group is the product category (``general`` for the facets
every category has) or the email topic. Product facets have a polarity, ``pro`` or ``con``; con
facets appear in reviews only.

**Visual terms.** A product image is a visual description built from a finish, a color, a shape,
a material and a setting ("matte white over-ear headphones with memory-foam ear cushions on a
wooden desk"). Each term carries query paraphrases split, like a facet's, into ``query_train`` and
held-out ``query_ood`` ones, so synthesis can pick a visual phrase out of a description
(:func:`find_visual`) and reword it.

>>> facets("ecommerce")["headphones.noise_cancelling"].polarity
'pro'
>>> find_facets("ecommerce", "Honestly, it has excellent ANC.")
[('headphones.noise_cancelling', 'has excellent ANC')]
>>> [t.kind for t in find_visual("Matte white over-ear headphones on a wooden desk", "headphones")]
['finish', 'color', 'shape', 'setting']
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import yaml

from indexing.errors import CorpusError

_HERE = Path(__file__).parent
_FILES = {"ecommerce": _HERE / "vocab_products.yaml", "email": _HERE / "vocab_emails.yaml"}
GENERAL = "general"
"""Group of the product facets that every category has."""
_ROSTER_SEED = 20190101
"""Fixed seed of the email roster: people are part of the vocabulary, not of a corpus seed."""


@dataclass(frozen=True)
class Facet:
    """One thing a text can say, with its document phrasings and query paraphrases."""

    key: str
    domain: str
    group: str
    """Product category (or ``general``) for e-commerce; topic for email."""
    name: str
    polarity: str
    """``pro`` or ``con`` for products; ``neutral`` for email."""
    doc_phrasings: tuple[str, ...]
    query_train: tuple[str, ...]
    query_ood: tuple[str, ...]

    @property
    def category(self) -> str:
        return self.group

    @property
    def topic(self) -> str:
        return self.group


@dataclass(frozen=True)
class VisualTerm:
    """A word or phrase of an image description, with paraphrases for queries."""

    kind: str
    """``color``, ``finish``, ``shape``, ``material`` or ``setting``."""
    value: str
    query_train: tuple[str, ...]
    """Paraphrases for training and test requests."""
    query_ood: tuple[str, ...]
    """Held-out paraphrases, for the OOD split only."""

    @property
    def paraphrases(self) -> tuple[str, ...]:
        """Every paraphrase, training ones first."""
        return self.query_train + self.query_ood


@dataclass(frozen=True)
class PriceDist:
    """Lognormal price around ``median`` dollars, clipped to ``[low, high]``."""

    median: float
    sigma: float
    low: float
    high: float


@dataclass(frozen=True)
class Brand:
    name: str
    tier: str
    categories: tuple[str, ...]
    price_factor: float
    rating_shift: float


@dataclass(frozen=True)
class Category:
    """A product category: how its products are named, priced, rated, pictured and described."""

    name: str
    noun: str
    title_nouns: tuple[str, ...]
    series: tuple[str, ...]
    price: PriceDist
    rating_mean: float
    rating_sd: float
    brands: tuple[str, ...]
    colors: tuple[str, ...]
    shapes: tuple[VisualTerm, ...]
    materials: tuple[VisualTerm, ...]
    facets: tuple[Facet, ...]
    """The category's own facets followed by the general ones."""

    @property
    def pros(self) -> tuple[Facet, ...]:
        return tuple(f for f in self.facets if f.polarity == "pro")

    @property
    def cons(self) -> tuple[Facet, ...]:
        return tuple(f for f in self.facets if f.polarity == "con")


@dataclass(frozen=True)
class ProductVocab:
    categories: Mapping[str, Category]
    brands: Mapping[str, Brand]
    colors: Mapping[str, VisualTerm]
    finishes: tuple[VisualTerm, ...]
    settings: tuple[VisualTerm, ...]


@dataclass(frozen=True)
class Person:
    """Someone who sends or receives mail."""

    name: str
    first: str
    address: str
    domain: str
    kind: str
    """Kind of the domain: ``internal``, ``partner``, ``vendor``, ``newsletter`` or ``personal``."""
    vip: bool = False


@dataclass(frozen=True)
class Style:
    """How a kind of email is written: greetings, sentence templates (with ``{p}``), sign-offs."""

    greetings: tuple[str, ...]
    openers: tuple[str, ...]
    sentences: tuple[str, ...]
    reply_openers: tuple[str, ...]
    closers: tuple[str, ...]
    signoffs: tuple[str, ...]


@dataclass(frozen=True)
class Topic:
    """What an email is about: who sends it, where it is filed, how it is flagged, its facets."""

    name: str
    weight: float
    """Relative share of generated mail."""
    style: str
    sender_kinds: tuple[str, ...]
    folders: Mapping[str, float]
    attachment: float
    star: float
    subjects: tuple[str, ...]
    facets: tuple[Facet, ...]


@dataclass(frozen=True)
class EmailVocab:
    people: tuple[Person, ...]
    owners: tuple[Person, ...]
    """Internal people whose mailboxes make up the corpus."""
    org_names: Mapping[str, str]
    """Display name of each partner, vendor and newsletter domain."""
    slots: Mapping[str, tuple[str, ...]]
    styles: Mapping[str, Style]
    topics: Mapping[str, Topic]
    received_folders: Mapping[str, float]

    @property
    def folders(self) -> tuple[str, ...]:
        """Every folder a generated email can be in."""
        names = {"sent", *self.received_folders}
        for t in self.topics.values():
            names.update(t.folders)
        return tuple(sorted(names))


def _load(domain: str) -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader when libyaml is there
    data: dict[str, Any] = yaml.load(_FILES[domain].read_text(), Loader=loader)
    return data


def _terms(kind: str, raw: Mapping[str, Any]) -> tuple[VisualTerm, ...]:
    out = []
    for value, ps in raw.items():
        q, ood = (tuple(str(p) for p in (ps or {}).get(k) or ()) for k in ("q", "ood"))
        if not q or not ood:
            raise CorpusError(
                f"vocabulary visual term {kind} {value!r} needs q and ood paraphrases", code="vocab"
            )
        out.append(VisualTerm(kind, str(value), q, ood))
    return tuple(out)


def _facet(domain: str, group: str, name: str, raw: Mapping[str, Any], default_pol: str) -> Facet:
    doc, q, ood = (tuple(str(s) for s in raw.get(k) or ()) for k in ("doc", "q", "ood"))
    if len(doc) < 2 or not q or not ood:
        raise CorpusError(f"vocabulary facet {group}.{name} needs 2+ doc phrasings, q and ood", code="vocab")
    return Facet(f"{group}.{name}", domain, group, name, str(raw.get("pol", default_pol)), doc, q, ood)


@cache
def product_vocab() -> ProductVocab:
    """The e-commerce vocabulary (loaded once per process)."""
    raw = _load("ecommerce")
    tiers = raw["tiers"]
    brands = {
        name: Brand(
            name, b["tier"], tuple(b["categories"]), tiers[b["tier"]]["price"], tiers[b["tier"]]["rating"]
        )
        for name, b in raw["brands"].items()
    }
    general = tuple(_facet("ecommerce", GENERAL, n, f, "pro") for n, f in raw["general_facets"].items())
    cats: dict[str, Category] = {}
    for name, c in raw["categories"].items():
        own = tuple(_facet("ecommerce", name.replace(" ", "_"), n, f, "pro") for n, f in c["facets"].items())
        sellers = tuple(b.name for b in brands.values() if name in b.categories)
        p = c["price"]
        cats[name] = Category(
            name=name,
            noun=c["noun"],
            title_nouns=tuple(c["title_nouns"]),
            series=tuple(c["series"]),
            price=PriceDist(float(p["median"]), float(p["sigma"]), float(p["min"]), float(p["max"])),
            rating_mean=float(c["rating"]["mean"]),
            rating_sd=float(c["rating"]["sd"]),
            brands=sellers,
            colors=tuple(c["colors"]),
            shapes=_terms("shape", c["shapes"]),
            materials=_terms("material", c["materials"]),
            facets=own + general,
        )
    unknown = sorted({c for b in brands.values() for c in b.categories} - set(cats))
    if unknown or any(not c.brands for c in cats.values()):
        raise CorpusError(
            f"vocabulary brands and categories disagree: {unknown or 'a category has no brand'}", code="vocab"
        )
    return ProductVocab(
        categories=MappingProxyType(cats),
        brands=MappingProxyType(brands),
        colors=MappingProxyType({t.value: t for t in _terms("color", raw["colors"])}),
        finishes=_terms("finish", raw["finishes"]),
        settings=_terms("setting", raw["settings"]),
    )


def _local(text: str) -> str:
    return re.sub(r"[^a-z0-9]", "", text.lower())


def _roster(raw: Mapping[str, Any]) -> tuple[Person, ...]:
    rng = np.random.default_rng(_ROSTER_SEED)
    firsts, lasts = raw["names"]["first"], raw["names"]["last"]
    per = raw["people_per_domain"]
    people: list[Person] = []
    for kind, domains in raw["domains"].items():
        for domain in domains:
            if kind == "newsletter":
                name = raw["newsletter_names"][domain]
                people.append(Person(name, name, f"digest@{domain}", domain, kind))
                continue
            picks = rng.choice(len(firsts) * len(lasts), size=per[kind], replace=False)
            for k in picks:
                first, last = firsts[int(k) // len(lasts)], lasts[int(k) % len(lasts)]
                local = {
                    "internal": f"{_local(first)}.{_local(last)}",
                    "partner": f"{_local(first)[0]}{_local(last)}",
                    "vendor": f"{_local(first)}",
                    "personal": f"{_local(first)}.{_local(last)}{int(rng.integers(10, 99))}",
                }[kind]
                people.append(Person(f"{first} {last}", first, f"{local}@{domain}", domain, kind))
    seen: set[str] = set()
    unique = []
    for p in people:  # two people may map to one address; the first keeps it
        if p.address not in seen:
            seen.add(p.address)
            unique.append(p)
    return tuple(unique)


@cache
def email_vocab() -> EmailVocab:
    """The email vocabulary (loaded once per process)."""
    raw = _load("email")
    people = list(_roster(raw))
    internal = [i for i, p in enumerate(people) if p.kind == "internal"]
    n_own, n_vip = int(raw["mailbox_owners"]), int(raw["vip_count"])
    for i in internal[n_own : n_own + n_vip]:
        p = people[i]
        people[i] = Person(p.name, p.first, p.address, p.domain, p.kind, vip=True)
    owners = tuple(people[i] for i in internal[:n_own])
    orgs = {**raw["partner_names"], **raw["vendor_names"], **raw["newsletter_names"]}
    styles = {
        name: Style(
            *(
                tuple(str(x) for x in s[k])
                for k in ("greetings", "openers", "sentences", "reply_openers", "closers", "signoffs")
            )
        )
        for name, s in raw["styles"].items()
    }
    topics = {
        name: Topic(
            name=name,
            weight=float(t["weight"]),
            style=t["style"],
            sender_kinds=tuple(t["from"]),
            folders=MappingProxyType({k: float(v) for k, v in t["folders"].items()}),
            attachment=float(t["attachment"]),
            star=float(t["star"]),
            subjects=tuple(t["subjects"]),
            facets=tuple(_facet("email", name, n, f, "neutral") for n, f in t["facets"].items()),
        )
        for name, t in raw["topics"].items()
    }
    return EmailVocab(
        people=tuple(people),
        owners=owners,
        org_names=MappingProxyType(dict(orgs)),
        slots=MappingProxyType({k: tuple(str(v) for v in vs) for k, vs in raw["slots"].items()}),
        styles=MappingProxyType(styles),
        topics=MappingProxyType(topics),
        received_folders=MappingProxyType({k: float(v) for k, v in raw["folders"]["received"].items()}),
    )


@cache
def facets(domain: str) -> Mapping[str, Facet]:
    """Every facet of a domain (``ecommerce`` or ``email``) by key, e.g. ``headphones.bass``."""
    if domain == "ecommerce":
        pv = product_vocab()
        items = [f for c in pv.categories.values() for f in c.facets]
    elif domain == "email":
        items = [f for t in email_vocab().topics.values() for f in t.facets]
    else:
        raise CorpusError(f"unknown domain {domain!r}; choose one of ecommerce, email")
    return MappingProxyType({f.key: f for f in items})


class _PhraseIndex:
    """Finds known phrases in a text: whole words, case-insensitive, in order of appearance.

    Phrases are indexed by their first word, so a scan costs one dict lookup per word of the text.
    """

    _WORD = re.compile(r"[\w']+")

    def __init__(self, entries: list[tuple[str, Any]]) -> None:
        self._by_first: dict[str, list[tuple[str, Any]]] = {}
        for phrase, payload in entries:
            low = phrase.lower()
            first = self._WORD.match(low)
            if first is None:
                raise CorpusError(f"vocabulary phrase {phrase!r} does not start with a word", code="vocab")
            self._by_first.setdefault(first.group(), []).append((low, payload))
        for cands in self._by_first.values():
            cands.sort(key=lambda c: -len(c[0]))

    def find(self, text: str) -> list[Any]:
        low = text.lower()
        found: list[Any] = []
        covered = 0  # a match hides the words inside it ("a plain white background" is no color)
        for m in self._WORD.finditer(low):
            if m.start() < covered:
                continue
            for phrase, payload in self._by_first.get(m.group(), ()):
                end = m.start() + len(phrase)
                if low.startswith(phrase, m.start()) and (
                    end == len(low) or not (low[end].isalnum() or low[end] in "_'")
                ):
                    if payload not in found:
                        found.append(payload)
                    covered = end
                    break
        return found


@cache
def _facet_index(domain: str) -> _PhraseIndex:
    return _PhraseIndex([(p, (f.key, p)) for f in facets(domain).values() for p in f.doc_phrasings])


def find_facets(domain: str, text: str) -> list[tuple[str, str]]:
    """``(facet_key, doc_phrasing)`` for every facet phrasing in ``text``, in order of appearance."""
    found: list[tuple[str, str]] = _facet_index(domain).find(text)
    return found


def visual_terms(category: str) -> tuple[VisualTerm, ...]:
    """Every visual term an image description of ``category`` can contain."""
    pv = product_vocab()
    try:
        cat = pv.categories[category]
    except KeyError:
        raise CorpusError(f"unknown product category {category!r}") from None
    colors = tuple(pv.colors[c] for c in cat.colors)
    return colors + pv.finishes + cat.shapes + cat.materials + pv.settings


@cache
def _visual_index(category: str | None) -> _PhraseIndex:
    cats = [category] if category is not None else list(product_vocab().categories)
    terms = {(t.kind, t.value): t for c in cats for t in visual_terms(c)}
    return _PhraseIndex([(t.value, t) for t in terms.values()])


def find_visual(text: str, category: str | None = None) -> list[VisualTerm]:
    """The visual terms in an image description, in order; ``category`` narrows the shapes and materials."""
    found: list[VisualTerm] = _visual_index(category).find(text)
    return found


@cache
def vocab_fingerprint() -> str:
    """A short hash of both vocabulary files; manifests record it so a vocabulary change is visible."""
    h = hashlib.sha256()
    for path in _FILES.values():
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def check_vocab(domain: str) -> list[str]:
    """Problems in a domain's facet phrasings: duplicates and phrasings that contain another one.

    Either would make :func:`find_facets` ambiguous. An empty list means the vocabulary is sound.
    """
    phrasings = [(p.lower(), f.key) for f in facets(domain).values() for p in f.doc_phrasings]
    problems = []
    seen: dict[str, str] = {}
    for p, key in phrasings:
        if p in seen:
            problems.append(f"{p!r} is in both {seen[p]} and {key}")
        seen[p] = key
    for p, key in phrasings:
        for q, other in phrasings:
            if p != q and re.search(rf"(?<![\w']){re.escape(q)}(?![\w'])", p):
                problems.append(f"{p!r} ({key}) contains {q!r} ({other})")
    return problems
