"""Small files in the real source formats, written by the project itself for tests and demos.

The real sources (Amazon ESCI, Amazon Reviews 2023, Enron) cannot be downloaded here, so these
writers re-express generated documents in those formats: an ESCI products parquet with review and
item-metadata JSON lines, and an Enron-style maildir of RFC 822 messages. Each fixture keeps the
generated table it came from, so a test can check that a loader gives the documents back.

``broken`` plants one bad record, and the fixture says where (``broken_at``):

- ESCI: ``json`` (a line that is not JSON), ``field`` (a review without ``rating``), ``column``
  (a products parquet without ``product_title``);
- Enron: ``date`` (an unparsable Date header), ``charset`` (a body in an unknown charset),
  ``headers`` (a file that is not a message at all).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from email.message import EmailMessage
from email.policy import default as default_policy
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from indexing.corpora.emails import generate_emails
from indexing.corpora.esci import ESCI_COLUMNS
from indexing.corpora.products import generate_products
from indexing.errors import CorpusError

ESCI_BROKEN = ("json", "field", "column")
ENRON_BROKEN = ("date", "charset", "headers")
MAIN_CATEGORY = "All Electronics"


@dataclass(frozen=True)
class EsciFixture:
    """Paths of an ESCI fixture, the generated products behind it and what the loader should drop."""

    products: Path
    reviews: Path
    meta: Path
    source: pa.Table
    asins: tuple[str, ...]
    """ESCI product_id of each source row."""
    no_reviews: tuple[str, ...]
    no_price: tuple[str, ...]
    broken_at: str | None
    """What the loader's error message must contain: file and line, or file and column."""


@dataclass(frozen=True)
class EnronFixture:
    """Path of a maildir fixture, the generated emails behind it and where each message lies."""

    maildir: Path
    source: pa.Table
    paths: tuple[Path, ...]
    """Message file of each source row, relative to ``maildir``."""
    flagged: tuple[bool, ...]
    """Whether the message file carries maildir flags (else is_read/is_starred load as false)."""
    broken_at: Path | None


def _ms(day: date, days_later: int) -> int:
    moment = datetime(day.year, day.month, day.day, 12, tzinfo=UTC) + timedelta(days=days_later)
    return int(moment.timestamp() * 1000)


def write_esci_fixture(
    directory: str | Path, n: int = 20, seed: int = 0, broken: str | None = None
) -> EsciFixture:
    """Write ``n`` generated products as ESCI parquet + Amazon Reviews 2023 JSONL into ``directory``.

    The last product has no review and the one before it no price: the loader drops both. Every
    even product's reviews name a different parent ASIN, whose metadata carries the price.
    """
    if broken is not None and broken not in ESCI_BROKEN:
        raise CorpusError(
            f"unknown broken kind {broken!r}; choose one of {', '.join(ESCI_BROKEN)}", code="bad_argument"
        )
    if n < 3:
        raise CorpusError("an ESCI fixture needs at least 3 products", code="bad_argument")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    source = pa.concat_tables(generate_products(n, seed=seed, chunk_rows=n))
    docs = source.to_pylist()
    asins = tuple(f"B0{k:08d}" for k in range(n))
    rows: list[dict[str, Any]] = []
    reviews: list[dict[str, Any]] = []
    metas: list[dict[str, Any]] = []
    for k, (asin, d) in enumerate(zip(asins, docs, strict=True)):
        parent = f"B1{k:08d}" if k % 2 == 0 else asin
        rows.append(
            {
                "product_id": asin,
                "product_title": d["title"],
                "product_description": f"<p>{d['description']}</p>",
                "product_bullet_point": f"{d['category'].title()} by {d['brand']}" if k % 3 == 0 else None,
                "product_brand": d["brand"] if k != 1 else None,  # product 1: brand from the metadata
                "product_color": d["color"],
                "product_locale": "us",
            }
        )
        if k == 0:  # the same ASIN in other locales: filtered out
            rows += [
                {**rows[0], "product_locale": loc, "product_title": f"{loc} title"} for loc in ("es", "jp")
            ]
        if k < n - 1:
            star = float(min(5, max(1, round(d["rating"]))))
            main = {
                "rating": star,
                "title": "",
                "text": d["review"],
                "asin": asin,
                "parent_asin": parent,
                "user_id": f"AE{k:06d}",
                "timestamp": _ms(d["release_date"], 30),
                "helpful_vote": 5 + k,
                "verified_purchase": True,
                "images": [],
            }
            other = {
                **main,
                "title": "OK",
                "text": "Arrived on time.",
                "helpful_vote": 0,
                "user_id": f"AF{k:06d}",
                "timestamp": _ms(d["release_date"], 60),
            }
            reviews += [other, main] if k % 2 else [main, other]
        price: Any = d["price"] if k != n - 2 else None
        if k % 5 == 3 and price is not None:
            price = f"${price:,.2f}"
        metas.append(
            {
                "main_category": MAIN_CATEGORY,
                "title": d["title"],
                "average_rating": d["rating"],
                "rating_number": d["review_count"],
                "features": [],
                "description": [],
                "price": price,
                "images": [],
                "videos": [],
                "store": d["brand"],
                "categories": [MAIN_CATEGORY, d["category"].title()],
                "details": {
                    "Brand": d["brand"],
                    "Color": d["color"],
                    "Date First Available": f"{d['release_date']:%B} {d['release_date'].day}, {d['release_date'].year}",
                },
                "parent_asin": parent,
                "bought_together": None,
            }
        )
    reviews.append({**reviews[0], "asin": "B9UNRELATED", "parent_asin": "B9UNRELATED"})
    columns = [c for c in ESCI_COLUMNS if not (broken == "column" and c == "product_title")]
    products = out / "shopping_queries_dataset_products.parquet"
    pq.write_table(pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows]), products)
    lines = [json.dumps(r) for r in reviews]
    broken_at = None
    review_path = out / "Electronics.jsonl"
    if broken == "json":
        lines.insert(2, '{"rating": 5.0, "text": "cut off')
        broken_at = f"{review_path}:3"
    elif broken == "field":
        bad = dict(reviews[1])
        del bad["rating"]
        lines.insert(2, json.dumps(bad))
        broken_at = f"{review_path}:3"
    elif broken == "column":
        broken_at = f"{products}: missing column product_title"
    review_path.write_text("\n".join(lines) + "\n")
    meta_path = out / "meta_Electronics.jsonl"
    meta_path.write_text("".join(json.dumps(m) + "\n" for m in metas))
    return EsciFixture(products, review_path, meta_path, source, asins, (asins[-1],), (asins[-2],), broken_at)


def _user_dir(address: str) -> str:
    first, _, last = address.split("@")[0].partition(".")
    return f"{last}-{first[:1]}"


def write_enron_fixture(
    directory: str | Path, n: int = 30, seed: int = 0, broken: str | None = None
) -> EnronFixture:
    """Write ``n`` generated emails as ``maildir/<user>/<folder>/...`` RFC 822 files under ``directory``.

    Mailboxes of every other owner use maildir file names with info flags (``cur/<name>:2,SF``,
    unread mail in ``new/``); the others use Enron's plain ``<n>.`` names. Mail with an attachment
    carries either a MIME attachment or an Enron ``<<file.xls>>`` marker.
    """
    if broken is not None and broken not in ENRON_BROKEN:
        raise CorpusError(
            f"unknown broken kind {broken!r}; choose one of {', '.join(ENRON_BROKEN)}", code="bad_argument"
        )
    if n < 3:
        raise CorpusError("an Enron fixture needs at least 3 emails", code="bad_argument")
    root = Path(directory) / "maildir"
    source = pa.concat_tables(generate_emails(n, seed=seed, chunk_rows=n))
    owners = sorted({d["sender"] if d["folder"] == "sent" else d["recipient"] for d in source.to_pylist()})
    paths: list[Path] = []
    flagged: list[bool] = []
    broken_at = None
    for k, d in enumerate(source.to_pylist()):
        owner = d["sender"] if d["folder"] == "sent" else d["recipient"]
        with_flags = owners.index(owner) % 2 == 1
        folder = Path(_user_dir(owner), d["folder"])
        if with_flags:
            flags = ("S" if d["is_read"] else "") + ("F" if d["is_starred"] else "")
            rel = (
                folder
                / ("cur" if d["is_read"] else "new")
                / (f"{k + 1}.fixture:2,{flags}" if d["is_read"] else f"{k + 1}.fixture")
            )
        else:
            rel = folder / f"{k + 1}."
        msg = EmailMessage()
        msg["Message-ID"] = f"<{d['id']}.fixture@northwind>"
        msg["Date"] = format_datetime(d["date"].replace(tzinfo=UTC))
        msg["From"], msg["To"], msg["Subject"] = d["sender"], d["recipient"], d["subject"]
        msg["X-Folder"], msg["X-Origin"] = d["folder"], _user_dir(owner)
        body = d["body"]
        if d["has_attachment"] and k % 2 == 0:
            body += f"\n\n<<{d['thread_id']}.xls>>"
        msg.set_content(body)
        if d["has_attachment"] and k % 2 == 1:
            msg.add_attachment(b"col1,col2\n1,2\n", maintype="text", subtype="csv", filename="numbers.csv")
        data = msg.as_bytes(policy=default_policy.clone(linesep="\n"))
        if k == 2 and broken is not None:
            broken_at = rel
            if broken == "date":
                data = re.sub(rb"(?m)^Date: .*$", b"Date: sometime next week", data, count=1)
            elif broken == "charset":
                data = data.replace(b'charset="utf-8"', b'charset="x-no-such-charset"')
            else:
                data = b"\x00\x01\x02 this file holds no message\n"
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        paths.append(rel)
        flagged.append(with_flags)
    return EnronFixture(root, source, tuple(paths), tuple(flagged), broken_at)
