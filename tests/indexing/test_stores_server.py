"""The local Milvus server as a deployment: ``prore stores up|status|down`` in a workspace, an index built
on it, and a server that goes away in the middle of a batch of searches and comes back; a start after a crash."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("milvus", reason="needs the milvus-server extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")

import pymilvus

from indexing.build import build_index
from indexing.config import Config, MilvusConfig
from indexing.errors import StoreUnavailable
from indexing.index import open_index
from indexing.stores import server
from prore.cli import main

# These tests start, kill and restart servers of their own: under pytest-xdist they share a worker with the
# session's standalone server (tests/conftest.py), so that no two servers start at once on a loaded machine.
pytestmark = [pytest.mark.server, pytest.mark.xdist_group("milvus-standalone")]


def _status(cfg: Config, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["--workspace", str(cfg.workspace), "stores", "status", "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


DEFAULT_PORTS = {53100, 19529, 19531, 21123, 21121, 13333, 21124}
"""Milvus 2.3.5's default ports of the standalone server's internal components."""


def _component_ports(directory: Path) -> dict[str, int]:
    config = yaml.safe_load((directory / "configs" / "milvus.yaml").read_text())
    return {f"{section}.{key}": int(config[section][key]) for section, key in server.COMPONENT_PORTS}


def _stop(pid: int, within_s: float = 10.0) -> None:
    """SIGSTOP ``pid`` and return once the kernel shows it stopped (state ``T``): on a loaded machine the
    stop reaches a many-threaded server a moment after ``kill`` returns."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + within_s
    while (state := Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "T":
        assert time.monotonic() < deadline, (
            f"the server (pid {pid}) is still in state {state!r} after SIGSTOP"
        )
        time.sleep(0.05)


def _search_until_it_fails(
    search: Callable[[], Any], kill: Callable[[], object], after: int
) -> tuple[int, BaseException]:
    """Run ``search`` in a loop on another thread, ``kill`` once ``after`` have answered; the error that ends it."""
    answered = threading.Semaphore(0)
    outcome: dict[str, Any] = {"ok": 0}

    def loop() -> None:
        while True:
            try:
                search()
            except BaseException as exc:
                outcome["error"] = exc
                answered.release()
                return
            outcome["ok"] += 1
            answered.release()

    worker = threading.Thread(target=loop, daemon=True)
    worker.start()
    for _ in range(after):
        answered.acquire()
    kill()
    worker.join()
    return outcome["ok"], outcome["error"]


def test_a_server_that_goes_away_is_unavailable_and_the_store_reconnects(
    workspace_config: Callable[..., Config],
    write_synthetic_corpus: Callable[..., Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = workspace_config("stores", text="hashing", image="hashing", hashing_dim=64)
    ws = ["--workspace", str(base.workspace)]
    directory = server.server_dir(base.workspace)
    assert _status(base, capsys)["running"] is False
    port = server.free_port()
    assert main([*ws, "stores", "up", "--port", str(port)]) == 0
    assert f"running at http://127.0.0.1:{port}" in capsys.readouterr().out
    try:
        state = _status(base, capsys)
        assert state["running"] is True and state["uri"] == f"http://127.0.0.1:{port}"
        assert (directory / server.PID_FILE).read_text().strip() == str(state["pid"])
        assert (directory / server.LOG_FILE).is_file()
        # Every internal component on a port of its own, not Milvus' defaults, which a second server on the
        # machine (the suite's own) would also probe from.
        ports = _component_ports(directory)
        assert (
            len(set(ports.values())) == len(server.COMPONENT_PORTS)
            and not set(ports.values()) & DEFAULT_PORTS
        )
        assert main([*ws, "stores", "up"]) == 0  # a running server is kept
        capsys.readouterr()
        assert _status(base, capsys)["pid"] == state["pid"]

        cfg = base.replace(milvus=MilvusConfig(uri=state["uri"], timeout_s=3.0))
        write_synthetic_corpus(cfg, "ecommerce", 200)
        assert build_index(cfg, "ecommerce", progress=False).rows == 200
        with open_index(cfg, "ecommerce") as index:
            queries = ["Sony headphones in black", "faded denim jeans"] * 8
            first = index.dense_search("title", queries, 5)
            assert len(first) == 16 and all(len(hits) == 5 for hits in first)

            # A server that stops answering: each request gives up after timeout_s.
            _stop(state["pid"])
            try:
                with pytest.raises(StoreUnavailable) as hung:
                    index.dense_search("title", queries, 5)
                assert hung.value.retryable and hung.value.code == "store_unavailable"
            finally:
                os.kill(state["pid"], signal.SIGCONT)
            assert index.dense_search("title", queries, 5) == first

            # A server that lost its loaded collections, as a restarted one has, unseen by the handle: the
            # handle loads them again.
            other = pymilvus.MilvusClient(uri=state["uri"], timeout=30)
            try:
                for name in other.list_collections():
                    other.release_collection(name)
                assert index.dense_search("title", queries, 5) == first
                # Down and up again on the same port with the same data: the same handle answers as before.
                # Nothing is loaded when it stops: Milvus 2.3.5 reloads the collections that were, and on a
                # busy machine that recovery stalled for minutes with the proxy never listening (each of
                # this test's runs in one full suite took 211-240 s that way).
                for name in other.list_collections():
                    other.release_collection(name)
            finally:
                other.close()
            assert main([*ws, "stores", "down"]) == 0
            assert "stopped" in capsys.readouterr().out
            assert main([*ws, "stores", "up", "--port", str(port)]) == 0
            capsys.readouterr()
            assert _component_ports(directory) == ports  # kept: the restart's own old sessions name them
            assert index.dense_search("title", queries, 5) == first

            # Gone in the middle of a batch of searches: the batch fails typed, not a hang. The stop's grace is
            # short (a clean stop of a loaded server took 17 s here), so it ends in SIGKILL; what a kill leaves
            # behind is test_a_start_after_a_crash_that_does_not_answer_is_tried_once_more's.
            done, error = _search_until_it_fails(
                lambda: index.dense_search("description", queries, 5),
                lambda: server.stop(directory, timeout_s=1.0),
                after=3,
            )
            assert done >= 3 and isinstance(error, StoreUnavailable), error
            with pytest.raises(StoreUnavailable):
                index.dense_search("title", queries, 5)
            assert _status(base, capsys)["running"] is False
    finally:
        assert main([*ws, "stores", "down"]) == 0
    assert "was not running" in capsys.readouterr().out
    assert _status(base, capsys)["running"] is False
    assert main([*ws, "stores", "down"]) == 0
    assert "was not running" in capsys.readouterr().out


def test_free_ports_are_below_the_range_outgoing_connections_take_theirs_from() -> None:
    low = int(server.EPHEMERAL_RANGE.read_text().split()[0])
    ports = [server.free_port() for _ in range(20)]
    assert all(server.LISTEN_PORTS_FROM <= p < low for p in ports) and len(set(ports)) > 1
    with socket.socket() as s:  # and nothing listens there: a server can bind it
        s.bind(("127.0.0.1", ports[0]))
        s.listen()


def test_a_started_child_is_alive_before_it_shows_the_servers_command_line() -> None:
    """Between fork and exec a child started by ``start`` shows its parent's command line; it must still count as
    running, or the start gives up at once and leaves the server it started behind. A pid this process did not
    start counts only when it is a ``milvus`` process."""
    import subprocess

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert server._alive(child.pid) is False  # not ours, not milvus
        server._CHILDREN[child.pid] = child
        assert server._alive(child.pid) is True
        child.kill()
        child.wait()
        assert server._alive(child.pid) is False
    finally:
        server._CHILDREN.pop(child.pid, None)
        child.kill()


def test_an_unknown_port_flag_is_a_one_line_error(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--workspace", str(tmp_path), "stores", "up", "--port", "many"]) == 2
    assert capsys.readouterr().err.strip() == "error config: --port must be a number, got 'many'"


def test_status_of_a_workspace_without_a_server(tmp_path: Any) -> None:
    info = server.status(server.server_dir(tmp_path))
    assert not info.running and info.uri is None
    assert info.summary() == f"Milvus server: stopped ({server.server_dir(tmp_path)})"
    assert dataclasses.asdict(info)["running"] is False


def test_a_server_with_authentication_takes_the_credentials_from_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store's user and password come from MILVUS_USER / MILVUS_PASSWORD (a Secret on Kubernetes)."""
    from indexing.errors import StoreError
    from indexing.stores.milvus import MilvusStore

    monkeypatch.setenv("MILVUS_USER", "root")
    monkeypatch.setenv("MILVUS_PASSWORD", "Milvus")  # the first user of a new server with authentication
    directory = tmp_path / "milvus-server"
    state = server.start(directory, port=server.free_port(), authorization=True)
    try:
        uri = f"http://127.0.0.1:{state.port}"
        store = MilvusStore(uri, MilvusConfig())
        assert store.list_collections() == []
        store.close()
        monkeypatch.setenv("MILVUS_PASSWORD", "not-the-password")
        with pytest.raises(StoreError) as wrong:
            MilvusStore(uri, MilvusConfig()).list_collections()
        assert "not-the-password" not in str(wrong.value) and "\n" not in str(wrong.value)
        monkeypatch.delenv("MILVUS_USER")
        monkeypatch.delenv("MILVUS_PASSWORD")
        with pytest.raises(StoreError):
            MilvusStore(uri, MilvusConfig()).list_collections()
    finally:
        server.stop(directory)


def test_a_start_after_a_crash_that_does_not_answer_is_tried_once_more(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """After ``kill -9`` the state file stays; the next start stops a server that hangs and starts it again,
    once, and gives up with both starts named. Nothing is left running or recorded."""
    directory = tmp_path / "milvus-server"
    port = server.free_port()
    server.start(directory, port=port)
    server.kill(directory)
    assert (directory / server.STATE_FILE).is_file() and not server.status(directory).running
    with pytest.raises(StoreUnavailable) as hung:  # no Milvus answers within 50 ms
        server.start(directory, port=port, timeout_s=0.05)
    message = str(hung.value)
    assert f"start {server.RECOVERY_STARTS} of {server.RECOVERY_STARTS} after an unclean stop" in message
    assert "\n" not in message and hung.value.retryable
    assert "starting it once more" in caplog.text
    assert not server.status(directory).running
    assert not (directory / server.STATE_FILE).exists() and not (directory / server.PID_FILE).exists()
    # A stop that was clean leaves no state: the next start that hangs gives up at once.
    with pytest.raises(StoreUnavailable) as once:
        server.start(directory, port=port, timeout_s=0.05)
    assert "after an unclean stop" not in str(once.value)
