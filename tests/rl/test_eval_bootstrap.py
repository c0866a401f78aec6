"""Bootstrap intervals: they hold the point estimate, shrink with n, and are reproducible."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rl.eval.bootstrap import bootstrap_ci, bootstrap_many


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=200), st.integers(0, 2**16))
def test_interval_contains_point_estimate(values: list[float], seed: int) -> None:
    iv = bootstrap_ci(values, n_resamples=300, seed=seed)
    assert iv.n == len(values)
    assert iv.mean == pytest.approx(float(np.mean(values)))
    assert 0.0 <= iv.low <= iv.mean + 1e-12
    assert iv.mean - 1e-12 <= iv.high <= 1.0


def test_interval_shrinks_as_n_grows() -> None:
    rng = np.random.default_rng(7)
    widths = []
    for n in (50, 500, 5000):
        hits = (rng.random(n) < 0.6).astype(float)
        iv = bootstrap_ci(hits, seed=1)
        widths.append(iv.high - iv.low)
    assert widths[0] > widths[1] > widths[2] > 0
    # A proportion's 95% interval is about 2 * 1.96 * sqrt(p(1-p)/n) wide.
    assert widths[2] == pytest.approx(2 * 1.96 * math.sqrt(0.24 / 5000), rel=0.25)


def test_seeded_and_shared_resamples() -> None:
    cols = {"a": [1.0, 0.0, 1.0, 1.0, 0.0], "b": [1.0, 0.0, 1.0, 1.0, 0.0]}
    first = bootstrap_many(cols, seed=3)
    again = bootstrap_many(cols, seed=3)
    assert first == again
    # Identical columns resampled with the same indices get identical intervals.
    assert first["a"] == first["b"]


def test_constant_column_and_empty_group() -> None:
    iv = bootstrap_ci([1.0] * 10)
    assert (iv.low, iv.mean, iv.high) == (1.0, 1.0, 1.0)
    empty = bootstrap_ci([])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_chunked_resampling_matches_shape() -> None:
    # Enough rows that the resample matrix is built in several chunks.
    values = np.tile([0.0, 1.0], 5000)
    iv = bootstrap_ci(values, n_resamples=1000, seed=0)
    assert iv.low < 0.5 < iv.high


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        bootstrap_ci([1.0], confidence=1.5)
    with pytest.raises(ValueError):
        bootstrap_many({"a": [1.0], "b": [1.0, 0.0]})
