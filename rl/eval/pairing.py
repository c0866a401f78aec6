"""Which stored runs may be compared, and paired differences between methods on the queries they share.

Two runs are comparable when they scored the same queries (same ids, same gold answers) of the same
benchmark version against the same index version, at the same depth ``k``. :func:`mismatches` says
where a set of runs differs; a run stored without this record (before runs kept it) counts as
differing, since nothing shows that it agrees.

:func:`paired` puts each run against a baseline on the query ids both scored with the same gold id:
per query the difference of every metric, and a percentile-bootstrap interval of the mean difference
that resamples queries (pairs stay together). :func:`pooled` puts several runs of one recipe (training
seeds) against the baseline at once, with an interval that resamples the runs too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl.eval.bootstrap import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    Interval,
    paired_difference,
    pooled_difference,
)
from rl.eval.errors import EvalError
from rl.eval.metrics import GRADED, METRICS
from rl.eval.report import QUERIES
from rl.eval.runner import query_digests

UNRECORDED = "unrecorded"
"""The value of an identity field a run did not store."""

FIELDS: tuple[str, ...] = ("domain", "split", "benchmark", "index version", "query ids", "gold answers", "k")
"""What two runs must share to be compared, in the order mismatches are reported."""


def load_queries(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The per-query records of a stored run, by query id, in stored order."""
    path = run_dir / QUERIES
    if not path.is_file():
        raise EvalError(f"no evaluation run at {run_dir} (missing {QUERIES})", code="no_run")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {str(r["qid"]): r for r in records}


def identity(summary: Mapping[str, Any], queries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The fields of :data:`FIELDS` for one run (``gold answers`` is checked per shared query instead)."""
    meta = summary.get("meta")
    digests = query_digests(list(queries), [str(q["gold_id"]) for q in queries.values()])
    if meta is None:
        bench: Any = UNRECORDED
        index: Any = UNRECORDED
    else:
        recorded = meta.get("benchmark") or {}
        bench = recorded.get("fingerprint") or recorded.get("version")
        index = meta.get("index_version")
    return {
        "domain": summary["domain"],
        "split": summary["split"],
        "benchmark": bench,
        "index version": index,
        "query ids": digests["ids"],
        "k": summary["k"],
    }


def mismatches(
    summaries: Sequence[Mapping[str, Any]], queries: Sequence[Mapping[str, Mapping[str, Any]]]
) -> dict[str, list[Any]]:
    """Each field of :data:`FIELDS` on which the runs differ, with the value of every run."""
    ids = [identity(s, q) for s, q in zip(summaries, queries, strict=True)]
    out: dict[str, list[Any]] = {}
    for name in FIELDS:
        if name == "gold answers":
            golds: dict[str, set[str]] = {}
            for q in queries:
                for qid, rec in q.items():
                    golds.setdefault(qid, set()).add(str(rec["gold_id"]))
            differ = sorted(qid for qid, g in golds.items() if len(g) > 1)
            if differ:
                out[name] = [f"{len(differ)} shared queries with another gold id, e.g. {differ[0]}"]
            continue
        values = [i[name] for i in ids]
        if len({json.dumps(v, default=str) for v in values}) > 1 or UNRECORDED in values:
            out[name] = values
    return out


def describe(found: Mapping[str, Sequence[Any]]) -> str:
    """``query ids (3 sets), index version (v0001, v0002)``: one line for an error or a note."""
    parts = []
    for name, values in found.items():
        distinct = list(dict.fromkeys(str(v) for v in values))
        if name == "query ids":
            parts.append(f"query ids ({len(distinct)} different sets)")
        else:
            parts.append(f"{name} ({', '.join(distinct)})")
    return "; ".join(parts)


@dataclass(frozen=True)
class PairedResult:
    """One run against the baseline on the queries both scored with the same gold id."""

    method: str
    baseline: str
    n: int
    metrics: dict[str, Interval]
    """Mean of ``run - baseline`` per metric, with its paired bootstrap interval."""
    wins: int
    """Queries where the run's Hit@1 beats the baseline's (summed over the runs of a pool)."""
    losses: int
    runs: int = 1
    """How many runs the difference pools (:func:`pooled`); 1 for one run."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "baseline": self.baseline,
            "n": self.n,
            "wins": self.wins,
            "losses": self.losses,
            "runs": self.runs,
            "metrics": {m: iv.as_dict() for m, iv in self.metrics.items()},
        }


def paired(
    names: Sequence[str],
    queries: Sequence[Mapping[str, Mapping[str, Any]]],
    *,
    baseline: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> list[PairedResult]:
    """Every run but ``baseline`` (an index into ``names``) against it, matched on query ids."""
    base = queries[baseline]
    out = []
    for j, (name, q) in enumerate(zip(names, queries, strict=True)):
        if j == baseline:
            continue
        shared = _shared(base, [q])
        metrics = paired_metrics([base, q], shared)
        a, b = _columns(base, shared, metrics), _columns(q, shared, metrics)
        ivs = paired_difference(a, b, n_resamples=resamples, confidence=confidence, seed=seed)
        out.append(PairedResult(name, names[baseline], len(shared), ivs, *_wins_losses(a, [b])))
    return out


def _shared(
    base: Mapping[str, Mapping[str, Any]], others: Sequence[Mapping[str, Mapping[str, Any]]]
) -> list[str]:
    """The baseline's query ids that every one of ``others`` scored with the same gold id."""
    gold = {qid: str(row["gold_id"]) for qid, row in base.items()}
    return [qid for qid in base if all(qid in q and str(q[qid]["gold_id"]) == gold[qid] for q in others)]


def _columns(
    q: Mapping[str, Mapping[str, Any]], qids: Sequence[str], metrics: Sequence[str]
) -> dict[str, list[float]]:
    return {m: [float(q[qid][m]) for qid in qids] for m in metrics}


def paired_metrics(runs: Sequence[Mapping[str, Mapping[str, Any]]], qids: Sequence[str]) -> tuple[str, ...]:
    """The metrics to pair over ``qids``: the gold ones (:data:`METRICS`), and each graded one (P@1, nDCG@10, ...)
    that every run scored on every one of them (a query with a relevant set; none on a benchmark without)."""
    graded = tuple(m for m in GRADED if all(q[qid].get(m) is not None for q in runs for qid in qids))
    return METRICS + graded if qids else METRICS


def _wins_losses(
    base: Mapping[str, Sequence[float]], others: Sequence[Mapping[str, Sequence[float]]]
) -> tuple[int, int]:
    """Queries where a run's Hit@1 beats the baseline's, and where it falls below, summed over ``others``."""
    pairs = [(x, y) for o in others for x, y in zip(base["hit@1"], o["hit@1"], strict=True)]
    return sum(y > x for x, y in pairs), sum(y < x for x, y in pairs)


def pooled(
    label: str,
    names: Sequence[str],
    queries: Sequence[Mapping[str, Mapping[str, Any]]],
    members: Sequence[int],
    *,
    baseline: int = 0,
    resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> PairedResult:
    """The runs at ``members`` (indexes into ``names``: one recipe's seeds) against ``baseline`` as one
    method called ``label``, on the queries every one of them scored with the baseline's gold id, with
    the two-level interval of :func:`rl.eval.bootstrap.pooled_difference`."""
    if len(members) < 2 or baseline in members:
        raise EvalError(f"pool {label!r} needs two or more runs other than the baseline, got "
                        f"{', '.join(names[j] for j in members) or 'none'}", code="bad_pool")  # fmt: skip
    base = queries[baseline]
    shared = _shared(base, [queries[j] for j in members])
    metrics = paired_metrics([base, *(queries[j] for j in members)], shared)
    a, others = _columns(base, shared, metrics), [_columns(queries[j], shared, metrics) for j in members]
    ivs = pooled_difference(a, others, n_resamples=resamples, confidence=confidence, seed=seed)
    return PairedResult(label, names[baseline], len(shared), ivs, *_wins_losses(a, others), runs=len(members))
