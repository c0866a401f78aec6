"""Limits and deadlines of the query API; no web framework is imported here, so ``prore --help`` stays light."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ApiSettings:
    """Limits and deadlines of the query API."""

    max_body_bytes: int = 65_536
    max_nl_chars: int = 1_000
    max_k: int = 100
    max_concurrent: int = 16
    """Requests under ``/v1/`` in flight at once; past it, 429 with ``Retry-After``."""
    retry_after_s: int = 1
    plan_deadline_s: float = 10.0
    execute_deadline_s: float = 10.0
    fallback_deadline_s: float = 10.0
    fallback_on_empty: bool = True
    """A planner's program that runs and matches no document is answered like a failed one: a guided pass
    when that is on, then the fallback (``"reason": "program_empty"``). Measured as the evaluation's system
    ``planner-grounded:PATH?fallback=rrf`` (README, "Training the planner"): on unseen wording a quarter to a
    half of the programs match nothing, and the fallback lifts the ecommerce human split's P@1 from 0.200 to
    0.305. False answers with the empty result (``"source": "planner"``, no rows)."""
    token: str | None = None
    """Bearer token ``/v1/*`` requires; None: no check (the loopback demo)."""
    doc_cache_rows: int = 50_000
    """Result rows (per corpus and field list) kept in memory, so a repeated id is not fetched again."""
    warmup: bool = True
    """Run the fallback program once per corpus at start (loads the embedders before the first request)."""


API_DEFAULTS = ApiSettings()
