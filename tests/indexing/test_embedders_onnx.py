"""The ONNX Runtime backends of all-MiniLM-L6-v2 against the torch embedder, on the project's own texts.

Parity: fp32 gives the torch vectors (cosine >= 0.99 on every text) and the same top-20 documents for every
query; int8 is measured against the same bar and its difference stays within the documented bounds
(mean cosine >= 0.93, mean top-20 overlap >= 0.75).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="needs the onnx extra (pip install 'proretrieval[onnx]')")

from indexing.config import EmbedderConfig
from indexing.corpora import generate
from indexing.embedders import make_embedder
from indexing.embedders import onnx as onnx_backend
from indexing.schema import Role
from tests.needs import needs

# imported by the tests that embed on torch, not at collection
pytestmark = needs("sentence_transformers", reason="needs the embed extra")

QUERIES = [
    "great noise cancelling",
    "battery lasts all week",
    "matte white over-ear headphones",
    "cheap and flimsy plastic",
    "quiet fan, runs cool",
    "arrived broken, returned it",
    "sturdy aluminium frame",
    "meeting moved to thursday",
]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh cache directory: the export itself runs in this test module."""
    path = tmp_path_factory.mktemp("onnx-cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("PRORE_CACHE_DIR", str(path))
    onnx_backend._SESSIONS.clear()
    yield path
    onnx_backend._SESSIONS.clear()
    mp.undo()


@pytest.fixture(scope="module")
def docs() -> list[str]:
    table = next(generate("ecommerce", 300, seed=3))
    return [str(t) for t in table.column("review").to_pylist()]


def _embedder(name: str) -> Any:
    return make_embedder(EmbedderConfig(text=name), Role.TEXT)


def _top(queries: np.ndarray, corpus: np.ndarray, k: int = 20) -> list[list[int]]:
    scores = queries @ corpus.T
    return [list(np.argsort(-row, kind="stable")[:k]) for row in scores]


def test_export_is_local_and_cached(cache: Path) -> None:
    fp32 = onnx_backend.export_path(quantized=False)
    int8 = onnx_backend.export_path(quantized=True)
    assert fp32.is_file() and int8.is_file() and cache in fp32.parents
    assert int8.stat().st_size < fp32.stat().st_size / 2
    assert onnx_backend.export_path(quantized=False) == fp32  # a second call exports nothing
    assert not [p for p in fp32.parent.iterdir() if p.is_dir()]  # no temporary directory left behind


@pytest.mark.slow
def test_fp32_matches_torch_vectors_and_rankings(cache: Path, docs: list[str]) -> None:
    torch_e, onnx_e = _embedder("minilm"), _embedder("minilm-onnx")
    texts = QUERIES + docs[:50]
    cosine = np.sum(torch_e.embed(texts) * onnx_e.embed(texts), axis=1)
    assert cosine.min() >= 0.99
    corpus_t, corpus_o = torch_e.embed(docs), onnx_e.embed(docs)
    assert _top(torch_e.embed(QUERIES), corpus_t) == _top(onnx_e.embed(QUERIES), corpus_o)


@pytest.mark.slow
def test_int8_difference_is_measured_and_bounded(cache: Path, docs: list[str]) -> None:
    torch_e, int8_e = _embedder("minilm"), _embedder("minilm-onnx-int8")
    texts = QUERIES + docs[:50]
    cosine = np.sum(torch_e.embed(texts) * int8_e.embed(texts), axis=1)
    assert cosine.mean() >= 0.93
    ref = _top(torch_e.embed(QUERIES), torch_e.embed(docs))
    got = _top(int8_e.embed(QUERIES), int8_e.embed(docs))
    overlap = [len(set(a) & set(b)) / 20 for a, b in zip(ref, got, strict=True)]
    assert float(np.mean(overlap)) >= 0.75


def test_short_batches_run_on_one_thread(cache: Path) -> None:
    e = _embedder("minilm-onnx")
    e.embed(["one query"])
    small = onnx_backend._SESSIONS[(False, True)]
    assert small.get_session_options().intra_op_num_threads == 1


@pytest.mark.parametrize("name", ["minilm-onnx", "minilm-onnx-int8"])
def test_batches_do_not_change_vectors(cache: Path, docs: list[str], name: str) -> None:
    """A text's vector is a function of the text alone, whatever else is in its batch.

    int8's dynamic quantization scales over the whole input, so batched it would not be (a query beside a
    longer text moved by cosine 0.008): the engine's execute/execute_many agreement and the reward's
    same-score-in-any-batch rule rest on this.
    """
    e = _embedder(name)
    whole = e.embed(docs[:30])
    np.testing.assert_allclose(whole[7], e.embed(docs[7:8])[0], atol=1e-5)
    beside_longer = e.embed([QUERIES[0], docs[0] * 3])[0]
    np.testing.assert_allclose(beside_longer, e.embed(QUERIES[:1])[0], atol=1e-5)
    assert e.embed([]).shape == (0, 384)


def test_minilm_backend_keeps_the_vector_space(cache: Path, docs: list[str]) -> None:
    """``embedder.minilm_backend`` switches the runtime, not the space: same name, same vectors (fp32)."""
    from core.errors import ConfigError

    torch_e = make_embedder(EmbedderConfig(text="minilm", minilm_backend="torch"), Role.TEXT)
    onnx_e = make_embedder(EmbedderConfig(text="minilm", minilm_backend="onnx"), Role.TEXT)
    assert onnx_e.name == torch_e.name == "minilm"
    cosine = np.sum(torch_e.embed(QUERIES) * onnx_e.embed(QUERIES), axis=1)
    assert cosine.min() >= 0.99
    with pytest.raises(ConfigError, match="minilm_backend must be one of auto, torch, onnx, onnx-int8"):
        make_embedder(EmbedderConfig(text="minilm", minilm_backend="tpu"), Role.TEXT)


_BACKEND_OF_THE_DEFAULT = """
import sys
for name in sys.argv[1:]:
    sys.modules[name] = None  # as if not installed: importing it raises ImportError
from indexing.config import EmbedderConfig
from indexing.embedders import make_embedder
from indexing.schema import Role
e = make_embedder(EmbedderConfig(text="minilm"), Role.TEXT)
e.embed(["great noise cancelling"])
print(type(e).__name__, e.name, "torch" in sys.modules)
"""


@pytest.mark.parametrize(
    ("missing", "unwritable", "expected"),
    [((), False, "OnnxMiniLMEmbedder minilm False"), (("onnxruntime",), False, "MiniLMEmbedder minilm True"),
     ((), True, "MiniLMEmbedder minilm True")],
    ids=["onnx-installed", "onnxruntime-missing", "cache-unwritable"],
)  # fmt: skip
def test_the_default_backend_is_onnx_where_installed_else_torch(
    cache: Path, tmp_path: Path, missing: tuple[str, ...], unwritable: bool, expected: str
) -> None:
    """``auto``: ONNX Runtime where it and ``onnx`` are installed, and then the process never imports torch
    (the graph is already exported into ``cache``); torch where they are not, or where the graph cannot be
    written (a cache path below a file), with one warning. Fresh processes, since torch stays imported once
    any test here has loaded it."""
    onnx_backend.export_path(quantized=False)  # exported before, as on any machine after its first use
    where = cache
    if unwritable:
        (tmp_path / "a-file").write_text("")
        where = tmp_path / "a-file" / "cache"
    done = subprocess.run([sys.executable, "-c", _BACKEND_OF_THE_DEFAULT, *missing], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PRORE_CACHE_DIR": str(where)})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == expected
    warned = "MiniLM runs on torch: its ONNX graph cannot be exported" in done.stderr
    assert warned == unwritable, done.stderr[-2000:]
