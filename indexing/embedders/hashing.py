"""Feature hashing of word uni- and bi-grams: a model-free embedder for measuring speed.

It exists to measure the throughput of indexing and search at sizes where a neural model would
dominate the time. It does not measure retrieval quality: two texts are close only when they
share words, never when they share meaning.
"""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence

import numpy as np

from core.errors import ConfigError
from indexing.embedders.base import Vectors, empty, normalize_rows

_WORD = re.compile(r"\b\w\w+\b")
_SIGN_BIT = 0x8000_0000


def features(text: str) -> list[str]:
    """Lower-cased words of two or more characters, then their bigrams.

    >>> features("Noise-cancelling, great!")
    ['noise', 'cancelling', 'great', 'noise cancelling', 'cancelling great']
    """
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in itertools.pairwise(words)]


class HashingEmbedder:
    """Signed feature hashing (CRC-32) of lower-cased word uni/bi-grams into ``dim`` buckets.

    Deterministic across processes and machines, with no model and no heavy import. For measuring
    speed, not retrieval quality. A text without any word maps to the zero vector, the only row
    that is not of unit norm.
    """

    def __init__(self, dim: int = 256) -> None:
        if dim < 2:
            raise ConfigError(f"hashing_dim must be at least 2, got {dim}")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One float32 row per text, unit norm unless the text has no words."""
        if len(texts) == 0:
            return empty(self.dim)
        rows: list[int] = []
        hashes: list[int] = []
        for i, text in enumerate(texts):
            feats = features(text)
            rows.extend([i] * len(feats))
            hashes.extend(zlib.crc32(f.encode()) for f in feats)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if hashes:
            h = np.asarray(hashes, dtype=np.uint64)
            # The top bit picks the sign, so colliding features cancel out on average.
            signs = np.where(h & _SIGN_BIT, 1.0, -1.0).astype(np.float32)
            np.add.at(out, (np.asarray(rows), (h % self.dim).astype(np.int64)), signs)
        return normalize_rows(out)
