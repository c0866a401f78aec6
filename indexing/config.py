"""Typed, frozen configuration, loaded from a documented YAML file (see ``docs/config.example.yaml``).

Every setting has one precedence: defaults < YAML file (``--config``) < environment < command-line flags.
:func:`load_config` reads the file and lays over it the environment variables the settings classes declare
(``ENVIRONMENT``, a class attribute mapping a variable to a key of that class: ``PRORE_WORKSPACE`` here,
``PRORE_PLANNER_URL`` on the planner's settings); this is the one place the environment is read. A command then
lays the flags it was given over the result (:mod:`core.flags`). Unknown keys are rejected, and every value
is checked against its field's type by pydantic (:func:`core.settings.load_section`), so a typo never silently
falls back to a default: each mistake is one :class:`~core.errors.ConfigError` line naming the dotted key
(``serving.dsl.default_k``).

This layer owns ``workspace`` and the ``clickhouse``, ``milvus``, ``embedder`` and ``build`` sections. Each
layer above declares its own as :class:`~core.settings.Section` values (``serving.settings.SECTIONS``,
``rl.settings.SECTIONS``): a top-level key and a frozen dataclass whose fields all have defaults. Nothing
registers itself on import: whoever loads the file passes the sections of the layers it runs to
:func:`load_config`, which registers them (``prore.config.load_config`` passes every layer's). A process that
runs only some layers (``python -m serving.kserve``: indexing and serving) passes ``partial=True``, and the
keys of the layers it does not run (:data:`LAYER_KEYS`) are accepted unread. :meth:`Config.section` returns a
section by its type.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Greeting:
...     word: str = "hello"
...     times: int = 1
>>> Config().section(Greeting)  # a section not loaded from a file has its defaults
Greeting(word='hello', times=1)
>>> Config().with_section(Greeting(times=3)).section(Greeting)
Greeting(word='hello', times=3)
>>> config_from_mapping({"greting": {}})
Traceback (most recent call last):
...
core.errors.ConfigError: unknown top-level key 'greting' in config; known keys: workspace, clickhouse, milvus, embedder, build...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import yaml

from core.errors import ConfigError
from core.registry import Registry
from core.settings import Section, environment, field_type, has_key, load_section, parse_text, put_key

S = TypeVar("S")


@dataclass(frozen=True)
class ClickHouseConfig:
    """Where structured fields live and SQL runs."""

    url: str | None = None
    """``None`` uses embedded chDB with its files in the workspace; otherwise a ClickHouse HTTP URL,
    e.g. ``http://default:@clickhouse:8123``, used through clickhouse-connect (tables are always
    qualified with ``database``)."""
    database: str = "prore"
    """Database that holds the versioned corpus tables."""
    chdb_path: str | None = None
    """Directory of the embedded chDB files when ``url`` is ``None``; ``None`` means ``<workspace>/chdb``.
    chDB binds one path per process, so several workspaces used by one process (tests, benchmarks)
    point here at one shared path and keep apart by ``database``."""
    max_execution_time_s: float = 5.0
    """Per-query wall-clock limit for untrusted programs (ClickHouse ``max_execution_time``)."""
    max_rows_to_read: int = 50_000_000
    """Per-query cap on rows scanned (ClickHouse ``max_rows_to_read``)."""
    max_result_rows: int = 100_000
    """Per-query cap on result rows (ClickHouse ``max_result_rows``)."""
    max_memory_usage: int = 2_000_000_000
    """Per-query memory cap in bytes (ClickHouse ``max_memory_usage``)."""
    request_timeout_s: float | None = None
    """Seconds a request to a ClickHouse server waits for its answer before the store is unavailable
    (clickhouse-connect's ``send_receive_timeout``, whose own default is 300 s); ``None``: twice
    ``max_execution_time_s``, at least 30 s. Not used by embedded chDB."""
    index_granularity: int = 256
    """Rows per granule of a new corpus table (MergeTree ``index_granularity``; ClickHouse's default is
    8192). The primary key (``id``) skips the granules that hold none of a program's ids, so a program's
    ``id IN <ids>`` reads about ``k`` granules: with 256, some 5k rows of 100k for 20 ids, where 8192-row
    granules read nearly all of them. Full scans cost the same either way. Existing tables keep theirs."""


@dataclass(frozen=True)
class MilvusConfig:
    """Where vectors live."""

    uri: str | None = None
    """``None`` uses a Milvus Lite file in the workspace (zero setup; slow past about 100k documents);
    otherwise a server URI such as ``http://milvus:19530``, used as is, or the local server that
    ``prore stores up`` starts (``http://127.0.0.1:19530``)."""
    index_type: str = "FLAT"
    """Vector index type. Milvus Lite builds FLAT and AUTOINDEX, plus HNSW, HNSW_SQ, IVF_FLAT and IVF_SQ8
    with faiss-cpu; other types are rejected. A Milvus cluster accepts its full list."""
    metric_type: str = "IP"
    """Similarity metric; vectors are L2-normalized, so IP is cosine similarity."""
    index_params: dict[str, Any] = field(default_factory=dict)
    """Extra build parameters for the index type, e.g. ``{nlist: 128}`` for IVF_FLAT; HNSW types get ``M`` 16 and
    ``efConstruction`` 128 where these leave them out (the Milvus 2.3 server requires both)."""
    search_params: dict[str, Any] = field(default_factory=dict)
    """Extra search parameters sent with every search, e.g. ``{nprobe: 16}`` (Milvus Lite's FLAT index reads
    none but a range search's ``radius`` and ``range_filter``, which the engine sets itself)."""
    ef: int | None = None
    """HNSW search breadth sent with each search (raised to the number of hits asked for); ``None``:
    the server's default. Larger is more exact and slower."""
    nprobe: int | None = None
    """IVF clusters probed per search (at most ``index_params.nlist``); ``None``: the server's default (8)."""
    timeout_s: float = 10.0
    """Seconds a Milvus server may take to answer one request (loading a collection: at least 60)
    before the store counts as unavailable."""
    shards_num: int = 1
    """Shards per collection on a Milvus cluster (ignored by Milvus Lite)."""


@dataclass(frozen=True)
class EmbedderConfig:
    """Which embedders encode text and image fields; chosen by name, never by editing code."""

    ENVIRONMENT: ClassVar[Mapping[str, str]] = {"PRORE_VECTOR_CACHE": "vector_cache"}
    """Environment variables over the file's keys (see :func:`environment`)."""

    text: str = "minilm"
    """``minilm`` (all-MiniLM-L6-v2, offline), ``minilm-onnx`` / ``minilm-onnx-int8`` (the same model on ONNX
    Runtime, as vector spaces of their own), ``hashing`` (fast, no model: speed only, not quality), or
    ``openai`` (an OpenAI-compatible ``/v1/embeddings`` endpoint, e.g. Qwen3-Embedding in a cluster)."""
    minilm_backend: str = "auto"
    """How ``minilm`` runs: ``torch`` (sentence-transformers), ``onnx`` (ONNX Runtime fp32: the same vectors,
    cosine 1.0, faster per query) or ``onnx-int8`` (dynamic int8: about 2-3x faster per query, cosine about
    0.96 to fp32). ``auto`` (the default) is ``onnx`` where ONNX Runtime and ``onnx`` are installed (the
    ``onnx`` extra) and its graph can be exported, else ``torch``: a process that embeds on ONNX never imports
    torch or transformers once the graph is exported (``prore execute`` on a MiniLM index: 3.8 s against
    14.2 s, ``bench/minilm_backend.py``). Not part of an index's identity: an index built with one backend is
    queried with another, so a service can embed queries on ONNX against documents embedded with torch."""
    image: str = "minilm"
    """Same names; on CPU an image is its visual description, encoded by the text model."""
    batch_size: int = 64
    """Texts per forward pass or per HTTP request."""
    endpoint: str | None = None
    """Base URL of the OpenAI-compatible embeddings endpoint (for ``openai``)."""
    model: str | None = None
    """Model name sent to the endpoint (for ``openai``)."""
    timeout_s: float = 30.0
    """Seconds to wait for one ``openai`` embeddings request before the endpoint counts as unavailable."""
    hashing_dim: int = 256
    """Vector size of the hashing embedder."""
    cache_size: int = 200_000
    """Entries in the in-process embedding cache, keyed by (embedder, text)."""
    vector_cache: str | None = None
    """Directory of an on-disk store of the vectors an index build computes (``PRORE_VECTOR_CACHE``), keyed by
    what decides them (embedder, runtime, batch size) and each chunk's texts: building the same corpus again, on
    another store, with other index parameters or in another workspace, reads them instead of embedding. Shared
    by processes; never evicted (remove the directory). ``null``: off."""


@dataclass(frozen=True)
class BuildConfig:
    """How ``prore index build`` runs; neither setting changes what is built (an index built by one
    engine is the same index, with the same build key, as one built by the other)."""

    engine: Literal["local", "ray"] = "local"
    """``local``: this process reads, embeds and writes chunk after chunk. ``ray``: a Ray Data pipeline
    reads the corpus parts in tasks and embeds in a pool of actors, one embedder each; this process
    still writes every store, commits and publishes (see :mod:`indexing.ray_build`)."""
    ray_actors: int = 2
    """Embedding actors in the Ray pool, each with its own embedder and one CPU."""
    ray_address: str | None = None
    """The Ray cluster of a ``ray`` build: ``None`` joins the one ``RAY_ADDRESS`` names (a KubeRay RayJob
    sets it) or else starts a local one for the build and stops it after; otherwise an address such as
    ``auto`` or ``ray://head:10001``."""

    def __post_init__(self) -> None:
        if isinstance(self.ray_actors, bool) or not isinstance(self.ray_actors, int) or self.ray_actors < 1:
            raise ConfigError(f"build.ray_actors must be at least 1, got {self.ray_actors!r}")


@dataclass(frozen=True)
class Config:
    """Everything a command needs to find its workspace and stores, plus the other layers' sections."""

    ENVIRONMENT: ClassVar[Mapping[str, str]] = {"PRORE_WORKSPACE": "workspace"}
    """Environment variables over the file's keys (see :func:`environment`)."""

    workspace: Path = Path("workspace")
    """Directory holding corpora, embedded stores, indexes, benchmarks and reports."""
    clickhouse: ClickHouseConfig = field(default_factory=ClickHouseConfig)
    milvus: MilvusConfig = field(default_factory=MilvusConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    sections: Mapping[str, Any] = field(default_factory=dict)
    """Registered sections by name (``serving``, ``rl``), as loaded; read them with :meth:`section`."""

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)

    def section(self, cls: type[S]) -> S:
        """The section of type ``cls``: the one loaded from the file, or ``cls()`` (its defaults); one of this
        layer's (``ClickHouseConfig``) is its field."""
        for name, builtin in BUILTIN_SECTIONS.items():
            if cls is builtin:
                got: S = getattr(self, name)
                return got
        for value in self.sections.values():
            if isinstance(value, cls):
                return value
        return cls()

    def with_section(self, value: object) -> Config:
        """A copy with ``value`` as the section of its type (one of this layer's, or a layer's above, whether
        registered or not: a config built in code needs no registration)."""
        for name, builtin in BUILTIN_SECTIONS.items():
            if type(value) is builtin:
                return self.replace(**{name: value})
        name = (next((n for n, v in self.sections.items() if type(v) is type(value)), None)
                or _registered_name(type(value)) or f"{type(value).__module__}.{type(value).__qualname__}")  # fmt: skip
        return self.replace(sections={**self.sections, name: value})


BUILTIN_SECTIONS: dict[str, type[Any]] = {
    "clickhouse": ClickHouseConfig,
    "milvus": MilvusConfig,
    "embedder": EmbedderConfig,
    "build": BuildConfig,
}
"""This layer's sections: fields of :class:`Config`."""

LAYER_KEYS: tuple[str, ...] = ("serving", "rl")
"""The top-level keys of the layers above this one, which this layer names and never imports: a process that
runs only some layers loads the file with ``partial=True`` and leaves the others' keys unread (see
:func:`config_from_mapping`). ``prore`` registers a section under each."""


SECTIONS: Registry[type[Any]] = Registry("config section", unknown=ConfigError, duplicate=ConfigError)
"""Sections of the layers above, by top-level key; filled by :func:`register_sections`, which
:func:`load_config` calls with the sections it is given."""


def register_section(name: str, cls: type[Any]) -> None:
    """Make ``name`` a top-level key of the config file, read into the frozen dataclass ``cls``.

    Every field of ``cls`` needs a default (a section left out of the file is ``cls()``); a nested
    frozen dataclass is a nested mapping. Registering the same class again is harmless; another class
    under a taken name is a :class:`ConfigError`.
    """
    if not (dataclasses.is_dataclass(cls) and isinstance(cls, type)):
        raise TypeError(f"config section {name!r} must be a dataclass, got {cls!r}")
    if not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise TypeError(f"config section {name!r} must be a frozen dataclass")
    if name in BUILTIN_SECTIONS or name == "workspace":
        raise ConfigError(f"config section {name!r} is already a key of the indexing layer")
    if name in SECTIONS.names() and SECTIONS.get(name) is cls:
        return
    SECTIONS.add(name, cls)


def register_sections(*sections: Section) -> None:
    """:func:`register_section` for each of ``sections``."""
    for section in sections:
        register_section(section.name, section.cls)


def _registered_name(cls: type[Any]) -> str | None:
    return next((name for name in SECTIONS.names() if SECTIONS.get(name) is cls), None)


def section_name(cls: type[Any]) -> str:
    """The top-level key a registered section class is read from."""
    name = _registered_name(cls)
    if name is None:
        raise ConfigError(f"{cls.__name__} is not a registered config section")
    return name


def config_from_mapping(
    raw: Mapping[str, Any],
    *,
    workspace: str | Path | None = None,
    sections: Sequence[Section] = (),
    partial: bool = False,
) -> Config:
    """The config a decoded YAML mapping describes (no environment, no flags), after registering ``sections``.

    A top-level key must be this layer's or a registered section's; with ``partial``, the key of a layer this
    process does not run (one of :data:`LAYER_KEYS` with no section registered) is accepted and left unread.
    """
    register_sections(*sections)
    registered = SECTIONS.names()
    unread = tuple(k for k in LAYER_KEYS if k not in registered) if partial else ()
    known = ("workspace", *BUILTIN_SECTIONS, *registered)
    unknown = sorted(str(k) for k in set(raw) - set(known) - set(unread))
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r} in config; known keys: {', '.join(known)}")

    def given(name: str) -> Any:
        return {} if raw.get(name) is None else raw[name]  # ``clickhouse:`` with nothing under it

    builtin = {name: load_section(cls, given(name), name) for name, cls in BUILTIN_SECTIONS.items()}
    layered = {name: load_section(SECTIONS.get(name), given(name), name) for name in registered}
    ws = (
        Path(workspace)
        if workspace is not None
        else load_section(Path, raw.get("workspace", "workspace"), "workspace")
    )
    return Config(workspace=ws, **builtin, sections=layered)


def with_environment(raw: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``raw`` with the environment laid over it: every variable the registered sections and this layer declare
    (:func:`environment`) that is set and not empty. A value is read as its field's type (:func:`parse_text`)."""
    environ = os.environ if environ is None else environ
    out = dict(raw)
    roots = [("", Config), *((f"{name}.", SECTIONS.get(name)) for name in SECTIONS.names())]
    for prefix, cls in roots:
        for var, key in environment(cls).items():
            text = environ.get(var)
            if not text:
                continue
            try:
                value = parse_text(field_type(cls, key), text, prefix + key)
            except ConfigError as exc:
                raise ConfigError(f"environment variable {var}: {exc.message}") from None
            put_key(out, prefix + key, value)
    return out


def load_config(
    path: str | Path | None = None,
    *,
    sections: Sequence[Section] = (),
    partial: bool = False,
    environ: Mapping[str, str] | None = None,
    workspace: str | Path | None = None,
    clickhouse_url: str | None = None,
    milvus_uri: str | None = None,
    embedder: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Config:
    """Build the config from defaults, an optional YAML file, the environment (``environ``, default
    ``os.environ``) and this layer's flags, in that order.

    ``sections`` are registered first (:func:`config_from_mapping`, which ``partial`` is passed to); the file
    may hold every registered section. ``defaults`` are a process's own defaults by dotted key, where they
    differ from the settings classes' (``{"serving.planner.output": "json"}``): under the file, which may set
    them again.
    """
    raw: dict[str, Any] = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file not found: {p}")
        try:
            loaded = yaml.safe_load(p.read_text()) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {p} is not valid YAML: {exc}".splitlines()[0]) from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {p} must hold a mapping")
        raw = loaded
    register_sections(*sections)
    for key, value in (defaults or {}).items():
        if not has_key(raw, key):
            put_key(raw, key, value)
    raw = with_environment(raw, environ)
    cfg = config_from_mapping(raw, workspace=workspace or None, partial=partial)
    if clickhouse_url:
        cfg = cfg.replace(clickhouse=dataclasses.replace(cfg.clickhouse, url=clickhouse_url))
    if milvus_uri:
        cfg = cfg.replace(milvus=dataclasses.replace(cfg.milvus, uri=milvus_uri))
    if embedder:
        cfg = cfg.replace(embedder=dataclasses.replace(cfg.embedder, text=embedder, image=embedder))
    return cfg
