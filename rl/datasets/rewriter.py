"""Optional LLM rewrite of templated requests through an OpenAI-compatible chat-completions endpoint.

Every response is cached on disk, keyed by (model, prompt), so a rerun of the same synthesis sends
nothing. A rewrite is kept only when it still names every value the program filters on; otherwise
the templated request stands (see :func:`keeps_anchors`).

Requests go through :class:`core.openai_client.OpenAIClient` and its retry policy (``retry``), with the
key in :data:`KEY_ENV` when that is set.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.openai_client import OpenAIClient, OpenAIError, RetryPolicy
from indexing.workspace import atomic_write_json
from rl.datasets.errors import BenchError

KEY_ENV = "PRORE_REWRITER_API_KEY"
"""The environment variable whose value the rewriter sends as its bearer token (none when unset)."""

SYSTEM_PROMPT = (
    "You rewrite search requests so they sound like a real person typed them. Keep the meaning exactly: "
    "keep every name, number, date and condition, keep every negation, add nothing. "
    "Answer with the rewritten request only, on one line."
)


@dataclass(frozen=True)
class RewriterConfig:
    """Where and how to rewrite."""

    url: str
    """Base URL of the endpoint, e.g. ``http://localhost:8000/v1``; ``/chat/completions`` is appended."""
    model: str = "default"
    """Model name sent with each request."""
    temperature: float = 0.7
    """Sampling temperature; the cache makes reruns identical whatever it is."""
    max_tokens: int = 160
    """Upper bound on the rewritten request's length in tokens."""
    timeout_s: float = 60.0
    """Per-request HTTP timeout."""
    concurrency: int = 8
    """Requests in flight at once (the endpoint batches them; the results keep their order)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """When a failed request is sent again (:class:`~core.openai_client.RetryPolicy`)."""


def build_messages(nl: str) -> list[dict[str, str]]:
    """The chat messages asking for a rewrite of ``nl``."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"Rewrite this search request:\n{nl}"},
    ]


def build_request(cfg: RewriterConfig, nl: str) -> dict[str, Any]:
    """The JSON body of the chat-completions request for ``nl``."""
    return {
        "model": cfg.model,
        "messages": build_messages(nl),
        "temperature": cfg.temperature,
        "max_tokens": cfg.max_tokens,
        "n": 1,
    }


def cache_key(model: str, messages: Sequence[dict[str, str]]) -> str:
    """The cache key of a request: a hash of the model name and the full prompt."""
    blob = json.dumps([model, list(messages)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def keeps_anchors(text: str, anchors: Sequence[str]) -> bool:
    """Whether ``text`` still contains every anchor (case-insensitive): the values a rewrite may not drop.

    >>> keeps_anchors("Sony cans below $200", ["Sony", "200"]), keeps_anchors("cheap Sony cans", ["200"])
    (True, False)
    """
    low = text.lower()
    return all(a.lower() in low for a in anchors)


class Rewriter:
    """Rewrites requests through the endpoint, reading and filling the on-disk cache."""

    def __init__(self, cfg: RewriterConfig, cache_dir: Path) -> None:
        self.cfg = cfg
        self.cache_dir = cache_dir
        self.sent = 0
        self.cached = 0
        self._client = OpenAIClient(cfg.url, api_key_env=KEY_ENV, timeout_s=cfg.timeout_s, retry=cfg.retry)

    def _path(self, key: str) -> Path:
        return self.cache_dir / key[:2] / f"{key}.json"

    def rewrite(self, nl: str) -> str:
        """The rewritten request (from the cache when this prompt was seen before)."""
        body = build_request(self.cfg, nl)
        key = cache_key(self.cfg.model, body["messages"])
        path = self._path(key)
        if path.is_file():
            self.cached += 1
            return str(json.loads(path.read_text())["content"])
        content = self._post(body)
        atomic_write_json(path, {"model": self.cfg.model, "prompt": body["messages"], "content": content})
        self.sent += 1
        return content

    def rewrite_many(self, texts: Sequence[str], *, progress: bool = False) -> list[str]:
        """:meth:`rewrite` for each text, ``concurrency`` requests at a time, in input order."""
        from concurrent.futures import ThreadPoolExecutor

        from tqdm import tqdm

        with ThreadPoolExecutor(max_workers=max(1, self.cfg.concurrency)) as pool:
            results = pool.map(self.rewrite, texts)
            return list(tqdm(results, total=len(texts), desc="rewriting", unit="q", disable=not progress))

    def close(self) -> None:
        """Close the HTTP client (harmless when none was opened)."""
        self._client.close()

    def _post(self, body: dict[str, Any]) -> str:
        url = self._client.url("chat/completions")
        try:
            got = self._client.chat(body)
        except OpenAIError as exc:
            raise BenchError(f"rewriter endpoint {url} failed: {exc}", code="bench_rewriter") from None
        if not got.choices:
            raise BenchError(f"rewriter endpoint {url} sent no chat completion", code="bench_rewriter")
        content = got.choices[0].text or ""
        # Reasoning models may prepend a think block; only the answer line is a request.
        lines = content.split("</think>")[-1].strip().splitlines()
        return lines[0].strip().strip('"') if lines else ""
