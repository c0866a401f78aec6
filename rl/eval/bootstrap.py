"""Percentile bootstrap confidence intervals for per-query metrics, vectorized with numpy.

All metrics of one group share the same resamples, so their intervals are comparable, and a
seeded :class:`numpy.random.Generator` makes a report reproducible.

>>> iv = bootstrap_ci([1.0, 0.0, 1.0, 1.0], seed=0)
>>> iv.low <= iv.mean <= iv.high, iv.n
(True, 4)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
# Resample index matrices are built in chunks so memory stays bounded for large test splits.
_CHUNK_CELLS = 4_000_000


@dataclass(frozen=True)
class Interval:
    """A point estimate (the sample mean) with its bootstrap interval and sample size."""

    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, float | int]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}


def _check(n_resamples: int, confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")


def _query_draws(
    n: int, n_resamples: int, rng: np.random.Generator, rows: int = 1
) -> Iterator[npt.NDArray[np.int64]]:
    """``n_resamples`` draws of ``n`` query indexes with replacement, in chunks of shape (size, n) small
    enough that indexing ``rows`` rows of values with one stays within :data:`_CHUNK_CELLS`."""
    per_chunk = max(1, _CHUNK_CELLS // max(n * rows, 1))
    done = 0
    while done < n_resamples:
        size = min(per_chunk, n_resamples - done)
        yield rng.integers(0, n, size=(size, n))
        done += size


def _resample_means(
    matrix: npt.NDArray[np.float64], n_resamples: int, rng: np.random.Generator
) -> npt.NDArray[np.float64]:
    """Means of ``n_resamples`` bootstrap resamples of the rows of ``matrix``: shape (B, metrics)."""
    return np.concatenate(
        [matrix[idx].mean(axis=1) for idx in _query_draws(matrix.shape[0], n_resamples, rng)]
    )


def bootstrap_many(
    columns: Mapping[str, Sequence[float] | npt.NDArray[np.float64]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Interval]:
    """Intervals for several equally long per-query columns, drawn from the same resamples.

    An empty group gives NaN bounds with ``n == 0``.
    """
    _check(n_resamples, confidence)
    names = list(columns)
    lengths = {len(columns[name]) for name in names}
    if len(lengths) > 1:
        raise ValueError("bootstrap columns must have the same length")
    n = lengths.pop() if lengths else 0
    if n == 0:
        nan = float("nan")
        return {name: Interval(nan, nan, nan, 0) for name in names}
    matrix = np.column_stack([np.asarray(columns[name], dtype=np.float64) for name in names])
    means = _resample_means(matrix, n_resamples, np.random.default_rng(seed))
    alpha = (1.0 - confidence) / 2.0
    lows, highs = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    point = matrix.mean(axis=0)
    return {
        name: Interval(float(point[j]), float(lows[j]), float(highs[j]), n) for j, name in enumerate(names)
    }


def bootstrap_ci(
    values: Sequence[float] | npt.NDArray[np.float64],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of the mean of ``values``."""
    return bootstrap_many({"v": values}, n_resamples=n_resamples, confidence=confidence, seed=seed)["v"]


def paired_difference(
    baseline: Mapping[str, Sequence[float] | npt.NDArray[np.float64]],
    other: Mapping[str, Sequence[float] | npt.NDArray[np.float64]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Interval]:
    """Intervals of the mean difference ``other - baseline`` per metric, over paired queries.

    Row ``i`` of every column of both sides is the same query. Resampling queries keeps each pair
    together, so the spread that two methods share (hard queries are hard for both) cancels, and the
    interval is that of the difference itself, not of two unpaired means.

    >>> iv = paired_difference({"hit": [0.0, 1.0, 0.0, 1.0]}, {"hit": [1.0, 1.0, 0.0, 1.0]}, seed=0)["hit"]
    >>> iv.mean, iv.low >= 0.0, iv.n
    (0.25, True, 4)
    """
    if set(baseline) != set(other):
        raise ValueError("both sides of a paired difference need the same metrics")
    diffs = {}
    for name in baseline:
        a, b = np.asarray(baseline[name], dtype=np.float64), np.asarray(other[name], dtype=np.float64)
        if a.shape != b.shape:
            raise ValueError("both sides of a paired difference need one value per query")
        diffs[name] = b - a
    return bootstrap_many(diffs, n_resamples=n_resamples, confidence=confidence, seed=seed)


def pooled_difference(
    baseline: Mapping[str, Sequence[float] | npt.NDArray[np.float64]],
    others: Sequence[Mapping[str, Sequence[float] | npt.NDArray[np.float64]]],
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict[str, Interval]:
    """Intervals of the mean difference ``other - baseline`` over several runs of one recipe (training
    seeds, say) and their paired queries.

    A two-level bootstrap: each resample draws the runs with replacement, then the queries, the same
    queries for every run drawn, so the interval covers the spread between runs as well as the test
    set's. One run's paired interval covers only the latter, and a gain that one seed shows and another
    does not stays inside this interval. ``n`` is the number of queries.

    Two seeds that both gain on the first 10 of 20 queries, then one that gains and one that does not:

    >>> base, gain = {"hit": [0.0] * 10 + [1.0] * 10}, {"hit": [1.0] * 20}
    >>> both = pooled_difference(base, [gain, gain], seed=0)["hit"]
    >>> both.mean, both.low > 0.0
    (0.5, True)
    >>> one = pooled_difference(base, [gain, base], seed=0)["hit"]
    >>> one.mean, one.low
    (0.25, 0.0)
    """
    if not others:
        raise ValueError("a pooled difference needs at least one run")
    _check(n_resamples, confidence)
    rng = np.random.default_rng(seed)
    a = {name: np.asarray(col, dtype=np.float64) for name, col in baseline.items()}
    n = len(next(iter(a.values()))) if a else 0
    k = len(others)
    diffs = {}
    for name, col in a.items():
        rows = [np.asarray(o[name], dtype=np.float64) for o in others]
        if any(r.shape != col.shape for r in rows):
            raise ValueError("every run of a pooled difference needs one value per baseline query")
        diffs[name] = np.stack(rows) - col  # (runs, queries)
    if n == 0:
        nan = float("nan")
        return {name: Interval(nan, nan, nan, 0) for name in a}
    runs = rng.integers(0, k, size=(n_resamples, k))
    alpha = (1.0 - confidence) / 2.0
    out = {}
    chunks = list(_query_draws(n, n_resamples, rng, rows=k))  # the same query draws for every metric
    for name, d in diffs.items():
        # Per resample: each run's mean over the drawn queries, then the mean over the drawn runs.
        per_run = np.concatenate([d[:, idx].mean(axis=2) for idx in chunks], axis=1)  # (runs, resamples)
        means = np.take_along_axis(per_run, runs.T, axis=0).mean(axis=0)
        low, high = np.quantile(means, [alpha, 1.0 - alpha])
        out[name] = Interval(float(d.mean()), float(low), float(high), n)
    return out
