"""A client of an OpenAI-compatible ``POST {endpoint}/v1/embeddings`` server.

In a cluster this serves a model such as Qwen3-Embedding behind vLLM or TEI. Only the standard
library is used, so the client adds no dependency. A refused connection or a timeout raises
:class:`EmbedderUnavailable` (retryable); a server that answers with an error or a malformed body
raises :class:`EmbedderError`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexing.embedders.base import EmbedderError, EmbedderUnavailable, Vectors, empty, normalize_rows
from indexing.errors import ConfigError


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
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ConfigError(f"embedder endpoint must be an http(s) URL, got {endpoint!r}")
        self.url = endpoint.rstrip("/").removesuffix("/v1") + "/v1/embeddings"
        self.model = model
        self.name = f"openai:{model}"
        self.batch_size = max(1, batch_size)
        self.timeout_s = timeout_s
        self.api_key = api_key
        self._dim = dim

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
        parts = [self._request(list(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        out = np.concatenate(parts, axis=0)
        if self._dim is None:
            self._dim = int(out.shape[1])
        elif out.shape[1] != self._dim:
            raise EmbedderError(f"{self.url} returned {out.shape[1]}-dimensional vectors, expected {self._dim}")
        return out

    def _request(self, batch: list[str]) -> Vectors:
        body = json.dumps({"model": self.model, "input": batch, "encoding_format": "float"}).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                payload: Any = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode(errors="replace")
            if exc.code >= 500:
                raise EmbedderUnavailable(f"{self.url} answered HTTP {exc.code}: {detail}") from None
            raise EmbedderError(f"{self.url} rejected the request (HTTP {exc.code}): {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise EmbedderUnavailable(f"embedding endpoint {self.url} is unreachable: {reason}") from None
        except json.JSONDecodeError:
            raise EmbedderError(f"{self.url} did not answer with JSON") from None
        return _vectors_of(payload, len(batch), self.url)


def _vectors_of(payload: Any, expected: int, url: str) -> Vectors:
    try:
        items = sorted(payload["data"], key=lambda d: int(d["index"]))
        rows = [item["embedding"] for item in items]
    except (KeyError, TypeError, ValueError):
        raise EmbedderError(f"{url} answered without an OpenAI 'data' list of embeddings") from None
    if len(rows) != expected:
        raise EmbedderError(f"{url} returned {len(rows)} embeddings for {expected} texts")
    return normalize_rows(rows)
