"""The label table of a generated corpus: which facets each document carries in which field.

The generators decide what every text and image says (a facet phrasing, a visual term); they write
those decisions out beside the corpus as a table of ``(doc_id, field, facet)`` rows, one per facet a
field carries. Facet keys are the vocabulary's (``headphones.bass``, ``budget_review.hiring_freeze``)
and, for image descriptions, ``visual:<kind>=<term>`` (``visual:color=white``).

The labels are ground truth for benchmarks (which documents satisfy a request) and nothing else:
they are written to ``labels-*.parquet`` files that the index build never reads, so they are never
indexed, never in the ClickHouse table that programs query, and never visible to a method. They are
part of the corpus's fingerprint. A corpus loaded from real data (ESCI, Enron) has no labels.

>>> visual_key("color", "white")
'visual:color=white'
>>> find_labels("ecommerce", "review", "Honestly, it has excellent ANC.")
['headphones.noise_cancelling']
>>> find_labels("ecommerce", "image", "Matte white over-ear headphones on a wooden desk", "headphones")
['visual:finish=matte', 'visual:color=white', 'visual:shape=over-ear', 'visual:setting=on a wooden desk']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import pyarrow as pa

from indexing.corpora.vocab import find_facets, find_visual
from indexing.schema import schema_for

VISUAL = "visual"
"""Prefix of the facet keys of image descriptions."""
LABEL_COLUMN = "_labels"
"""The generators' per-document label column (a list of ``{field, facet}``); split off before writing."""
LABEL_ITEM = pa.struct([("field", pa.string()), ("facet", pa.string())])
LABEL_SCHEMA = pa.schema(
    [
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("field", pa.string(), nullable=False),
        pa.field("facet", pa.string(), nullable=False),
    ]
)
"""One row per (document, field, facet) it carries there."""


class LabeledBatch(NamedTuple):
    """A batch of documents with the label rows of exactly those documents."""

    table: pa.Table
    labels: pa.Table


def visual_key(kind: str, value: str) -> str:
    """The facet key of a visual term."""
    return f"{VISUAL}:{kind}={value}"


def label_column(per_doc: Sequence[Sequence[tuple[str, str]]]) -> pa.Array:
    """The generators' ``_labels`` column from each document's ``(field, facet)`` pairs."""
    return pa.array([[{"field": f, "facet": k} for f, k in doc] for doc in per_doc], pa.list_(LABEL_ITEM))


def split_labels(table: pa.Table) -> LabeledBatch:
    """The documents without their ``_labels`` column, and that column as label rows."""
    col = table.column(LABEL_COLUMN).combine_chunks()
    flat = col.flatten()
    lengths = col.value_lengths().to_numpy(zero_copy_only=False)
    ids = table.column("id").combine_chunks().take(pa.array(_repeat_index(lengths), pa.int64()))
    labels = pa.table([ids, flat.field("field"), flat.field("facet")], schema=LABEL_SCHEMA)
    return LabeledBatch(table.drop_columns([LABEL_COLUMN]), labels)


def drop_labels(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """The documents alone."""
    for table in tables:
        yield table.drop_columns([LABEL_COLUMN])


def with_labels(tables: Iterable[pa.Table]) -> Iterator[LabeledBatch]:
    """Each table split into documents and label rows."""
    for table in tables:
        yield split_labels(table)


def _repeat_index(lengths: Sequence[int]) -> list[int]:
    out: list[int] = []
    for i, n in enumerate(lengths):
        out.extend([i] * int(n))
    return out


def find_labels(domain: str, field: str, text: str, category: str | None = None) -> list[str]:
    """The facet keys that the text of ``field`` says, recovered from its words: vocabulary facet
    phrasings in text fields (:func:`~indexing.corpora.vocab.find_facets`), visual terms in image
    fields (:func:`~indexing.corpora.vocab.find_visual`, narrowed to ``category``)."""
    if field in schema_for(domain).image_fields:
        return [visual_key(t.kind, t.value) for t in find_visual(text, category)]
    return [key for key, _ in find_facets(domain, text)]
