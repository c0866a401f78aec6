"""The embedder interface. Vectors are float32 and L2-normalized, so inner product is cosine."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """One row per text, shape ``(len(texts), dim)``, each row of unit norm."""
