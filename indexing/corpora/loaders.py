"""Loaders of the real source formats, mapped onto the PRODUCTS and EMAILS schemas.

Both loaders stream Arrow tables for :func:`indexing.corpora.files.write_corpus`, which publishes a
corpus only when every row is written. A broken record stops the load with a
:class:`~indexing.errors.CorpusError` naming the file and line (or the message path), so a failed
load leaves the previous corpus as it was.

**Amazon ESCI + Amazon Reviews 2023** (:func:`iter_esci`). The ESCI products parquet
(``product_id, product_title, product_description, product_bullet_point, product_brand,
product_color, product_locale``) is joined with review JSONL lines (``rating, title, text, asin,
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

A Git LFS pointer in place of a source file (a clone made without git-lfs) is refused with
``lfs_pointer``, and the ESCI examples file given as the products file with ``examples_file``, each in
one line that says what to pass or run.

**Enron maildir** (:func:`iter_enron`): ``maildir/<user>/<folder>/<file>`` holding RFC 822 messages,
parsed with the standard ``email`` package. The directory given is the maildir itself; a folder that
holds one (the release's top folder) is refused with ``maildir_root``, naming the maildir to pass, so
users are never read one level off. Messages load mailbox by mailbox (users in natural order), a
mailbox's folders in preference order (``inbox``, ``sent``, ``sent_items``, ``_sent_mail``, then the
folders the user made, then the Notes views ``notes_inbox``, ``discussion_threads``, ``all_documents``),
files in natural path order within a folder; ``limit`` counts loaded rows.

- **Copies**: a message whose ``Message-ID`` was loaded already (the Notes views repeat ``inbox`` and
  ``sent``) is dropped and counted (``duplicate_message``), so the copy kept is the one in the most
  preferred folder of the first mailbox that holds it; ``keep_duplicates`` loads every file.
- ``folder``: the path between user and file (lower case, a maildir's ``cur``/``new`` left out).
  ``is_read`` / ``is_starred`` come from maildir info flags (``<name>:2,<flags>``, ``S`` seen, ``F``
  flagged); the Enron release has no flags, so there both are false.
- ``date``: the sender's local wall-clock time, as the ``Date:`` header reads (``Mon, 14 May 2001
  16:39:00 -0700`` is 2001-05-14 16:39:00), stored without a zone, so ``toDate``/``toYear`` filters agree
  with the day a reader of the message sees (UTC would move about one message in seven to another day).
  Times of different senders are therefore not on one clock: a reply can sort before its question.
  Enron's placeholder ``Mon, 31 Dec 1979 16:00:00 -0800`` means "unknown"; the column cannot be null, so
  such a message is dropped and counted (``placeholder_date``), as is one dated outside ClickHouse's
  ``DateTime`` range (``date_out_of_range``).
- ``recipient``: the first ``To:`` address, else the first ``Cc:``, else the first ``Bcc:``, else empty.
  The schema has one recipient column (filtered as ``recipient = '...'``), so further addresses are not
  kept; the load counts messages that had more (``recipients_not_kept``) and recipients taken from
  ``Cc:``/``Bcc:`` (``recipient_from_cc``, ``recipient_from_bcc``).
- ``has_attachment``: a MIME attachment part, or an attachment marker in the body: ``<<name.ext>>`` as
  Notes writes it or ``<< File: name.ext >>`` as Outlook does.
- ``thread_id``: a hash of the subject without ``Re:``/``Fw:`` prefixes; ``body``: the first plain-text
  part, line endings normalized to ``\\n`` (some messages keep ``\\r\\n``).
"""

from __future__ import annotations

import codecs
import email
import email.errors
import gzip
import hashlib
import html
import json
import os
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from functools import cache
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.corpora.blocks import check_args, doc_id, id_width
from indexing.corpora.files import arrow_schema
from indexing.corpora.vocab import product_vocab
from indexing.errors import CorpusError
from indexing.schema import EMAILS, PRODUCTS

LOADER_VERSION = "2"
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
NO_DATE = datetime(1980, 1, 1, tzinfo=UTC)
"""Enron's placeholder for a missing date (``Mon, 31 Dec 1979 16:00:00 -0800``): the date is unknown."""
DATETIME_RANGE = (datetime(1970, 1, 1), datetime(2106, 2, 7))
"""Wall-clock times a ClickHouse ``DateTime`` column holds; a message dated outside is dropped."""
FIRST_FOLDERS = ("inbox", "sent", "sent_items", "_sent_mail")
"""Folders whose copy of a message is kept first, in this order; then any other folder a user made."""
COPY_FOLDERS = ("notes_inbox", "discussion_threads", "all_documents")
"""Lotus Notes views of the Enron release that repeat mail filed elsewhere: their copies are kept last."""
_TAG = re.compile(r"<[^>]+>")
_REPLY_PREFIX = re.compile(r"^\s*((re|fw|fwd|aw)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_ENRON_ATTACHMENT = re.compile(r"<<[^<>\n]{1,200}\.[A-Za-z0-9]{2,5}\s*>>")
"""An attachment marker: ``<<name.ext>>`` (Lotus Notes) or ``<< File: name.ext >>`` (Outlook, with spaces)."""


@dataclass
class LoadStats:
    """Filled while a loader streams: rows kept, rows dropped by reason, notes on derived values."""

    rows: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    derived: Counter[str] = field(default_factory=Counter)

    def as_meta(self) -> dict[str, Any]:
        return {"rows_loaded": self.rows, "dropped": dict(self.dropped), "derived": dict(self.derived)}


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


def _check_limit(limit: int | None) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise CorpusError(f"limit must be a positive integer, got {limit!r}", code="bad_argument")


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
            if pid in candidates:
                stats.dropped["duplicate_product"] += 1
                continue
            candidates[pid] = row_no
    if not candidates:
        raise CorpusError(f"{products}: no products with locale {locale!r}", code="bad_source")
    joined = _read_reviews(reviews, candidates)
    wanted = {r.parent or pid for pid, r in joined.items()} | set(joined)
    metas = _read_meta(meta, wanted) if meta is not None else {}
    width = id_width(min(len(candidates), limit) if limit else len(candidates))
    kept, row_no = 0, 0
    for batch in pf.iter_batches(columns=list(ESCI_COLUMNS)):
        for row in batch.to_pylist():
            row_no += 1
            pid = row["product_id"]
            if candidates.get(pid) != row_no:
                continue  # another locale, or a duplicate
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
            yield out
            if limit is not None and kept >= limit:
                return
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


def _tables(rows: Iterator[dict[str, Any]], schema: pa.Schema, chunk_rows: int) -> Iterator[pa.Table]:
    buf: list[dict[str, Any]] = []
    for row in rows:
        buf.append(row)
        if len(buf) >= chunk_rows:
            yield pa.Table.from_pylist(buf, schema=schema)
            buf = []
    if buf:
        yield pa.Table.from_pylist(buf, schema=schema)


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
    _check_limit(limit)
    rows = _esci_rows(Path(products), Path(reviews), Path(meta) if meta else None, locale, limit, st)
    return _tables(rows, arrow_schema(PRODUCTS), chunk_rows)


def _natural(path: Path) -> list[Any]:
    return [(0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.split(r"(\d+)", path.as_posix())]


def _folder(rel: Path) -> str:
    """The folder of a message path ``<user>/<folder...>/<file>``, a maildir's ``cur``/``new`` left out."""
    return "/".join(p for p in rel.parts[1:-1] if p not in ("cur", "new")).lower() or "inbox"


def _preference(folder: str) -> int:
    top = folder.split("/", 1)[0]
    if top in FIRST_FOLDERS:
        return FIRST_FOLDERS.index(top)
    if top in COPY_FOLDERS:
        return len(FIRST_FOLDERS) + 1 + COPY_FOLDERS.index(top)
    return len(FIRST_FOLDERS)


def _message_files(root: Path) -> list[Path]:
    """Message paths in load order: mailbox by mailbox, folders in preference order, natural order within."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "tmp"]
        files += [Path(dirpath, f).relative_to(root) for f in filenames if not f.startswith(".")]
    return sorted(
        files, key=lambda rel: (_natural(Path(rel.parts[0])), _preference(_folder(rel)), _natural(rel))
    )


def _header(msg: Message, name: str, where: Path) -> str:
    raw = msg.get(name)
    if raw is None:
        return ""
    try:
        return " ".join(str(make_header(decode_header(str(raw)))).split())
    except (LookupError, UnicodeError, email.errors.HeaderParseError) as exc:
        raise CorpusError(f"{where}: cannot decode the {name} header ({exc})", code="bad_record") from None


def _text(part: Message, where: Path, stats: LoadStats) -> str:
    payload = part.get_payload(decode=True)
    data = payload if isinstance(payload, bytes) else b""
    charset = part.get_content_charset() or "us-ascii"
    try:
        codecs.lookup(charset)
    except LookupError:
        raise CorpusError(f"{where}: body has unknown charset {charset!r}", code="bad_record") from None
    try:
        return data.decode(charset)
    except UnicodeDecodeError:
        stats.derived["body_decoded_as_cp1252"] += 1  # Enron mislabels Windows text as ASCII
        return data.decode("cp1252", errors="replace")


def _message(root: Path, rel: Path, seen: set[str] | None, stats: LoadStats) -> dict[str, Any] | None:
    """The row of one message, or ``None`` (counted in ``stats.dropped``) when its date is unknown or, with
    ``seen`` (the Message-IDs loaded so far), when it is a copy of a message already loaded."""
    where = root / rel
    try:
        msg = email.message_from_bytes(where.read_bytes())
    except OSError as exc:
        raise CorpusError(f"{where}: cannot be read ({exc.strerror})", code="bad_source") from None
    sender = parseaddr(_header(msg, "From", where))[1].lower()
    raw_date = _header(msg, "Date", where)
    if not sender or not raw_date:
        raise CorpusError(f"{where}: not an RFC 822 message (no From or Date header)", code="bad_record")
    try:
        when = parsedate_to_datetime(raw_date)
    except (TypeError, ValueError, IndexError):
        raise CorpusError(f"{where}: unparsable Date header {raw_date!r}", code="bad_record") from None
    if when.tzinfo is not None and when.astimezone(UTC) == NO_DATE:
        stats.dropped["placeholder_date"] += 1
        return None
    when = when.replace(tzinfo=None)  # the sender's wall-clock time, as a reader sees it in the header
    if not DATETIME_RANGE[0] <= when < DATETIME_RANGE[1]:
        stats.dropped["date_out_of_range"] += 1
        return None
    message_id = str(msg.get("Message-ID") or "").strip()
    if seen is not None and message_id:
        if message_id in seen:
            stats.dropped["duplicate_message"] += 1
            return None
        seen.add(message_id)
    recipient = ""
    addresses = 0
    for name in ("To", "Cc", "Bcc"):
        found = [a.lower() for _, a in getaddresses([_header(msg, name, where)]) if a]
        if found and not recipient:
            recipient = found[0]
            if name != "To":
                stats.derived[f"recipient_from_{name.lower()}"] += 1
        addresses += len(found)
    if addresses > 1:
        stats.derived["recipients_not_kept"] += 1  # the schema holds one recipient (see the module doc)
    body, attachment = "", False
    for part in msg.walk():
        if part.is_multipart():
            continue
        if part.get_filename() or part.get_content_disposition() == "attachment":
            attachment = True
        elif not body and part.get_content_type() == "text/plain":
            body = _text(part, where, stats).replace("\r\n", "\n").replace("\r", "\n").strip()
    subject = _header(msg, "Subject", where)
    topic = " ".join(_REPLY_PREFIX.sub("", subject).lower().split()) or f"message:{rel.as_posix()}"
    name = rel.name
    flags = name.split(":2,", 1)[1] if ":2," in name else ""
    return {
        "sender": sender,
        "sender_domain": sender.rsplit("@", 1)[-1],
        "recipient": recipient,
        "date": when,
        "folder": _folder(rel),
        "is_read": "S" in flags and rel.parent.name != "new",
        "is_starred": "F" in flags,
        "has_attachment": attachment or bool(_ENRON_ATTACHMENT.search(body)),
        "thread_id": "T" + hashlib.sha1(topic.encode()).hexdigest()[:12],
        "subject": subject,
        "body": body,
    }


def _enron_rows(
    root: Path, limit: int | None, keep_duplicates: bool, stats: LoadStats
) -> Iterator[dict[str, Any]]:
    if not root.is_dir():
        raise CorpusError(f"{root}: no such maildir directory", code="bad_source")
    if (root / "maildir").is_dir():  # the release folder: users would load as folders of a user 'maildir'
        raise CorpusError(
            f"{root} holds a maildir instead of being one; pass --maildir {root / 'maildir'}",
            code="maildir_root",
        )
    files = _message_files(root)
    if not files:
        raise CorpusError(f"{root}: no messages under maildir/<user>/<folder>/", code="bad_source")
    width = id_width(min(len(files), limit) if limit is not None else len(files))
    kept = 0
    seen: set[str] | None = None if keep_duplicates else set()
    for rel in files:
        row = _message(root, rel, seen, stats)
        if row is None:
            continue
        kept += 1
        stats.rows = kept
        yield {"id": doc_id(EMAILS.id_prefix, kept, width), **row}
        if limit is not None and kept >= limit:
            return
    if kept == 0:
        reasons = ", ".join(f"{k}: {v}" for k, v in sorted(stats.dropped.items()))
        raise CorpusError(f"{root}: no message could be loaded ({reasons})", code="empty_load")


def iter_enron(
    maildir: str | Path,
    *,
    limit: int | None = None,
    keep_duplicates: bool = False,
    chunk_rows: int = 10_000,
    stats: LoadStats | None = None,
) -> Iterator[pa.Table]:
    """Stream the messages of an Enron-style maildir as EMAILS tables (see the module doc).

    A message whose Message-ID was loaded already is a copy and is dropped (``duplicate_message``)
    unless ``keep_duplicates``.
    """
    st = stats if stats is not None else LoadStats()
    check_args(1, 0, chunk_rows)
    _check_limit(limit)
    rows = _enron_rows(Path(maildir), limit, keep_duplicates, st)
    return _tables(rows, arrow_schema(EMAILS), chunk_rows)
