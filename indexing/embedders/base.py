"""The embedder interface. Vectors are float32 and L2-normalized, so inner product is cosine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from indexing.errors import StoreError, StoreUnavailable

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Encodes texts. ``name`` identifies the vector space (model and settings), ``dim`` its size."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text, shape ``(len(texts), dim)``, each row of unit norm."""


class EmbedderError(StoreError):
    """An embedder answered, but not with usable vectors (bad request, wrong model, wrong shape)."""

    code = "embedder"


class EmbedderUnavailable(StoreUnavailable):
    """An embedding server could not be reached or timed out. Retrying later may help."""

    code = "embedder_unavailable"


def normalize_rows(matrix: npt.ArrayLike) -> Vectors:
    """Rows scaled to unit L2 norm as float32; all-zero rows stay zero instead of becoming NaN."""
    arr = np.asarray(matrix, dtype=np.float32)
    if arr.ndim != 2:
        raise EmbedderError(f"expected a 2-D array of vectors, got shape {arr.shape}")
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Vectors = (arr / norms).astype(np.float32, copy=False)
    return out


def empty(dim: int) -> Vectors:
    """The result of embedding no texts."""
    return np.zeros((0, dim), dtype=np.float32)
