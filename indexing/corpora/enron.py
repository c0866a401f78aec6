"""Enron-style maildirs of RFC 822 messages, mapped onto the EMAILS schema.

Streamed by :func:`iter_enron`: ``maildir/<user>/<folder>/<file>`` holding RFC 822 messages, parsed
with the standard ``email`` package. The directory given is the maildir itself; a folder that
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
  The schema has one recipient column (filtered as ``recipient = '...'``); every address is kept in the
  extra columns (below), not indexed. The load counts messages that had more than one
  (``recipients_not_indexed``) and recipients taken from ``Cc:``/``Bcc:`` (``recipient_from_cc``,
  ``recipient_from_bcc``).
- ``has_attachment``: a MIME attachment part, or an attachment marker in the body: ``<<name.ext>>`` as
  Notes writes it or ``<< File: name.ext >>`` as Outlook does.
- ``thread_id``: a hash of the subject without ``Re:``/``Fw:`` prefixes; ``body``: the first plain-text
  part, line endings normalized to ``\\n`` (some messages keep ``\\r\\n``).

**Extra columns** (:data:`EXTRA_SCHEMA`, in the corpus's ``extras.parquet`` by ``id``; the program language
and the indexes do not see them, since a list column would need list operators in the DSL, its grammar
and the planner's prompt): ``message_id`` (``""`` when the message has none); ``to``, ``cc``, ``bcc``,
every address of each header, lower case, in header order; ``copies``, the ``<user>/<folder>`` of every
file read that holds the same Message-ID, the loaded one first (with ``keep_duplicates`` each copy's row
lists them all).
"""

from __future__ import annotations

import codecs
import email
import email.errors
import hashlib
import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from email.header import decode_header, make_header
from email.message import Message
from email.utils import getaddresses, parseaddr, parsedate_to_datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from indexing.corpora.blocks import check_args, doc_id, id_width
from indexing.corpora.files import arrow_schema
from indexing.corpora.loading import LoadStats, check_limit, row_tables
from indexing.errors import CorpusError
from indexing.schema import EMAILS

NO_DATE = datetime(1980, 1, 1, tzinfo=UTC)
"""Enron's placeholder for a missing date (``Mon, 31 Dec 1979 16:00:00 -0800``): the date is unknown."""
DATETIME_RANGE = (datetime(1970, 1, 1), datetime(2106, 2, 7))
"""Wall-clock times a ClickHouse ``DateTime`` column holds; a message dated outside is dropped."""
FIRST_FOLDERS = ("inbox", "sent", "sent_items", "_sent_mail")
"""Folders whose copy of a message is kept first, in this order; then any other folder a user made."""
COPY_FOLDERS = ("notes_inbox", "discussion_threads", "all_documents")
"""Lotus Notes views of the Enron release that repeat mail filed elsewhere: their copies are kept last."""
_REPLY_PREFIX = re.compile(r"^\s*((re|fw|fwd|aw)\s*(\[\d+\])?\s*:\s*)+", re.IGNORECASE)
EXTRA_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("message_id", pa.string(), nullable=False),
        pa.field("to", pa.list_(pa.string()), nullable=False),
        pa.field("cc", pa.list_(pa.string()), nullable=False),
        pa.field("bcc", pa.list_(pa.string()), nullable=False),
        pa.field("copies", pa.list_(pa.string()), nullable=False),
    ]
)
"""What a message holds that the EMAILS schema does not, kept in the corpus's ``extras.parquet``."""
_ENRON_ATTACHMENT = re.compile(r"<<[^<>\n]{1,200}\.[A-Za-z0-9]{2,5}\s*>>")
"""An attachment marker: ``<<name.ext>>`` (Lotus Notes) or ``<< File: name.ext >>`` (Outlook, with spaces)."""


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
        # A Maildir's tmp/ (beside its cur/ and new/) holds deliveries still being written; a mail folder
        # that a user named "tmp" is mail like any other.
        maildir_tmp = {"cur", "new"} <= set(dirnames)
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and not (d == "tmp" and maildir_tmp)]
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


class _Extras:
    """The columns of the loaded messages that the EMAILS schema lacks (:data:`EXTRA_SCHEMA`)."""

    def __init__(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in EXTRA_SCHEMA.names}
        self.places: dict[str, list[str]] = {}
        """``<user>/<folder>`` of every file holding a Message-ID, in load order."""

    def seen_before(self, message_id: str, rel: Path) -> bool:
        """Record the file ``rel`` as a copy of ``message_id``; whether an earlier file held it."""
        place = f"{rel.parts[0]}/{_folder(rel)}"
        if not message_id:
            return False
        if message_id in self.places:
            self.places[message_id].append(place)
            return True
        self.places[message_id] = [place]
        return False

    def add(self, row_id: str, message_id: str, addresses: dict[str, list[str]], rel: Path) -> None:
        """A loaded message; its ``copies`` are filled in by :meth:`table`, once every file is read."""
        for name, value in (("id", row_id), ("message_id", message_id), *addresses.items()):
            self.columns[name].append(value)
        self.columns["copies"].append(f"{rel.parts[0]}/{_folder(rel)}")

    def table(self) -> pa.Table:
        ids = self.columns["message_id"]
        copies = [
            self.places[m] if m else [place] for m, place in zip(ids, self.columns["copies"], strict=True)
        ]
        return pa.table({**self.columns, "copies": copies}, schema=EXTRA_SCHEMA)


def _message(
    root: Path, rel: Path, extras: _Extras, keep_duplicates: bool, stats: LoadStats
) -> tuple[dict[str, Any], dict[str, list[str]], str] | None:
    """The row of one message, its ``To``/``Cc``/``Bcc`` addresses and its Message-ID; or ``None`` (counted
    in ``stats.dropped``) when its date is unknown or, unless ``keep_duplicates``, when it is a copy of a
    message already loaded."""
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
    if extras.seen_before(message_id, rel) and not keep_duplicates:
        stats.dropped["duplicate_message"] += 1
        return None
    recipient = ""
    addresses: dict[str, list[str]] = {}
    for name in ("To", "Cc", "Bcc"):
        found = [a.lower() for _, a in getaddresses([_header(msg, name, where)]) if a]
        if found and not recipient:
            recipient = found[0]
            if name != "To":
                stats.derived[f"recipient_from_{name.lower()}"] += 1
        addresses[name.lower()] = found
    if sum(map(len, addresses.values())) > 1:
        stats.derived["recipients_not_indexed"] += 1  # the schema has one recipient (see the module doc)
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
    row = {
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
    return row, addresses, message_id


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
    extras = _Extras()
    for rel in files:
        if limit is not None and kept >= limit:
            break
        stats.read += 1
        loaded = _message(root, rel, extras, keep_duplicates, stats)
        if loaded is None:
            continue
        row, addresses, message_id = loaded
        kept += 1
        stats.rows = kept
        row_id = doc_id(EMAILS.id_prefix, kept, width)
        extras.add(row_id, message_id, addresses, rel)
        yield {"id": row_id, **row}
    stats.extras = extras.table()
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
    check_limit(limit)
    rows = _enron_rows(Path(maildir), limit, keep_duplicates, st)
    return row_tables(rows, arrow_schema(EMAILS), chunk_rows)
