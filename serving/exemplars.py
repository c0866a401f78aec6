"""Exemplar retrieval for the planner's prompt: the training pairs nearest a request, of diverse program shapes.

A planner that has seen one wording of a request shape reads another poorly. Retrieval-augmented parsing
(CASPER, Pasupat et al. 2021; GandR 2022) puts the training pairs whose requests are nearest the new one into
the prompt, so the model edits a program it is shown instead of recalling one; Cover-LS (Levy et al. 2022)
picks them for diverse program shapes rather than near-duplicates. This module is that index:

- **What it holds.** ``(domain, request, program)`` pairs of a benchmark's *train* split only, each with the
  request's MiniLM vector and its program's :func:`program_shape` (SQL with literals masked, plus the
  entries' modality and field).
- **Where it lives.** The pairs and vectors are files in the planner's model directory
  (``exemplars/``: ``pairs.parquet`` and ``exemplars.json``), so a checkpoint carries its exemplars wherever it
  goes; the planner card (``planner.json``) names the index's ``version`` (a digest of the embedder and the
  pairs) and ``k``. Searching happens in the project's vector store, :class:`indexing.stores.milvus.MilvusStore`:
  a process-private Milvus Lite file by default (Milvus Lite opens a file in one process only, and an
  evaluation or a reward service already holds the workspace's), or a Milvus server's
  ``exemplars_<version>`` collection, shared by every pod of a cluster.
- **How it picks** (:meth:`ExemplarIndex.select`): the :data:`CANDIDATES` nearest requests of the domain,
  then, nearest first, each whose shape is not yet chosen, up to ``k``; the request itself is never its own
  exemplar (training rows would otherwise copy their answer). The picks are returned farthest first, so the
  nearest sits just before the request.

The same pick builds SFT rows, RL prompts, evaluation prompts and served prompts (:func:`shots_for`), so a
model sees exemplars chosen the same way everywhere.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import re
import shutil
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ProReError
from indexing.config import EmbedderConfig, MilvusConfig
from indexing.schema import CorpusSchema, DType, Field, Role

EXEMPLARS_DIR = "exemplars"
"""The index's folder inside a model directory."""
PAIRS_FILE = "pairs.parquet"
MANIFEST_FILE = "exemplars.json"
DEFAULT_K = 3
"""Exemplars per prompt (CASPER and Cover-LS use a handful; each adds a request and a program to the chat)."""
CANDIDATES = 24
"""Nearest requests searched before the shape-diverse pick."""

EXEMPLAR_SCHEMA = CorpusSchema(
    domain="exemplars",
    table="exemplars",
    id_prefix="X",
    fields=(
        Field("id", Role.STRUCTURED, DType.STRING, "Pair id, 'X' and its row number."),
        Field("domain", Role.STRUCTURED, DType.STRING, "The corpus the pair's program runs on."),
        Field("request", Role.TEXT, DType.STRING, "The training request, embedded."),
    ),
)
"""The vector store's view of the index: one collection whose vector field is the request."""


class ExemplarError(ProReError):
    """An exemplar index that cannot be built, read or searched as asked."""

    code = "exemplars"


Shot = tuple[str, str]
"""One exemplar as the prompt builder takes it: (request, program JSON)."""


@dataclass(frozen=True)
class Pair:
    """One training pair of the index."""

    domain: str
    request: str
    program: str
    shape: str


_STRING = re.compile(r"'(?:[^']|'')*'")
_NUMBER = re.compile(r"(?<![A-Za-z_<])\d+(?:\.\d+)?")


def program_shape(program: str) -> str:
    """The shape of a program: its SQL with string and number literals masked, then each entry's type and field.

    >>> program_shape('{"sql": "SELECT id FROM products WHERE brand = \\'Sony\\' AND price < 200 AND id IN <text_1>",'
    ...               ' "retrieval_list": [{"type": "text", "field": "review", "query": "quiet"}]}')
    'SELECT id FROM products WHERE brand = ? AND price < # AND id IN <text_1> | text:review'
    """
    try:
        data = json.loads(program)
        sql = str(data["sql"])
        entries = [f"{e['type']}:{e['field']}" for e in data.get("retrieval_list", [])]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ExemplarError(
            f"an exemplar's program is not a DSL program object ({exc})", code="exemplar_program"
        ) from exc
    masked = _NUMBER.sub("#", _STRING.sub("?", sql))
    return " | ".join([masked, *entries])


def version_of(embedder: dict[str, Any], pairs: Sequence[Pair]) -> str:
    """A digest of what decides the index: the embedder's identity and every pair, in order."""
    h = hashlib.sha256(json.dumps(embedder, sort_keys=True).encode())
    for p in pairs:
        h.update(json.dumps([p.domain, p.request, p.program]).encode())
    return h.hexdigest()[:16]


def _embedder(cfg: EmbedderConfig) -> Any:
    from indexing.embedders import shared_embedder

    return shared_embedder(cfg, Role.TEXT)


def _identity(cfg: EmbedderConfig) -> dict[str, Any]:
    from indexing.embedders.registry import embedder_identity

    return {k: v for k, v in embedder_identity(cfg).items() if k != "image"}


class ExemplarIndex:
    """Training pairs with their request vectors, searched through the project's vector store.

    Build one with :meth:`build` (embeds the requests), write it into a model directory with :meth:`save`,
    open it again with :meth:`load`. Searching opens the store on first use; :meth:`close` releases it.
    """

    def __init__(self, pairs: Sequence[Pair], vectors: np.ndarray, *, embedder: EmbedderConfig,
                 version: str | None = None, milvus_uri: str | None = None) -> None:  # fmt: skip
        if len(pairs) != len(vectors):
            raise ExemplarError(
                f"{len(vectors)} vectors for {len(pairs)} exemplar pairs", code="exemplar_vectors"
            )
        if not pairs:
            raise ExemplarError("an exemplar index needs at least one training pair", code="exemplar_empty")
        self.pairs = list(pairs)
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.embedder_cfg = embedder
        self.version = version or version_of(_identity(embedder), self.pairs)
        self.milvus_uri = milvus_uri
        self._store: Any = None
        self._tmp: Path | None = None
        self._lock = threading.Lock()

    # -- building and files ------------------------------------------------------------------------

    @classmethod
    def build(cls, pairs: Iterable[tuple[str, str, str]], *, embedder: EmbedderConfig | None = None,
              milvus_uri: str | None = None) -> ExemplarIndex:  # fmt: skip
        """An index of ``(domain, request, program)`` pairs (the train split's), their requests embedded."""
        cfg = embedder or EmbedderConfig()
        rows = [Pair(d, r, p, program_shape(p)) for d, r, p in pairs]
        if not rows:
            raise ExemplarError("an exemplar index needs at least one training pair", code="exemplar_empty")
        vectors = _embedder(cfg).embed([p.request for p in rows])
        return cls(rows, np.asarray(vectors, dtype=np.float32), embedder=cfg, milvus_uri=milvus_uri)

    def save(self, model_dir: Path) -> Path:
        """Write the index into ``model_dir/exemplars`` (replacing one there) and return that folder."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        out = Path(model_dir) / EXEMPLARS_DIR
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        table = pa.table({
            "domain": [p.domain for p in self.pairs],
            "request": [p.request for p in self.pairs],
            "program": [p.program for p in self.pairs],
            "shape": [p.shape for p in self.pairs],
            "vector": pa.FixedSizeListArray.from_arrays(pa.array(self.vectors.reshape(-1)), self.vectors.shape[1]),
        })  # fmt: skip
        pq.write_table(table, tmp / PAIRS_FILE)
        manifest = {"version": self.version, "embedder": _identity(self.embedder_cfg), "pairs": len(self.pairs),
                    "domains": sorted({p.domain for p in self.pairs}), "dim": int(self.vectors.shape[1])}  # fmt: skip
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out

    @classmethod
    def load(cls, model_dir: Path, *, embedder: EmbedderConfig | None = None,
             milvus_uri: str | None = None) -> ExemplarIndex:  # fmt: skip
        """The index saved in ``model_dir`` (a model directory or its ``exemplars`` folder).

        ``embedder`` says how to run the embedder (its backend); the vector-deciding settings come from the
        index, so queries land in the space the pairs were embedded in."""
        import pyarrow.parquet as pq

        from indexing.embedders.registry import with_identity

        folder = Path(model_dir)
        if (folder / EXEMPLARS_DIR).is_dir():
            folder = folder / EXEMPLARS_DIR
        try:
            manifest = json.loads((folder / MANIFEST_FILE).read_text())
            table = pq.read_table(folder / PAIRS_FILE)
        except (OSError, ValueError) as exc:
            raise ExemplarError(
                f"no readable exemplar index at {folder} ({exc})", code="exemplar_index"
            ) from exc
        cols = table.to_pydict()
        pairs = [Pair(d, r, p, s) for d, r, p, s in zip(cols["domain"], cols["request"], cols["program"],
                                                        cols["shape"], strict=True)]  # fmt: skip
        vectors = np.asarray(cols["vector"], dtype=np.float32)
        cfg = with_identity(embedder or EmbedderConfig(), manifest["embedder"])
        index = cls(pairs, vectors, embedder=cfg, version=manifest["version"], milvus_uri=milvus_uri)
        return index

    def card(self, k: int) -> dict[str, Any]:
        """What the planner card records of this index."""
        return {"index": EXEMPLARS_DIR, "version": self.version, "k": k, "pairs": len(self.pairs),
                "embedder": _identity(self.embedder_cfg)}  # fmt: skip

    # -- searching ---------------------------------------------------------------------------------

    @property
    def collection(self) -> str:
        return f"exemplars_{self.version}"

    def _open(self) -> Any:
        import pyarrow as pa

        from indexing.stores.milvus import MilvusStore

        with self._lock:
            if self._store is not None:
                return self._store
            uri = self.milvus_uri
            if uri is None:
                self._tmp = Path(tempfile.mkdtemp(prefix="prore-exemplars-"))
                uri = str(self._tmp / "exemplars.db")
            store = MilvusStore(uri, MilvusConfig())
            name = self.collection
            if not store.has_collection(name) or store.count(name) != len(self.pairs):
                store.create_collection(name, EXEMPLAR_SCHEMA, {"request": int(self.vectors.shape[1])})
                data = pa.table({"id": [f"X{i}" for i in range(len(self.pairs))],
                                 "domain": [p.domain for p in self.pairs]})  # fmt: skip
                store.upsert(name, EXEMPLAR_SCHEMA, data, {"request": self.vectors})
                store.flush(name)
            self._store = store
            return store

    def select(self, domain: str, requests: Sequence[str], *, k: int = DEFAULT_K) -> list[list[Shot]]:
        """For each request, up to ``k`` exemplars of ``domain``: nearest first with shapes not yet chosen,
        never the request itself; returned farthest first."""
        if not requests:
            return []
        if k <= 0:
            return [[] for _ in requests]
        store = self._open()
        vectors = _embedder(self.embedder_cfg).embed(list(requests))
        hits = store.search(self.collection, "request", np.asarray(vectors, dtype=np.float32), CANDIDATES,
                            filter=f'domain == "{domain}"')  # fmt: skip
        out: list[list[Shot]] = []
        for request, found in zip(requests, hits, strict=True):
            picked: list[Pair] = []
            shapes: set[str] = set()
            rest: list[Pair] = []
            for pid, _score in found:
                pair = self.pairs[int(pid[1:])]
                if pair.request == request:
                    continue
                if pair.shape in shapes:
                    rest.append(pair)
                    continue
                picked.append(pair)
                shapes.add(pair.shape)
                if len(picked) == k:
                    break
            seen = {p.program for p in picked}
            for pair in rest:  # fewer shapes than k among the candidates: the nearest other programs
                if len(picked) == k:
                    break
                if pair.program not in seen:
                    picked.append(pair)
                    seen.add(pair.program)
            out.append([(p.request, p.program) for p in reversed(picked)])
        return out

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def __enter__(self) -> ExemplarIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def card_exemplars(card: dict[str, Any]) -> dict[str, Any] | None:
    """The exemplar section of a planner card, or None when the planner reads no exemplars."""
    got = card.get("exemplars")
    if got is None:
        return None
    if (
        not isinstance(got, dict)
        or not isinstance(got.get("k"), int)
        or not isinstance(got.get("version"), str)
    ):
        raise ExemplarError(
            f"the planner card's exemplars section is malformed: {got!r}", code="exemplar_card"
        )
    return got


_OPEN: dict[str, ExemplarIndex] = {}
_OPEN_LOCK = threading.Lock()


def open_for_planner(model_dir: str | Path, embedder: EmbedderConfig | None = None,
                     milvus_uri: str | None = None) -> tuple[ExemplarIndex, int] | None:  # fmt: skip
    """The exemplar index and ``k`` the planner at ``model_dir`` was trained with (cached per process), or
    None when its card names none. A card whose index is missing or of another version is refused."""
    from serving.prompt import read_card

    section = card_exemplars(read_card(model_dir))
    if section is None:
        return None
    model_dir = (
        Path(model_dir).parent if Path(model_dir).is_file() else Path(model_dir)
    )  # a card file's folder
    key = f"{Path(model_dir).resolve()}|{section['version']}|{milvus_uri}"
    with _OPEN_LOCK:
        index = _OPEN.get(key)
        if index is None:
            index = ExemplarIndex.load(Path(model_dir), embedder=embedder, milvus_uri=milvus_uri)
            if index.version != section["version"]:
                raise ExemplarError(f"{model_dir}: the card names exemplar index {section['version']} but the "
                                    f"folder holds {index.version}", code="exemplar_version")  # fmt: skip
            if (
                not _OPEN
            ):  # the first one: whatever this process opens is closed (its temporary store removed) at exit
                atexit.register(close_open_indexes)
            _OPEN[key] = index
    return index, int(section["k"])


def shots_for(
    planner: tuple[ExemplarIndex, int] | None, domain: str, requests: Sequence[str]
) -> list[list[Shot]]:
    """The exemplars of each request under ``planner`` (:func:`open_for_planner`); none without an index."""
    if planner is None:
        return [[] for _ in requests]
    index, k = planner
    return index.select(domain, requests, k=k)


def close_open_indexes() -> None:
    """Close every index :func:`open_for_planner` opened in this process."""
    with _OPEN_LOCK:
        for index in _OPEN.values():
            index.close()
        _OPEN.clear()
