"""Ties at a dense search's cut, broken by id as the ranking contract breaks them.

A placeholder's id set is its entry's top-K. When several documents score the same as the K-th, the
ranking contract (DESIGN.md §3) orders them by id, so the set is the K best by ``(score, id)``. A store
does not: it returns *some* of the tied documents, chosen by its index (an HNSW graph's walk, Milvus
Lite's row order), and which ones changes with the index, so the same program answers differently on
another build or at another corpus size. The engine fetches :data:`~serving.engine.retrieval.WIDTH_MARGIN`
hits past K, which settles a tie that ends inside the margin. A tie that reaches the last hit fetched may
go on past it: then the set is still the store's choice.

Embedders with many exact ties make that common. The hashing embedder gives every text with the same words
the same vector, so hundreds of products tie at 5k and thousands at 1M; ``bench/scale.py`` traced every
pure-vector L1 miss at 5k to a tie beyond K. Learned embedders tie only on duplicate texts.

**How a tie is settled** (:func:`settle`). The band of the K-th score (scores equal to it at
:data:`~serving.engine.retrieval.SCORE_DECIMALS`) is read with a range search of at most
:data:`BAND_LIMIT` hits. Fewer than that: the whole band was read, and its smallest ids fill the cut. A
full answer is some of the band: its ``need``-th smallest id bounds the ``need`` smallest ids of the whole
band from above, so the band is read again below that bound (``id <= bound``, a smaller band each round),
for at most :data:`MAX_ROUNDS` reads. A read asks for at least twice the hits the cut needs, so a cut wider
than :data:`BAND_LIMIT` (a chain's wide head, :mod:`serving.engine.conditional`) is settled the same way. A
band still unread after them (never seen in the measured runs) is settled among what was read, and counted. The band is read with the filter the search ran with (the entry's
pushed filter, unless the store refused it, and its candidates).

An approximate index (HNSW) may miss band members in a range search as in any search; the cut is then
the smallest ids of those it finds, which is the same on every call of a build.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from indexing.stores.base import MAX_HITS, Hit

__all__ = ["BAND_LIMIT", "MAX_ROUNDS", "BandSearch", "Settled", "needs_settling", "settle"]

BAND_LIMIT = 1024
"""Most hits one range search over a band returns."""

MAX_ROUNDS = 4
"""Most range searches one tie takes."""

BandSearch = Callable[[float, float, int, str | None], list[Hit]]
"""``(low, high, limit, id_bound)``: at most ``limit`` hits scoring in ``(low, high]``, only ids at or
before ``id_bound`` when it is given."""


class Settled(NamedTuple):
    """A cut with its tie settled."""

    hits: tuple[Hit, ...]
    searches: int
    """Range searches made."""
    exact: bool
    """Whether the whole band (below the last bound) was read."""


def needs_settling(hits: Sequence[Hit], k: int, width: int, decimals: int) -> bool:
    """True when a store's answer of ``width`` hits (ordered by rounded score, then id) may cut a tie at
    ``k`` by the store's choice: it is full and its K-th score equals its last.

    >>> needs_settling([("a", 0.9), ("b", 0.5), ("c", 0.5)], 2, 3, 5)
    True
    >>> needs_settling([("a", 0.9), ("b", 0.5), ("c", 0.4)], 2, 3, 5)
    False
    >>> needs_settling([("a", 0.9), ("b", 0.5)], 2, 3, 5)  # the store had no more: nothing was cut
    False
    """
    if k < 1 or len(hits) < width or width <= k:
        return False
    return round(hits[k - 1][1], decimals) == round(hits[width - 1][1], decimals)


def settle(hits: Sequence[Hit], k: int, width: int, decimals: int, search: BandSearch) -> Settled:
    """``hits`` with the tie at ``k`` broken by id over the whole band (module docstring): the hits above
    the band, then the band's smallest ids, ``width`` in all.

    >>> band = [(f"P{i:03d}", 0.5) for i in range(40, 0, -1)]  # the store's order: largest id first
    >>> def search(low, high, limit, bound):
    ...     inside = [h for h in band if low < h[1] <= high and (bound is None or h[0] <= bound)]
    ...     return inside[:limit]
    >>> settled, searches, exact = settle([("P999", 0.9), *band[:4]], 2, 5, 5, search)
    >>> [d for d, _ in settled], searches, exact
    (['P999', 'P001', 'P002', 'P003', 'P004'], 1, True)

    A cut wider than :data:`BAND_LIMIT` (a chain's wide head): each read asks for twice the cut.

    >>> band = [(f"Q{i:05d}", 0.5) for i in range(3 * BAND_LIMIT, 0, -1)]
    >>> settled, searches, exact = settle(band[: 2 * BAND_LIMIT], BAND_LIMIT + 10, 2 * BAND_LIMIT, 5, search)
    >>> len(settled), settled[0][0], settled[-1][0], searches, exact
    (2048, 'Q00001', 'Q02048', 1, True)
    """
    score = round(hits[k - 1][1], decimals)
    half = 0.5 * 10.0**-decimals
    above = [h for h in hits if round(h[1], decimals) > score]
    need = width - len(above)
    members = {d: s for d, s in hits if round(s, decimals) == score}
    bound: str | None = None
    searches, exact = 0, False
    # twice the cut, so that a full read's need-th smallest id is a bound below its largest (the next read shrinks)
    limit = min(max(BAND_LIMIT, 2 * need), MAX_HITS)
    while searches < MAX_ROUNDS:
        band = search(score - half, score + half, limit, bound)
        searches += 1
        members.update((d, s) for d, s in band if round(s, decimals) == score)
        if len(band) < limit:
            exact = True
            break
        ids = sorted(d for d, _ in band)
        if bound is not None and ids[need - 1] == bound:
            break  # no smaller bound from this read; settle among what was read
        bound = ids[need - 1]
    cut = sorted(members.items())[:need]
    return Settled(tuple(above) + tuple(cut), searches, exact)
