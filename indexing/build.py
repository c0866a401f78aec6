"""Versioned, resumable, atomically published index builds: corpus -> ClickHouse, Milvus and BM25.

A build writes version ``vNNNN``: ClickHouse table ``<db>.<table>__vNNNN``, one Milvus collection
per vector field ``<table>__vNNNN__<field>`` (see :mod:`indexing.stores.milvus`) and BM25 indexes in ``indexes/<domain>/vNNNN/bm25/``. It then checks that every
store holds exactly the corpus rows, writes ``version.json`` and only then switches ``CURRENT``.
The previously published version is kept, and so is every version an open
:class:`~indexing.index.IndexHandle` leases (see :mod:`indexing.publish`); older ones are dropped.

* **Idempotent.** If CURRENT was built from the same corpus fingerprint with the same embedder and
  index settings (the *build key*), nothing is done.
* **Resumable.** ``journal.json`` in the version directory records the committed chunks. A rerun
  after a crash continues the unfinished version with the same build key: the chunk that was in
  flight is deleted from ClickHouse and inserted again (an INSERT of one chunk may have landed in
  part), and upserted into Milvus, which replaces rows by primary key rather than duplicating them;
  every later chunk is new to the collection and inserted.
* **Fault hook.** ``PRORE_BUILD_KILL_AT=<stage>:<chunk>`` makes the process SIGKILL itself at that
  point, so tests can crash a build deterministically. Stages: ``embedded``, ``clickhouse``,
  ``milvus`` and ``committed`` (after chunk ``<chunk>``, counted from 0), ``bm25`` and ``verified``
  (chunk ignored).

One build per domain and workspace runs at a time (a file lock); a second one fails at once.

**Milvus on a server** (:data:`~indexing.stores.milvus_plan.BULK_LOAD`). The collections are created without
an index, unloaded and with automatic compaction held off; the chunks are inserted; then one flush seals
the segments, the index is created and the build waits until it covers every row, and the collections
are loaded. Each row is indexed once. Creating the index first and upserting (as before) indexed every
segment again after compaction had rewritten it for the upsert's delete records, and once more after it
had merged small segments: at 1M products 45 minutes of indexing. :class:`StageTimes` splits the Milvus
stage into these steps; ``bench/milvus_load.py`` measures the plans side by side. Milvus Lite indexes
in-process and is written as before: created indexed and loaded, upserted.

**Engines.** Where the chunks get their vectors is a :class:`~indexing.chunks.ChunkSource`, chosen by
``build.engine``: ``local`` reads and embeds in this process (:class:`LocalChunks`); ``ray`` runs a Ray
Data pipeline (:mod:`indexing.ray_build`). Both embed with :mod:`indexing.chunks`, which also defines
what a source yields. Everything else, the stores' writes, the journal, BM25, the check and the
publish, is this module's, so both engines build the same version with the same build key.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from tqdm import tqdm

from core.errors import ConfigError
from indexing.chunks import ChunkSource, EmbeddedChunk, embed_table, embedders_for
from indexing.config import Config
from indexing.corpora.files import corpus_manifest, iter_corpus, part_paths
from indexing.embedders.base import Embedder
from indexing.embedders.registry import embedder_identity
from indexing.errors import StoreError
from indexing.index import (
    BM25_DIR,
    CURRENT,
    VERSION_FILE,
    VERSION_RE,
    bm25_dir,
    collection_name,
    physical_table,
    read_current,
    read_version,
    reference_time_text,
    version_name,
)
from indexing.publish import READERS, claim, lease_current
from indexing.publish import list_versions as versions_under
from indexing.schema import CorpusSchema, Role, schema_for
from indexing.stores import bm25 as bm25_store
from indexing.stores.bm25 import STEMMER_LANGUAGE, STOPWORDS, Bm25Index
from indexing.stores.clickhouse import ChdbStore, ClickHouseServerStore, make_sql_store
from indexing.stores.milvus import (
    MILVUS_LAYOUT,
    MilvusStore,
    check_index_config,
    is_lite,
    make_vector_store,
    milvus_uri,
)
from indexing.stores.milvus_plan import BULK_LOAD, LoadPlan
from indexing.workspace import Workspace, atomic_write_json, atomic_write_text

JOURNAL = "journal.json"
LOCK = ".build.lock"
DEFAULT_BATCH_ROWS = 2_000
"""Rows per chunk: the unit of embedding, of writing to the stores and of resuming."""
KILL_ENV = "PRORE_BUILD_KILL_AT"
BUILD_FORMAT = 1
"""Bumped when the layout of a version changes, so that old versions are rebuilt, not reused."""


@dataclass(frozen=True)
class StageTimes:
    """Seconds spent per stage of one build run (resumed chunks are not counted again)."""

    embed_s: float = 0.0
    clickhouse_s: float = 0.0
    milvus_s: float = 0.0
    """The Milvus stage: the four steps below plus creating the collections."""
    milvus_write_s: float = 0.0
    """Insert and upsert requests."""
    milvus_flush_s: float = 0.0
    """Sealing and persisting the written rows."""
    milvus_index_s: float = 0.0
    """Creating the index (after the load, on a server) and waiting until it covers every row."""
    milvus_load_s: float = 0.0
    """Loading the collections into the query node."""
    bm25_s: float = 0.0
    verify_s: float = 0.0


@dataclass(frozen=True)
class BuildResult:
    """What a build run did. ``status`` is ``built``, ``resumed`` or ``up_to_date``."""

    domain: str
    version: str
    status: str
    rows: int
    table: str
    collection: str
    rows_written: int = 0
    resumed_from_chunk: int = 0
    dropped: tuple[str, ...] = ()
    in_use: tuple[str, ...] = ()
    """Older versions kept because a reader still leases them; a later build drops them once released."""
    times: StageTimes = field(default_factory=StageTimes)

    def summary(self) -> str:
        """One line for the terminal."""
        if self.status == "up_to_date":
            return (
                f"{self.domain}: index {self.version} is up to date ({self.rows} docs, same corpus and "
                "settings); nothing changed"
            )
        how = "built"
        if self.status == "resumed":
            how = (
                f"resumed at chunk {self.resumed_from_chunk}"
                if self.rows_written
                else "republished, already complete"
            )
        dropped = f"; dropped {', '.join(self.dropped)}" if self.dropped else ""
        kept = f"; kept {', '.join(self.in_use)} (in use)" if self.in_use else ""
        return f"{self.domain}: published {self.version} with {self.rows} docs ({how}){dropped}{kept}"


ENGINES = ("local", "ray")
"""The values of ``build.engine``."""


@dataclass(frozen=True)
class LocalChunks:
    """The ``local`` engine: read and embed chunk after chunk in this process."""

    embedders: dict[Role, Embedder]

    def __call__(
        self, ws: Workspace, schema: CorpusSchema, batch_rows: int, start_chunk: int
    ) -> Generator[EmbeddedChunk]:
        for i, chunk in enumerate(iter_corpus(ws, schema, batch_rows)):
            if i >= start_chunk:
                yield EmbeddedChunk(i, chunk, embed_table(self.embedders, schema, chunk))


def chunk_source(cfg: Config, embedders: dict[Role, Embedder]) -> ChunkSource:
    """The source of ``cfg.build.engine``; a missing extra or a bad setting fails here, before any write."""
    engine = cfg.build.engine
    if engine == "local":
        return LocalChunks(embedders)
    if engine == "ray":
        from indexing.ray_build import RayChunks

        return RayChunks.from_config(cfg)
    raise ConfigError(f"build.engine must be one of {', '.join(ENGINES)}, got {engine!r}")


def build_settings(
    cfg: Config, schema: CorpusSchema, manifest: dict[str, Any], embedders: dict[Role, Embedder]
) -> dict[str, Any]:
    """Everything that makes two builds equal; its hash is the build key."""
    return {
        "format": BUILD_FORMAT,
        "schema": [[f.name, f.role.value, f.dtype.value] for f in schema.fields],
        "corpus": {"fingerprint": manifest.get("fingerprint"), "rows": manifest.get("rows")},
        "embedders": {r.value: {"name": e.name, "dim": e.dim} for r, e in embedders.items()},
        "milvus": {
            "layout": MILVUS_LAYOUT,
            "index_type": cfg.milvus.index_type,
            "metric_type": cfg.milvus.metric_type,
            "index_params": cfg.milvus.index_params,
        },
        "bm25": {"stopwords": STOPWORDS, "stemmer": STEMMER_LANGUAGE},
    }


def build_key(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def build_index(
    cfg: Config,
    domain: str,
    *,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    progress: bool | None = None,
    on_chunk: Callable[[int], None] | None = None,
    milvus_load: LoadPlan = BULK_LOAD,
) -> BuildResult:
    """Build (or resume, or confirm) the index of ``domain`` and publish it; see the module docstring.

    ``progress`` shows tqdm bars (``None``: only on a terminal). ``on_chunk(i)`` is called after
    chunk ``i`` is committed (tests use it to read the index while a build is running). The engine is
    ``cfg.build.engine``. ``milvus_load`` is how a Milvus server is written (benchmarks compare others);
    it does not change what is built.
    """
    if batch_rows < 1:
        raise StoreError(f"--batch-rows must be at least 1, got {batch_rows}", code="bad_batch_rows")
    schema = schema_for(domain)
    ws = Workspace(cfg.workspace)
    manifest = corpus_manifest(ws, domain)
    check_index_config(cfg.milvus, lite=is_lite(milvus_uri(cfg)))
    embedders = embedders_for(cfg, schema)
    source = chunk_source(cfg, embedders)
    settings = build_settings(cfg, schema, manifest, embedders)
    key = build_key(settings)
    ws.index_root(domain).mkdir(parents=True, exist_ok=True)
    # The corpus version being read stays on disk while the build reads it, even if a new one is published.
    corpus_lease = lease_current(ws.corpus_root(domain)) or contextlib.nullcontext()
    with corpus_lease, _build_lock(ws, domain), make_sql_store(cfg) as sql, make_vector_store(cfg) as vec:
        current = read_current(ws, domain)
        if current and _is_built(cfg, ws, schema, current, key, sql, vec):
            return BuildResult(
                domain, current, "up_to_date", int(manifest["rows"]),
                physical_table(cfg, schema, current), collection_name(schema, current),
            )  # fmt: skip
        version, journal, dropped = _pick_version(cfg, ws, schema, key, current, sql, vec)
        resumed = journal is not None
        if journal is None:
            journal = {"version": version, "build_key": key, "batch_rows": batch_rows, "chunks": 0, "rows": 0}
            journal.update(state="building", bm25_done=False, settings=settings)
            ws.index_dir(domain, version).mkdir(parents=True, exist_ok=True)
            # Dropped leftovers of an abandoned attempt may share the name; start from nothing.
            sql.drop_table(physical_table(cfg, schema, version))
            vec.drop_collection(collection_name(schema, version))
            atomic_write_json(ws.index_dir(domain, version) / JOURNAL, journal)
        builder = _Builder(
            cfg, ws, schema, manifest, embedders, source, sql, vec, version, journal, progress, milvus_load
        )
        result = builder.run(on_chunk, resumed=resumed)
        kept = {version} | ({current} if current else set())
        gone, in_use = _collect_garbage(cfg, ws, schema, kept, sql, vec)
        return dataclasses.replace(result, dropped=tuple(dropped + gone), in_use=tuple(in_use))


class _Builder:
    """One run over one version: chunks into ClickHouse and Milvus, then BM25, verify, publish."""

    def __init__(
        self,
        cfg: Config,
        ws: Workspace,
        schema: CorpusSchema,
        manifest: dict[str, Any],
        embedders: dict[Role, Embedder],
        source: ChunkSource,
        sql: ChdbStore | ClickHouseServerStore,
        vec: MilvusStore,
        version: str,
        journal: dict[str, Any],
        progress: bool | None,
        plan: LoadPlan,
    ) -> None:
        self.cfg, self.ws, self.schema, self.manifest = cfg, ws, schema, manifest
        self.plan = plan
        self.embedders, self.source, self.sql, self.vec = embedders, source, sql, vec
        self.version, self.journal = version, journal
        self.disable = None if progress is None else not progress
        self.table = physical_table(cfg, schema, version)
        self.collection = collection_name(schema, version)
        self.dir = ws.index_dir(schema.domain, version)
        self.times: dict[str, float] = {k: 0.0 for k in asdict(StageTimes())}

    def run(self, on_chunk: Callable[[int], None] | None, *, resumed: bool) -> BuildResult:
        rows = int(self.manifest["rows"])
        start_chunk = int(self.journal["chunks"])
        dims = {f: self.embedders[self.schema.field(f).role].dim for f in self.schema.vector_fields}
        self.sql.create_table(self.schema, self.table)
        with self._timed("milvus_s"):
            self.vec.create_collection(self.collection, self.schema, dims, plan=self.plan)
        written = self._chunks(rows, start_chunk, on_chunk, redo_first=resumed)
        if not self.journal["bm25_done"]:
            self._bm25()
        self._verify(rows)
        self._publish(rows)
        status = "resumed" if resumed else "built"
        return BuildResult(
            self.schema.domain, self.version, status, rows, self.table, self.collection,
            rows_written=written, resumed_from_chunk=start_chunk, times=StageTimes(**self.times),
        )  # fmt: skip

    def _chunks(
        self, rows: int, start_chunk: int, on_chunk: Callable[[int], None] | None, *, redo_first: bool
    ) -> int:
        batch_rows = int(self.journal["batch_rows"])
        done_rows = int(self.journal["rows"])
        bars = {
            stage: tqdm(total=rows, initial=done_rows, desc=f"{self.schema.domain} {stage}", unit="doc",
                        position=i, leave=True, disable=self.disable, dynamic_ncols=True)
            for i, stage in enumerate(("embed", "clickhouse", "milvus"))
        }  # fmt: skip
        written = 0
        chunks = self.source(self.ws, self.schema, batch_rows, start_chunk)
        try:
            while True:
                # Embedding time is the wait for the next embedded chunk (a pipeline's other stages overlap it).
                with self._timed("embed_s"):
                    embedded = next(chunks, None)
                if embedded is None:
                    break
                i, chunk, vectors = embedded.index, embedded.table, embedded.vectors
                n = chunk.num_rows
                bars["embed"].update(n)
                _fault("embedded", i)
                with self._timed("clickhouse_s"):
                    if redo_first and i == start_chunk:
                        # The crashed run may have inserted this chunk, wholly or in part.
                        self.sql.delete_ids(self.table, chunk.column("id").to_pylist())
                    self.sql.insert_arrow(self.table, chunk)
                bars["clickhouse"].update(n)
                _fault("clickhouse", i)
                with self._timed("milvus_s"), self._timed("milvus_write_s"):
                    # Only the chunk in flight when a run was killed may be in the collection already.
                    fresh = not (redo_first and i == start_chunk)
                    self.vec.write(self.collection, self.schema, chunk, vectors, fresh=fresh, plan=self.plan)
                bars["milvus"].update(n)
                _fault("milvus", i)
                self.journal.update(chunks=i + 1, rows=int(self.journal["rows"]) + n)
                atomic_write_json(self.dir / JOURNAL, self.journal)
                written += n
                _fault("committed", i)
                if on_chunk is not None:
                    on_chunk(i)
            with self._timed("milvus_s"):
                flushed = self.vec.flush(self.collection)
            self.times["milvus_flush_s"] += flushed.persist_s
            self.times["milvus_index_s"] += flushed.index_s
            self.times["milvus_load_s"] += flushed.load_s
        finally:
            chunks.close()
            for bar in bars.values():
                bar.close()
        return written

    def _bm25(self) -> None:
        fields = self.schema.vector_fields
        with self._timed("bm25_s"):
            parts = part_paths(self.ws, self.schema.domain)
            for f in tqdm(fields, desc=f"{self.schema.domain} bm25", unit="field", disable=self.disable):
                ids: list[str] = []
                texts: list[str] = []
                for part in parts:
                    t = pq.read_table(part, columns=["id", f])
                    ids.extend(t.column("id").to_pylist())
                    texts.extend(t.column(f).to_pylist())
                target = bm25_dir(self.ws, self.schema.domain, self.version, f)
                bm25_store.forget(target)
                Bm25Index.build(ids, texts).save(target)
        self.journal["bm25_done"] = True
        atomic_write_json(self.dir / JOURNAL, self.journal)
        _fault("bm25", 0)

    def _verify(self, rows: int) -> None:
        with self._timed("verify_s"):
            counts = store_counts(self.cfg, self.ws, self.schema, self.version, self.sql, self.vec)
        wrong = {k: v for k, v in counts.items() if v != rows}
        if wrong:
            self.journal["state"] = "failed"
            atomic_write_json(self.dir / JOURNAL, self.journal)
            detail = ", ".join(f"{k}={v}" for k, v in wrong.items())
            raise StoreError(
                f"{self.schema.domain} {self.version} does not hold the corpus' {rows} rows ({detail}); "
                "it was not published; run the build again to start a fresh version",
                code="count_mismatch",
            )
        _fault("verified", 0)

    def _publish(self, rows: int) -> None:
        meta = {
            "version": self.version,
            "domain": self.schema.domain,
            "build_key": self.journal["build_key"],
            "rows": rows,
            "corpus_fingerprint": self.manifest.get("fingerprint"),
            "table": self.table,
            "collection": self.collection,
            "embedder_config": embedder_identity(self.cfg.embedder),
            "settings": self.journal["settings"],
            "published_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            # What "now" means to every program run on this version (the engine pins now() / today() to it).
            "reference_time": reference_time_text(),
        }
        (self.dir / READERS).touch()
        atomic_write_json(self.dir / VERSION_FILE, meta)
        self.journal["state"] = "complete"
        atomic_write_json(self.dir / JOURNAL, self.journal)
        atomic_write_text(self.ws.index_root(self.schema.domain) / CURRENT, self.version + "\n")

    @contextlib.contextmanager
    def _timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times[stage] += time.perf_counter() - t0


def store_counts(
    cfg: Config,
    ws: Workspace,
    schema: CorpusSchema,
    version: str,
    sql: ChdbStore | ClickHouseServerStore,
    vec: MilvusStore,
) -> dict[str, int]:
    """Rows per store of a version: ClickHouse rows and distinct ids, Milvus entities, BM25 docs."""
    table = physical_table(cfg, schema, version)
    collection = collection_name(schema, version)
    counts: dict[str, int] = {}
    exists = sql.table_exists(table)
    counts["clickhouse"] = sql.count(table) if exists else 0
    counts["clickhouse_ids"] = sql.distinct_ids(table) if exists else 0
    # Entities in every field's collection; 0 unless each vector field has its collection.
    whole = set(vec.collection_fields(collection)) == set(schema.vector_fields)
    counts["milvus"] = vec.count(collection) if whole else 0
    for f in schema.vector_fields:
        ids_file = bm25_dir(ws, schema.domain, version, f) / bm25_store.IDS_FILE
        counts[f"bm25.{f}"] = len(json.loads(ids_file.read_text())) if ids_file.is_file() else 0
    return counts


def _is_built(
    cfg: Config,
    ws: Workspace,
    schema: CorpusSchema,
    version: str,
    key: str,
    sql: ChdbStore | ClickHouseServerStore,
    vec: MilvusStore,
) -> bool:
    meta = read_version(ws, schema.domain, version)
    if meta is None or meta.get("build_key") != key:
        return False
    return sql.table_exists(physical_table(cfg, schema, version)) and set(
        vec.collection_fields(collection_name(schema, version))
    ) == set(schema.vector_fields)


def list_versions(ws: Workspace, domain: str) -> list[str]:
    """The version directories of ``domain``'s index, oldest first (complete or not)."""
    return versions_under(ws.index_root(domain))


def _read_journal(ws: Workspace, domain: str, version: str) -> dict[str, Any] | None:
    path = ws.index_dir(domain, version) / JOURNAL
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def _pick_version(
    cfg: Config,
    ws: Workspace,
    schema: CorpusSchema,
    key: str,
    current: str | None,
    sql: ChdbStore | ClickHouseServerStore,
    vec: MilvusStore,
) -> tuple[str, dict[str, Any] | None, list[str]]:
    """The version to work on: an unfinished one with this build key, else a new number.

    Unfinished versions with another build key can never be resumed and are dropped here.
    """
    domain = schema.domain
    versions = list_versions(ws, domain)
    resume: tuple[str, dict[str, Any]] | None = None
    dropped: list[str] = []
    for v in versions:
        if v == current:
            continue
        journal = _read_journal(ws, domain, v)
        complete = read_version(ws, domain, v) is not None
        if journal and journal.get("build_key") == key and journal.get("state") in ("building", "complete"):
            resume = (v, journal)
        elif not complete and _drop_version(cfg, ws, schema, v, sql, vec):
            dropped.append(v)
    if resume is not None:
        version, journal = resume
        if journal.get("state") == "complete":
            # Crashed between version.json and CURRENT: verify again and publish.
            journal["state"] = "building"
        return version, journal, dropped
    numbers = [int(m.group(1)) for v in [*versions, current or ""] if (m := VERSION_RE.match(v))]
    return version_name(max(numbers, default=0) + 1), None, dropped


def _collect_garbage(
    cfg: Config,
    ws: Workspace,
    schema: CorpusSchema,
    keep: set[str],
    sql: ChdbStore | ClickHouseServerStore,
    vec: MilvusStore,
) -> tuple[list[str], list[str]]:
    """Drop every version outside ``keep`` that no reader leases: ``(dropped, kept because in use)``."""
    gone: list[str] = []
    in_use: list[str] = []
    for v in list_versions(ws, schema.domain):
        if v in keep:
            continue
        (gone if _drop_version(cfg, ws, schema, v, sql, vec) else in_use).append(v)
    return gone, in_use


def _drop_version(
    cfg: Config,
    ws: Workspace,
    schema: CorpusSchema,
    version: str,
    sql: ChdbStore | ClickHouseServerStore,
    vec: MilvusStore,
) -> bool:
    """Remove a version from every store unless a reader leases it; ``False`` if it is in use.

    ``version.json`` goes first, so no new lease starts on a half-dropped version, and the
    directory goes last, so a crash here is retried by the next build.
    """
    vdir = ws.index_dir(schema.domain, version)
    with claim(vdir) as claimed:
        if not claimed and vdir.is_dir():
            return False
        (vdir / VERSION_FILE).unlink(missing_ok=True)
        sql.drop_table(physical_table(cfg, schema, version))
        vec.drop_collection(collection_name(schema, version))
        for f in schema.vector_fields:
            bm25_store.forget(vdir / BM25_DIR / f)
        shutil.rmtree(vdir, ignore_errors=True)
    return True


@contextlib.contextmanager
def _build_lock(ws: Workspace, domain: str) -> Iterator[None]:
    path: Path = ws.index_root(domain) / LOCK
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(
                f"another build of the {domain} index is running in {ws.root}", code="build_running"
            ) from None
        yield
    finally:
        os.close(fd)


def _fault(stage: str, chunk: int) -> None:
    spec = os.environ.get(KILL_ENV)
    if not spec:
        return
    want_stage, _, want_chunk = spec.partition(":")
    if want_stage == stage and (stage in ("bm25", "verified") or want_chunk == str(chunk)):
        os.kill(os.getpid(), signal.SIGKILL)
