"""Score completions in batches: parse each, run every program through ``Engine.execute_many`` once
per domain, and compute the layered reward of :mod:`rl.reward.terms`.

This is the one definition of the reward: the local trainer, the reward service, verl's reward
function and the evaluation's failure breakdown all score through :class:`RewardScorer` (or, for a
single item, :func:`score_one`).

Determinism: an item's score depends only on the item, the :class:`~rl.reward.config.RewardConfig`
and the index the engine serves, never on the batch it lands in. Programs are deduplicated by their
canonical JSON and every batch is ranked to the same depth (``cutoff``); a batch that fails for a
retryable reason (a store that cannot be reached) raises instead of scoring its items 0.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from indexing.config import Config
from indexing.schema import DOMAINS
from rl.eval.outcome import Failure, Ran, read_completion, run_programs
from rl.reward.config import LengthUnit, RewardConfig
from rl.reward.errors import RewardError
from rl.reward.length import LengthCounter
from rl.reward.terms import Terms, accuracy_term, length_term
from serving.dsl import Program
from serving.engine import CacheSizes, Engine, ExecutionLimits

TIMEOUT_CODE = "reward_timeout"
"""Error code of an item whose batch ran past the service's deadline: ``S_e`` is 0."""


@dataclass(frozen=True)
class RewardItem:
    """One completion to score against its instance's answer.

    ``gold_id`` is needed by ``hit1`` and ``mrr``; ``relevant`` by ``satisfy`` (the gold id counts as
    relevant too). ``budget`` overrides the config's length budget, in the scorer's unit.
    """

    completion: str
    domain: str
    gold_id: str | None = None
    relevant: frozenset[str] | None = None
    budget: int | None = None


@dataclass(frozen=True)
class RewardResult:
    """Every term, the total, why a layer failed, what the program returned, and how long it took."""

    terms: Terms
    error: str | None
    """Code of the failure that stopped the layers: a format, validation or execution code, or
    :data:`TIMEOUT_CODE`; ``None`` when the program ran (a miss is not an error)."""
    message: str | None
    ids: tuple[str, ...]
    """The executed program's top ids (at most ``top_ids``)."""
    length: int
    length_unit: LengthUnit
    budget: int
    timings: Mapping[str, float] = field(default_factory=dict)
    """Milliseconds: ``parse``, ``execute`` (the item's share of its domain's ``execute_many`` call),
    ``total`` (the item's share of the whole batch)."""
    timed_out: bool = False

    @property
    def total(self) -> float:
        return self.terms.total

    def score_key(self) -> tuple[Any, ...]:
        """Everything that is the score (all but timings): equal keys mean the same score."""
        return (self.terms, self.error, self.ids, self.length, self.length_unit, self.budget, self.timed_out)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready view (what the reward service answers per item)."""
        return {
            **self.terms.as_dict(),
            "error": self.error,
            "message": self.message,
            "failed_layer": self.terms.failed_layer,
            "ids": list(self.ids),
            "length": self.length,
            "length_unit": self.length_unit,
            "budget": self.budget,
            "timed_out": self.timed_out,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
        }


class RewardScorer:
    """The reward over engines opened once, one per domain. Thread-compatible: one batch at a time
    per engine (an engine serializes its calls)."""

    def __init__(
        self,
        engines: Mapping[str, Engine],
        config: RewardConfig | None = None,
        *,
        tokenizer: Any | None = None,
        owns_engines: bool = False,
    ) -> None:
        if not engines:
            raise RewardError("a scorer needs at least one domain's engine", code="unknown_domain")
        self.engines = dict(engines)
        self.config = config or RewardConfig()
        self.length = LengthCounter(tokenizer)
        self._owns = owns_engines

    @classmethod
    def open(
        cls,
        cfg: Config,
        domains: Iterable[str],
        config: RewardConfig | None = None,
        *,
        tokenizer: Any | None = None,
        limits: ExecutionLimits | None = None,
        caches: CacheSizes | None = None,
    ) -> RewardScorer:
        """A scorer on the published index of each of ``domains`` in ``cfg``'s workspace.

        ``limits`` (default: ``cfg.clickhouse``'s) are what every program runs under; a program past
        ``max_execution_time_s`` scores ``S_e = 0`` with code ``exec_timeout``. The engines take the config's
        ``serving`` section (planning passes, DSL limits, SQL settings; cache sizes unless ``caches``), as
        ``prore serve`` and evaluation do, so a reward is the same program's meaning as there.
        """
        engines: dict[str, Engine] = {}
        try:
            for domain in dict.fromkeys(domains):
                if domain not in DOMAINS:
                    raise RewardError(
                        f"unknown domain {domain!r}; choose from {', '.join(DOMAINS)}", code="unknown_domain"
                    )
                engines[domain] = Engine.open(cfg, domain, limits=limits, caches=caches)
        except BaseException:
            for engine in engines.values():
                engine.close()
            raise
        return cls(engines, config, tokenizer=tokenizer, owns_engines=True)

    def close(self) -> None:
        """Close the engines this scorer opened."""
        if self._owns:
            for engine in self.engines.values():
                engine.close()

    @property
    def unit(self) -> LengthUnit:
        return self.length.unit

    def cache_stats(self) -> dict[str, dict[str, dict[str, int]]]:
        """Each domain's engine cache statistics (``size``, ``hits``, ``misses`` per cache)."""
        return {domain: engine.cache_stats() for domain, engine in self.engines.items()}

    # -- checks ---------------------------------------------------------------------------------

    def check(self, item: RewardItem) -> None:
        """Raise the :class:`RewardError` that makes ``item`` unscorable as configured, if any."""
        if not isinstance(item.completion, str):
            raise RewardError("completion must be text", code="bad_item")
        if item.domain not in self.engines:
            raise RewardError(
                f"domain {item.domain!r} is not served here; served: {', '.join(sorted(self.engines))}",
                code="unknown_domain",
            )
        if self.config.accuracy == "satisfy":
            if item.relevant is None:
                raise RewardError(
                    "accuracy 'satisfy' needs the item's relevant set, and the item has none (relevant sets "
                    "come with the benchmark's instances; score with 'hit1' or 'mrr' until then)",
                    code="no_relevant_set",
                )
        elif item.gold_id is None:
            raise RewardError(
                f"accuracy {self.config.accuracy!r} needs a gold id or an instance id", code="no_gold"
            )
        if item.budget is not None and (isinstance(item.budget, bool) or item.budget < 1):
            raise RewardError(
                f"a length budget must be a positive integer, got {item.budget!r}", code="bad_item"
            )

    # -- scoring --------------------------------------------------------------------------------

    def score(self, items: Sequence[RewardItem]) -> list[RewardResult]:
        """Score a batch, in input order: one ``execute_many`` call per domain in the batch.

        Every item is checked first (:meth:`check`), so a bad item fails the call before any work.
        """
        for item in items:
            self.check(item)
        t0 = time.perf_counter()
        read: list[Program | Failure] = []
        parse_ms: list[float] = []
        for item in items:
            start = time.perf_counter()
            read.append(read_completion(item.completion))
            parse_ms.append((time.perf_counter() - start) * 1000)

        outcomes: dict[int, Ran] = {}
        execute_ms: dict[int, float] = {}
        by_domain: dict[str, list[int]] = {}
        for i, (item, p) in enumerate(zip(items, read, strict=True)):
            if isinstance(p, Program):
                by_domain.setdefault(item.domain, []).append(i)
        for domain, idxs in by_domain.items():
            start = time.perf_counter()
            # A retryable error raises: a store went away, no score is known, the caller retries.
            got = run_programs(
                self.engines[domain], [read[i] for i in idxs], self.config.cutoff, raise_retryable=True
            )
            share = (time.perf_counter() - start) * 1000 / len(idxs)
            for i, outcome in zip(idxs, got, strict=True):
                outcomes[i] = outcome
                execute_ms[i] = share
        batch_share = (time.perf_counter() - t0) * 1000 / max(len(items), 1)
        return [
            self._result(item, p if isinstance(p, Failure) else outcomes.get(i),
                         {"parse": parse_ms[i], "execute": execute_ms.get(i, 0.0), "total": batch_share})
            for i, (item, p) in enumerate(zip(items, read, strict=True))
        ]  # fmt: skip

    def unscored(
        self, item: RewardItem, *, code: str = TIMEOUT_CODE, message: str | None = None
    ) -> RewardResult:
        """The result of an item whose program got no time to run: ``S_f`` as parsed, ``S_e = 0``."""
        self.check(item)
        p = read_completion(item.completion)
        if isinstance(p, Failure):
            return self._result(item, p, {})
        text = message or "the batch ran past the service's deadline; the program scores S_e = 0"
        return self._finish(item, 1.0, 0.0, (), code, text, {}, timed_out=True)

    def _result(self, item: RewardItem, outcome: Ran | None, timings: dict[str, float]) -> RewardResult:
        """The terms of an item that ran or failed: a ``format`` failure earns nothing, any other failure
        ``S_f`` alone."""
        if isinstance(outcome, Failure):
            s_f = 0.0 if outcome.layer == "format" else 1.0
            return self._finish(item, s_f, 0.0, (), outcome.code, outcome.message, timings)
        if outcome is None:
            return self._finish(item, 1.0, 0.0, (), "exec_failed", "the program did not run", timings)
        return self._finish(item, 1.0, 1.0, outcome.ids, None, None, timings)

    def _finish(
        self,
        item: RewardItem,
        s_f: float,
        s_e: float,
        ids: tuple[str, ...],
        code: str | None,
        message: str | None,
        timings: dict[str, float],
        *,
        timed_out: bool = False,
    ) -> RewardResult:
        cfg = self.config
        budget = item.budget if item.budget is not None else cfg.budget(self.unit)
        length = self.length(item.completion)
        relevant: Collection[str] | None = item.relevant
        s_r = (
            accuracy_term(ids, cfg.accuracy, gold=item.gold_id, relevant=relevant, cutoff=cfg.cutoff)
            if s_e
            else 0.0
        )
        terms = Terms(s_f, s_e, s_r, length_term(length, budget), cfg.execution_credit)
        return RewardResult(
            terms, code, message, tuple(ids[: cfg.top_ids]), length, self.unit, budget, timings, timed_out
        )


def score_one(scorer: RewardScorer, item: RewardItem) -> RewardResult:
    """One item's reward (a batch of one; the same score it gets in any batch)."""
    return scorer.score([item])[0]
