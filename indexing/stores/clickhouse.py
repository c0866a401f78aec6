"""ClickHouse stores: embedded chDB (files in the workspace) or a server through clickhouse-connect.

Corpus tables are ``MergeTree ORDER BY id`` with column types taken from the schema. Every
``query`` runs read-only under the limits of :class:`~indexing.config.ClickHouseConfig`, because
the engine sends SQL written by a model through it.

chDB runs one embedded server per process, bound to one path: :class:`ChdbStore` keeps one
session per process and refuses a second path with a clear :class:`StoreError`.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Self

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.errors import ConfigError, require
from core.logs import drop_messages
from indexing.config import ClickHouseConfig, Config
from indexing.errors import StoreError, StoreUnavailable
from indexing.schema import CorpusSchema, DType, Field
from indexing.stores.clickhouse_faults import first_line, sql_error
from indexing.stores.credentials import Credentials
from indexing.workspace import Workspace

CLICKHOUSE_TYPES: dict[DType, str] = {
    DType.STRING: "String",
    DType.INT: "Int64",
    DType.FLOAT: "Float64",
    DType.BOOL: "Bool",
    DType.DATE: "Date",
    # Corpus datetimes are zone-less wall-clock times (an email's is its sender's local time); naming UTC
    # stores and reads them unshifted whatever the host's zone is.
    DType.DATETIME: "DateTime('UTC')",
}

# clickhouse-connect warns about a failure the store reports as one typed, retryable StoreUnavailable line.
drop_messages("clickhouse_connect.driver._backend.http_sync", "Unexpected Http Driver Exception")

_SELECT_START = re.compile(r"^(\s|--[^\n]*\n|/\*.*?\*/|\()*(SELECT|WITH)\b", re.IGNORECASE | re.DOTALL)
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")


def ident(name: str) -> str:
    """``name`` (``table`` or ``db.table``) if it is a plain identifier; these are never user text."""
    if not _IDENT.match(name):
        raise StoreError(f"not a valid table name: {name!r}", code="bad_identifier")
    return name


def column_type(field: Field) -> str:
    """The ClickHouse type of a schema field."""
    base = CLICKHOUSE_TYPES[field.dtype]
    return f"Nullable({base})" if field.nullable else base


def create_table_sql(
    schema: CorpusSchema, table: str, *, index_granularity: int = ClickHouseConfig.index_granularity
) -> str:
    """DDL of a corpus table: every schema field, typed (``Nullable(T)`` where the schema says so),
    ``MergeTree ORDER BY id`` with ``index_granularity`` rows per granule (see
    :attr:`~indexing.config.ClickHouseConfig.index_granularity`), so ``id IN <ids>`` reads only the
    granules that hold those ids."""
    if isinstance(index_granularity, bool) or not isinstance(index_granularity, int) or index_granularity < 1:
        raise ConfigError(
            f"clickhouse.index_granularity must be a whole number from 1 up, got {index_granularity!r}"
        )
    cols = ",\n  ".join(f"`{f.name}` {column_type(f)}" for f in schema.fields)
    return (
        f"CREATE TABLE IF NOT EXISTS {ident(table)} (\n  {cols}\n) ENGINE = MergeTree ORDER BY id "
        f"SETTINGS index_granularity = {index_granularity}"
    )


@dataclass(frozen=True)
class QueryLimits:
    """The caps an untrusted query runs under; one definition for the stores and the engine.

    Defaults and documentation live in :class:`~indexing.config.ClickHouseConfig`, whose fields of the same
    names are what a user configures.
    """

    max_execution_time_s: float = ClickHouseConfig.max_execution_time_s
    max_rows_to_read: int = ClickHouseConfig.max_rows_to_read
    max_result_rows: int = ClickHouseConfig.max_result_rows
    max_memory_usage: int = ClickHouseConfig.max_memory_usage

    @classmethod
    def from_config(cls, ch: ClickHouseConfig) -> QueryLimits:
        return cls(*(getattr(ch, f.name) for f in fields(cls)))

    def settings(self, programs: int = 1) -> dict[str, Any]:
        """ClickHouse settings of a read-only query that runs ``programs`` programs at once.

        A batched query gets the same caps as one program: it reads, keeps and spends at least what each
        of its programs would alone, so a batch within the caps means every program is. A union returns
        one row per program, so its row cap is at least ``programs``; each program's own row cap is then
        checked on its own. ``readonly`` comes last: once applied, ClickHouse refuses to change others.
        """
        return {
            "max_execution_time": self.max_execution_time_s,
            "max_rows_to_read": self.max_rows_to_read,
            "max_result_rows": max(self.max_result_rows, programs),
            "max_memory_usage": self.max_memory_usage,
            "readonly": 1,
        }


def limit_settings(cfg: ClickHouseConfig, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Settings of a read-only query: the configured limits, ``extra`` on top, ``readonly=1`` last."""
    settings = QueryLimits.from_config(cfg).settings()
    del settings["readonly"]
    settings.update({k: v for k, v in (extra or {}).items() if k != "readonly"})
    settings["readonly"] = 1
    return settings


# What may end a statement early or change how it runs, outside string literals and quoted identifiers:
# clauses, a second statement, comments (an unclosed one would swallow what follows), heredocs.
_UNTRUSTED_SCAN = re.compile(
    r"""'(?:[^'\\]|\\.|'')*'|`(?:[^`\\]|\\.|``)*`|"(?:[^"\\]|\\.|"")*"|"""
    r"""(?P<bad>\b(?:SETTINGS|FORMAT|INTO)\b|;|--|/\*|\#|\$|'|`|")""",
    re.IGNORECASE | re.DOTALL,
)


def refuse_untrusted_clauses(sql: str) -> None:
    """Refuse SQL that could override the limits it runs under, whatever validated it upstream.

    The store's own check, independent of the program language's validator: no ``SETTINGS``, ``FORMAT``
    or ``INTO`` outside literals, one statement, no comments or heredocs, every quote closed.
    """
    for match in _UNTRUSTED_SCAN.finditer(sql):
        bad = match.group("bad")
        if bad is not None:
            raise StoreError(
                f"an untrusted query may not hold {bad.upper()!r} (offset {match.start()})",
                code="sql_readonly",
            )


def _rows(table: pa.Table) -> list[tuple[Any, ...]]:
    cols = [_naive_utc(c).to_pylist() for c in table.columns]
    return list(zip(*cols, strict=True)) if cols else []


def _naive_utc(col: pa.ChunkedArray) -> pa.ChunkedArray:
    # chDB returns DateTime('UTC') as zone-aware timestamps, clickhouse-connect as naive UTC; the
    # corpus files hold naive UTC. Both stores answer like the corpus.
    if pa.types.is_timestamp(col.type) and col.type.tz is not None:
        return pc.cast(col, pa.timestamp(col.type.unit))
    return col


class _ClickHouseBase:
    """What both stores share: DDL helpers and counts written once over ``command``/``query``."""

    cfg: ClickHouseConfig

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self, sql: str, *, params: Mapping[str, Any] | None = None) -> None:
        raise NotImplementedError

    def query(
        self,
        sql: str,
        *,
        settings: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _trusted(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    @staticmethod
    def _only_select(sql: str) -> None:
        """Refuse anything but SELECT/WITH before it reaches the engine (``readonly=1`` still applies).

        Besides defence in depth, this keeps write statements off clickhouse-connect's chDB
        backend, which leaves ``readonly=1`` set on its session after such a statement fails.
        """
        if not _SELECT_START.match(sql):
            raise StoreError("query() runs only SELECT statements", code="sql_readonly")

    def estimate_rows(self, sql: str, *, params: Mapping[str, Any] | None = None) -> int:
        """Rows ClickHouse will read to run the SELECT ``sql`` (``EXPLAIN ESTIMATE``, after the primary
        key has skipped granules; the statement itself does not run). For benchmarks and tests of pruning.
        """
        self._only_select(sql)
        refuse_untrusted_clauses(sql)
        rows = self._trusted(f"EXPLAIN ESTIMATE {sql}", params)
        return sum(int(r[3]) for r in rows)  # database, table, parts, rows, marks

    def ensure_database(self, database: str) -> None:
        self.command(f"CREATE DATABASE IF NOT EXISTS {ident(database)}")

    def create_table(self, schema: CorpusSchema, table: str) -> None:
        """Create ``table`` (``db.name``) for ``schema`` unless it exists."""
        self.ensure_database(ident(table).split(".")[0] if "." in table else self.cfg.database)
        self.command(create_table_sql(schema, table, index_granularity=self.cfg.index_granularity))

    def count(self, table: str) -> int:
        return int(self._trusted(f"SELECT count() FROM {ident(table)}")[0][0])

    def distinct_ids(self, table: str) -> int:
        """Number of distinct ids (equals :meth:`count` exactly when no id is duplicated)."""
        return int(self._trusted(f"SELECT uniqExact(id) FROM {ident(table)}")[0][0])

    def table_exists(self, table: str) -> bool:
        db, name = self._split(table)
        rows = self._trusted(
            "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {name:String}",
            {"db": db, "name": name},
        )
        return int(rows[0][0]) > 0

    def list_tables(self, database: str, prefix: str = "") -> list[str]:
        """Names (unqualified) of the tables of ``database`` starting with ``prefix``."""
        rows = self._trusted(
            "SELECT name FROM system.tables WHERE database = {db:String} AND startsWith(name, {p:String}) ORDER BY name",
            {"db": database, "p": prefix},
        )
        return [str(r[0]) for r in rows]

    def drop_table(self, table: str) -> None:
        self.command(f"DROP TABLE IF EXISTS {ident(table)} SYNC")

    def delete_ids(self, table: str, ids: Sequence[str]) -> None:
        """Remove the rows of ``ids`` (a lightweight delete; used to redo a chunk after a crash)."""
        if ids:
            self.command(
                f"DELETE FROM {ident(table)} WHERE id IN {{ids:Array(String)}}", params={"ids": list(ids)}
            )

    def _split(self, table: str) -> tuple[str, str]:
        ident(table)
        if "." in table:
            db, name = table.split(".", 1)
            return db, name
        return self.cfg.database, table


_CHDB_LOCK = threading.Lock()
_CHDB_QUERY_LOCK = threading.Lock()
_CHDB_SESSION: tuple[Path, Any] | None = None


def _held_elsewhere(path: Path) -> bool:
    """Whether another process holds the chDB ``path``: the server inside chDB keeps an exclusive
    ``flock`` on its ``status`` file while it runs."""
    try:
        with (path / "status").open("rb") as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(f, fcntl.LOCK_UN)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False


def chdb_session(path: Path) -> Any:
    """The process-wide chDB session at ``path``; a different path than the first is an error."""
    global _CHDB_SESSION
    resolved = Path(path).resolve()
    with _CHDB_LOCK:
        if _CHDB_SESSION is None:
            session: Any = require("chdb.session", "clickhouse")
            resolved.mkdir(parents=True, exist_ok=True)
            try:
                _CHDB_SESSION = (resolved, session.Session(str(resolved)))
            except Exception as exc:
                if _held_elsewhere(
                    resolved
                ):  # chDB's exception says only "Error initializing EmbeddedServer"
                    raise StoreError(
                        f"cannot open chDB at {resolved}: another process holds it (chDB opens a path from one "
                        "process at a time); stop that process, for example `prore reward serve`, or give both "
                        "--clickhouse-url of a ClickHouse server",
                        code="chdb_path",
                    ) from None
                raise StoreError(
                    f"cannot open chDB at {resolved}: {first_line(exc)}", code="chdb_path"
                ) from None
        bound, sess = _CHDB_SESSION
        if bound != resolved:
            raise StoreError(
                f"chDB is already open at {bound} in this process and cannot also open {resolved}; "
                "one process uses one chDB path (set clickhouse.chdb_path to share it)",
                code="chdb_path",
            )
        return sess


_CHDB_APPLIED: dict[str, Any] = {}
"""Settings this process has SET on its chDB session (beyond the defaults); guarded by the query lock."""


def _session_settings(session: Any, wanted: Mapping[str, Any]) -> None:
    """SET the chDB session's settings to ``wanted``; every other setting this module set goes back to DEFAULT.

    Only changes are sent, so a run of queries under the same limits costs nothing extra.
    """
    for name in [k for k in _CHDB_APPLIED if k not in wanted]:
        session.query(f"SET {_setting_name(name)} = DEFAULT", "CSV")
        del _CHDB_APPLIED[name]
    for name, value in wanted.items():
        if name not in _CHDB_APPLIED or _CHDB_APPLIED[name] != value:
            session.query(f"SET {_setting_name(name)} = {_setting_literal(value)}", "CSV")
            _CHDB_APPLIED[name] = value


def _setting_name(name: str) -> str:
    if not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
        raise StoreError(f"not a ClickHouse setting name: {name!r}", code="bad_setting")
    return name


def chdb_bound_path() -> Path | None:
    """The chDB path this process is bound to, if any."""
    return _CHDB_SESSION[0] if _CHDB_SESSION else None


class ChdbStore(_ClickHouseBase):
    """Embedded ClickHouse (chDB) with its files at ``path``; one path per process."""

    def __init__(self, path: Path, cfg: ClickHouseConfig | None = None) -> None:
        self.cfg = cfg or ClickHouseConfig()
        self.path = Path(path).resolve()
        self._session = chdb_session(self.path)
        binding: Any = require("clickhouse_connect.driver.binding", "clickhouse")
        self._format = binding.format_bind_value

    def command(self, sql: str, *, params: Mapping[str, Any] | None = None) -> None:
        """Run trusted DDL/DML written by the project."""
        self._run(sql, "CSV", params)

    def query(
        self,
        sql: str,
        *,
        settings: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run one untrusted SELECT read-only under the configured limits; ``params`` bind ``{name:Type}``.

        The limits are settings of the chDB session, applied before the query runs (and lifted again before
        the project's own statements), not text of the query. ``readonly`` cannot be a session setting here:
        ClickHouse makes it irrevocable for the session, and chDB has one session per process, which the
        index writer shares; so it goes with the statement, which this store first checks itself
        (:func:`refuse_untrusted_clauses`) holds nothing that could override it or cut it off.
        """
        self._only_select(sql)
        refuse_untrusted_clauses(sql)
        session = limit_settings(self.cfg, settings)
        del session["readonly"]
        return _rows(self._arrow(f"{sql}\nSETTINGS readonly = 1", params, session))

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Append ``data``; its columns are matched to the table's by name."""
        if data.num_rows == 0:
            return
        cols = ", ".join(f"`{c}`" for c in data.column_names)
        # chDB's Python() table function reads the local variable named in the SQL.
        arrow_input = data  # noqa: F841
        self._run(f"INSERT INTO {ident(table)} ({cols}) SELECT {cols} FROM Python(arrow_input)", "CSV", None)

    def close(self) -> None:
        """Nothing to release: this store holds only the process's chDB session.

        chDB binds one path per process, so that session is process-wide and lives until the process
        exits; every :class:`ChdbStore` of the process shares it.
        """

    def _trusted(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        return _rows(self._arrow(sql, params))

    def _arrow(
        self, sql: str, params: Mapping[str, Any] | None, session: Mapping[str, Any] | None = None
    ) -> pa.Table:
        res = self._run(sql, "Parquet", params, session)
        data = res.bytes()
        if not data:
            return pa.table({})
        return pq.read_table(io.BytesIO(data))

    def _run(
        self, sql: str, fmt: str, params: Mapping[str, Any] | None, session: Mapping[str, Any] | None = None
    ) -> Any:
        """Run ``sql`` with the chDB session's settings set to ``session`` (none: the engine's defaults)."""
        bound = {k: self._format(v) for k, v in (params or {}).items()}
        with _CHDB_QUERY_LOCK:
            try:
                _session_settings(self._session, session or {})
                return self._session.query(sql, fmt, params=bound or None)
            except Exception as exc:
                # chDB 4.4 hands the partial output of a query that failed mid-stream (e.g. a result
                # limit) to the next query on the session; a throwaway query absorbs it.
                with contextlib.suppress(Exception):
                    self._session.query("SELECT 1", "CSV")
                raise sql_error(exc) from None


class ClickHouseServerStore(_ClickHouseBase):
    """A ClickHouse server through clickhouse-connect; ``url`` may also be a ``chdb://`` DSN."""

    def __init__(self, url: str, cfg: ClickHouseConfig | None = None, **client_args: Any) -> None:
        self.cfg = cfg or ClickHouseConfig()
        self.url = url
        cc: Any = require("clickhouse_connect", "clickhouse")
        try:
            # A server that stops answering fails a request after request_timeout_s, by default twice the
            # query's own time limit (at least 30 s), not after clickhouse-connect's default 300 s.
            timeout = self.cfg.request_timeout_s
            options: dict[str, Any] = {
                "connect_timeout": 10,
                "send_receive_timeout": max(30.0, 2 * self.cfg.max_execution_time_s)
                if timeout is None
                else timeout,
            }
            if not url.startswith("chdb:"):
                # Bound id sets go in the request body, not the URL: a batch's can pass the server's
                # http_max_uri_size (1 MiB).
                options["form_encode_query_params"] = True
            # The user and password come from CLICKHOUSE_USER / CLICKHOUSE_PASSWORD (a Secret on Kubernetes).
            creds = Credentials.from_env("CLICKHOUSE").clickhouse_args(url)
            self._client = cc.get_client(dsn=url, **{**options, **creds, **client_args})
        except ConfigError:
            raise
        except Exception as exc:
            raise StoreUnavailable(
                f"cannot connect to ClickHouse at {_redact(url)}: {first_line(exc)}"
            ) from None

    def command(self, sql: str, *, params: Mapping[str, Any] | None = None) -> None:
        """Run trusted DDL/DML written by the project."""
        self._call(lambda: self._client.command(sql, parameters=dict(params) if params else None))

    def query(
        self,
        sql: str,
        *,
        settings: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> list[tuple[Any, ...]]:
        """Run one SELECT read-only under the configured limits; ``params`` bind ``{name:Type}``."""
        self._only_select(sql)
        refuse_untrusted_clauses(sql)
        # Sent as the request's settings (HTTP parameters), never as text of the query.
        limits = limit_settings(self.cfg, settings)
        result = self._call(
            lambda: self._client.query(sql, parameters=dict(params) if params else None, settings=limits)
        )
        return [tuple(r) for r in result.result_rows]

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Append ``data``; its columns are matched to the table's by name."""
        if data.num_rows:
            self._call(lambda: self._client.insert_arrow(ident(table), data))

    def close(self) -> None:
        """Close this store's client (each store owns one; see :func:`make_sql_store`). Twice is harmless."""
        self._client.close()

    def _trusted(self, sql: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        result = self._call(lambda: self._client.query(sql, parameters=dict(params) if params else None))
        return [tuple(r) for r in result.result_rows]

    def _call(self, fn: Any) -> Any:
        try:
            return fn()
        except Exception as exc:
            name = type(exc).__name__
            if name in ("OperationalError", "ConnectionError") or isinstance(exc, OSError):
                raise StoreUnavailable(
                    f"ClickHouse at {_redact(self.url)} went away: {first_line(exc)}"
                ) from None
            raise sql_error(exc) from None


def _setting_literal(value: Any) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _redact(url: str) -> str:
    return re.sub(r"//[^@/]*@", "//***@", url)


def make_sql_store(cfg: Config) -> ChdbStore | ClickHouseServerStore:
    """The SQL store of ``cfg`` for the caller to close: a server when ``clickhouse.url`` is set, else chDB.

    A server store owns its own client (a connection pool), closed by its ``close()``. A chDB store
    uses the process's one chDB session, which stays open for the process.
    """
    ch = cfg.clickhouse
    if ch.url:
        return ClickHouseServerStore(ch.url, ch)
    path = Path(ch.chdb_path) if ch.chdb_path else Workspace(cfg.workspace).chdb_path
    return ChdbStore(path, ch)
