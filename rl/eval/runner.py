"""Run one method over benchmark instances and score every query.

Instances go to the method in batches (so engines can batch their vector searches); a tqdm bar
shows progress. The result is an :class:`EvalRun`: per-query scores plus what produced them, in
``meta`` (:func:`run_meta`): the benchmark version, the index version, the split, a hash of the query
ids and of the gold answers, the method and its settings, so that runs are compared only on the same
queries (see :mod:`rl.eval.compare`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tqdm import tqdm

from indexing.config import Config
from rl.eval.errors import EvalError
from rl.eval.methods import EvalInstance, MethodContext, MethodSpec, Outcome, get_method
from rl.eval.metrics import DEFAULT_CUTOFF, Relevant, score_queries
from rl.eval.outcome import Layer

LEVELS: tuple[str, ...] = ("L1", "L2", "L3")
MODALITY_GROUPS: tuple[str, ...] = ("structured", "text", "image", "mixed")
"""How a query's modalities group it: only structured conditions; text (with or without structured,
no image); image (no text); mixed (text and image together)."""

DEFAULT_BATCH = 64
MIN_K = 3  # Hit@3 and NDCG@3 need at least three ranked ids.


def modality_group(modalities: Sequence[str]) -> str:
    """The report group of a query from the modalities its gold program touches.

    >>> modality_group(("structured",)), modality_group(("structured", "text")), modality_group(("image", "text"))
    ('structured', 'text', 'mixed')
    """
    has_text = "text" in modalities
    has_image = "image" in modalities
    if has_text and has_image:
        return "mixed"
    if has_text:
        return "text"
    if has_image:
        return "image"
    return "structured"


@dataclass(frozen=True)
class QueryResult:
    """One scored query: who it was, where the gold id landed, and what the method returned."""

    qid: str
    level: str
    modality: str
    gold_id: str
    rank: int | None
    scores: dict[str, float]
    ids: tuple[str, ...]
    error: str | None
    layer: Layer | None = None
    """Where a failed query stopped (``format``, ``validation`` or ``execution``); None when it ran."""

    def as_record(self) -> dict[str, Any]:
        """A flat JSON-ready row for the per-query results file."""
        return {
            "qid": self.qid,
            "level": self.level,
            "modality": self.modality,
            "gold_id": self.gold_id,
            "rank": self.rank,
            **self.scores,
            "ids": list(self.ids),
            "error": self.error,
            "layer": self.layer,
        }


@dataclass(frozen=True)
class EvalRun:
    """The outcome of evaluating one method on one split of one domain."""

    domain: str
    split: str
    method: str
    k: int
    results: tuple[QueryResult, ...]
    started_at: str
    elapsed_s: float
    uses_gold: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


def digest(items: Sequence[object]) -> str:
    """A short stable hash of a list of JSON values (16 hex digits)."""
    text = json.dumps(list(items), ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def query_digests(qids: Sequence[str], golds: Sequence[str]) -> dict[str, str]:
    """``ids``: hash of the sorted query ids; ``gold``: hash of the sorted (query id, gold id) pairs."""
    pairs = sorted(zip(qids, golds, strict=True))
    return {"ids": digest([q for q, _ in pairs]), "gold": digest([list(p) for p in pairs])}


def run_meta(
    cfg: Config,
    domain: str,
    split: str,
    spec: MethodSpec,
    instances: Sequence[EvalInstance],
    *,
    k: int,
    batch_size: int,
    index_version: str | None,
    benchmark: Mapping[str, Any] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What a run was computed on and with; two runs compare only where these agree."""
    bench = dict(benchmark or {})
    return {
        "domain": domain,
        "split": split,
        "method": spec.name,
        "benchmark": {
            "version": bench.get("version"),
            "fingerprint": bench.get("fingerprint"),
            "seed": bench.get("seed"),
            "index_version": bench.get("index_version"),
            "corpus_fingerprint": bench.get("corpus_fingerprint"),
        },
        "index_version": index_version,
        "queries": {
            "n": len(instances),
            **query_digests([i.qid for i in instances], [i.gold_id for i in instances]),
        },
        "config": {
            "k": k,
            "batch_size": batch_size,
            "embedder": {"text": cfg.embedder.text, "image": cfg.embedder.image},
            **dict(extra or {}),
        },
    }


def _score(instances: Sequence[EvalInstance], outcomes: Sequence[Outcome], k: int) -> list[QueryResult]:
    results = []
    # Gold and graded metrics of every query in one library call (see rl.eval.metrics).
    all_scores = score_queries(
        [o.ids for o in outcomes],
        [i.gold_id for i in instances],
        [Relevant.of(i) for i in instances],
        cutoff=k,
    )
    for inst, out, scores in zip(instances, outcomes, all_scores, strict=True):
        results.append(
            QueryResult(
                qid=inst.qid,
                level=inst.level,
                modality=modality_group(inst.modalities),
                gold_id=inst.gold_id,
                rank=scores.rank,
                scores=scores.as_dict(),
                ids=tuple(out.ids[:k]) if out.ids is not None else (),
                error=out.error,
                layer=out.layer,
            )
        )
    return results


def run_method(
    spec: MethodSpec,
    ctx: MethodContext,
    instances: Sequence[EvalInstance],
    *,
    k: int = DEFAULT_CUTOFF,
    batch_size: int = DEFAULT_BATCH,
    progress: bool = True,
) -> list[Outcome]:
    """The method's outcome for every instance, in order, fed in batches of ``batch_size``."""
    outcomes: list[Outcome] = []
    with tqdm(total=len(instances), desc=spec.name, unit="q", disable=not progress, leave=False) as bar:
        for start in range(0, len(instances), batch_size):
            batch = instances[start : start + batch_size]
            got = spec.run(ctx, batch, k)
            if len(got) != len(batch):
                raise EvalError(f"method {spec.name!r} returned {len(got)} outcomes for {len(batch)} queries")
            outcomes.extend(got)
            bar.update(len(batch))
    return outcomes


def evaluate(
    cfg: Config,
    domain: str,
    method: str | MethodSpec,
    instances: Sequence[EvalInstance],
    *,
    split: str = "test",
    k: int = DEFAULT_CUTOFF,
    batch_size: int = DEFAULT_BATCH,
    progress: bool = True,
    ctx: MethodContext | None = None,
    benchmark: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> EvalRun:
    """Evaluate ``method`` (a registered name or a spec) on ``instances``; pass ``ctx`` to reuse open engines.

    ``benchmark`` is the manifest the instances come from (its version and fingerprint go into the
    run's ``meta``); ``meta`` adds entries to the recorded config (``--limit``, say).
    """
    if k < MIN_K:
        raise EvalError(f"--k must be at least {MIN_K} (Hit@3 and NDCG@3 need three ranks), got {k}")
    if batch_size < 1:
        raise EvalError(f"batch size must be positive, got {batch_size}")
    if not instances:
        raise EvalError(f"no {split} queries to evaluate for {domain}")
    spec = get_method(method) if isinstance(method, str) else method
    own = ctx is None
    context = ctx if ctx is not None else MethodContext(cfg, domain)
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    try:
        outcomes = run_method(spec, context, instances, k=k, batch_size=batch_size, progress=progress)
        index_version = context.index_version
    finally:
        if own:
            context.close()
    elapsed = time.perf_counter() - t0
    return EvalRun(
        domain=domain,
        split=split,
        method=spec.name,
        k=k,
        results=tuple(_score(instances, outcomes, k)),
        started_at=started.isoformat(timespec="seconds"),
        elapsed_s=elapsed,
        uses_gold=spec.uses_gold,
        meta=run_meta(
            cfg,
            domain,
            split,
            spec,
            instances,
            k=k,
            batch_size=batch_size,
            index_version=index_version,
            benchmark=benchmark,
            extra=meta,
        ),
    )
