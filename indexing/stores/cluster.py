"""Corpus tables of a sharded ClickHouse cluster, from the same DDL as the embedded store's.

For a cluster (the ClickHouseInstallation of ``platform/``: N shards x 2 replicas with Keeper), a corpus
table ``db.products`` becomes two tables, both created ``ON CLUSTER``:

- ``db.products_local`` on every node: ``ReplicatedMergeTree`` (the replicas of a shard copy each other
  through Keeper), the columns and ``ORDER BY`` of :func:`~indexing.stores.clickhouse.create_table_sql`;
- ``db.products``: a ``Distributed`` table over the local ones with a sharding key, the name programs run
  against, so the engine's SQL is the same on one node and on a cluster.

Both take the column list and ``ORDER BY`` of :func:`~indexing.stores.clickhouse.create_table_sql`'s own
statement verbatim, so a column added there reaches the cluster too (and a change of that statement's
shape fails loudly here instead of being guessed). :func:`single_node_ddl` is the same pair
for one server (chDB in tests): a plain ``MergeTree`` local table and a ``Merge`` table under the
distributed name, which reads the local table as ``Distributed`` reads its shards.

>>> from indexing.schema import schema_for
>>> local, dist = cluster_ddl(schema_for("email"), "corpus.emails", ClusterLayout("proretrieval"))
>>> local.split(" (")[0]
'CREATE TABLE IF NOT EXISTS corpus.emails_local ON CLUSTER proretrieval'
>>> dist.rsplit(") ", 1)[1]
'ENGINE = Distributed(proretrieval, corpus, emails_local, cityHash64(id))'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import sqlglot

from indexing.errors import StoreError
from indexing.schema import CorpusSchema
from indexing.stores.clickhouse import create_table_sql, ident

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ClusterLayout:
    """How a corpus table is laid out on a cluster."""

    cluster: str
    """Cluster name in ClickHouse's ``remote_servers`` (the ClickHouseInstallation's cluster name)."""
    sharding_key: str = "cityHash64(id)"
    """Expression that picks a row's shard: a hash of the document id spreads documents evenly and keeps
    each document on one shard."""
    local_suffix: str = "_local"
    """Suffix of the per-node table's name."""
    zookeeper_path: str = "/clickhouse/tables/{shard}/{database}/{table}"
    """Keeper path of a shard's replicas; ``{shard}`` and ``{replica}`` are the server's macros (the
    operator sets them), ``{database}`` and ``{table}`` ClickHouse's own."""
    replica_name: str = "{replica}"
    """Replica name in Keeper (the server's ``{replica}`` macro)."""

    def __post_init__(self) -> None:
        if not _NAME.match(self.cluster):
            raise StoreError(f"not a valid cluster name: {self.cluster!r}", code="bad_identifier")
        if not _NAME.match(self.local_suffix.lstrip("_") or "x"):
            raise StoreError(f"not a valid table suffix: {self.local_suffix!r}", code="bad_identifier")
        try:
            sqlglot.parse_one(self.sharding_key, read="clickhouse")
        except sqlglot.errors.ParseError as exc:
            raise StoreError(
                f"sharding key {self.sharding_key!r} does not parse: {exc}", code="bad_sharding_key"
            ) from None


_EMBEDDED = re.compile(r"^CREATE TABLE IF NOT EXISTS (?P<table>\S+) \((?P<columns>.*)\) ENGINE = MergeTree (?P<order>ORDER BY .+)$",
                       re.DOTALL)  # fmt: skip


@dataclass(frozen=True)
class _Parts:
    columns: str
    """The column list exactly as the embedded DDL writes it (types are case-sensitive in ClickHouse)."""
    order: str


def _split(table: str) -> tuple[str | None, str]:
    db, _, name = ident(table).rpartition(".")
    return db or None, name


def _parts(schema: CorpusSchema, table: str) -> _Parts:
    ddl = create_table_sql(schema, table)
    m = _EMBEDDED.match(ddl)
    if not m:  # the embedded DDL changed shape: this module must learn it, not guess
        raise StoreError(f"unexpected corpus table DDL: {ddl[:80]!r}", code="cluster_ddl")
    return _Parts(m["columns"], m["order"].strip())


def _db_arg(db: str | None) -> str:
    return db if db else "currentDatabase()"


def local_table_sql(schema: CorpusSchema, table: str, layout: ClusterLayout) -> str:
    """``<table>_local ON CLUSTER``: ReplicatedMergeTree with the embedded table's columns and order."""
    p = _parts(schema, table)
    engine = f"ReplicatedMergeTree('{layout.zookeeper_path}', '{layout.replica_name}')"
    return (f"CREATE TABLE IF NOT EXISTS {ident(table)}{layout.local_suffix} ON CLUSTER {layout.cluster} "
            f"({p.columns}) ENGINE = {engine} {p.order}")  # fmt: skip


def distributed_table_sql(schema: CorpusSchema, table: str, layout: ClusterLayout) -> str:
    """``<table> ON CLUSTER``: Distributed over ``<table>_local`` on every shard, by the sharding key."""
    p = _parts(schema, table)
    db, name = _split(table)
    engine = (
        f"Distributed({layout.cluster}, {_db_arg(db)}, {name}{layout.local_suffix}, {layout.sharding_key})"
    )
    return f"CREATE TABLE IF NOT EXISTS {ident(table)} ON CLUSTER {layout.cluster} ({p.columns}) ENGINE = {engine}"


def cluster_ddl(schema: CorpusSchema, table: str, layout: ClusterLayout) -> tuple[str, str]:
    """The two statements that create corpus table ``table`` on a cluster, local table first."""
    return local_table_sql(schema, table, layout), distributed_table_sql(schema, table, layout)


def single_node_ddl(schema: CorpusSchema, table: str, layout: ClusterLayout) -> tuple[str, str]:
    """The same pair on one server: MergeTree ``<table>_local`` and a Merge table named ``table`` over it."""
    p = _parts(schema, table)
    db, name = _split(table)
    local = f"CREATE TABLE IF NOT EXISTS {ident(table)}{layout.local_suffix} ({p.columns}) ENGINE = MergeTree {p.order}"
    merge = f"Merge({_db_arg(db)}, '^{name}{layout.local_suffix}$')"
    return local, f"CREATE TABLE IF NOT EXISTS {ident(table)} ({p.columns}) ENGINE = {merge}"
