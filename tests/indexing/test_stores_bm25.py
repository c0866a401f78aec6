"""BM25 indexes with bm25s and English stemming: ids, batching, persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("bm25s", reason="needs the bm25 extra")
pytest.importorskip("Stemmer", reason="needs the bm25 extra")

from indexing.errors import StoreError
from indexing.stores.bm25 import Bm25Index, load_cached

DOCS = {
    "P10": "Great noise cancelling on planes, the ANC blocks engine noise",
    "P20": "Long battery life: the batteries last for days",
    "P30": "A cheap cable that works",
    "P40": "Noise cancellation is fine but the battery is weak",
    "P50": "The and of to in",  # stop words only
}


@pytest.fixture(scope="module")
def index() -> Bm25Index:
    return Bm25Index.build(list(DOCS), list(DOCS.values()))


def test_hits_are_document_ids_best_first(index: Bm25Index) -> None:
    hits = index.search(["noise cancelling"], 3)[0]
    assert {i for i, _ in hits[:2]} == {"P10", "P40"}  # the two documents about noise cancelling
    assert all(i in DOCS for i, _ in hits)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_stemming_and_stop_words(index: Bm25Index) -> None:
    battery, cancelled, stop = index.search(["battery", "cancelled", "the of and"], 5)
    assert {i for i, _ in battery} == {"P20", "P40"}  # "batteries" and "battery" share a stem
    assert {i for i, _ in cancelled} == {"P10", "P40"}  # "cancelling", "cancellation"
    assert stop == []  # stop words match nothing


def test_batch_equals_one_by_one_and_k_is_capped(index: Bm25Index) -> None:
    queries = ["noise", "cable", "battery life", "zebra"]
    batch = index.search(queries, 10)
    assert batch == [index.search([q], 10)[0] for q in queries]
    assert batch[3] == []  # no shared term: no hit, even with k larger than the corpus
    assert len(index.search(["noise"], 1)[0]) == 1
    assert index.search([], 5) == []
    assert index.search(["noise"], 0) == [[]]


def test_save_and_load_round_trip(index: Bm25Index, tmp_path: Path) -> None:
    target = tmp_path / "bm25" / "review"
    index.save(target)
    index.save(target)  # replacing an existing index is fine
    loaded = Bm25Index.load(target)
    assert len(loaded) == len(DOCS)
    queries = ["noise cancelling", "battery", "cheap cable"]
    assert loaded.search(queries, 3) == index.search(queries, 3)
    assert load_cached(target) is load_cached(target)


def test_bad_input_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError):
        Bm25Index.build(["a", "b"], ["only one text"])
    with pytest.raises(StoreError) as err:
        Bm25Index.load(tmp_path / "nothing")
    assert err.value.code == "no_index"
