"""A client of an OpenAI-compatible ``POST {endpoint}/v1/embeddings`` server.

In a cluster this serves a model such as Qwen3-Embedding behind vLLM or TEI. Requests go through
:class:`core.openai_client.OpenAIClient` and its retry policy (a refused connection, a timeout, a 429
or a 5xx is tried again). A server still unreachable, timing out or answering 5xx raises
:class:`EmbedderUnavailable` (retryable); a server that answers with another error or a malformed body
raises :class:`EmbedderError`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from core.errors import ConfigError
from core.openai_client import (
    OpenAIBadResponse,
    OpenAIClient,
    OpenAIError,
    OpenAIStatusError,
    RetryPolicy,
)
from indexing.embedders.base import EmbedderError, EmbedderUnavailable, Vectors, empty, normalize_rows


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible endpoint, ``batch_size`` texts per request."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        batch_size: int = 64,
        timeout_s: float = 30.0,
        dim: int | None = None,
        api_key: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"embedder endpoint must be an http(s) URL, got {endpoint!r}")
        base = endpoint.rstrip("/").removesuffix("/v1") + "/v1"
        self.url = base + "/embeddings"
        self.model = model
        self.name = f"openai:{model}"
        self.batch_size = max(1, batch_size)
        self.timeout_s = timeout_s
        self.api_key = api_key
        self._dim = dim
        self._client = OpenAIClient(base, api_key=api_key, timeout_s=timeout_s, retry=retry)

    @property
    def dim(self) -> int:
        """Vector size; asked of the server once (one short request) when not configured."""
        if self._dim is None:
            self._dim = int(self._request(["dimension probe"]).shape[1])
        return self._dim

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One unit-norm float32 row per text, in input order."""
        if len(texts) == 0:
            return empty(self.dim)
        parts = [
            self._request(list(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)
        ]
        out = np.concatenate(parts, axis=0)
        if self._dim is None:
            self._dim = int(out.shape[1])
        elif out.shape[1] != self._dim:
            raise EmbedderError(
                f"{self.url} returned {out.shape[1]}-dimensional vectors, expected {self._dim}"
            )
        return out

    def close(self) -> None:
        """Close the HTTP client (harmless when none was opened)."""
        self._client.close()

    def _request(self, batch: list[str]) -> Vectors:
        try:
            got = self._client.embeddings(self.model, batch)
        except OpenAIStatusError as exc:
            if exc.status >= 500:
                raise EmbedderUnavailable(
                    f"{self.url} answered HTTP {exc.status}: {exc.body[:200]}"
                ) from None
            raise EmbedderError(
                f"{self.url} rejected the request (HTTP {exc.status}): {exc.body[:200]}"
            ) from None
        except OpenAIBadResponse as exc:
            raise EmbedderError(exc.message) from None
        except OpenAIError as exc:  # unreachable, or timed out
            raise EmbedderUnavailable(f"embedding endpoint {self.url} is unreachable: {exc}") from None
        if len(got.vectors) != len(batch):
            raise EmbedderError(f"{self.url} returned {len(got.vectors)} embeddings for {len(batch)} texts")
        return normalize_rows(got.vectors)
