"""Store lifetimes on the real engines: one Milvus client per URI closed with its last store, server stores own theirs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")

from indexing.config import ClickHouseConfig, Config
from indexing.errors import StoreError
from indexing.stores.clickhouse import make_sql_store
from indexing.stores.milvus import make_vector_store, milvus_uri, open_connections

Factory = Callable[..., Config]


def test_stores_share_one_client_per_uri_and_close_it_with_the_last(
    workspace_config: Factory, chdb_path: Any
) -> None:
    cfg = workspace_config("clients")
    uri = milvus_uri(cfg)
    a, b = make_vector_store(cfg), make_vector_store(cfg)
    assert open_connections()[uri] == 2
    a.close()
    a.close()  # twice releases once
    assert open_connections()[uri] == 1 and b.list_collections() == []
    with pytest.raises(StoreError) as closed:
        a.list_collections()
    assert closed.value.code == "store_closed"
    b.close()
    assert uri not in open_connections()
    server = cfg.replace(clickhouse=ClickHouseConfig(url=f"chdb://{chdb_path.resolve()}"))
    with make_sql_store(server) as one:
        with make_sql_store(server) as two:  # each server store owns its client
            assert two is not one and two.query("SELECT 1") == [(1,)]
        assert one.query("SELECT 2") == [(2,)]
