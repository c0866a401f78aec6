"""ClickHouse stores against a real engine: chDB directly, and clickhouse-connect over chDB."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("clickhouse_connect", reason="needs the clickhouse extra")

from core.errors import ConfigError
from indexing.config import ClickHouseConfig, Config
from indexing.errors import StoreError
from indexing.schema import EMAILS, PRODUCTS
from indexing.stores.clickhouse import (
    ChdbStore,
    ClickHouseServerStore,
    chdb_bound_path,
    create_table_sql,
    make_sql_store,
)


@pytest.fixture(params=["chdb", "clickhouse-connect"])
def store(request: pytest.FixtureRequest, chdb_path: Path) -> Any:
    """Each test runs on both code paths; both share the process's one chDB path."""
    cfg = ClickHouseConfig(database="stores_ch", max_result_rows=1000)
    if request.param == "chdb":
        return ChdbStore(chdb_path, cfg)
    return ClickHouseServerStore(f"chdb://{chdb_path.resolve()}", cfg)


def _fresh(store: Any, schema: Any, name: str) -> str:
    table = f"stores_ch.{name}"
    store.drop_table(table)
    store.create_table(schema, table)
    return table


def test_table_is_typed_from_the_schema(store: Any, synthetic_table: Callable[..., Any]) -> None:
    table = _fresh(store, PRODUCTS, f"types_{type(store).__name__}")
    ddl = create_table_sql(PRODUCTS, table)
    assert "ORDER BY id" in ddl and "`release_date` Date" in ddl and "`in_stock` Bool" in ddl
    cols = dict(
        store._trusted(
            f"SELECT name, type FROM system.columns WHERE database = 'stores_ch' AND table = '{table.split('.')[1]}'"
        )
    )
    assert cols["price"] == "Float64" and cols["review_count"] == "Int64" and cols["title"] == "String"
    store.insert_arrow(table, synthetic_table("ecommerce", 50))
    assert store.count(table) == 50 and store.distinct_ids(table) == 50
    assert store.table_exists(table) and not store.table_exists("stores_ch.nope")
    store.drop_table(table)
    assert not store.table_exists(table)


def test_values_round_trip_with_python_types(store: Any, synthetic_table: Callable[..., Any]) -> None:
    table = _fresh(store, EMAILS, f"emails_{type(store).__name__}")
    data = synthetic_table("email", 20, seed=3)
    store.insert_arrow(table, data)
    want = {r["id"]: r for r in data.to_pylist()}
    rows = store.query(
        f"SELECT id, date, is_read, sender FROM {table} WHERE id IN {{ids:Array(String)}} ORDER BY id",
        params={"ids": ["E00003", "E00007", "nope"]},
    )
    assert [r[0] for r in rows] == ["E00003", "E00007"]
    for rid, date, is_read, sender in rows:
        assert date == want[rid]["date"] and isinstance(date, dt.datetime) and date.tzinfo is None
        assert is_read is want[rid]["is_read"]
        assert sender == want[rid]["sender"]


def test_parameters_are_bound_not_pasted(store: Any, synthetic_table: Callable[..., Any]) -> None:
    table = _fresh(store, PRODUCTS, f"quote_{type(store).__name__}")
    store.insert_arrow(table, synthetic_table("ecommerce", 60))
    n = store.query(f"SELECT count() FROM {table} WHERE brand = {{b:String}}", params={"b": "Levi's"})[0][0]
    direct = store._trusted(f"SELECT countIf(brand = 'Levi\\'s') FROM {table}")[0][0]
    assert n == direct and n > 0
    hostile = "x') OR 1=1 --"
    assert store.query(
        f"SELECT count() FROM {table} WHERE id IN {{ids:Array(String)}}", params={"ids": [hostile]}
    ) == [(0,)]


def test_queries_are_read_only_and_limited(store: Any, synthetic_table: Callable[..., Any]) -> None:
    table = _fresh(store, PRODUCTS, f"limits_{type(store).__name__}")
    store.insert_arrow(table, synthetic_table("ecommerce", 30))
    # The engine itself runs the query under the limits and read-only, whatever the caller asks.
    applied = store.query(
        "SELECT getSetting('readonly'), getSetting('max_result_rows'), getSetting('max_rows_to_read'), "
        "getSetting('max_memory_usage'), getSetting('max_execution_time')",
        settings={"readonly": 0, "max_rows_to_read": 777},
    )
    assert applied[0][:4] == (1, 1000, 777, 2_000_000_000) and float(applied[0][4]) == 5.0
    for write in (f"DROP TABLE {table}", f"INSERT INTO {table} SELECT * FROM {table}", "CREATE DATABASE x"):
        with pytest.raises(StoreError) as ro:
            store.query(write)
        assert ro.value.code == "sql_readonly"
    with pytest.raises(StoreError) as rows:
        store.query(f"SELECT id FROM {table}", settings={"max_result_rows": 5})
    assert rows.value.code == "sql_limit"
    with pytest.raises(StoreError) as scanned:
        store.query(f"SELECT id FROM {table}", settings={"max_rows_to_read": 3})
    assert scanned.value.code == "sql_limit"
    with pytest.raises(StoreError) as bad:
        store.query("SELECT FROM WHERE")
    assert bad.value.code == "sql" and "\n" not in bad.value.one_line()
    # A failed query leaves nothing behind: the next answers are exact.
    assert store.count(table) == 30
    assert store.query(f"SELECT count() FROM {table} WHERE id = {{i:String}}", params={"i": "P00001"}) == [
        (1,)
    ]


def test_delete_ids_removes_exactly_those_rows(store: Any, synthetic_table: Callable[..., Any]) -> None:
    table = _fresh(store, PRODUCTS, f"delete_{type(store).__name__}")
    data = synthetic_table("ecommerce", 40)
    store.insert_arrow(table, data)
    store.insert_arrow(table, data.slice(0, 10))  # a chunk that landed twice
    assert store.count(table) == 50 and store.distinct_ids(table) == 40
    store.delete_ids(table, data.column("id").to_pylist()[:10])
    store.insert_arrow(table, data.slice(0, 10))
    assert store.count(table) == 40 and store.distinct_ids(table) == 40
    assert store.list_tables("stores_ch", f"delete_{type(store).__name__}") == [table.split(".")[1]]


def test_chdb_binds_one_path_per_process(chdb_path: Path, tmp_path: Path) -> None:
    ChdbStore(chdb_path)
    assert chdb_bound_path() == chdb_path.resolve()
    with pytest.raises(StoreError) as err:
        ChdbStore(tmp_path / "elsewhere")
    assert err.value.code == "chdb_path"
    assert str(chdb_path.resolve()) in err.value.message


def test_a_path_held_by_another_process_is_named_as_such(chdb_path: Path) -> None:
    """chDB opens a path from one process at a time; a second process (an evaluation beside a running
    reward service) gets one line that says so, not chDB's generic first line."""
    ChdbStore(chdb_path)  # this process holds the path
    code = ("from indexing.errors import StoreError\nfrom indexing.stores.clickhouse import ChdbStore\n"
            f"try:\n    ChdbStore({str(chdb_path)!r})\nexcept StoreError as e:\n    print(e.code, e.message)")  # fmt: skip
    got = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    line = got.stdout.strip()
    assert line.startswith(f"chdb_path cannot open chDB at {chdb_path.resolve()}: another process holds it")
    assert "--clickhouse-url" in line and len(line.splitlines()) == 1


def test_factory_picks_by_config(chdb_path: Path, tmp_path: Path) -> None:
    embedded = make_sql_store(
        Config(workspace=tmp_path, clickhouse=ClickHouseConfig(chdb_path=str(chdb_path)))
    )
    assert isinstance(embedded, ChdbStore)
    server = make_sql_store(
        Config(workspace=tmp_path, clickhouse=ClickHouseConfig(url=f"chdb://{chdb_path.resolve()}"))
    )
    assert isinstance(server, ClickHouseServerStore)
    assert server.query("SELECT 1 + 1") == [(2,)]
    with pytest.raises(StoreError) as err:
        make_sql_store(Config(workspace=tmp_path))  # would need <tmp_path>/chdb: a second path
    assert err.value.code == "chdb_path"


def test_server_credentials_come_from_the_environment(
    chdb_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CLICKHOUSE_USER / CLICKHOUSE_PASSWORD reach clickhouse-connect (chDB has no users and ignores them); a
    password without a user is a one-line configuration error that names no password."""
    monkeypatch.setenv("CLICKHOUSE_USER", "reader")
    monkeypatch.setenv("CLICKHOUSE_PASSWORD", "s3cret")
    store = ClickHouseServerStore(f"chdb://{chdb_path.resolve()}")
    assert store.query("SELECT 1 AS one") == [(1,)]
    monkeypatch.delenv("CLICKHOUSE_USER")
    with pytest.raises(ConfigError) as err:
        ClickHouseServerStore("http://127.0.0.1:1")
    assert str(err.value) == "CLICKHOUSE_PASSWORD is set without CLICKHOUSE_USER"
