"""Amazon ESCI products joined with Amazon Reviews 2023, mapped onto the PRODUCTS schema.

Streamed by :func:`iter_esci`. The ESCI products parquet (``product_id, product_title,
product_description, product_bullet_point, product_brand, product_color, product_locale``) is joined with review JSONL lines (``rating, title, text, asin,
parent_asin, user_id, timestamp, helpful_vote, verified_purchase``; ``.gz`` is read as is) on the
ASIN, and with item metadata JSONL (``parent_asin, main_category, average_rating, rating_number,
price, categories, details, ...``) on the reviews' ``parent_asin``. What the sources lack is
derived, always the same way:

- only products of one locale (``us``) are kept, in parquet order; ids are ``P`` + their rank;
- ``brand``: product_brand, else details["Brand"], else the store, else ``Generic``;
- ``category``: the last of the metadata categories, else main_category, else ``uncategorized``
  (lower case); ``color``: the first color word of product_color, else of details["Color"], else
  ``unspecified`` (counted as ``color_not_a_color`` when the source had a value): color words are
  the generator's color vocabulary plus ``yellow`` (``grey`` is read as ``gray``), so ``Navy Blue``
  is navy, and ``0``, ``dvd``, ``multi`` or ``Standard 3GB+32GB`` name no color;
- ``price``: the metadata price; a product without one is dropped and counted (``no_price``);
- ``rating`` / ``review_count``: average_rating / rating_number of the metadata, else the mean and
  count of the joined reviews; a product without reviews is dropped (``no_reviews``);
- ``in_stock``: true (ESCI lists products that were for sale); ``release_date``: details["Date First
  Available"], else the day of the earliest review;
- ``description``: description and bullet points, HTML removed, else the metadata's; ``review``:
  the most helpful review (title and text; ties go to the earliest); ``image``: there are no
  captions, so ``product photo of a <color> <title>`` (``product photo of <title>`` without a color).

The ESCI ``product_id`` (ASIN) and the reviews' ``parent_asin`` of each product are kept beside the
schema in the corpus's ``extras.parquet`` (:data:`EXTRA_SCHEMA`), not indexed.

A Git LFS pointer in place of a source file (a clone made without git-lfs) is refused with
``lfs_pointer``, and the ESCI examples file given as the products file with ``examples_file``, each in
one line that says what to pass or run.
"""

from __future__ import annotations

import gzip
import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import cache
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.corpora.blocks import check_args, doc_id, id_width
from indexing.corpora.files import arrow_schema
from indexing.corpora.loading import LoadStats, check_limit, row_tables
from indexing.corpora.vocab import product_vocab
from indexing.errors import CorpusError
from indexing.schema import PRODUCTS

ESCI_COLUMNS = (
    "product_id",
    "product_title",
    "product_description",
    "product_bullet_point",
    "product_brand",
    "product_color",
    "product_locale",
)
REVIEW_REQUIRED = ("asin", "rating", "text", "timestamp")
ESCI_EXAMPLE_COLUMNS = ("example_id", "query", "query_id", "product_id", "esci_label")
"""Columns of the ESCI examples file (shopping_queries_dataset_examples.parquet), the judged query-product pairs."""
EXTRA_COLORS = ("yellow",)
"""The basic color term (of Berlin and Kay's eleven) that the generator's color vocabulary lacks."""
COLOR_SPELLINGS = {"grey": "gray"}
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
"""How a Git LFS pointer file starts: a clone without git-lfs holds these in place of the data files."""
EXTRA_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("asin", pa.string(), nullable=False),
        pa.field("parent_asin", pa.string(), nullable=False),
    ]
)
"""What the corpus keeps of a product beside the PRODUCTS schema (``extras.parquet``): its ESCI
``product_id`` (the ASIN the ESCI examples judge) and the reviews' ``parent_asin`` (``""`` if none)."""
_TAG = re.compile(r"<[^>]+>")


def _clean(text: Any) -> str:
    """Plain text from a string or list of strings that may hold HTML."""
    if text is None:
        return ""
    if isinstance(text, list):
        text = " ".join(str(t) for t in text if t)
    return " ".join(html.unescape(_TAG.sub(" ", str(text))).split())


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _source_file(path: Path) -> None:
    """Refuse a missing file, and a Git LFS pointer standing in for the data, each in one line."""
    if not path.is_file():
        raise CorpusError(f"{path}: no such file", code="bad_source")
    try:
        with path.open("rb") as fh:
            head = fh.read(len(LFS_POINTER))
    except OSError as exc:
        raise CorpusError(f"{path}: cannot be read ({exc.strerror})", code="bad_source") from None
    if head == LFS_POINTER:
        raise CorpusError(
            f"{path} is a Git LFS pointer, not the data (the clone was made without git-lfs); "
            "run: git lfs pull (in that clone)",
            code="lfs_pointer",
        )


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line; a broken line is a CorpusError."""
    _source_file(path)
    try:
        with _open_text(path) as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise CorpusError(
                        f"{path}:{lineno}: not valid JSON ({exc.msg.removesuffix(' at')}, column {exc.colno})",
                        code="bad_record",
                    ) from None
                if not isinstance(obj, dict):
                    raise CorpusError(f"{path}:{lineno}: expected a JSON object", code="bad_record")
                yield lineno, obj
    except (UnicodeDecodeError, OSError, EOFError) as exc:
        raise CorpusError(f"{path}: cannot be read as UTF-8 JSON lines ({exc})", code="bad_source") from None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        m = re.search(r"\d[\d,]*(\.\d+)?", value)
        if m:
            return float(m.group().replace(",", ""))
    return None


@dataclass
class _Reviews:
    count: int = 0
    rating_sum: float = 0.0
    best: tuple[int, int] = (-1, 0)
    text: str = ""
    first_ts: int | None = None
    parent: str | None = None


def _read_reviews(path: Path, candidates: dict[str, int]) -> dict[str, _Reviews]:
    out: dict[str, _Reviews] = {}
    for lineno, obj in _jsonl(path):
        where = f"{path}:{lineno}"
        missing = [k for k in REVIEW_REQUIRED if k not in obj]
        if missing:
            raise CorpusError(f"{where}: review lacks {', '.join(missing)}", code="bad_record")
        asin, parent = obj["asin"], obj.get("parent_asin")
        key = asin if asin in candidates else parent if parent in candidates else None
        if key is None:
            continue
        rating = _number(obj["rating"])
        if rating is None or not 1.0 <= rating <= 5.0 or isinstance(obj["rating"], str):
            raise CorpusError(
                f"{where}: rating must be a number from 1 to 5, got {obj['rating']!r}", code="bad_record"
            )
        ts = obj["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int) or ts < 0:
            raise CorpusError(f"{where}: timestamp must be Unix time in ms, got {ts!r}", code="bad_record")
        seconds = ts // 1000 if ts > 10**11 else ts  # the 2023 release uses milliseconds
        votes = obj.get("helpful_vote") or 0
        r = out.setdefault(key, _Reviews())
        r.count += 1
        r.rating_sum += rating
        if r.parent is None and isinstance(parent, str):
            r.parent = parent
        r.first_ts = seconds if r.first_ts is None else min(r.first_ts, seconds)
        rank = (int(votes) if isinstance(votes, int) else 0, -seconds)
        if rank > r.best:
            title, text = _clean(obj.get("title")), _clean(obj["text"])
            r.best, r.text = rank, f"{title}. {text}" if title and text else (title or text)
    return out


def _read_meta(path: Path, wanted: set[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for lineno, obj in _jsonl(path):
        parent = obj.get("parent_asin")
        if not isinstance(parent, str) or not parent:
            raise CorpusError(f"{path}:{lineno}: item metadata lacks parent_asin", code="bad_record")
        if parent in wanted:
            details = obj.get("details")
            obj["details"] = details if isinstance(details, dict) else {}
            out[parent] = obj
    return out


def _parquet(path: Path) -> pq.ParquetFile:
    _source_file(path)
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise CorpusError(f"{path}: not a parquet file ({exc})", code="bad_source") from None
    names = pf.schema_arrow.names
    missing = [c for c in ESCI_COLUMNS if c not in names]
    if missing and all(c in names for c in ESCI_EXAMPLE_COLUMNS):
        raise CorpusError(
            f"{path} is the ESCI examples file (query, product_id, esci_label per row), not the products file; "
            "pass shopping_queries_dataset_products.parquet as --products",
            code="examples_file",
        )
    if missing:
        raise CorpusError(f"{path}: missing column {', '.join(missing)}", code="bad_record")
    return pf


@cache
def _color_words() -> frozenset[str]:
    return frozenset(product_vocab().colors) | frozenset(EXTRA_COLORS)


def _color(value: Any) -> str:
    """The first color word of a source value, or ``""`` when it names none.

    >>> _color("Navy Blue"), _color("Space Grey"), _color("Rose Gold"), _color("multi"), _color("0")
    ('navy', 'gray', 'gold', '', '')
    """
    for found in re.finditer(r"[a-z]+", _clean(value).lower()):
        word = COLOR_SPELLINGS.get(found.group(), found.group())
        if word in _color_words():
            return word
    return ""


def _release(meta: dict[str, Any], reviews: _Reviews, stats: LoadStats) -> date:
    raw = meta.get("details", {}).get("Date First Available")
    if isinstance(raw, str):
        try:
            return datetime.strptime(raw.strip(), "%B %d, %Y").date()
        except ValueError:
            pass
    stats.derived["release_date_from_reviews"] += 1
    return datetime.fromtimestamp(reviews.first_ts or 0, UTC).date()


def _product(
    pid: str, row: dict[str, Any], reviews: _Reviews, meta: dict[str, Any], stats: LoadStats
) -> dict[str, Any] | None:
    details = meta.get("details", {})
    price = _number(meta.get("price"))
    if price is None or price <= 0:
        stats.dropped["no_price"] += 1
        return None
    title = _clean(row["product_title"])
    if not title:
        stats.dropped["no_title"] += 1
        return None
    cats = meta.get("categories")
    category = (
        (cats[-1] if isinstance(cats, list) and cats else None)
        or meta.get("main_category")
        or "uncategorized"
    )
    color = _color(row["product_color"]) or _color(details.get("Color")) or "unspecified"
    if color == "unspecified" and (_clean(row["product_color"]) or _clean(details.get("Color"))):
        stats.derived["color_not_a_color"] += 1
    brand = (
        _clean(row["product_brand"]) or _clean(details.get("Brand")) or _clean(meta.get("store")) or "Generic"
    )
    avg = _number(meta.get("average_rating"))
    count = meta.get("rating_number")
    description = " ".join(
        x for x in (_clean(row["product_description"]), _clean(row["product_bullet_point"])) if x
    )
    if not description:
        description = _clean(meta.get("description")) or _clean(meta.get("features")) or title
    return {
        "id": pid,
        "brand": brand,
        "category": str(category).strip().lower(),
        "price": round(price, 2),
        "rating": round(avg if avg is not None and 1 <= avg <= 5 else reviews.rating_sum / reviews.count, 1),
        "review_count": int(count) if isinstance(count, int) and count >= 0 else reviews.count,
        "color": color,
        "in_stock": True,
        "release_date": _release(meta, reviews, stats),
        "title": title,
        "description": description,
        "review": reviews.text or title,
        "image": f"product photo of a {color} {title}"
        if color != "unspecified"
        else f"product photo of {title}",
    }


def _esci_rows(
    products: Path, reviews: Path, meta: Path | None, locale: str, limit: int | None, stats: LoadStats
) -> Iterator[dict[str, Any]]:
    pf = _parquet(products)
    candidates: dict[str, int] = {}
    row_no = 0
    for batch in pf.iter_batches(columns=["product_id", "product_locale"]):
        for pid, loc in zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), strict=True):
            row_no += 1
            if loc != locale:
                continue
            if not isinstance(pid, str) or not pid:
                raise CorpusError(f"{products}: row {row_no}: product_id is empty", code="bad_record")
            if pid not in candidates:  # a repeat is counted where the second pass meets it (within --limit)
                candidates[pid] = row_no
    if not candidates:
        raise CorpusError(f"{products}: no products with locale {locale!r}", code="bad_source")
    joined = _read_reviews(reviews, candidates)
    wanted = {r.parent or pid for pid, r in joined.items()} | set(joined)
    metas = _read_meta(meta, wanted) if meta is not None else {}
    width = id_width(min(len(candidates), limit) if limit else len(candidates))
    kept, row_no = 0, 0
    extras: dict[str, list[str]] = {name: [] for name in EXTRA_SCHEMA.names}
    for row in (row for batch in pf.iter_batches(columns=list(ESCI_COLUMNS)) for row in batch.to_pylist()):
        if limit is not None and kept >= limit:
            break
        row_no += 1
        pid = row["product_id"]
        if row["product_locale"] != locale:
            continue
        stats.read += 1
        if candidates.get(pid) != row_no:  # a product listed again
            stats.dropped["duplicate_product"] += 1
            continue
        r = joined.get(pid)
        if r is None:
            stats.dropped["no_reviews"] += 1
            continue
        m = metas.get(r.parent or pid) or metas.get(pid) or {}
        out = _product(doc_id(PRODUCTS.id_prefix, kept + 1, width), row, r, m, stats)
        if out is None:
            continue
        kept += 1
        stats.rows = kept
        for name, value in (("id", out["id"]), ("asin", pid), ("parent_asin", r.parent or "")):
            extras[name].append(value)
        yield out
    stats.extras = pa.table(extras, schema=EXTRA_SCHEMA)
    if kept == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(stats.dropped.items()))
        raise CorpusError(
            f"no product survived the join ({reasons}){_join_hint(stats, reviews, meta)}", code="empty_load"
        )


def _join_hint(stats: LoadStats, reviews: Path, meta: Path | None) -> str:
    """What to change when no product survived, for the reason that dropped the most products."""
    most = max(stats.dropped.values(), default=0)
    hints = []
    if stats.dropped["no_reviews"] == most > 0:
        hints.append(f"{reviews} has no review for most of them; pass the reviews of their category")
    if stats.dropped["no_price"] == most > 0:
        hints.append(
            "pass the item metadata (--meta) for prices" if meta is None else f"{meta} has no price for them"
        )
    return "".join(f"; {h}" for h in hints)


def iter_esci(
    products: str | Path,
    reviews: str | Path,
    meta: str | Path | None = None,
    *,
    locale: str = "us",
    limit: int | None = None,
    chunk_rows: int = 10_000,
    stats: LoadStats | None = None,
) -> Iterator[pa.Table]:
    """Stream ESCI products joined with Amazon Reviews 2023 as PRODUCTS tables (see the module doc)."""
    st = stats if stats is not None else LoadStats()
    check_args(1, 0, chunk_rows)
    check_limit(limit)
    rows = _esci_rows(Path(products), Path(reviews), Path(meta) if meta else None, locale, limit, st)
    return row_tables(rows, arrow_schema(PRODUCTS), chunk_rows)
