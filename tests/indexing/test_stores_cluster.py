"""Sharded ClickHouse DDL: rendered for a cluster, parsed by ClickHouse itself, and run as its single-node
equivalent on chDB (the cluster form needs Keeper and remote servers, which chDB has not)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")

from indexing.config import ClickHouseConfig
from indexing.errors import StoreError
from indexing.schema import EMAILS, PRODUCTS
from indexing.stores.clickhouse import ChdbStore, create_table_sql
from indexing.stores.cluster import ClusterLayout, cluster_ddl, single_node_ddl

LAYOUT = ClusterLayout("proretrieval")


@pytest.fixture
def store(chdb_path: Path) -> ChdbStore:
    s = ChdbStore(chdb_path, ClickHouseConfig(database="stores_cluster", max_result_rows=1000))
    s.command("CREATE DATABASE IF NOT EXISTS stores_cluster")
    return s


def _columns(ddl: str) -> str:
    return ddl[ddl.index("(") + 1 : ddl.rindex(") ENGINE")]


@pytest.mark.parametrize("schema", [PRODUCTS, EMAILS], ids=lambda s: s.domain)
def test_cluster_ddl_keeps_the_embedded_columns(schema: Any) -> None:
    embedded = create_table_sql(schema, "corpus.t")
    local, dist = cluster_ddl(schema, "corpus.t", LAYOUT)
    cols = _columns(embedded)
    assert _columns(local) == cols and _columns(dist) == cols
    assert "ON CLUSTER proretrieval" in local and "ON CLUSTER proretrieval" in dist
    assert (
        "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/{database}/{table}', '{replica}')" in local
    )
    assert local.rstrip().endswith("ORDER BY id SETTINGS index_granularity = 256")
    assert dist.rstrip().endswith("ENGINE = Distributed(proretrieval, corpus, t_local, cityHash64(id))")
    assert "ORDER BY" not in dist


def test_clickhouse_parses_the_cluster_ddl(store: ChdbStore) -> None:
    for ddl in cluster_ddl(PRODUCTS, "stores_cluster.products", LAYOUT):
        ast = store._trusted(f"EXPLAIN AST {ddl}")
        assert any("CreateQuery" in str(row) for row in ast)


def test_single_node_equivalent_runs_on_chdb(store: ChdbStore, synthetic_table: Callable[..., Any]) -> None:
    table = "stores_cluster.emails"
    for name in (table, table + "_local"):
        store.drop_table(name)
    for ddl in single_node_ddl(EMAILS, table, LAYOUT):
        store.command(ddl)
    store.insert_arrow(table + "_local", synthetic_table("email", 40, seed=1))
    assert store.count(table) == 40
    # programs run against the distributed name, under the read-only limits
    rows = store.query(f"SELECT count() FROM {table} WHERE is_starred OR NOT is_starred")
    assert rows == [(40,)]


def test_a_custom_sharding_key_and_bad_names() -> None:
    layout = ClusterLayout("c2", sharding_key="sipHash64(sender_domain)")
    assert (
        "Distributed(c2, corpus, emails_local, sipHash64(sender_domain))"
        in cluster_ddl(EMAILS, "corpus.emails", layout)[1]
    )
    with pytest.raises(StoreError, match="not a valid cluster name"):
        ClusterLayout("prod; DROP")
    with pytest.raises(StoreError, match="does not parse"):
        ClusterLayout("c", sharding_key="cityHash64(")
