"""Typed, frozen configuration, loaded from a documented YAML file (see ``docs/config.example.yaml``).

Precedence: defaults < YAML file (``--config``) < environment (``PRORE_WORKSPACE``) < command-line flags.
Unknown keys are rejected, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from indexing.errors import ConfigError


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


@dataclass(frozen=True)
class MilvusConfig:
    """Where vectors live."""

    uri: str | None = None
    """``None`` uses a Milvus Lite file in the workspace; otherwise a server URI such as
    ``http://milvus:19530``, used as is."""
    index_type: str = "FLAT"
    """Vector index type. Milvus Lite builds FLAT and AUTOINDEX, plus HNSW, HNSW_SQ, IVF_FLAT and IVF_SQ8
    with faiss-cpu; other types are rejected. A Milvus cluster accepts its full list."""
    metric_type: str = "IP"
    """Similarity metric; vectors are L2-normalized, so IP is cosine similarity."""
    index_params: dict[str, Any] = field(default_factory=dict)
    """Extra build parameters for the index type, e.g. ``{nlist: 128}`` for IVF_FLAT."""
    search_params: dict[str, Any] = field(default_factory=dict)
    """Extra search parameters, e.g. ``{nprobe: 16}`` for IVF_FLAT."""
    shards_num: int = 1
    """Shards per collection on a Milvus cluster (ignored by Milvus Lite)."""


@dataclass(frozen=True)
class EmbedderConfig:
    """Which embedders encode text and image fields; chosen by name, never by editing code."""

    text: str = "minilm"
    """``minilm`` (all-MiniLM-L6-v2, offline), ``hashing`` (fast, no model: speed only, not quality),
    or ``openai`` (an OpenAI-compatible ``/v1/embeddings`` endpoint, e.g. Qwen3-Embedding in a cluster)."""
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


@dataclass(frozen=True)
class Config:
    """Everything a command needs to find its workspace and stores."""

    workspace: Path = Path("workspace")
    """Directory holding corpora, embedded stores, indexes, benchmarks and reports."""
    clickhouse: ClickHouseConfig = field(default_factory=ClickHouseConfig)
    milvus: MilvusConfig = field(default_factory=MilvusConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)

    def replace(self, **changes: Any) -> Config:
        return dataclasses.replace(self, **changes)


_SECTIONS: dict[str, type[Any]] = {
    "clickhouse": ClickHouseConfig,
    "milvus": MilvusConfig,
    "embedder": EmbedderConfig,
}


def _section(cls: type[Any], raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping, got {type(raw).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key {where}.{unknown[0]}; known keys: {', '.join(sorted(known))}")
    return cls(**raw)


def load_config(
    path: str | Path | None = None,
    *,
    workspace: str | Path | None = None,
    clickhouse_url: str | None = None,
    milvus_uri: str | None = None,
    embedder: str | None = None,
) -> Config:
    """Build the config from defaults, an optional YAML file, ``PRORE_WORKSPACE`` and flags."""
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
    unknown = sorted(set(raw) - {"workspace", *_SECTIONS})
    if unknown:
        raise ConfigError(f"unknown top-level key {unknown[0]!r} in config")
    sections = {name: _section(cls, raw.get(name, {}), name) for name, cls in _SECTIONS.items()}
    ws = workspace or os.environ.get("PRORE_WORKSPACE") or raw.get("workspace") or "workspace"
    cfg = Config(workspace=Path(ws), **sections)
    if clickhouse_url:
        cfg = cfg.replace(clickhouse=dataclasses.replace(cfg.clickhouse, url=clickhouse_url))
    if milvus_uri:
        cfg = cfg.replace(milvus=dataclasses.replace(cfg.milvus, uri=milvus_uri))
    if embedder:
        cfg = cfg.replace(embedder=dataclasses.replace(cfg.embedder, text=embedder, image=embedder))
    return cfg
