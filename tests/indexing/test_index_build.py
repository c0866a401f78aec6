"""Versioned index builds on the real engines: exact counts, idempotence, versions, readers, servers."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")

from indexing.build import build_index, list_versions, store_counts
from indexing.config import ClickHouseConfig, Config, MilvusConfig
from indexing.errors import StoreError
from indexing.index import open_index, read_current
from indexing.schema import schema_for
from indexing.stores.clickhouse import make_sql_store
from indexing.stores.milvus import make_vector_store
from indexing.workspace import Workspace

Factory = Callable[..., Config]


def _counts(cfg: Config, domain: str, version: str) -> dict[str, int]:
    return store_counts(
        cfg,
        Workspace(cfg.workspace),
        schema_for(domain),
        version,
        make_sql_store(cfg),
        make_vector_store(cfg),
    )


def _with_dim(cfg: Config, dim: int) -> Config:
    return cfg.replace(embedder=dataclasses.replace(cfg.embedder, hashing_dim=dim))


@pytest.fixture(scope="module")
def built(workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]) -> Config:
    """450 products and 200 emails in chunks of 100, indexed with the hashing embedder."""
    cfg = workspace_config("built", text="hashing", image="hashing", hashing_dim=256)
    write_synthetic_corpus(cfg, "ecommerce", 450, chunk=150)
    write_synthetic_corpus(cfg, "email", 200)
    first = build_index(cfg, "ecommerce", batch_rows=100, progress=False)
    assert (first.status, first.version, first.rows, first.rows_written) == ("built", "v0001", 450, 450)
    assert build_index(cfg, "email", batch_rows=64, progress=False).rows == 200
    return cfg


def test_every_store_holds_exactly_the_corpus(built: Config) -> None:
    for domain, rows in (("ecommerce", 450), ("email", 200)):
        counts = _counts(built, domain, "v0001")
        assert set(counts.values()) == {rows}, counts
        assert len(counts) == 3 + len(schema_for(domain).vector_fields)
    assert read_current(Workspace(built.workspace), "ecommerce") == "v0001"


def test_rerun_is_idempotent(built: Config) -> None:
    ws = Workspace(built.workspace)
    before = sorted(p.name for p in ws.index_root("ecommerce").iterdir())
    again = build_index(built, "ecommerce", batch_rows=37, progress=False)  # chunking is not a setting
    assert (again.status, again.version, again.rows_written) == ("up_to_date", "v0001", 0)
    assert "nothing changed" in again.summary()
    assert sorted(p.name for p in ws.index_root("ecommerce").iterdir()) == before
    assert _counts(built, "ecommerce", "v0001")["clickhouse"] == 450


def test_handle_searches_and_fetches(built: Config, synthetic_table: Callable[..., Any]) -> None:
    data = synthetic_table("ecommerce", 450)
    rows = data.to_pylist()
    idx = open_index(built, "ecommerce")
    assert (idx.version, idx.table, idx.collection) == (
        "v0001",
        f"{built.clickhouse.database}.products__v0001",
        "products__v0001",
    )
    assert idx.schema.domain == "ecommerce" and idx.rows == 450
    # The description names the item number: dense (hashing) and sparse both find the document.
    queries = [rows[i]["description"] for i in (4, 250, 449)]
    for hits, want in zip(idx.dense_search("description", queries, 3), (4, 250, 449), strict=True):
        assert hits[0][1] == pytest.approx(1.0, abs=1e-4)
        assert rows[want]["id"] in [i for i, s in hits if s == pytest.approx(1.0, abs=1e-4)]
    for hits, want in zip(idx.sparse_search("description", queries, 3), (4, 250, 449), strict=True):
        assert hits[0][0] == rows[want]["id"]
    sony = idx.dense_search("review", ["great noise cancelling"], 500, filter='brand == "Sony"')[0]
    assert sony and {r["brand"] for r in idx.fetch_docs([i for i, _ in sony], ["brand"])} == {"Sony"}
    docs = idx.fetch_docs(["P00009", "nope", "P00002", "P00009"], ["price", "release_date", "title"])
    assert [d["id"] for d in docs] == ["P00009", "P00002", "P00009"]
    assert docs[1] == {k: rows[2][k] for k in ("id", "price", "release_date", "title")}
    assert idx.fetch_docs([], ["title"]) == []
    assert idx.embedder("title") is idx.embedder("review") and idx.embedder("title").dim == 256
    with pytest.raises(Exception) as err:
        idx.dense_search("price", ["x"], 3)
    assert getattr(err.value, "code", None) == "not_vector_field"
    idx.close()


def test_a_build_of_the_same_corpus_elsewhere_reads_every_vector_from_the_vector_cache(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any], tmp_path: Path
) -> None:
    cache = tmp_path / "vectors"
    embedder = {"text": "hashing", "image": "hashing", "hashing_dim": 64, "vector_cache": str(cache)}
    first = workspace_config("cached_a", **embedder)
    second = workspace_config("cached_b", **embedder)
    for cfg in (first, second):
        write_synthetic_corpus(cfg, "ecommerce", 300, chunk=300)
    assert build_index(first, "ecommerce", batch_rows=100, progress=False).rows == 300
    entries = sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file())
    fields = len(schema_for("ecommerce").vector_fields)
    assert len([p for p in entries if p.name == "output.pkl"]) == 3 * fields  # 3 chunks of 100
    # the same corpus into another workspace: every chunk's vectors are read, none written
    assert build_index(second, "ecommerce", batch_rows=100, progress=False).rows == 300
    assert sorted(p.relative_to(cache) for p in cache.rglob("*") if p.is_file()) == entries
    queries = ["A speaker by Sony, item 17", "great noise cancelling"]
    with open_index(first, "ecommerce") as a, open_index(second, "ecommerce") as b:
        for field in ("description", "review"):
            assert a.dense_search(field, queries, 5) == b.dense_search(field, queries, 5)


def test_handle_uses_the_embedder_the_version_was_built_with(built: Config) -> None:
    other = built.replace(embedder=dataclasses.replace(built.embedder, text="minilm", image="minilm"))
    idx = open_index(other, "email")
    assert idx.embedder("subject").name == "hashing-256"
    assert len(idx.dense_search("subject", ["lunch plans"], 5)[0]) == 5


def test_open_index_errors(built: Config, workspace_config: Factory) -> None:
    with pytest.raises(StoreError) as none:
        open_index(workspace_config("empty"), "ecommerce")
    assert none.value.code == "no_index" and "prore index build ecommerce" in none.value.message
    with pytest.raises(StoreError) as missing:
        open_index(built, "ecommerce", version="v0042")
    assert missing.value.code == "no_index"


def test_new_settings_make_a_new_version_keep_one_previous_and_drop_older(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    cfg = workspace_config("versions", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "email", 150)
    ws = Workspace(cfg.workspace)
    assert build_index(cfg, "email", progress=False).version == "v0001"
    assert build_index(_with_dim(cfg, 48), "email", progress=False).version == "v0002"
    assert list_versions(ws, "email") == ["v0001", "v0002"]
    third = build_index(_with_dim(cfg, 40), "email", progress=False)
    assert (third.version, third.dropped) == ("v0003", ("v0001",))
    assert list_versions(ws, "email") == ["v0002", "v0003"]
    sql, vec = make_sql_store(cfg), make_vector_store(cfg)
    assert not sql.table_exists(f"{cfg.clickhouse.database}.emails__v0001")
    assert not vec.has_collection("emails__v0001")
    # Going back to the previous settings republishes the kept version without rewriting it.
    back = build_index(_with_dim(cfg, 48), "email", progress=False)
    assert (back.version, back.status, back.rows_written) == ("v0002", "resumed", 0)
    assert read_current(ws, "email") == "v0002"
    assert open_index(cfg, "email").embedder("body").dim == 48


def test_reader_sees_the_old_version_until_publish(
    workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    cfg = workspace_config("readers", text="hashing", image="hashing", hashing_dim=32)
    write_synthetic_corpus(cfg, "ecommerce", 300)
    build_index(cfg, "ecommerce", progress=False)
    old = open_index(cfg, "ecommerce")
    seen: list[tuple[str, int, int]] = []

    def peek(chunk: int) -> None:
        idx = open_index(cfg, "ecommerce")
        hits = idx.dense_search("title", ["Sony headphones in black"], 400)[0]
        seen.append((idx.version, len(hits), idx.sql.count(idx.table)))

    # A corpus change makes a new version; readers keep getting the whole old one meanwhile.
    write_synthetic_corpus(cfg, "ecommerce", 350, seed=1)
    new = build_index(cfg, "ecommerce", batch_rows=100, progress=False, on_chunk=peek)
    assert len(seen) == 4 and set(seen) == {("v0001", 300, 300)}
    assert open_index(cfg, "ecommerce").version == new.version == "v0002"
    assert old.fetch_docs(["P00001"], ["title"])  # the previous version stays readable
    assert old.sql.count(old.table) == 300


def test_build_against_servers(
    milvus_server: str, chdb_path: Any, workspace_config: Factory, write_synthetic_corpus: Callable[..., Any]
) -> None:
    base = workspace_config("servers", text="hashing", image="hashing", hashing_dim=32)
    cfg = base.replace(
        clickhouse=ClickHouseConfig(url=f"chdb://{chdb_path.resolve()}", database=base.clickhouse.database),
        milvus=MilvusConfig(uri=milvus_server),
    )
    write_synthetic_corpus(cfg, "email", 180)
    result = build_index(cfg, "email", batch_rows=50, progress=False)
    assert set(_counts(cfg, "email", result.version).values()) == {180}
    assert open_index(cfg, "email").dense_search("body", ["server outage"], 3)[0]


@pytest.mark.slow
def test_small_index_fixture_with_generated_corpora_and_minilm(small_index_cfg: Config) -> None:
    for domain in ("ecommerce", "email"):
        idx = open_index(small_index_cfg, domain)
        assert set(_counts(small_index_cfg, domain, idx.version).values()) == {600}
        field = idx.schema.text_fields[-1]
        doc = idx.fetch_docs([f"{idx.schema.id_prefix}00007"], [field]) or idx.fetch_docs(
            [r[0] for r in idx.sql.query(f"SELECT id FROM {idx.table} ORDER BY id LIMIT 1")], [field]
        )
        hits = idx.dense_search(field, [doc[0][field]], 5)[0]
        assert hits[0][0] == doc[0]["id"]
        assert idx.embedder(field).name == "minilm"
