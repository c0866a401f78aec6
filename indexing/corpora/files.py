"""Corpus files in the workspace: parquet parts plus a manifest that is written last.

A corpus is complete exactly when ``manifest.json`` exists; writers build into a temporary
directory and rename it into place, so a reader never sees a partial corpus.

A generated corpus also has its label table (:mod:`indexing.corpora.labels`) in ``labels-*.parquet``
files beside the ``part-*.parquet`` documents. Only benchmark synthesis reads them
(:func:`read_labels`); the index build reads the parts alone. The manifest's ``labels`` entry holds
their row count and fingerprint (``null`` for a corpus without labels, such as one loaded from real
data), and the corpus ``fingerprint`` covers documents and labels together.

Beside the manifest lies the load report (:mod:`indexing.corpora.report`, ``report.json``: empty values
and ranges per column, and a loader's counts), and, for a loaded corpus whose source has more than the
schema holds, ``extras.parquet``: those columns, one row per document by ``id``. Nothing indexes them and
the fingerprint leaves them out.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from indexing.corpora.labels import LABEL_SCHEMA, LabeledBatch
from indexing.corpora.loading import LoadStats
from indexing.corpora.report import EXTRAS, REPORT, Profile
from indexing.errors import CorpusError
from indexing.schema import CorpusSchema, DType
from indexing.workspace import Workspace, atomic_write_json, staged_dir

MANIFEST = "manifest.json"
LABEL_PARTS = "labels-*.parquet"

_ARROW: dict[DType, pa.DataType] = {
    DType.STRING: pa.string(),
    DType.INT: pa.int64(),
    DType.FLOAT: pa.float64(),
    DType.BOOL: pa.bool_(),
    DType.DATE: pa.date32(),
    DType.DATETIME: pa.timestamp("s"),
}


def arrow_schema(schema: CorpusSchema) -> pa.Schema:
    """The Arrow schema of a corpus; every column is non-nullable."""
    return pa.schema([pa.field(f.name, _ARROW[f.dtype], nullable=False) for f in schema.fields])


class _Fingerprint:
    """A hash of a corpus's content that does not depend on how the rows are split into parts.

    Every column keeps running hashes of its value bytes and (for strings) of its value lengths,
    so hashing the parts one after the other equals hashing the whole column.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self._names = schema.names
        self._values = {n: hashlib.sha256() for n in self._names}
        self._lengths = {n: hashlib.sha256() for n in self._names}

    def update(self, table: pa.Table) -> None:
        for name in self._names:
            for chunk in table.column(name).chunks:
                if pa.types.is_string(chunk.type):
                    _, offsets_buf, data = chunk.buffers()
                    offsets = np.frombuffer(offsets_buf, dtype=np.int32)[
                        chunk.offset : chunk.offset + len(chunk) + 1
                    ]
                    if data is not None:
                        self._values[name].update(memoryview(data)[int(offsets[0]) : int(offsets[-1])])
                    self._lengths[name].update(np.diff(offsets).astype(np.int64).tobytes())
                else:
                    self._values[name].update(chunk.to_numpy(zero_copy_only=False).tobytes())

    def hexdigest(self) -> str:
        total = hashlib.sha256()
        for name in self._names:
            total.update(self._values[name].digest() + self._lengths[name].digest())
        return total.hexdigest()[:16]


def write_corpus(
    ws: Workspace,
    schema: CorpusSchema,
    batches: Iterable[pa.Table | LabeledBatch],
    meta: dict[str, Any],
    load: LoadStats | None = None,
) -> dict[str, Any]:
    """Write ``batches`` as the workspace corpus of ``schema.domain``, replacing any previous one.

    Each batch is checked against the Arrow schema. A :class:`~indexing.corpora.labels.LabeledBatch`
    also writes the label rows of its documents; a corpus has labels when every batch brings them.
    Returns the manifest. Nothing is visible until every part is written; a failure leaves the
    previous corpus as it was. ``load`` is the loader's :class:`~indexing.corpora.loading.LoadStats`,
    read once the batches are consumed: its counts go into the load report, its extras into
    ``extras.parquet``.
    """
    target = arrow_schema(schema)
    digest = _Fingerprint(target)
    profile = Profile(schema)
    label_digest = _Fingerprint(LABEL_SCHEMA)
    rows = parts = label_rows = 0
    labeled: bool | None = None
    with staged_dir(ws.corpus_dir(schema.domain)) as tmp:
        for batch in batches:
            labels = batch.labels if isinstance(batch, LabeledBatch) else None
            docs = batch.table if isinstance(batch, LabeledBatch) else batch
            if labeled is not None and labeled != (labels is not None):
                raise CorpusError("either every batch of a corpus carries labels or none does", code="labels")
            labeled = labels is not None
            try:
                table = docs.select(target.names).cast(target)
            except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                raise CorpusError(f"batch does not match the {schema.table} schema: {exc}") from None
            if table.num_rows == 0:
                continue
            pq.write_table(table, tmp / f"part-{parts:05d}.parquet", compression="zstd")
            digest.update(table)
            profile.update(table)
            if labels is not None:
                try:
                    label_table = labels.select(LABEL_SCHEMA.names).cast(LABEL_SCHEMA)
                except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                    raise CorpusError(
                        f"label rows do not match the label schema: {exc}", code="labels"
                    ) from None
                pq.write_table(label_table, tmp / f"labels-{parts:05d}.parquet", compression="zstd")
                label_digest.update(label_table)
                label_rows += label_table.num_rows
            rows += table.num_rows
            parts += 1
        fingerprint = digest.hexdigest()
        label_meta = None
        if labeled:
            label_meta = {"rows": label_rows, "fingerprint": label_digest.hexdigest()}
            fingerprint = hashlib.sha256(f"{fingerprint}:{label_meta['fingerprint']}".encode()).hexdigest()[
                :16
            ]
        manifest = {
            **meta,
            "domain": schema.domain,
            "table": schema.table,
            "rows": rows,
            "parts": parts,
            "labels": label_meta,
            "fingerprint": fingerprint,
        }
        report = profile.as_report()
        if load is not None:
            report.update(load.as_report())
        report["extras"] = _write_extras(tmp / EXTRAS, load.extras, rows) if load is not None else None
        atomic_write_json(tmp / REPORT, report)
        atomic_write_json(tmp / MANIFEST, manifest)
    return manifest


def _write_extras(path: Path, extras: pa.Table | None, rows: int) -> list[str] | None:
    """Write a loader's extra columns; their names, or ``None`` when it has none."""
    if extras is None:
        return None
    if extras.column_names[:1] != ["id"] or extras.num_rows != rows:
        raise CorpusError(
            f"extra columns must start with id and hold one row per document ({rows}), "
            f"got {extras.column_names[:3]} with {extras.num_rows} rows",
            code="extras",
        )
    pq.write_table(extras, path, compression="zstd")
    return [str(name) for name in extras.column_names[1:]]


def read_extras(ws: Workspace, domain: str, ids: Iterable[str] | None = None) -> pa.Table | None:
    """The extra columns of the workspace corpus (``id`` first), for ``ids`` only when given, or ``None``."""
    corpus_manifest(ws, domain)
    path = ws.corpus_dir(domain) / EXTRAS
    if not path.is_file():
        return None
    if ids is None:
        return pq.read_table(path)
    return pq.read_table(path, filters=[("id", "in", list(ids))])


def corpus_manifest(ws: Workspace, domain: str) -> dict[str, Any]:
    """The manifest of the workspace corpus, or a :class:`CorpusError` telling how to build one."""
    path = ws.corpus_dir(domain) / MANIFEST
    if not path.is_file():
        raise CorpusError(
            f"no {domain} corpus in {ws.root}; run: prore corpus build {domain} --size N",
            code="no_corpus",
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def iter_corpus(ws: Workspace, schema: CorpusSchema, batch_rows: int = 10_000) -> Iterator[pa.Table]:
    """Stream the workspace corpus in tables of at most ``batch_rows`` rows, in id order as written.

    The tables are the chunks of :func:`iter_part`, part after part.
    """
    for part in part_paths(ws, schema.domain):
        yield from iter_part(part, batch_rows)


def iter_part(part: Path, batch_rows: int) -> Iterator[pa.Table]:
    """The chunks of one corpus part: ``ceil(rows / batch_rows)`` tables of ``batch_rows`` rows, the last
    one shorter (parquet's batches span row groups, so only the part's end cuts a chunk short)."""
    for rb in pq.ParquetFile(part).iter_batches(batch_size=batch_rows):
        yield pa.Table.from_batches([rb])


def part_chunks(part: Path, batch_rows: int) -> int:
    """How many chunks :func:`iter_part` yields for ``part``, from the parquet footer alone."""
    rows = int(pq.ParquetFile(part).metadata.num_rows)
    return -(-rows // batch_rows)


def part_paths(ws: Workspace, domain: str) -> list[Path]:
    corpus_manifest(ws, domain)
    return sorted(ws.corpus_dir(domain).glob("part-*.parquet"))


def has_labels(manifest: dict[str, Any]) -> bool:
    """Whether the corpus of ``manifest`` has a label table (generated corpora do, loaded ones do not)."""
    return bool(manifest.get("labels"))


def read_labels(ws: Workspace, domain: str) -> pa.Table | None:
    """The label table of the workspace corpus (``doc_id``, ``field``, ``facet``), or ``None`` when it has none.

    Only benchmark synthesis reads this; nothing that a retrieval method can reach does.
    """
    manifest = corpus_manifest(ws, domain)
    if not has_labels(manifest):
        return None
    paths = sorted(ws.corpus_dir(domain).glob(LABEL_PARTS))
    if not paths:
        return LABEL_SCHEMA.empty_table()
    return pa.concat_tables([pq.read_table(p, schema=LABEL_SCHEMA) for p in paths])
