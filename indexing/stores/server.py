"""A local Milvus standalone server in the workspace: ``prore stores up``, ``down`` and ``status``.

The PyPI package ``milvus`` (2.3.5, "embedded Milvus", extra ``milvus-server``) ships the real C++
Milvus standalone server with an embedded etcd and local storage. :func:`start` unpacks it into a
directory (``<workspace>/milvus-server/`` for the commands), starts it as a detached process, waits
until it answers and records it::

    milvus-server/
      server.pid       the server's process id
      state.json       {"pid", "port", "uri", "started_at"}
      server.log       the server's stdout and stderr
      bin/ configs/ data/ logs/   the server's binaries, generated config, data and own logs

The generated configuration differs from the package's in a few keys, each a constant here: a segment is
sealed at :data:`SEAL_PROPORTION` of its size (large segments, indexed once by the index build), sessions
and a graceful stop fit restarts on a busy machine, and the embedded etcd gets ports of its own. A start
after a crash (the state file of a server that is gone) tries twice: see :data:`RECOVERY_STARTS`.

The engine reaches it by URI, like any Milvus server: ``--milvus-uri http://127.0.0.1:19530`` (or
``milvus.uri`` in the config file). Data stays in ``data/`` across :func:`stop` and :func:`start`.

**When to use it.** Milvus Lite, the zero-setup default, searches with a Python loop over every row:
about 1 ms at 3k documents, 40 ms at 100k and 430 ms at 1M. This server answers an HNSW search in about
4 ms at 100k, and it honours search parameters (``milvus.ef``, ``milvus.nprobe``). Switch from about
100k documents, or when measuring latency. One vector store per workspace: after switching, build the
indexes again with ``--milvus-uri``.

>>> status(Path("no-such-workspace") / "milvus-server").summary()
'Milvus server: stopped (no-such-workspace/milvus-server)'
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import socket
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core import processes
from core.errors import ConfigError, require
from indexing.errors import StoreError, StoreUnavailable
from indexing.stores.credentials import Credentials
from indexing.workspace import atomic_write_json

SERVER_DIR = "milvus-server"
"""Directory of the local server under the workspace."""
PORTS_FILE = "component_ports.json"
"""The internal components' ports of a server directory, kept across its starts (:func:`_own_ports`)."""
PID_FILE = "server.pid"
STATE_FILE = "state.json"
LOG_FILE = "server.log"
DEFAULT_PORT = 19530
SESSION_TTL_S = 30
"""Seconds etcd keeps a server's sessions without a keepalive (Milvus' default). A restart after a kill
waits for them to expire; a shorter lease made a server on a busy machine lose its own session (etcd:
"requested lease not found") and exit in the middle of a run."""

RECOVERY_STARTS = 2
"""How many times :func:`start` starts a server whose last run was killed (a state file, no live process)
before it gives up, each waiting ``timeout_s``. Milvus 2.3.5 can hang while it recovers from a crash: once
in CI, a restart after ``kill -9`` logged its query coordinator reading the recovered collections and then
nothing for 180 s, the proxy never listening (upstream issues 15523 and 26124 describe the same stall). A
server that hangs is stopped and started once more; one that exits is not (its log says why). At least some
of those hangs were a server listening one port up (see :func:`_own_ports`, fixed since); the retry stays for
the others."""

GRACEFUL_STOP_S = 5
"""Seconds the server's services may take to stop on SIGTERM."""
SEAL_PROPORTION = 0.85
"""Share of the segment size (``dataCoord.segment.maxSize``, 512 MB) at which a growing segment is sealed and
indexed; Milvus' default is 0.23, about 60k rows of a product collection. The index build holds automatic
compaction off (:data:`~indexing.stores.milvus_plan.BULK_LOAD`), so its collections keep the segments they
were sealed into: sealed this large, they are as large as compaction would have merged them (it merges
segments under half the size up to 0.85 of it), and searches cost the same without indexing anything twice.
Measured with 64 MB segments at 100k products (``bench/milvus_load.py``): 11 segments per collection at 0.23
searched 1.5x slower than the 3-4 that compaction left; 4 sealed at 0.85, 1.02x."""

_log = logging.getLogger(__name__)

_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
"""Servers this process started, so that stopping one also reaps it."""


@dataclass(frozen=True)
class ServerStatus:
    """Whether the server of ``directory`` runs, and where."""

    directory: Path
    running: bool
    pid: int | None = None
    port: int | None = None

    @property
    def uri(self) -> str | None:
        return f"http://127.0.0.1:{self.port}" if self.port is not None else None

    @property
    def log(self) -> Path:
        return self.directory / LOG_FILE

    def summary(self) -> str:
        """One line for the terminal."""
        if not self.running:
            return f"Milvus server: stopped ({self.directory})"
        return (
            f"Milvus server: running at {self.uri} (pid {self.pid}, data in {self.directory}); "
            f"use it with --milvus-uri {self.uri}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"running": self.running, "uri": self.uri, "pid": self.pid, "port": self.port,
                "directory": str(self.directory), "log": str(self.log)}  # fmt: skip


def server_dir(workspace: Path) -> Path:
    """The local server's directory in ``workspace``."""
    return workspace / SERVER_DIR


def status(directory: Path) -> ServerStatus:
    """The recorded server of ``directory``, running only if its process is alive."""
    state = _read_state(directory)
    pid = state.get("pid")
    if not isinstance(pid, int) or not _alive(pid):
        return ServerStatus(directory, running=False)
    return ServerStatus(directory, running=True, pid=pid, port=int(state["port"]))


def start(
    directory: Path,
    *,
    port: int | None = None,
    timeout_s: float = 180.0,
    authorization: bool = False,
    settings: Mapping[str, str | int | float | bool] | None = None,
) -> ServerStatus:
    """Start the server of ``directory`` on ``port`` and wait until it answers; a running one is kept.

    ``authorization`` turns Milvus' user authentication on (its first user is ``root``, password ``Milvus``):
    every client then needs ``MILVUS_USER`` and ``MILVUS_PASSWORD``, as against a cluster's Milvus.
    ``settings`` overrides keys of the generated ``configs/milvus.yaml`` by dotted name, e.g.
    ``{"dataCoord.segment.maxSize": 64}`` (benchmarks use it; only keys the package's template has).

    ``port`` ``None`` takes :data:`DEFAULT_PORT`, or a free port if that one is taken. Raises
    :class:`~core.errors.ConfigError` for a port in use, :class:`~indexing.errors.StoreUnavailable`
    when the server does not answer within ``timeout_s`` (it is stopped again; ``server.log`` and
    ``logs/`` say why).
    """
    milvus: Any = require("milvus", "milvus-server")
    current = status(directory)
    if current.running:
        if port is not None and port != current.port:
            raise ConfigError(
                f"the Milvus server of {directory} already runs on port {current.port}; stop it first: prore stores down"
            )
        wait_ready(current.uri or "", timeout_s=timeout_s, pid=current.pid, log=current.log)
        return current
    if port is None:
        port = DEFAULT_PORT if _port_free(DEFAULT_PORT) else free_port()
    elif not _port_free(port):
        raise ConfigError(f"port {port} is in use; choose another with --port")
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    # A state file without a live server: the last one was killed, not stopped (see RECOVERY_STARTS).
    starts = RECOVERY_STARTS if _read_state(directory) else 1
    uri = f"http://127.0.0.1:{port}"
    for attempt in range(1, starts + 1):
        proc = _spawn(milvus, directory, port, authorization=authorization, settings=settings or {})
        _CHILDREN[proc.pid] = proc
        (directory / PID_FILE).write_text(f"{proc.pid}\n")
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        atomic_write_json(
            directory / STATE_FILE, {"pid": proc.pid, "port": port, "uri": uri, "started_at": started}
        )
        try:
            wait_ready(uri, timeout_s=timeout_s, pid=proc.pid, log=directory / LOG_FILE)
            return ServerStatus(directory, running=True, pid=proc.pid, port=port)
        except StoreUnavailable as exc:
            if _alive(proc.pid) and attempt < starts:  # it hangs: stop it, keep the crash record, start again
                _stop_process(proc.pid, grace_s=GRACEFUL_STOP_S * 2)
                _log.warning("the Milvus server at %s did not answer within %g s after an unclean stop; "
                             "starting it once more", uri, timeout_s)  # fmt: skip
                continue
            stop(directory)
            if attempt > 1:
                raise StoreUnavailable(f"{exc} (start {attempt} of {starts} after an unclean stop)") from None
            raise
        except BaseException:
            stop(directory)
            raise
    raise AssertionError("unreachable: the last start returns or raises")


def stop(directory: Path, *, timeout_s: float = 30.0) -> bool:
    """Stop the server of ``directory`` cleanly (SIGTERM, then SIGKILL after ``timeout_s``).

    ``False`` if none was running. Its data stays.
    """
    current = status(directory)
    stopped = current.running
    if current.pid is not None:
        _stop_process(current.pid, grace_s=timeout_s)
    for name in (PID_FILE, STATE_FILE):
        (directory / name).unlink(missing_ok=True)
    return stopped


def _stop_process(pid: int, *, grace_s: float) -> None:
    """Stop the server process ``pid`` if it runs (SIGTERM, then SIGKILL after ``grace_s``) and reap it; its
    records stay."""
    if _alive(pid):
        processes.stop(pid, grace_s=grace_s, running=lambda: _alive(pid))
    _reap(pid)


def wait_ready(
    uri: str, *, timeout_s: float = 180.0, pid: int | None = None, log: Path | None = None
) -> None:
    """Wait until the Milvus server at ``uri`` answers requests (not only its health check).

    Raises :class:`~indexing.errors.StoreUnavailable` after ``timeout_s``, or as soon as process
    ``pid`` (the server) has exited; the message ends with the tail of ``log`` (its ``server.log``).
    """
    pymilvus: Any = require("pymilvus", "milvus")
    import logging

    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    host_port = uri.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    creds = Credentials.from_env("MILVUS").milvus_args()
    listens = processes.listening(host or "127.0.0.1", int(port))

    def answers() -> bool:
        listens()  # fails fast while nothing listens, before a client waits for its timeout
        client = pymilvus.MilvusClient(uri=uri, timeout=2, dedicated=True, **creds)
        try:
            client.list_collections(timeout=2)
        finally:
            client.close()
        return True

    processes.wait_ready(
        answers, what=f"the Milvus server at {uri}", timeout_s=timeout_s, poll_s=0.5,
        running=None if pid is None else (lambda: _alive(pid)), log=log, error=StoreUnavailable,
    )  # fmt: skip


EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""Where Linux keeps the range it takes outgoing connections' local ports from (default 32768-60999)."""
LISTEN_PORTS_FROM = 20_000
"""The lowest port :func:`free_port` hands out (clear of Milvus's 19530 and the usual 8000s)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now, chosen at random below the system's ephemeral range.

    A port the kernel picks (binding port 0) comes from that range, which is also where every outgoing
    connection takes its local port: in the minute before a slow server (vLLM loading a model) binds a port
    handed out so, a client's connection may take it, and the server fails with "address already in use".
    Below the range no outgoing connection lands. The choice is random (from the OS, never a seeded
    generator, so two test processes do not walk the same sequence); past 200 taken ports it falls back to
    the kernel's pick.
    """
    try:
        low = int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768
    pick = random.SystemRandom()
    if low > LISTEN_PORTS_FROM + 1000:
        for _ in range(200):
            port = pick.randrange(LISTEN_PORTS_FROM, low)
            if _port_free(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        chosen: int = s.getsockname()[1]
        return chosen


def _spawn(
    milvus: Any,
    directory: Path,
    port: int,
    *,
    authorization: bool = False,
    settings: Mapping[str, str | int | float | bool],
) -> subprocess.Popen[bytes]:
    """The server as a detached process (its own session), as ``milvus.MilvusServer.start`` runs it."""
    server = milvus.MilvusServer()
    server.set_base_dir(str(directory))
    server.listen_port = port
    server.config.set("common.security.authorizationEnabled", authorization)
    server.config.set("common.session.ttl", SESSION_TTL_S)
    # A standalone query node waits this long for its segments to move elsewhere (default 30 min).
    server.config.set("common.gracefulStopTimeout", GRACEFUL_STOP_S)
    server.config.set("dataCoord.segment.sealProportion", SEAL_PROPORTION)
    for key, value in settings.items():
        server.config.set(key, value)
    try:
        server.config.resolve()  # free ports for the internal services; writes configs/milvus.yaml
    except RuntimeError as exc:
        raise ConfigError(f"cannot start the Milvus server on port {port}: {exc}") from None
    _own_ports(directory, port)
    milvus._initialize_data_files(str(directory))  # unpacks bin/ once
    metrics_port, sock = server.config.resolve_port(9091)
    sock.close()
    exe = directory / "bin" / "milvus"
    env = dict(os.environ)
    env.update(
        DEPLOY_MODE="STANDALONE", METRICS_PORT=str(metrics_port), MILVUS_RUN_DIR=str(directory / "run")
    )
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (str(exe.parent), os.environ.get("LD_LIBRARY_PATH", "")) if p
    )
    server.server_proc = None  # the package's object would stop the server when collected
    return processes.spawn(
        [str(exe), "run", "standalone"], directory / LOG_FILE, env=env, cwd=directory, append=True
    )


COMPONENT_PORTS: tuple[tuple[str, str], ...] = (
    ("rootCoord", "port"),
    ("proxy", "internalPort"),
    ("queryCoord", "port"),
    ("queryNode", "port"),
    ("indexNode", "port"),
    ("dataCoord", "port"),
    ("dataNode", "port"),
)
"""The ``configs/milvus.yaml`` keys of the standalone server's internal gRPC ports (Milvus 2.3.5's defaults 53100,
19529, 19531, 21123, 21121, 13333 and 21124), each given a port of its own by :func:`_own_ports`."""


def _own_ports(directory: Path, port: int) -> None:
    """Put the server on ``port`` and give its embedded etcd ports of its own.

    The package probes the port it is given without ``SO_REUSEADDR`` and takes the next one that binds. Right
    after a server on the same port stopped, its connections in ``TIME_WAIT`` fail that probe, so a restart
    (``prore stores down`` then ``up``) listened one port up while :func:`start` waited on the one asked for,
    180 s, then gave up. The server binds with ``SO_REUSEADDR``, as :func:`_port_free` checks, so the
    generated ``configs/milvus.yaml`` is given ``port`` itself.

    Its components (:data:`COMPONENT_PORTS`) listen on fixed default ports too, each taking the next free one
    when its own is held. A second server then took 53101 where the first held 53100, and when it restarted, its
    own etcd still named its previous run's sessions: its components dialled the other server's root
    coordinator and the start failed ("node not match"; two scale runs at once). So every component gets a port
    of its own, chosen at random below the ephemeral range on the directory's first start and kept in
    ``component_ports.json`` for the next ones (new ports at every start made each restart wait out its
    previous run's sessions, which named ports nobody answered on: 40-50 s); one taken since is chosen again.

    Milvus 2.3.5's embedded etcd listens on the fixed peer port 2380 unless it is given a configuration
    file, so a second server on one machine (a test's beside the suite's, two workspaces) would fail to
    start with "bind: address already in use". The generated ``configs/milvus.yaml`` is pointed at an
    ``embedEtcd.yaml`` with a client and a peer port the kernel chose. (The package resolves its client
    port by probing upward from 2379, so two servers starting at once could both take the same one.)
    """
    import yaml

    configs = directory / "configs"
    client_port = free_port()
    peer = _free_port_besides({client_port})
    etcd_file = configs / "embedEtcd.yaml"
    client, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer}"
    etcd_file.write_text(
        yaml.safe_dump(
            {
                "name": "default",
                "listen-client-urls": client,
                "advertise-client-urls": client,
                "listen-peer-urls": peer_url,
                "initial-advertise-peer-urls": peer_url,
                "initial-cluster": f"default={peer_url}",
            }
        )
    )
    main = configs / "milvus.yaml"
    config = yaml.safe_load(main.read_text())
    config.setdefault("etcd", {}).setdefault("config", {})["path"] = str(etcd_file)
    config["etcd"]["endpoints"] = f"127.0.0.1:{client_port}"
    config.setdefault("proxy", {})["port"] = port
    taken = {port, client_port, peer}
    kept = _read_json(directory / PORTS_FILE)
    chosen: dict[str, int] = {}
    for section, key in COMPONENT_PORTS:
        name = f"{section}.{key}"
        pick = kept.get(name)
        if not (isinstance(pick, int) and pick not in taken and _port_free(pick)):
            pick = _free_port_besides(taken)
        taken.add(pick)
        chosen[name] = pick
        config.setdefault(section, {})[key] = pick
    atomic_write_json(directory / PORTS_FILE, chosen)
    main.write_text(yaml.safe_dump(config, sort_keys=False))


def _free_port_besides(taken: set[int]) -> int:
    """A :func:`free_port` that is none of ``taken`` (ports handed out for this start, not yet bound)."""
    port = free_port()
    while port in taken:
        port = free_port()
    return port


def _read_state(directory: Path) -> dict[str, Any]:
    return _read_json(directory / STATE_FILE)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live Milvus process (not a zombie, not a recycled pid).

    A child this process started is alive until it exits, whatever its command line: between the fork and the
    ``exec`` of the server binary it still shows the parent's, which had made a start on a loaded machine give
    up at once ("exited before it answered") and leave the server it had started running, unrecorded, on the
    same data directory as the next start's. Any other pid must show ``milvus`` in its command line.
    """
    proc = _CHILDREN.get(pid)
    if proc is not None:
        return proc.poll() is None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z" and b"milvus" in cmdline


def _reap(pid: int) -> None:
    proc = _CHILDREN.pop(pid, None)
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds it
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def kill(directory: Path) -> None:
    """SIGKILL the server of ``directory`` (what a crash does); its records stay. For fault tests."""
    current = status(directory)
    if current.pid is None:
        raise StoreError(f"no Milvus server runs in {directory}", code="no_server")
    pid = current.pid
    processes.kill(pid, running=lambda: _alive(pid))
    _reap(pid)
