"""MilvusStore against Milvus Lite, embedded (a local directory) and as a gRPC server, and against the real
Milvus 2.3 standalone server (the session's ``milvus_standalone``)."""

from __future__ import annotations

import datetime as dt
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("milvus_lite", reason="needs the milvus extra")

from core.errors import ConfigError
from indexing.config import MilvusConfig
from indexing.embedders.hashing import HashingEmbedder
from indexing.errors import StoreError, StoreUnavailable
from indexing.schema import PRODUCTS, CorpusSchema, DType, Field, Role
from indexing.stores.milvus import (
    MilvusStore,
    check_index_config,
    field_collection,
    search_params,
    supported_index_types,
    vector_field,
)
from indexing.stores.milvus_plan import BULK_LOAD, INTERACTIVE, LoadPlan

N = 120
DIM = 64


DEPLOYMENTS = [
    "lite",
    pytest.param("lite-server", marks=[pytest.mark.server, pytest.mark.xdist_group("milvus-lite")]),
    pytest.param("standalone", marks=[pytest.mark.server, pytest.mark.xdist_group("milvus-standalone")]),
]
"""The servers are reached through ``request.getfixturevalue``, which the conftest's grouping by fixture name
cannot see, so their parameters carry the group themselves."""


def _store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, cfg: MilvusConfig
) -> MilvusStore:
    if request.param == "lite":
        return MilvusStore(str(tmp_path_factory.mktemp("lite") / "milvus.db"), cfg)
    fixture = "milvus_server" if request.param == "lite-server" else "milvus_standalone"
    return MilvusStore(request.getfixturevalue(fixture), cfg)


@pytest.fixture(params=DEPLOYMENTS)
def store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[MilvusStore]:
    with _store(request, tmp_path_factory, MilvusConfig()) as s:
        yield s


@pytest.fixture(scope="module")
def products(synthetic_table: Callable[..., Any]) -> tuple[Any, dict[str, Any]]:
    data = synthetic_table("ecommerce", N, seed=7)
    emb = HashingEmbedder(DIM)
    vectors = {f: emb.embed(data.column(f).to_pylist()) for f in PRODUCTS.vector_fields}
    return data, vectors


def _load(store: MilvusStore, name: str, products: tuple[Any, dict[str, Any]]) -> None:
    data, vectors = products
    store.drop_collection(name)
    store.create_collection(name, PRODUCTS, {f: DIM for f in PRODUCTS.vector_fields})
    store.upsert(name, PRODUCTS, data, vectors)


def test_upsert_is_idempotent_and_counts_are_exact(store: MilvusStore, products: Any) -> None:
    _load(store, "products__v0001", products)
    assert store.count("products__v0001") == N
    data, vectors = products
    store.upsert("products__v0001", PRODUCTS, data.slice(0, 30), {f: v[:30] for f, v in vectors.items()})
    assert store.count("products__v0001") == N
    assert store.field_counts("products__v0001") == dict.fromkeys(PRODUCTS.vector_fields, N)
    store.drop_collection("products__v0001")
    assert not store.has_collection("products__v0001") and store.count("products__v0001") == 0


def test_each_vector_field_has_its_own_collection(store: MilvusStore, products: Any) -> None:
    _load(store, "products__v0005", products)
    fields = sorted(PRODUCTS.vector_fields)
    assert store.collection_fields("products__v0005") == fields
    assert store.list_collections("products__v0005") == sorted(
        field_collection("products__v0005", f) for f in fields
    )
    # Only this version's collections: v0005's prefix is not v00050's.
    _load(store, "products__v00050", products)
    store.drop_collection("products__v0005")
    assert store.list_collections("products__v0005") == sorted(
        field_collection("products__v00050", f) for f in fields
    )
    store.drop_collection("products__v00050")
    assert store.list_collections("products__v0005") == []


def test_batched_search_finds_each_document_first(store: MilvusStore, products: Any) -> None:
    _load(store, "products__v0002", products)
    data, vectors = products
    ids = data.column("id").to_pylist()
    queries = vectors["title"][[3, 17, 99]]
    hits = store.search("products__v0002", "title", queries, 5)
    assert len(hits) == 3 and all(len(h) == 5 for h in hits)
    for row, want in zip(hits, (3, 17, 99), strict=True):
        assert row[0][1] == pytest.approx(1.0, abs=1e-4)
        # Duplicate titles tie at the top; the document itself is among the ties.
        assert ids[want] in [i for i, s in row if s == pytest.approx(row[0][1], abs=1e-4)]
        assert [s for _, s in row] == sorted((s for _, s in row), reverse=True)
    assert store.search("products__v0002", "title", queries[:0], 5) == []


def test_searches_from_many_threads_wait_for_the_collections_one_load(
    store: MilvusStore, products: Any
) -> None:
    """Released collections are loaded again by the first search of each; the engine sends a batch's searches
    from several threads (``serving.engine.search_threads``), and none may search a collection mid-load. (In
    one CI run a second thread's load of a collection that another had just loaded put Milvus Lite's
    collection back in state 'loading' under the first thread's search; loads now take turns per connection.
    The race is timing-dependent: this test exercises the path, it did not fail without the fix here.)"""
    _load(store, "products__v0003", products)
    _, vectors = products
    fields = list(PRODUCTS.vector_fields)
    alone = {f: store.search("products__v0003", f, vectors[f][:2], 5) for f in fields}
    start = threading.Barrier(8)

    def search(i: int) -> tuple[str, Any]:
        f = fields[i % 2]  # two collections, four threads on each
        start.wait()
        return f, store.search("products__v0003", f, vectors[f][:2], 5)

    with ThreadPoolExecutor(8) as pool:
        for _ in range(5 if store.lite else 1):  # the standalone server takes seconds to load each collection
            store.release("products__v0003")
            for f, hits in pool.map(search, range(8)):
                assert hits == alone[f]


def test_filter_is_pushed_into_the_search(store: MilvusStore, products: Any) -> None:
    _load(store, "products__v0003", products)
    data, vectors = products
    rows = {r["id"]: r for r in data.to_pylist()}
    cutoff = dt.date(2022, 1, 1)
    epoch = int(dt.datetime(cutoff.year, cutoff.month, cutoff.day, tzinfo=dt.UTC).timestamp())
    expr = f'brand in ["Sony", "Bose"] and price < 300 and release_date >= {epoch} and in_stock == true'
    want = {i for i, r in rows.items() if r["brand"] in ("Sony", "Bose") and r["price"] < 300
            and r["release_date"] >= cutoff and r["in_stock"]}  # fmt: skip
    hits = store.search("products__v0003", "review", vectors["review"][:2], N, filter=expr)
    assert want and all({i for i, _ in row} == want for row in hits)
    with pytest.raises(StoreError) as err:
        store.search("products__v0003", "review", vectors["review"][:1], 3, filter="no_such_field == 1")
    assert err.value.code == "vector_search"


def test_fetch_vectors_returns_what_was_stored(store: MilvusStore, products: Any) -> None:
    _load(store, "products__v0004", products)
    data, vectors = products
    ids = data.column("id").to_pylist()
    got = store.fetch_vectors("products__v0004", "image", [ids[5], "P99999", ids[0]])
    assert set(got) == {ids[5], ids[0]}
    np.testing.assert_allclose(got[ids[5]], vectors["image"][5], atol=1e-6)
    assert store.fetch_vectors("products__v0004", "image", []) == {}


def test_a_bulk_load_is_indexed_and_loaded_by_flush(store: MilvusStore, products: Any) -> None:
    """The build's plan: no index and nothing loaded until flush, fresh rows inserted, a re-sent chunk upserted."""
    data, vectors = products
    name = "products__v0006"
    store.drop_collection(name)
    store.create_collection(name, PRODUCTS, {f: DIM for f in PRODUCTS.vector_fields}, plan=BULK_LOAD)
    cut = 70
    store.write(
        name,
        PRODUCTS,
        data.slice(0, cut),
        {f: v[:cut] for f, v in vectors.items()},
        fresh=True,
        plan=BULK_LOAD,
    )
    # A resumed build re-sends the chunk it was writing when it was killed: upserted, never duplicated.
    again = slice(cut - 20, N)
    store.write(
        name,
        PRODUCTS,
        data.slice(cut - 20),
        {f: v[again] for f, v in vectors.items()},
        fresh=False,
        plan=BULK_LOAD,
    )
    times = store.flush(name)
    assert store.field_counts(name) == dict.fromkeys(PRODUCTS.vector_fields, N)
    assert (times.index_s > 0) == (times.load_s > 0) == (not store.lite)
    ids = data.column("id").to_pylist()
    row = store.search(name, "title", vectors["title"][[5]], 5)[0]
    assert row[0][1] == pytest.approx(1.0, abs=1e-4)
    assert ids[5] in [i for i, s in row if s == pytest.approx(row[0][1], abs=1e-4)]
    store.flush(name)  # a second flush finds the index there
    assert store.count(name) == N
    store.drop_collection(name)


def test_a_plan_that_loads_an_unindexed_collection_is_refused() -> None:
    with pytest.raises(ConfigError, match="load_first needs index_first"):
        LoadPlan(index_first=False)
    with pytest.raises(ConfigError, match="rows_per_request"):
        LoadPlan(rows_per_request=0)
    assert BULK_LOAD.insert and not (BULK_LOAD.load_first or BULK_LOAD.auto_compaction)
    assert LoadPlan() == INTERACTIVE


def test_index_types_are_checked_against_what_the_target_builds() -> None:
    lite = supported_index_types(lite=True)
    assert {"FLAT", "AUTOINDEX"} <= set(lite)
    for bad in ("IVF_PQ", "DISKANN", "SCANN", "nonsense"):
        with pytest.raises(ConfigError) as err:
            check_index_config(MilvusConfig(index_type=bad), lite=True)
        assert err.value.code == "index_type" and "FLAT" in err.value.message
    check_index_config(MilvusConfig(index_type="DISKANN"), lite=False)
    with pytest.raises(ConfigError):
        check_index_config(MilvusConfig(metric_type="HAMMING"), lite=True)


@pytest.mark.parametrize(
    "index_type,params", [("IVF_FLAT", {"nlist": 8}), ("HNSW", {"M": 8, "efConstruction": 32})]
)
def test_faiss_index_types_build_and_search_on_lite(
    tmp_path: Path, products: Any, index_type: str, params: dict[str, Any]
) -> None:
    if index_type not in supported_index_types(lite=True):
        pytest.skip(f"{index_type} needs faiss-cpu, which is not installed")
    cfg = MilvusConfig(index_type=index_type, index_params=params, search_params={"nprobe": 8, "ef": 64})
    store = MilvusStore(str(tmp_path / "milvus.db"), cfg)
    _load(store, "products__v0001", products)
    data, vectors = products
    hits = store.search("products__v0001", "description", vectors["description"][:4], 3)
    assert [row[0][0] for row in hits] == data.column("id").to_pylist()[:4]


def test_l2_metric_still_ranks_best_first(tmp_path: Path, products: Any) -> None:
    store = MilvusStore(str(tmp_path / "milvus.db"), MilvusConfig(metric_type="L2"))
    _load(store, "products__v0001", products)
    hits = store.search("products__v0001", "description", products[1]["description"][:1], 4)[0]
    assert hits[0][0] == "P00000" and hits[0][1] == pytest.approx(0.0, abs=1e-4)
    assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)


def test_unreachable_server_is_a_retryable_typed_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreUnavailable) as err:
        MilvusStore(f"http://127.0.0.1:{port}")
    assert err.value.retryable


def test_vector_field_names() -> None:
    assert vector_field("title") == "title_vec"


def test_search_parameters_follow_the_index_type() -> None:
    assert search_params(MilvusConfig(index_type="HNSW", ef=64), 20) == {"ef": 64}
    assert search_params(MilvusConfig(index_type="HNSW", search_params={"ef": 8}), 20) == {"ef": 20}
    assert search_params(MilvusConfig(index_type="IVF_SQ8", nprobe=4, ef=64), 20) == {"nprobe": 4}
    assert search_params(
        MilvusConfig(index_type="FLAT", nprobe=4, ef=64, search_params={"radius": 0.1}), 5
    ) == {"radius": 0.1}


@pytest.mark.server
def test_nprobe_reaches_the_server(milvus_standalone: str) -> None:
    """With IVF_FLAT, probing every cluster is exact and probing one is not: the parameter is applied."""
    rng = np.random.default_rng(3)
    n, dim = 3000, 16  # Milvus indexes segments of 1024 rows and more; smaller ones are searched exactly
    fields = (
        Field("id", Role.STRUCTURED, DType.STRING, "row id"),
        Field("text", Role.TEXT, DType.STRING, "text"),
    )
    schema = CorpusSchema("probe", "probe", fields, "r")  # an id and one vector field
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    table = pa.table({"id": [f"r{i:05d}" for i in range(n)]})
    queries = vecs[:8]
    exact = np.argsort(-(queries @ vecs.T), axis=1)[:, :50]
    want = [[f"r{i:05d}" for i in row] for row in exact]
    ivf = MilvusConfig(index_type="IVF_FLAT", index_params={"nlist": 32})
    with MilvusStore(milvus_standalone, replace(ivf, nprobe=32)) as everything:
        everything.drop_collection("probe__v0001")
        everything.create_collection("probe__v0001", schema, {"text": dim})
        everything.upsert("probe__v0001", schema, table, {"text": vecs})
        everything.flush("probe__v0001")  # waits until the index covers every row
        # Searched segments switch to their index when it is loaded: load them anew.
        everything.release("probe__v0001")
        got = [[i for i, _ in row] for row in everything.search("probe__v0001", "text", queries, 50)]
        assert got == want
        with MilvusStore(milvus_standalone, replace(ivf, nprobe=1)) as one:
            narrow = [[i for i, _ in row] for row in one.search("probe__v0001", "text", queries, 50)]
        recall = np.mean([len(set(a) & set(b)) / 50 for a, b in zip(narrow, want, strict=True)])
        assert recall < 0.9
        everything.drop_collection("probe__v0001")
