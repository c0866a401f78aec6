"""Embedders: the real MiniLM model, the hashing embedder, the cache, the registry, the OpenAI client."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from core.errors import ConfigError
from core.openai_client import NO_RETRY
from indexing.config import EmbedderConfig
from indexing.embedders import (
    CachedEmbedder,
    EmbedderError,
    EmbedderUnavailable,
    Registry,
    make_embedder,
    shared_embedder,
)
from indexing.embedders.cache import StoredEmbedder
from indexing.embedders.hashing import HashingEmbedder
from indexing.embedders.openai import OpenAIEmbedder
from indexing.embedders.registry import Factory
from indexing.schema import Role

TORCH_MINILM = EmbedderConfig(text="minilm", minilm_backend="torch")
"""MiniLM on torch (sentence-transformers), named: the default runs it on ONNX Runtime where that is installed
(``tests/indexing/test_embedders_onnx.py`` holds the two to the same vectors)."""


@pytest.fixture(scope="module")
def minilm() -> Any:
    pytest.importorskip("sentence_transformers", reason="needs the embed extra")
    return make_embedder(TORCH_MINILM, Role.TEXT)


def test_minilm_shapes_and_norms(minilm: Any) -> None:
    out = minilm.embed(["wireless headphones", "a red lamp", "quarterly budget review"])
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)


def test_minilm_is_deterministic_and_batch_independent(minilm: Any) -> None:
    texts = [f"product number {i} with a long battery" for i in range(70)]
    whole = minilm.embed(texts)
    alone = minilm.embed(texts[5:6])
    np.testing.assert_allclose(whole[5], alone[0], atol=1e-5)


def test_minilm_semantics(minilm: Any) -> None:
    # Bare "excellent ANC" is not understood by MiniLM (the acronym scores 0.06 vs 0.10 the wrong way),
    # so the queries spell the meaning out the way a shopper would.
    q, plane, battery = minilm.embed(
        ["headphones with excellent ANC", "blocks out plane noise", "long battery life"]
    )
    assert q @ plane > q @ battery
    q2, plane2, battery2 = minilm.embed(
        ["excellent noise cancelling", "blocks out plane noise", "long battery life"]
    )
    assert q2 @ plane2 > q2 @ battery2 + 0.2


def test_image_role_uses_the_text_model_on_descriptions(minilm: Any) -> None:
    image = make_embedder(EmbedderConfig(image="minilm", minilm_backend="torch"), Role.IMAGE)
    text = "matte white over-ear headphones on a desk"
    np.testing.assert_allclose(image.embed([text]), minilm.embed([text]), atol=1e-6)


def test_hashing_is_deterministic_normalized_and_word_sensitive() -> None:
    a, b = HashingEmbedder(128), HashingEmbedder(128)
    texts = ["Sony wireless headphones", "sony WIRELESS headphones!", "a red desk lamp", ""]
    va, vb = a.embed(texts), b.embed(texts)
    assert va.shape == (4, 128) and va.dtype == np.float32
    np.testing.assert_array_equal(va, vb)
    np.testing.assert_allclose(np.linalg.norm(va[:3], axis=1), 1.0, atol=1e-6)
    assert not va[3].any()  # no words: the zero vector
    assert va[0] @ va[1] == pytest.approx(1.0, abs=1e-6)  # case and punctuation do not matter
    assert va[0] @ va[2] < 0.5
    assert a.name == "hashing-128"


def test_hashing_uses_bigrams() -> None:
    e = HashingEmbedder(4096)
    dog_bites, man_bites = e.embed(["dog bites man", "man bites dog"])
    assert dog_bites @ man_bites < 0.99  # same words, different bigrams


class Recording:
    """The hashing embedder (8 dimensions), its rows times ``scale``, recording each call's texts in ``calls``."""

    name = "rec"
    dim = 8

    def __init__(self, scale: float = 1.0) -> None:
        self.calls: list[list[str]] = []
        self.scale = np.float32(scale)

    def embed(self, texts: Any) -> Any:
        self.calls.append(list(texts))
        return HashingEmbedder(8).embed(texts) * self.scale


def test_cache_encodes_only_misses_in_one_batch() -> None:
    recording = Recording()
    calls = recording.calls
    cache = CachedEmbedder(recording, maxsize=10)
    first = cache.embed(["a b", "c d", "a b"])
    assert calls == [["a b", "c d"]]
    assert (cache.hits, cache.misses) == (1, 2)
    second = cache.embed(["c d", "e f", "a b"])
    assert calls[-1] == ["e f"]
    assert (cache.hits, cache.misses) == (3, 3)
    np.testing.assert_array_equal(second[2], first[0])
    np.testing.assert_array_equal(second, HashingEmbedder(8).embed(["c d", "e f", "a b"]))


def test_stored_vectors_are_read_back_bit_for_bit_by_any_process_and_kept_apart_by_key(tmp_path: Any) -> None:
    # rows whose last bits a rounding (a text format, float16) would change
    recording = Recording(scale=1 / 3)
    calls = recording.calls
    texts = ["a b", "c d", "a b"]
    first = StoredEmbedder(recording, tmp_path, {"embedder": "rec"})
    computed = first.embed(texts)
    assert calls == [texts] and (first.hits, first.misses) == (0, 1)
    # another instance over the same directory (as another process or a later build would open it)
    again = StoredEmbedder(recording, tmp_path, {"embedder": "rec"})
    read = again.embed(texts)
    assert calls == [texts] and (again.hits, again.misses) == (1, 0)
    assert read.dtype == np.float32 and read.tobytes() == computed.tobytes()
    # another key (another runtime, batch size or model) or other texts are entries of their own
    other = StoredEmbedder(recording, tmp_path, {"embedder": "rec", "batch_size": 32})
    other.embed(texts)
    again.embed(texts[:2])
    assert len(calls) == 3 and (other.misses, again.misses) == (1, 1)
    assert again.embed([]).shape == (0, 8) and len(calls) == 3


def test_cache_evicts_least_recently_used() -> None:
    cache = CachedEmbedder(HashingEmbedder(16), maxsize=2)
    cache.embed(["one", "two"])
    cache.embed(["one"])  # "two" is now the oldest
    cache.embed(["three"])
    assert len(cache) == 2
    misses = cache.misses
    cache.embed(["one"])
    assert cache.misses == misses
    cache.embed(["two"])
    assert cache.misses == misses + 1


def test_shared_embedder_is_one_per_process_and_role_settings() -> None:
    cfg = EmbedderConfig(text="hashing", image="hashing", hashing_dim=32)
    a = shared_embedder(cfg, Role.TEXT)
    assert shared_embedder(cfg, Role.TEXT) is a
    assert shared_embedder(cfg, Role.IMAGE) is a  # same settings: one cache
    assert shared_embedder(EmbedderConfig(text="hashing", hashing_dim=64), Role.TEXT) is not a


def test_registry_rejects_unknown_and_duplicate_names() -> None:
    with pytest.raises(ConfigError) as err:
        make_embedder(EmbedderConfig(text="word2vec"), Role.TEXT)
    assert err.value.code == "unknown_embedder"
    assert "hashing, minilm, minilm-onnx, minilm-onnx-int8, openai" in err.value.one_line()
    reg: Registry[Factory] = Registry("thing")
    reg.register("x")(lambda cfg: HashingEmbedder(4))
    with pytest.raises(ConfigError) as dup:
        reg.register("x")(lambda cfg: HashingEmbedder(4))
    assert dup.value.code == "duplicate_name"
    with pytest.raises(ConfigError):
        make_embedder(EmbedderConfig(), Role.STRUCTURED)
    with pytest.raises(ConfigError):
        make_embedder(EmbedderConfig(text="openai"), Role.TEXT)  # no endpoint configured


class _MiniLMServer(BaseHTTPRequestHandler):
    """A small OpenAI-compatible endpoint serving the real MiniLM model (unnormalized, rows in reverse order)."""

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["model"] == "missing":
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error": "model not found"}')
            return
        vecs = make_embedder(TORCH_MINILM, Role.TEXT).embed(body["input"]) * 3.0
        data = [{"index": i, "embedding": v.tolist(), "object": "embedding"} for i, v in enumerate(vecs)][
            ::-1
        ]
        out = json.dumps({"data": data, "model": body["model"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def local_endpoint(minilm: Any) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _MiniLMServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_openai_client_against_minilm_served_over_http(local_endpoint: str, minilm: Any) -> None:
    # Batching, reordering by index, normalizing and errors over real HTTP; a served Qwen3-Embedding
    # is tested below when one is configured.
    emb = OpenAIEmbedder(local_endpoint, "all-MiniLM-L6-v2", batch_size=2, timeout_s=30)
    texts = ["excellent noise cancelling", "blocks out plane noise", "long battery life", "zeta", "eta"]
    out = emb.embed(texts)
    assert emb.dim == 384 and out.shape == (5, 384)
    np.testing.assert_allclose(out, minilm.embed(texts), atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2]
    with pytest.raises(EmbedderError) as err:
        OpenAIEmbedder(local_endpoint, "missing", timeout_s=5).embed(["x"])
    assert err.value.code == "embedder"


def test_openai_client_reports_a_server_that_went_away() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])  # closed again below: nothing listens there
    emb = OpenAIEmbedder(
        f"http://127.0.0.1:{port}", "m", timeout_s=2, retry=NO_RETRY
    )  # retries: test_openai_client.py
    with pytest.raises(EmbedderUnavailable) as err:
        emb.embed(["hello"])
    assert err.value.retryable and err.value.code == "embedder_unavailable"


ENDPOINT_ENV = "PRORE_TEST_EMBEDDINGS_ENDPOINT"
MODEL_ENV = "PRORE_TEST_EMBEDDINGS_MODEL"


@pytest.mark.skipif(
    not os.environ.get(ENDPOINT_ENV),
    reason=f"no served embedding model: set {ENDPOINT_ENV} (and {MODEL_ENV}) to an OpenAI-compatible endpoint",
)
def test_openai_embedder_against_a_served_model() -> None:
    cfg = EmbedderConfig(
        text="openai",
        endpoint=os.environ[ENDPOINT_ENV],
        model=os.environ.get(MODEL_ENV, "Qwen/Qwen3-Embedding-0.6B"),
    )
    emb = make_embedder(cfg, Role.TEXT)
    out = emb.embed(["excellent noise cancelling", "blocks out plane noise", "long battery life"])
    assert out.shape == (3, emb.dim)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert out[0] @ out[1] > out[0] @ out[2]


def test_identity_is_recorded_and_restored_by_one_pair_of_functions() -> None:
    from indexing.embedders.registry import IDENTITY_FIELDS, embedder_identity, with_identity

    built = EmbedderConfig(text="hashing", image="hashing", hashing_dim=48, model="m", endpoint="http://old")
    current = EmbedderConfig(endpoint="http://new", batch_size=8)
    restored = with_identity(current, {**embedder_identity(built), "endpoint": "ignored", "batch_size": 1})
    assert embedder_identity(restored) == embedder_identity(built)
    assert (restored.endpoint, restored.batch_size) == ("http://new", 8)  # where and how fast stay current
    assert tuple(embedder_identity(built)) == IDENTITY_FIELDS
