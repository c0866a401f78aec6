"""Seeded, streamed generator of the e-commerce corpus (schema ``PRODUCTS``).

Every product is derived from ``(seed, index)`` alone (see :mod:`indexing.corpora.blocks`), so the
output is identical for any ``chunk_rows`` and a product does not change when the corpus grows.
What a product looks like:

- category uniform over the vocabulary's categories; a brand that sells in that category;
- price lognormal around the category median, times the brand tier's factor, clipped to the
  category range and ending in .99 or .49; rating around the category mean plus the tier's shift
  (a few "lemons" rate low); review_count lognormal (heavy-tailed); ~85% in stock; release dates
  2018-2024, skewed to recent years; a color from the category's colors, common ones first;
- title ``<brand> <series> <number><suffix> <title noun>`` (sometimes with the color);
- description: an intro and 2-4 *pro* facet phrasings in varied seller sentences;
- review: an opener that fits the rating and 2-3 facet phrasings, the more *con* facets the lower
  the rating; image: a visual description (finish, color, shape, material, setting).

:func:`labeled_products` gives the same batches with their label rows (:mod:`indexing.corpora.labels`).

>>> first = next(generate_products(3, seed=7))
>>> first.column("id").to_pylist()
['P00001', 'P00002', 'P00003']
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date
from functools import cache, partial

import numpy as np
import pyarrow as pa

from indexing.corpora.blocks import (
    BLOCK,
    block_rng,
    doc_id,
    generate_blocks,
)
from indexing.corpora.files import arrow_schema
from indexing.corpora.labels import (
    LABEL_COLUMN,
    LabeledBatch,
    drop_labels,
    label_column,
    visual_key,
    with_labels,
)
from indexing.corpora.vocab import GENERAL, product_vocab
from indexing.schema import PRODUCTS

GENERATOR_VERSION = "1"
STREAM = 1
IN_STOCK_RATE = 0.85
LEMON_RATE = 0.07
"""Share of products that disappoint whatever their brand: rating around LEMON_MEAN."""
LEMON_MEAN = 2.5
RELEASE_START = date(2018, 1, 1)
RELEASE_END = date(2024, 12, 31)
REVIEW_COUNT_LOG_MEAN, REVIEW_COUNT_LOG_SD, REVIEW_COUNT_MAX = 3.0, 1.5, 250_000
SUFFIXES = ("", "", "", " Pro", " Max", " Lite", "X", "S", " II", " Plus")

INTROS = (
    "Meet the {model} from {brand}.",
    "Introducing the {brand} {model}.",
    "{brand} built the {model} for everyday use.",
    "The {model} is the newest {noun} from {brand}.",
)
DESC_SENTENCES = (
    "It {p}.",
    "The {model} {p}.",
    "Better still, it {p}.",
    "On top of that, it {p}.",
    "Above all, it {p}.",
    "You will find that it {p}.",
    "Thanks to careful engineering, it {p}.",
)
OUTROS = (
    "Available in {color}.",
    "Backed by a two-year warranty.",
    "Ships free in recyclable packaging.",
    "",
)
REVIEW_OPENERS = {
    "high": (
        "Five stars from me.",
        "Exactly what I was looking for.",
        "Really happy with this purchase.",
        "Best purchase I made this year.",
    ),
    "mid": ("Decent overall.", "Mixed feelings about this one.", "Good, not great.", "It does the job."),
    "low": ("Disappointed.", "Would not buy again.", "Not worth it.", "Returned it after a week."),
}
REVIEW_CLOSERS = {
    "high": ("Would recommend.", "Highly recommend.", ""),
    "mid": ("Might work for you.", ""),
    "low": ("Save your money.", ""),
}
PRO_SENTENCES = (
    "I love that it {p}.",
    "Honestly, it {p}.",
    "What stood out: it {p}.",
    "My favorite part is that it {p}.",
    "Pleasantly surprised that it {p}.",
    "Impressed that it {p}.",
)
CON_SENTENCES = (
    "My only complaint is that it {p}.",
    "Unfortunately, it {p}.",
    "Be warned: it {p}.",
    "On the downside, it {p}.",
    "Sadly it {p}.",
)
IMAGES = (
    "{F} {c} {s} {n} with {m} {set}.",
    "Photo of {f} {c} {s} {n} with {m}, shown {set}.",
    "{F} {c} {s} {n} {set}; close-up of {m}.",
)

# Columns of the per-block uniform matrix: one independent draw per decision.
(
    U_BRAND,
    U_COLOR,
    U_SERIES,
    U_NUM,
    U_SUFFIX,
    U_NOUN,
    U_TITLE_COLOR,
    U_INTRO,
    U_DESC_T,
    U_DESC_K,
    U_OUTRO,
    U_REV_K,
    U_REV_T,
    U_OPEN,
    U_CLOSE,
    U_FINISH,
    U_SHAPE,
    U_MATERIAL,
    U_SETTING,
    U_IMAGE,
) = range(20)
N_UNIFORM = 20
MAX_DESC, MAX_REV = 4, 3
GENERAL_PENALTY = 3.0
"""Facets every category has (value, build, damage) come up less often than a category's own."""


@dataclass(frozen=True)
class _Cat:
    """A category flattened for the generation loop."""

    name: str
    noun: str
    title_nouns: tuple[str, ...]
    series: tuple[str, ...]
    brands: tuple[int, ...]
    colors: tuple[str, ...]
    color_cum: tuple[float, ...]
    pros: tuple[tuple[str, ...], ...]
    cons: tuple[tuple[str, ...], ...]
    pro_keys: tuple[str, ...]
    con_keys: tuple[str, ...]
    shapes: tuple[str, ...]
    materials: tuple[str, ...]


@dataclass(frozen=True)
class _Tables:
    cats: tuple[_Cat, ...]
    brand_names: tuple[str, ...]
    brand_table: np.ndarray  # [category, k] -> brand number
    brand_counts: np.ndarray
    price_factor: np.ndarray
    rating_shift: np.ndarray
    log_median: np.ndarray
    sigma: np.ndarray
    low: np.ndarray
    high: np.ndarray
    rating_mean: np.ndarray
    rating_sd: np.ndarray
    pro_scale: np.ndarray
    con_scale: np.ndarray
    finishes: tuple[str, ...]
    settings: tuple[str, ...]


@cache
def _tables() -> _Tables:
    pv = product_vocab()
    names = tuple(pv.brands)
    cats = []
    for c in pv.categories.values():
        weights = [1.0 / (k + 1) for k in range(len(c.colors))]
        cum = list(np.cumsum(weights) / sum(weights))
        cats.append(
            _Cat(
                name=c.name,
                noun=c.noun,
                title_nouns=c.title_nouns,
                series=c.series,
                brands=tuple(names.index(b) for b in c.brands),
                colors=c.colors,
                color_cum=tuple(cum[:-1]),
                pros=tuple(f.doc_phrasings for f in c.pros),
                cons=tuple(f.doc_phrasings for f in c.cons),
                pro_keys=tuple(f.key for f in c.pros),
                con_keys=tuple(f.key for f in c.cons),
                shapes=tuple(t.value for t in c.shapes),
                materials=tuple(t.value for t in c.materials),
            )
        )
    vcats = list(pv.categories.values())
    width = max(len(fc.brands) for fc in cats)
    table = np.zeros((len(cats), width), dtype=np.int64)
    for k, fc in enumerate(cats):
        table[k, : len(fc.brands)] = fc.brands
    arr = np.asarray
    return _Tables(
        cats=tuple(cats),
        brand_names=names,
        brand_table=table,
        brand_counts=arr([len(c.brands) for c in cats]),
        price_factor=arr([b.price_factor for b in pv.brands.values()]),
        rating_shift=arr([b.rating_shift for b in pv.brands.values()]),
        log_median=np.log(arr([c.price.median for c in vcats])),
        sigma=arr([c.price.sigma for c in vcats]),
        low=arr([c.price.low for c in vcats]),
        high=arr([c.price.high for c in vcats]),
        rating_mean=arr([c.rating_mean for c in vcats]),
        rating_sd=arr([c.rating_sd for c in vcats]),
        pro_scale=_weights(
            [[f.group == GENERAL for f in c.pros] for c in vcats], max(len(c.pros) for c in cats)
        ),
        con_scale=_weights(
            [[f.group == GENERAL for f in c.cons] for c in vcats], max(len(c.cons) for c in cats)
        ),
        finishes=tuple(t.value for t in pv.finishes),
        settings=tuple(t.value for t in pv.settings),
    )


def _weights(facets: list[list[bool]], width: int) -> np.ndarray:
    """Sort-key scale per [category, facet]: own facets 1, general ones GENERAL_PENALTY, padding inf."""
    w = np.full((len(facets), width), np.inf)
    for k, general in enumerate(facets):
        w[k, : len(general)] = [GENERAL_PENALTY if g else 1.0 for g in general]
    return w


def _permutations(rng: np.random.Generator, scale: np.ndarray) -> np.ndarray:
    """A random facet order per row (rows of ``scale``); larger scales tend to come later."""
    return np.argsort(rng.random(scale.shape) * scale, axis=1, kind="stable")


def _pick(options: tuple[str, ...], u: float) -> str:
    return options[int(u * len(options))]


def _block(t: _Tables, seed: int, block: int, start: int, rows: int, width: int) -> pa.Table:
    rng = block_rng(STREAM, seed, block)
    n = BLOCK  # always draw a full block so a document never depends on the corpus size
    cat = rng.integers(0, len(t.cats), n)
    u = rng.random((n, N_UNIFORM))
    brand = t.brand_table[cat, (u[:, U_BRAND] * t.brand_counts[cat]).astype(np.int64)]
    raw_price = np.exp(t.log_median[cat] + t.sigma[cat] * rng.standard_normal(n)) * t.price_factor[brand]
    cents = np.where(rng.random(n) < 0.8, 0.99, 0.49)
    price = np.floor(np.clip(raw_price, t.low[cat], t.high[cat] - 1.0)) + cents
    lemon = rng.random(n) < LEMON_RATE
    mean = np.where(lemon, LEMON_MEAN, t.rating_mean[cat] + t.rating_shift[brand])
    sd = np.where(lemon, 0.6, t.rating_sd[cat])
    rating = np.round(np.clip(mean + sd * rng.standard_normal(n), 1.0, 5.0), 1)
    reviews = np.minimum(
        np.floor(rng.lognormal(REVIEW_COUNT_LOG_MEAN, REVIEW_COUNT_LOG_SD, n)) + 1, REVIEW_COUNT_MAX
    )
    in_stock = rng.random(n) < IN_STOCK_RATE
    span = (RELEASE_END - RELEASE_START).days
    epoch = (RELEASE_START - date(1970, 1, 1)).days
    release = epoch + np.floor(span * np.sqrt(rng.random(n))).astype(np.int32)
    pros = _permutations(rng, t.pro_scale[cat])
    cons = _permutations(rng, t.con_scale[cat])
    rev_pros = _permutations(rng, t.pro_scale[cat])
    p_con = np.clip((4.4 - rating) / 2.2, 0.03, 0.9)
    is_con = rng.random((n, MAX_REV)) < p_con[:, None]
    phr = rng.random((n, MAX_DESC + MAX_REV))

    titles, descs, revs, images, brands, colors = [], [], [], [], [], []
    labels: list[list[tuple[str, str]]] = []
    U, C, B, R = u[:rows].tolist(), cat[:rows].tolist(), brand[:rows].tolist(), rating[:rows].tolist()
    P, K, RP, ISC, PH = (
        pros[:rows].tolist(),
        cons[:rows].tolist(),
        rev_pros[:rows].tolist(),
        is_con[:rows].tolist(),
        phr[:rows].tolist(),
    )
    for i in range(rows):
        r, c, b = U[i], t.cats[C[i]], t.brand_names[B[i]]
        x = r[U_COLOR]
        color = c.colors[sum(1 for edge in c.color_cum if x > edge)]
        model = f"{_pick(c.series, r[U_SERIES])} {10 + int(r[U_NUM] * 990)}{_pick(SUFFIXES, r[U_SUFFIX])}"
        title = f"{b} {model} {_pick(c.title_nouns, r[U_NOUN])}"
        if r[U_TITLE_COLOR] < 0.3:
            title += f", {color.title()}"
        ph = PH[i]
        k_desc = 2 + int(r[U_DESC_K] * 3)
        t0 = int(r[U_DESC_T] * len(DESC_SENTENCES))
        parts = [_pick(INTROS, r[U_INTRO]).format(model=model, brand=b, noun=c.noun)]
        said: list[tuple[str, str]] = []
        for j in range(k_desc):
            p = _pick(c.pros[P[i][j]], ph[j])
            said.append(("description", c.pro_keys[P[i][j]]))
            parts.append(DESC_SENTENCES[(t0 + j) % len(DESC_SENTENCES)].format(p=p, model=model))
        outro = _pick(OUTROS, r[U_OUTRO])
        if outro:
            parts.append(outro.format(color=color))
        mood = "high" if R[i] >= 4.3 else ("mid" if R[i] >= 3.0 else "low")
        review = [_pick(REVIEW_OPENERS[mood], r[U_OPEN])]
        k_rev = 2 + int(r[U_REV_K] * 2)
        t1 = int(r[U_REV_T] * 30)
        n_pro = n_con = 0
        for j in range(k_rev):
            if ISC[i][j] and n_con < len(c.cons):
                p = _pick(c.cons[K[i][n_con]], ph[MAX_DESC + j])
                said.append(("review", c.con_keys[K[i][n_con]]))
                review.append(CON_SENTENCES[(t1 + j) % len(CON_SENTENCES)].format(p=p))
                n_con += 1
            else:
                p = _pick(c.pros[RP[i][n_pro]], ph[MAX_DESC + j])
                said.append(("review", c.pro_keys[RP[i][n_pro]]))
                review.append(PRO_SENTENCES[(t1 + j) % len(PRO_SENTENCES)].format(p=p))
                n_pro += 1
        closer = _pick(REVIEW_CLOSERS[mood], r[U_CLOSE])
        if closer:
            review.append(closer)
        finish = _pick(t.finishes, r[U_FINISH])
        shape, material, setting = (
            _pick(c.shapes, r[U_SHAPE]),
            _pick(c.materials, r[U_MATERIAL]),
            _pick(t.settings, r[U_SETTING]),
        )
        image = _pick(IMAGES, r[U_IMAGE]).format(
            F=finish[0].upper() + finish[1:], f=finish, c=color, s=shape, n=c.noun, m=material, set=setting
        )
        said += [
            ("image", visual_key(kind, value))
            for kind, value in (("finish", finish), ("color", color), ("shape", shape), ("material", material),
                                ("setting", setting))
        ]  # fmt: skip
        labels.append(said)
        titles.append(title)
        descs.append(" ".join(parts))
        revs.append(" ".join(review))
        images.append(image)
        brands.append(b)
        colors.append(color)
    columns = {
        "id": pa.array([doc_id(PRODUCTS.id_prefix, start + i + 1, width) for i in range(rows)], pa.string()),
        "brand": pa.array(brands, pa.string()),
        "category": pa.array([t.cats[k].name for k in C], pa.string()),
        "price": pa.array(price[:rows], pa.float64()),
        "rating": pa.array(rating[:rows], pa.float64()),
        "review_count": pa.array(reviews[:rows].astype(np.int64), pa.int64()),
        "color": pa.array(colors, pa.string()),
        "in_stock": pa.array(in_stock[:rows], pa.bool_()),
        "release_date": pa.array(release[:rows], pa.date32()),
        "title": pa.array(titles, pa.string()),
        "description": pa.array(descs, pa.string()),
        "review": pa.array(revs, pa.string()),
        "image": pa.array(images, pa.string()),
    }
    return pa.table(columns, schema=arrow_schema(PRODUCTS)).append_column(LABEL_COLUMN, label_column(labels))


def _generate(size: int, seed: int, chunk_rows: int) -> Iterator[pa.Table]:
    return generate_blocks(partial(_block, _tables()), size, seed, chunk_rows)


def generate_products(size: int, seed: int = 0, chunk_rows: int = 10_000) -> Iterator[pa.Table]:
    """Stream ``size`` generated products as Arrow tables of ``chunk_rows`` rows (PRODUCTS columns)."""
    return drop_labels(_generate(size, seed, chunk_rows))


def labeled_products(size: int, seed: int = 0, chunk_rows: int = 10_000) -> Iterator[LabeledBatch]:
    """The batches of :func:`generate_products`, each with the label rows of its products
    (:mod:`indexing.corpora.labels`): the facets of description and review, the visual terms of the image."""
    return with_labels(_generate(size, seed, chunk_rows))
