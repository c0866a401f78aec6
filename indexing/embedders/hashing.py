"""Feature hashing of word uni- and bi-grams: a model-free embedder for measuring speed.

It exists to measure the throughput of indexing and search at sizes where a neural model would
dominate the time. It does not measure retrieval quality: two texts are close only when they
share words, never when they share meaning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from indexing.embedders.base import Vectors, empty, normalize_rows
from indexing.errors import ConfigError, require


class HashingEmbedder:
    """Signed feature hashing (scikit-learn's murmurhash3) of lower-cased word uni/bi-grams.

    Deterministic across processes and machines. For measuring speed, not retrieval quality.
    A text without any word maps to the zero vector, the only row that is not of unit norm.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ConfigError(f"hashing_dim must be at least 2, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"
        text: Any = require("sklearn.feature_extraction.text", "embed")
        self._vectorizer = text.HashingVectorizer(
            n_features=dim,
            ngram_range=(1, 2),
            alternate_sign=True,
            norm="l2",
            dtype=np.float32,
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One float32 row per text, unit norm unless the text has no words."""
        if len(texts) == 0:
            return empty(self.dim)
        sparse = self._vectorizer.transform(list(texts))
        return normalize_rows(sparse.toarray())
