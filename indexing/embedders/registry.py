"""Embedders by name: the config says ``minilm`` (on ONNX Runtime or torch: ``embedder.minilm_backend``),
``minilm-onnx`` / ``minilm-onnx-int8`` (ONNX Runtime), ``hashing`` or ``openai``; code never branches on it.

>>> from indexing.config import EmbedderConfig
>>> make_embedder(EmbedderConfig(text="hashing", hashing_dim=64), Role.TEXT).dim
64
>>> make_embedder(EmbedderConfig(text="word2vec"), Role.TEXT)
Traceback (most recent call last):
...
core.errors.ConfigError: unknown embedder 'word2vec'; known embedders: hashing, minilm, minilm-onnx, minilm-onnx-int8, openai
"""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from core.errors import ConfigError
from core.registry import Registry
from indexing.config import EmbedderConfig
from indexing.embedders.base import Embedder
from indexing.embedders.cache import CachedEmbedder
from indexing.schema import Role

Factory = Callable[[EmbedderConfig], Embedder]

API_KEY_ENV = "PRORE_EMBEDDER_API_KEY"
"""Environment variable holding the bearer token of an ``openai`` endpoint (never put in config)."""


EMBEDDERS: Registry[Factory] = Registry("embedder", unknown_code="unknown_embedder")
"""Embedder factories by name; another module adds one with ``@EMBEDDERS.register("name")``."""


MINILM_BACKENDS = ("auto", "torch", "onnx", "onnx-int8")


def minilm_backend(name: str) -> str:
    """The runtime ``embedder.minilm_backend`` names: ``auto`` is ``onnx`` where ONNX Runtime and ``onnx``
    (which exports the graph) are installed, else ``torch``; any other name is itself.

    >>> minilm_backend("torch"), minilm_backend("onnx-int8")
    ('torch', 'onnx-int8')
    """
    if name not in MINILM_BACKENDS:
        raise ConfigError(
            f"embedder.minilm_backend must be one of {', '.join(MINILM_BACKENDS)}, not {name!r}"
        )
    if name != "auto":
        return name
    try:
        found = all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))
    except (ImportError, ValueError):  # a module set to None in sys.modules, or a broken package
        found = False
    return "onnx" if found else "torch"


@EMBEDDERS.register("minilm")
def _minilm(cfg: EmbedderConfig) -> Embedder:
    backend = minilm_backend(cfg.minilm_backend)
    if backend == "onnx" and cfg.minilm_backend == "auto":
        from indexing.embedders.onnx import export_path

        try:  # once per machine; torch computes the same vectors where the graph cannot be written
            export_path(quantized=False)
        except OSError as exc:
            logging.getLogger(__name__).warning(
                "MiniLM runs on torch: its ONNX graph cannot be exported (%s)", exc
            )
            backend = "torch"
    if backend != "torch":
        from indexing.embedders.onnx import OnnxMiniLMEmbedder

        onnx = OnnxMiniLMEmbedder(quantized=backend == "onnx-int8", batch_size=cfg.batch_size)
        onnx.name = "minilm"  # the vector space of all-MiniLM-L6-v2, whichever runtime computes it
        return onnx
    from indexing.embedders.minilm import MiniLMEmbedder

    return MiniLMEmbedder(batch_size=cfg.batch_size)


@EMBEDDERS.register("minilm-onnx")
def _minilm_onnx(cfg: EmbedderConfig) -> Embedder:
    from indexing.embedders.onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder(batch_size=cfg.batch_size)


@EMBEDDERS.register("minilm-onnx-int8")
def _minilm_onnx_int8(cfg: EmbedderConfig) -> Embedder:
    from indexing.embedders.onnx import OnnxMiniLMEmbedder

    return OnnxMiniLMEmbedder(quantized=True, batch_size=cfg.batch_size)


@EMBEDDERS.register("hashing")
def _hashing(cfg: EmbedderConfig) -> Embedder:
    from indexing.embedders.hashing import HashingEmbedder

    return HashingEmbedder(dim=cfg.hashing_dim)


@EMBEDDERS.register("openai")
def _openai(cfg: EmbedderConfig) -> Embedder:
    from indexing.embedders.openai import OpenAIEmbedder

    if not cfg.endpoint or not cfg.model:
        raise ConfigError("embedder 'openai' needs embedder.endpoint and embedder.model in the config")
    return OpenAIEmbedder(
        cfg.endpoint,
        cfg.model,
        batch_size=cfg.batch_size,
        timeout_s=cfg.timeout_s,
        api_key=os.environ.get(API_KEY_ENV),
    )


def embedder_name(cfg: EmbedderConfig, role: Role) -> str:
    """The configured embedder name for fields of ``role`` (text or image)."""
    if role is Role.TEXT:
        return cfg.text
    if role is Role.IMAGE:
        return cfg.image
    raise ConfigError(f"{role.value} fields are not embedded", code="not_embedded")


IDENTITY_FIELDS = ("text", "image", "hashing_dim", "model")
"""The embedder settings that decide what the vectors are; an index version records them."""


def embedder_identity(cfg: EmbedderConfig) -> dict[str, Any]:
    """The settings of ``cfg`` that decide the vectors, as an index version stores them.

    >>> embedder_identity(EmbedderConfig(text="hashing", hashing_dim=64))
    {'text': 'hashing', 'image': 'minilm', 'hashing_dim': 64, 'model': None}
    """
    return {name: getattr(cfg, name) for name in IDENTITY_FIELDS}


def with_identity(current: EmbedderConfig, identity: Mapping[str, Any]) -> EmbedderConfig:
    """``current`` with the vector-deciding settings of ``identity``; where to reach them (endpoint) stays."""
    return dataclasses.replace(current, **{k: v for k, v in identity.items() if k in IDENTITY_FIELDS})


def vector_key(cfg: EmbedderConfig, role: Role) -> dict[str, Any]:
    """What decides, bit for bit, the vectors ``cfg``'s embedder for ``role`` computes: the name, the runtime of
    ``minilm``, the batch size (ONNX and torch pad each batch), and the settings of ``hashing`` and ``openai``.
    The key of :class:`~indexing.embedders.cache.StoredEmbedder`'s entries.

    >>> vector_key(EmbedderConfig(text="hashing", hashing_dim=64), Role.TEXT)
    {'embedder': 'hashing', 'batch_size': 64, 'hashing_dim': 64}
    """
    name = embedder_name(cfg, role)
    key: dict[str, Any] = {"embedder": name, "batch_size": cfg.batch_size}
    if name == "minilm":
        key["backend"] = minilm_backend(cfg.minilm_backend)
    elif name == "hashing":
        key["hashing_dim"] = cfg.hashing_dim
    elif name == "openai":
        key.update(endpoint=cfg.endpoint, model=cfg.model)
    return key


def make_embedder(cfg: EmbedderConfig, role: Role) -> Embedder:
    """A new embedder for fields of ``role``, chosen by name (models themselves are shared per process)."""
    return EMBEDDERS.get(embedder_name(cfg, role))(cfg)


_SHARED: dict[tuple[object, ...], CachedEmbedder] = {}
_SHARED_LOCK = threading.Lock()


def shared_embedder(cfg: EmbedderConfig, role: Role) -> CachedEmbedder:
    """The process-wide cached embedder for ``role``; roles with the same settings share one cache."""
    name = embedder_name(cfg, role)
    key = (
        name,
        cfg.minilm_backend,
        cfg.batch_size,
        cfg.hashing_dim,
        cfg.endpoint,
        cfg.model,
        cfg.timeout_s,
        cfg.cache_size,
    )
    with _SHARED_LOCK:
        found = _SHARED.get(key)
        if found is None:
            found = CachedEmbedder(make_embedder(cfg, role), maxsize=cfg.cache_size)
            _SHARED[key] = found
        return found


def release_shared_embedders() -> None:
    """Forget every process-wide cached embedder (models and cached vectors go with the last user)."""
    with _SHARED_LOCK:
        _SHARED.clear()
