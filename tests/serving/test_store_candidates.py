"""The two store-level facts conditional evaluation stands on, on both Milvus deployments (Milvus Lite and
the Milvus standalone server): a dense search among candidates scored in process (:func:`similarity`) ranks
them as the store's own filtered search does, under every metric; and the id filter selects exactly its ids,
odd characters included, alone and conjoined with a pushed filter."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from indexing.config import MilvusConfig
from indexing.embedders.hashing import HashingEmbedder
from indexing.schema import PRODUCTS
from indexing.stores.base import METRICS, similarity
from indexing.stores.milvus import MilvusStore
from serving.engine.pushdown import conjoin, id_filter
from serving.engine.retrieval import SCORE_DECIMALS, SCORE_TOLERANCE

"""Scores closer than this are ties to the engine (it orders hits by rounded score, then id)."""


# -- the id filter, and in-process scores, on both Milvus deployments ----------------------------


def load_hashed(store: MilvusStore, name: str, table: pa.Table) -> HashingEmbedder:
    """``table``'s products in collection ``name``, embedded by a 32-dimension hashing embedder (returned)."""
    emb = HashingEmbedder(32)
    store.create_collection(name, PRODUCTS, {f: 32 for f in PRODUCTS.vector_fields})
    store.upsert(
        name, PRODUCTS, table, {f: emb.embed(table.column(f).to_pylist()) for f in PRODUCTS.vector_fields}
    )
    store.flush(name)
    return emb


def by_rounded_score(hits: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Hits in the engine's order: rounded score, then id."""
    return sorted(hits, key=lambda h: (-round(h[1], SCORE_DECIMALS), h[0]))


def check_similarity(store: MilvusStore, name: str, table: pa.Table) -> None:
    """:func:`similarity` scores candidates as the store's own search among them does, under its metric."""
    emb = load_hashed(store, name, table)
    within = sorted(table.column("id").to_pylist())[::2]
    queries = np.asarray(emb.embed(["black headphones", "usb charger", "anything"]), dtype=np.float32)
    vectors = store.fetch_vectors(name, "title", within)
    scores = similarity(store.metric, queries, np.stack([vectors[d] for d in within]))
    for q, row in zip(queries, scores, strict=True):
        want = by_rounded_score(
            store.search(name, "title", q[None, :], len(within), filter=id_filter(within))[0]
        )
        got = by_rounded_score(zip(within, row.tolist(), strict=True))
        assert [d for d, _ in got] == [d for d, _ in want]
        assert np.allclose([s for _, s in got], [s for _, s in want], atol=SCORE_TOLERANCE)


@pytest.mark.parametrize("metric", METRICS)
def test_in_process_scores_are_the_stores_on_milvus_lite(
    tmp_path: Path, synthetic_table: Callable[..., Any], metric: str
) -> None:
    with MilvusStore(
        str(tmp_path / "milvus.db"), MilvusConfig(index_type="FLAT", metric_type=metric)
    ) as store:
        check_similarity(store, "similarity__v0001", synthetic_table("ecommerce", 60, seed=3))


@pytest.mark.server
@pytest.mark.parametrize("metric", METRICS)
def test_in_process_scores_are_the_stores_on_the_milvus_server(
    milvus_standalone: str, synthetic_table: Callable[..., Any], metric: str
) -> None:
    name = f"similarity_{metric.lower()}__v0001"
    with MilvusStore(milvus_standalone, MilvusConfig(index_type="HNSW", metric_type=metric)) as store:
        store.drop_collection(name)
        try:
            check_similarity(store, name, synthetic_table("ecommerce", 60, seed=3))
        finally:
            store.drop_collection(name)


ODD_IDS = ["P'apos", 'P"quote', "P\\slash", "P单词 ü", "P with space", "P\ttab", "P\nnl", "P\x07bell"]


def odd_ids_table(synthetic_table: Callable[..., Any]) -> pa.Table:
    table = synthetic_table("ecommerce", 40, seed=2)
    ids = table.column("id").to_pylist()
    ids[: len(ODD_IDS)] = ODD_IDS
    return table.set_column(table.schema.get_field_index("id"), "id", pa.array(ids))


def check_id_filter(store: MilvusStore, name: str, table: pa.Table) -> None:
    emb = load_hashed(store, name, table)
    query = np.asarray(emb.embed(["anything"]))
    within = [*ODD_IDS, "P00010", "P00011", "not there"]
    got = {d for d, _ in store.search(name, "title", query, 100, filter=id_filter(within))[0]}
    assert got == set(ODD_IDS[:-1]) | {"P00010", "P00011"}  # the bell is left out, never more
    both = conjoin("price < 250.0", id_filter(within))
    cheap = {d for d, _ in store.search(name, "title", query, 100, filter=both)[0]}
    prices = dict(zip(table.column("id").to_pylist(), table.column("price").to_pylist(), strict=True))
    assert cheap == {d for d in got if prices[d] < 250}


def test_the_id_filter_selects_exactly_its_ids_on_milvus_lite(
    tmp_path: Path, synthetic_table: Callable[..., Any]
) -> None:
    with MilvusStore(str(tmp_path / "milvus.db"), MilvusConfig(index_type="FLAT")) as store:
        check_id_filter(store, "conditional_ids__v0001", odd_ids_table(synthetic_table))


@pytest.mark.server
def test_the_id_filter_selects_exactly_its_ids_on_the_milvus_server(
    milvus_standalone: str, synthetic_table: Callable[..., Any]
) -> None:
    name = "conditional_ids__v0001"
    with MilvusStore(milvus_standalone, MilvusConfig(index_type="FLAT")) as store:
        store.drop_collection(name)
        try:
            check_id_filter(store, name, odd_ids_table(synthetic_table))
        finally:
            store.drop_collection(name)
