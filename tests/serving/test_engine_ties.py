"""Ties at a dense search's cut are broken by id, as the ranking contract says, on the real stores: Milvus
Lite (FLAT, every metric) and the Milvus standalone server (HNSW), checked against scores computed here
from the embedder's own vectors; and through the engine, a placeholder's set is the same whichever order
the corpus was indexed in."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from indexing.config import Config, MilvusConfig
from indexing.embedders.hashing import HashingEmbedder
from indexing.schema import PRODUCTS
from indexing.stores.milvus import MilvusStore
from serving.engine import Engine
from serving.engine.pushdown import id_at_most
from serving.engine.retrieval import SCORE_DECIMALS, SCORE_TOLERANCE, WIDTH_MARGIN, RetrievalRequest
from serving.engine.ties import BAND_LIMIT
from serving.settings import PlanningOptions

N = 400
TIED = "red kettle"
"""The title of every third product: a band of equal scores far wider than any cut."""
DIM = 32


def tied_table(synthetic_table: Callable[..., Any], n: int = N) -> pa.Table:
    """``n`` synthetic products; every third one titled :data:`TIED`, the rest keep their own titles."""
    table = synthetic_table("ecommerce", n, seed=3)
    titles = [TIED if i % 3 == 0 else t for i, t in enumerate(table.column("title").to_pylist())]
    return table.set_column(table.schema.get_field_index("title"), "title", pa.array(titles))


def scores_of(table: pa.Table, query: str, metric: str) -> dict[str, float]:
    """Every product's score for ``query`` on ``title``, computed here from the hashing vectors."""
    emb = HashingEmbedder(DIM)
    docs = np.asarray(emb.embed(table.column("title").to_pylist()), dtype=np.float64)
    q = np.asarray(emb.embed([query]), dtype=np.float64)[0]
    if metric == "L2":
        values = -((docs - q) ** 2).sum(axis=1)  # Milvus' L2 distance is squared; a score is its opposite
    elif metric == "COSINE":
        values = docs @ q / (np.linalg.norm(docs, axis=1) * np.linalg.norm(q))
    else:
        values = docs @ q
    return dict(zip(table.column("id").to_pylist(), values.tolist(), strict=True))


def contract_top(scores: dict[str, float], k: int) -> list[str]:
    """The ``k`` best ids by (score at the engine's precision, then id): the ranking contract's cut."""
    return sorted(scores, key=lambda d: (-round(scores[d], SCORE_DECIMALS), d))[:k]


def load(store: MilvusStore, name: str, table: pa.Table) -> None:
    emb = HashingEmbedder(DIM)
    store.drop_collection(name)
    store.create_collection(name, PRODUCTS, {f: DIM for f in PRODUCTS.vector_fields})
    store.upsert(
        name, PRODUCTS, table, {f: emb.embed(table.column(f).to_pylist()) for f in PRODUCTS.vector_fields}
    )
    store.flush(name)


def check_band(store: MilvusStore, name: str, table: pa.Table, metric: str) -> None:
    """``search_band`` returns exactly the products scoring in the band, and an id bound narrows it."""
    load(store, name, table)
    scores = scores_of(table, TIED, metric)
    top = round(max(scores.values()), SCORE_DECIMALS)
    half = 0.5 * SCORE_TOLERANCE
    band = {d for d, s in scores.items() if round(s, SCORE_DECIMALS) == top}
    assert len(band) == len(range(0, N, 3))  # every tied title, and no other
    q = np.asarray(HashingEmbedder(DIM).embed([TIED]))[0]
    got = store.search_band(name, "title", q, top - half, top + half, BAND_LIMIT)
    assert {d for d, _ in got} == band
    assert all(round(s, SCORE_DECIMALS) == top for _, s in got)
    bound = sorted(band)[9]
    below = store.search_band(name, "title", q, top - half, top + half, BAND_LIMIT, filter=id_at_most(bound))
    assert sorted(d for d, _ in below) == sorted(band)[:10]
    assert len(store.search_band(name, "title", q, top - half, top + half, 7)) == 7


@pytest.mark.parametrize("metric", ["COSINE", "IP", "L2"])
def test_a_band_search_returns_exactly_the_tied_products_on_milvus_lite(
    tmp_path: Path, synthetic_table: Callable[..., Any], metric: str
) -> None:
    with MilvusStore(
        str(tmp_path / "milvus.db"), MilvusConfig(index_type="FLAT", metric_type=metric)
    ) as store:
        check_band(store, "ties__v0001", tied_table(synthetic_table), metric)


@pytest.mark.server
def test_a_band_search_returns_exactly_the_tied_products_on_the_milvus_server(
    milvus_standalone: str, synthetic_table: Callable[..., Any]
) -> None:
    name = "ties__v0001"
    with MilvusStore(
        milvus_standalone,
        MilvusConfig(
            index_type="HNSW",
            metric_type="COSINE",
            ef=64,  # M and efConstruction: the store's HNSW defaults
        ),
    ) as store:
        try:
            check_band(store, name, tied_table(synthetic_table), "COSINE")
        finally:
            store.drop_collection(name)


@pytest.fixture(scope="module")
def two_builds(
    workspace_config: Callable[..., Config], synthetic_table: Callable[..., Any]
) -> tuple[Config, Config, pa.Table]:
    """The same corpus indexed twice (Milvus Lite, FLAT), its rows written in opposite orders."""
    from indexing.build import build_index
    from indexing.corpora.files import write_corpus
    from indexing.workspace import Workspace

    table = tied_table(synthetic_table)
    builds = []
    for name, rows in (("ties_fwd", table), ("ties_rev", table.take(list(range(N - 1, -1, -1))))):
        cfg = workspace_config(name, milvus=MilvusConfig(index_type="FLAT"), text="hashing", image="hashing",
                               hashing_dim=DIM)  # fmt: skip
        write_corpus(Workspace(cfg.workspace), PRODUCTS, [rows], {"generator": "synthetic", "seed": 3})
        build_index(cfg, "ecommerce", progress=False)
        builds.append(cfg)
    return builds[0], builds[1], table


def resolve(cfg: Config, k: int, exact: bool) -> tuple[list[str], Counter[str]]:
    with Engine.open(cfg, "ecommerce", planning=PlanningOptions(exact_ties=exact)) as engine:
        req = RetrievalRequest("title", "dense", TIED, k, 0)
        hits = engine.retriever.resolve([req], {})[req]
        return [d for d, _ in hits], engine.retriever.calls


@pytest.mark.parametrize("k", [3, 20, 50])
def test_a_placeholders_set_is_the_contracts_cut_whatever_order_the_corpus_was_indexed_in(
    two_builds: tuple[Config, Config, pa.Table], k: int
) -> None:
    forward, backward, table = two_builds
    want = contract_top(scores_of(table, TIED, "COSINE"), k)
    for cfg in (forward, backward):
        got, calls = resolve(cfg, k, exact=True)
        assert got == want
        assert calls["band"] >= 1 and calls["ties_settled"] == 1 and not calls["ties_unsettled"]


def test_a_tie_inside_the_margin_costs_no_band_search(two_builds: tuple[Config, Config, pa.Table]) -> None:
    forward, _, table = two_builds
    scores = scores_of(table, TIED, "COSINE")
    k = len(range(0, N, 3))  # the whole band fits under the cut: nothing tied is cut
    got, calls = resolve(forward, k, exact=True)
    assert got == contract_top(scores, k) and not calls["band"]
    assert k + WIDTH_MARGIN < N


def test_left_to_the_store_the_cut_is_some_of_the_band(two_builds: tuple[Config, Config, pa.Table]) -> None:
    """Without ``exact_ties`` the engine keeps whichever tied products the store returned (the behaviour the
    option exists to compare against): all of them tied, none settled."""
    forward, _, table = two_builds
    scores = scores_of(table, TIED, "COSINE")
    got, calls = resolve(forward, 20, exact=False)
    top = round(max(scores.values()), SCORE_DECIMALS)
    assert len(got) == 20 and all(round(scores[d], SCORE_DECIMALS) == top for d in got)
    assert not calls["band"] and not calls["ties_settled"]
