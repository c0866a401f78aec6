"""A ClickHouse server URL that stops answering is a typed, retryable StoreUnavailable, not a hang.

No ClickHouse server binary is available here, so the server is a loopback TCP port: closed (what a
stopped server looks like) or accepting connections and never answering (a hung server or a dead
network path). This covers connecting and the client's timeouts; a server that answers and then stops
is covered for Milvus by tests/indexing/test_stores_server.py.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("clickhouse_connect", reason="needs the clickhouse extra")

from indexing.config import ClickHouseConfig, Config
from indexing.errors import StoreUnavailable
from indexing.stores.clickhouse import make_sql_store


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers; closed at the end."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _cfg(port: int) -> Config:
    return Config(
        clickhouse=ClickHouseConfig(
            url=f"http://default:@127.0.0.1:{port}", max_execution_time_s=1.0, request_timeout_s=2.0
        )
    )


def test_a_closed_port_is_unavailable() -> None:
    with pytest.raises(StoreUnavailable) as err:
        make_sql_store(_cfg(_closed_port()))
    assert err.value.retryable and "ClickHouse" in err.value.message


@pytest.mark.timeout(120)  # clickhouse-connect's own read timeout is 300 s; the store's here is 2 s
def test_a_server_that_does_not_answer_is_unavailable_after_the_request_timeout(silent_port: int) -> None:
    with pytest.raises(StoreUnavailable) as err:
        make_sql_store(_cfg(silent_port))
    assert err.value.retryable
