"""Seeded, streamed generator of the email corpus (schema ``EMAILS``).

The corpus is the mail of a few mailbox owners at one company (see ``vocab_emails.yaml``). Every
email is derived from ``(seed, index)`` alone, as in :mod:`indexing.corpora.products`, so the
output is identical for any ``chunk_rows``. What an email looks like:

- a topic (weighted); a counterpart of the kind that sends that topic (colleague, partner,
  vendor, newsletter, friend); about 1 in 5 is *sent* by the owner (never newsletters);
- dates 2019-01 to 2024-11, mostly on weekdays in office hours;
- about a third are *replies* to an earlier email of the same block: same thread_id, subject
  ``Re: <root subject>``, sender and recipient swapped, a later date;
- folder: ``sent`` for sent mail, else from the topic's folder weights (old inbox mail is often
  archived); is_read: sent mail always, received mail mostly, the older the likelier;
  is_starred: the topic's rate, higher from VIP senders, lower for sent mail; has_attachment: the
  topic's rate, halved for replies;
- subject from the topic's subject lines; body: greeting, 2-3 facet phrasings (1-2 in replies) in
  the style's sentence templates, a closer and a sign-off with the sender's first name.

:func:`labeled_emails` gives the same batches with their label rows (:mod:`indexing.corpora.labels`).

>>> next(generate_emails(2, seed=3)).column("id").to_pylist()
['E00001', 'E00002']
"""

from __future__ import annotations

import string
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache, partial
from typing import NamedTuple

import numpy as np
import pyarrow as pa

from indexing.corpora.blocks import (
    BLOCK,
    block_rng,
    doc_id,
    generate_blocks,
)
from indexing.corpora.files import arrow_schema
from indexing.corpora.labels import LABEL_COLUMN, LabeledBatch, drop_labels, label_column, with_labels
from indexing.corpora.vocab import Person, Style, email_vocab
from indexing.schema import EMAILS

GENERATOR_VERSION = "1"
STREAM = 2
FIRST_DAY = datetime(2019, 1, 1, tzinfo=UTC)
LAST_ROOT_DAY = datetime(2024, 10, 31, tzinfo=UTC)
"""Thread roots end here so that replies (at most MAX_DEPTH * MAX_DELAY_S later) stay in 2024."""
NOW = datetime(2025, 1, 1, tzinfo=UTC)
"""The mailbox is read as of this moment: it decides how old (and so how likely read) mail is."""
SENT_RATE = 0.2
REPLY_RATE = 0.35
REPLY_WINDOW = 40
"""A reply answers one of this many preceding emails of its block."""
MAX_DEPTH = 6
MEDIAN_DELAY_S, MIN_DELAY_S, MAX_DELAY_S = 3 * 3600, 300, 5 * 86400
OFFICE_RATE = 0.85
"""Share of thread roots sent in office hours (around 13:00, 07:00-20:00)."""
WEEKEND_KEEP = 0.25
"""A weekend date is kept with this probability, else redrawn once: about 13% weekend mail."""
VIP_STAR_FACTOR, SENT_STAR_FACTOR = 3.0, 0.3
OLD_INBOX_DAYS, OLD_INBOX_ARCHIVED = 365, 0.5
READ_BASE, READ_AGE_DAYS = 0.6, 180

(
    U_REPLY,
    U_PARENT,
    U_SENT,
    U_CP,
    U_SUBJECT,
    U_SLOT1,
    U_SLOT2,
    U_FOLDER,
    U_ARCHIVE,
    U_READ,
    U_STAR,
    U_ATTACH,
    U_GREET,
    U_OPEN,
    U_K,
    U_TEMPLATE,
    U_CLOSE,
    U_SIGN,
) = range(18)
N_UNIFORM = 18
MAX_FACETS = 3


@dataclass(frozen=True)
class _Topic:
    """A topic flattened for the generation loop."""

    style: Style
    counterparts: tuple[int, ...]
    can_send: bool
    can_reply: bool
    subjects: tuple[tuple[str, tuple[str, ...]], ...]
    facets: tuple[tuple[str, ...], ...]
    facet_keys: tuple[str, ...]
    folders: tuple[str, ...]
    folder_cum: tuple[float, ...]
    attachment: float
    star: float


@dataclass(frozen=True)
class _Tables:
    topics: tuple[_Topic, ...]
    topic_cum: np.ndarray
    facet_scale: np.ndarray
    people: tuple[Person, ...]
    owners: tuple[int, ...]
    orgs: dict[str, tuple[str, ...]]
    org_names: dict[str, str]
    slots: dict[str, tuple[str, ...]]
    first_names: tuple[str, ...]


def _cum(weights: list[float]) -> tuple[float, ...]:
    total = sum(weights)
    return tuple(float(x) for x in np.cumsum(weights) / total)


@cache
def _tables() -> _Tables:
    ev = email_vocab()
    people = ev.people
    topics = []
    for tp in ev.topics.values():
        subjects = tuple(
            (s, tuple(f for _, f, _, _ in string.Formatter().parse(s) if f)) for s in tp.subjects
        )
        topics.append(
            _Topic(
                style=ev.styles[tp.style],
                counterparts=tuple(k for k, p in enumerate(people) if p.kind in tp.sender_kinds),
                can_send=tp.style != "newsletter",
                can_reply=tp.style != "newsletter",
                subjects=subjects,
                facets=tuple(f.doc_phrasings for f in tp.facets),
                facet_keys=tuple(f.key for f in tp.facets),
                folders=tuple(tp.folders),
                folder_cum=_cum(list(tp.folders.values())),
                attachment=tp.attachment,
                star=tp.star,
            )
        )
    width = max(len(t.facets) for t in topics)
    scale = np.full((len(topics), width), np.inf)
    for k, t in enumerate(topics):
        scale[k, : len(t.facets)] = 1.0
    orgs: dict[str, list[str]] = {}
    for p in people:
        if p.domain in ev.org_names:
            orgs.setdefault(p.kind, []).append(ev.org_names[p.domain])
    return _Tables(
        topics=tuple(topics),
        topic_cum=np.asarray(_cum([t.weight for t in ev.topics.values()])),
        facet_scale=scale,
        people=people,
        owners=tuple(people.index(o) for o in ev.owners),
        orgs={k: tuple(dict.fromkeys(v)) for k, v in orgs.items()},
        org_names=dict(ev.org_names),
        slots=dict(ev.slots),
        first_names=tuple(dict.fromkeys(p.first for p in people if p.kind != "newsletter")),
    )


class _Mail(NamedTuple):
    """What a reply inherits from the email it answers (people are roster indexes)."""

    topic: int
    owner: int
    sender: int
    recipient: int
    ts: int
    thread: str
    depth: int
    root_subject: str


def _pick(options: tuple[str, ...], u: float) -> str:
    return options[int(u * len(options))]


def _slot(t: _Tables, name: str, cp: Person, u: float) -> str:
    if name in ("partner", "vendor", "newsletter"):
        if cp.kind == name:
            return t.org_names[cp.domain]
        return _pick(t.orgs[name], u)
    if name == "invoice_no":
        return str(10_000 + int(u * 90_000))
    if name == "person":
        return _pick(t.first_names, u)
    return _pick(t.slots[name], u)


def _root_times(rng: np.random.Generator, n: int) -> np.ndarray:
    """Seconds since the epoch for thread roots: weekday office hours, mostly."""
    first = int(FIRST_DAY.timestamp()) // 86400
    span = (LAST_ROOT_DAY - FIRST_DAY).days + 1
    day, again = rng.integers(0, span, n) + first, rng.integers(0, span, n) + first
    weekend = (day + 3) % 7 >= 5  # 1970-01-01 was a Thursday
    day = np.where(weekend & (rng.random(n) >= WEEKEND_KEEP), again, day)
    office = np.clip(rng.normal(13 * 3600, 2.3 * 3600, n), 7 * 3600, 20 * 3600 - 1)
    anytime = rng.integers(0, 86400, n)
    tod = np.where(rng.random(n) < OFFICE_RATE, office, anytime).astype(np.int64)
    return day.astype(np.int64) * 86400 + tod


def _body(
    style: Style, reply: bool, greet_to: Person, sender: Person, sentences: list[str], r: list[float]
) -> str:
    greeting = _pick(style.greetings, r[U_GREET]).format(first=greet_to.first)
    opener = _pick(style.reply_openers if reply else style.openers, r[U_OPEN])
    closer = _pick(style.closers, r[U_CLOSE])
    para = " ".join(x for x in (opener, *sentences) if x)
    tail = f"{closer}\n\n" if closer else ""
    return f"{greeting}\n\n{para}\n\n{tail}{_pick(style.signoffs, r[U_SIGN])},\n{sender.first}"


def _block(t: _Tables, seed: int, block: int, start: int, rows: int, width: int) -> pa.Table:
    rng = block_rng(STREAM, seed, block)
    n = BLOCK  # always draw a full block so an email never depends on the corpus size
    topic = np.searchsorted(t.topic_cum, rng.random(n), side="right").clip(0, len(t.topics) - 1)
    owner = rng.integers(0, len(t.owners), n)
    u = rng.random((n, N_UNIFORM))
    roots = _root_times(rng, n)
    delays = np.clip(
        np.exp(np.log(MEDIAN_DELAY_S) + rng.standard_normal(n)), MIN_DELAY_S, MAX_DELAY_S
    ).astype(np.int64)
    perm = np.argsort(rng.random(t.facet_scale.shape)[topic] * t.facet_scale[topic], axis=1, kind="stable")
    phr = rng.random((n, MAX_FACETS))

    U, TP, OW, RT, DL = (
        u[:rows].tolist(),
        topic[:rows].tolist(),
        owner[:rows].tolist(),
        roots[:rows].tolist(),
        delays[:rows].tolist(),
    )
    PM, PH = perm[:rows].tolist(), phr[:rows].tolist()
    people, now = t.people, int(NOW.timestamp())
    cols: dict[str, list[object]] = {c: [] for c in EMAILS.columns}
    done: list[_Mail] = []
    labels: list[list[tuple[str, str]]] = []
    for i in range(rows):
        r = U[i]
        parent = -1
        if i > 0 and r[U_REPLY] < REPLY_RATE:
            j = i - 1 - int(r[U_PARENT] * min(i, REPLY_WINDOW))
            if t.topics[done[j].topic].can_reply and done[j].depth < MAX_DEPTH:
                parent = j
        if parent >= 0:
            pm = done[parent]
            k, own, sender, recipient = pm.topic, pm.owner, pm.recipient, pm.sender
            ts, thread, depth, root_subject = pm.ts + DL[i], pm.thread, pm.depth + 1, pm.root_subject
            subject = f"Re: {root_subject}"
        else:
            k, own = TP[i], t.owners[OW[i]]
            tp = t.topics[k]
            c = int(r[U_CP] * len(tp.counterparts))
            cp = tp.counterparts[c]
            if cp == own:
                cp = tp.counterparts[(c + 1) % len(tp.counterparts)]
            sent = tp.can_send and r[U_SENT] < SENT_RATE
            sender, recipient = (own, cp) if sent else (cp, own)
            ts, thread, depth = RT[i], doc_id("T", start + i + 1, width), 0
            template, fields = tp.subjects[int(r[U_SUBJECT] * len(tp.subjects))]
            values = {
                f: _slot(t, f, people[cp], r[U_SLOT1 if n_f == 0 else U_SLOT2])
                for n_f, f in enumerate(fields)
            }
            root_subject = subject = template.format(**values)
        tp = t.topics[k]
        sent = sender == own
        counterpart = people[recipient if sent else sender]
        age_days = (now - ts) / 86400
        if sent:
            folder = "sent"
        else:
            x = r[U_FOLDER]
            folder = tp.folders[sum(1 for edge in tp.folder_cum[:-1] if x > edge)]
            if folder == "inbox" and age_days > OLD_INBOX_DAYS and r[U_ARCHIVE] < OLD_INBOX_ARCHIVED:
                folder = "archive"
        p_star = tp.star * (VIP_STAR_FACTOR if counterpart.vip else 1.0) * (SENT_STAR_FACTOR if sent else 1.0)
        n_facets = (1 if parent >= 0 else 2) + int(r[U_K] * 2)
        s0 = int(r[U_TEMPLATE] * len(tp.style.sentences))
        sentences = [
            tp.style.sentences[(s0 + j) % len(tp.style.sentences)].format(
                p=_pick(tp.facets[PM[i][j]], PH[i][j])
            )
            for j in range(n_facets)
        ]
        labels.append([("body", tp.facet_keys[PM[i][j]]) for j in range(n_facets)])
        cols["id"].append(doc_id(EMAILS.id_prefix, start + i + 1, width))
        cols["sender"].append(people[sender].address)
        cols["sender_domain"].append(people[sender].domain)
        cols["recipient"].append(people[recipient].address)
        cols["date"].append(ts)
        cols["folder"].append(folder)
        cols["is_read"].append(
            sent or r[U_READ] < READ_BASE + (1 - READ_BASE - 0.02) * min(1.0, age_days / READ_AGE_DAYS)
        )
        cols["is_starred"].append(r[U_STAR] < p_star)
        cols["has_attachment"].append(r[U_ATTACH] < tp.attachment * (0.5 if parent >= 0 else 1.0))
        cols["thread_id"].append(thread)
        cols["subject"].append(subject)
        cols["body"].append(_body(tp.style, parent >= 0, people[recipient], people[sender], sentences, r))
        done.append(_Mail(k, own, sender, recipient, ts, thread, depth, root_subject))
    table = pa.table(cols, schema=arrow_schema(EMAILS))
    return table.append_column(LABEL_COLUMN, label_column(labels))


def _generate(size: int, seed: int, chunk_rows: int) -> Iterator[pa.Table]:
    return generate_blocks(partial(_block, _tables()), size, seed, chunk_rows)


def generate_emails(size: int, seed: int = 0, chunk_rows: int = 10_000) -> Iterator[pa.Table]:
    """Stream ``size`` generated emails as Arrow tables of ``chunk_rows`` rows (EMAILS columns)."""
    return drop_labels(_generate(size, seed, chunk_rows))


def labeled_emails(size: int, seed: int = 0, chunk_rows: int = 10_000) -> Iterator[LabeledBatch]:
    """The batches of :func:`generate_emails`, each with the label rows of its emails (the body's facets)."""
    return with_labels(_generate(size, seed, chunk_rows))
