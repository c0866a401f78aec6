"""Shared fixtures: one workspace and one chDB path per test process, small indexed corpora, Milvus servers,
a vLLM CPU server on a tiny planner checkpoint.

chDB binds one path per process, so every test that touches ClickHouse in-process uses the
session's chDB path: :func:`workspace_config` gives a fresh workspace that shares it and keeps
apart by its own ClickHouse database.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

# Before anything imports transformers or tokenizers: the model is local, and forked workers must
# not inherit tokenizer threads.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest

from core.memory import keep_freed_memory
from core.openmp import wait_passively
from core.processes import listening
from indexing.config import ClickHouseConfig, Config, EmbedderConfig, MilvusConfig
from indexing.stores.server import free_port
from tests.processes import VLLM_SERVER, interrupt_on_sigterm, served


def _share_the_cores() -> int | None:
    """With ``PRORE_TEST_SHARE_CORES=1`` (``make test-fast`` sets it) under pytest-xdist, each worker's share of
    the cores for torch, OpenMP and MKL, and for the training subprocesses (``PRORE_TRAIN_THREADS``); else
    ``None``, and torch takes every core in each worker. On 2 cores the fast tier, CPU-bound in both workers,
    took 362 s with 2 threads a worker and 290 s with one, 252 s and 203 s on warm caches (single runs); the
    full suite did not gain (992 s against 1,062 s), since one worker often waits on a server while the other's
    threads fill both cores. What the environment already says wins."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2 or os.environ.get("PRORE_TEST_SHARE_CORES") != "1":
        return None
    share = max(1, len(os.sched_getaffinity(0)) // workers)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PRORE_TRAIN_THREADS"):
        os.environ.setdefault(name, str(share))
    return int(os.environ["OMP_NUM_THREADS"])


_THREADS = _share_the_cores()  # before any test imports torch (nothing imported above does)
OPENMP_BEFORE_TORCH = "torch" not in sys.modules
"""Whether the suite set its OpenMP wait policy before anything loaded torch (``tests/core/test_openmp.py``)."""
wait_passively()  # as `prore` does: the suite's processes (workers, servers, trainers) share the cores
keep_freed_memory()  # as `prore`'s batch commands do: the suite builds indexes and trains in its processes

SMALL_CORPUS_ROWS = 600
"""Documents per domain in :func:`small_index_cfg`."""


@pytest.fixture(scope="session")
def session_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The workspace of the whole test process; its ``chdb/`` is the process's one chDB path."""
    return tmp_path_factory.mktemp("workspace")


@pytest.fixture(scope="session")
def chdb_path(session_workspace: Path) -> Path:
    """The one chDB path of this test process."""
    return session_workspace / "chdb"


@pytest.fixture(scope="session")
def workspace_config(tmp_path_factory: pytest.TempPathFactory, chdb_path: Path) -> Callable[..., Config]:
    """Factory of configs with a fresh workspace each, sharing the session's chDB path.

    ``workspace_config("name", text="hashing", image="hashing", hashing_dim=64)``; keyword
    arguments go to :class:`EmbedderConfig`, ``milvus=MilvusConfig(...)`` replaces the Milvus section.
    """
    counter = itertools.count()

    def make(name: str = "ws", *, milvus: MilvusConfig | None = None, **embedder: Any) -> Config:
        i = next(counter)
        return Config(
            workspace=tmp_path_factory.mktemp(name),
            clickhouse=ClickHouseConfig(chdb_path=str(chdb_path), database=f"t{i:03d}_{name}"),
            milvus=milvus or MilvusConfig(),
            embedder=EmbedderConfig(**embedder),
        )

    return make


def _run_directory(basetemp: Path) -> Path:
    """The directory of the whole run, given this process's base temporary directory: under pytest-xdist each
    worker's (``popen-gwN``) is a child of it, so the workers share it; else the base directory itself."""
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


@pytest.fixture(scope="session")
def vector_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One on-disk store of index vectors (``embedder.vector_cache``) for the whole run, shared by the xdist
    workers (:func:`_run_directory`): a corpus that several workers or tests build with MiniLM is embedded once."""
    path = _run_directory(tmp_path_factory.getbasetemp()) / "vector-cache"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="session")
def small_index_cfg(session_workspace: Path, chdb_path: Path, vector_cache: Path) -> Config:
    """Config of the session workspace holding both corpora (600 docs each, generated, with their label
    tables) indexed with MiniLM. Each worker builds its own, one at a time: the first embeds, into the
    shared :func:`vector_cache`, while the others wait on its lock, then read every vector."""
    from filelock import FileLock

    from indexing.build import build_index
    from indexing.corpora import generate_labeled
    from indexing.corpora.files import write_corpus
    from indexing.schema import EMAILS, PRODUCTS
    from indexing.workspace import Workspace

    cfg = Config(
        workspace=session_workspace,
        clickhouse=ClickHouseConfig(chdb_path=str(chdb_path)),
        embedder=EmbedderConfig(text="minilm", image="minilm", vector_cache=str(vector_cache)),
    )
    ws = Workspace(session_workspace)
    with FileLock(vector_cache / "small-index.lock"):
        for schema in (PRODUCTS, EMAILS):
            meta = {"generator": schema.domain, "size": SMALL_CORPUS_ROWS, "seed": 0}
            write_corpus(ws, schema, generate_labeled(schema.domain, SMALL_CORPUS_ROWS, seed=0), meta)
            build_index(cfg, schema.domain, progress=False)
    return cfg


_STOPS: dict[str, contextlib.ExitStack] = {}
"""The session servers still running that :func:`until_last_user` stops early, by fixture name."""


@contextlib.contextmanager
def until_last_user(fixture: str) -> Iterator[contextlib.ExitStack]:
    """An exit stack for session fixture ``fixture``'s server: closed once the last test of the session that
    uses ``fixture`` is torn down (``pytest_runtest_teardown`` below), or at the end of the session if that test
    never runs. A server idles between its users' tests, and an idle Milvus standalone server with the
    collections its tests made keeps a tenth of a core busy: left for the whole session (its group runs first)
    it cost CI about 130 core-seconds. Its users all run on one pytest-xdist worker and in collection order
    (``XDIST_GROUPS``), so after the last of them in ``session.items`` none is left to need it."""
    assert fixture in XDIST_GROUPS, f"{fixture} has no xdist group, so its users may run on any worker"
    with contextlib.ExitStack() as stack:
        _STOPS[fixture] = stack
        try:
            yield stack
        finally:
            _STOPS.pop(fixture, None)


_LAST_USERS: dict[str, str] = {}


def _last_user(session: pytest.Session, fixture: str) -> str | None:
    """The node id of the last test in ``session.items`` (what runs, in order) that uses ``fixture``: asks for it,
    or is in its group (a test that reaches it by ``request.getfixturevalue`` carries the group's mark)."""
    if fixture not in _LAST_USERS:
        group = XDIST_GROUPS[fixture]
        users = [item.nodeid for item in session.items
                 if fixture in getattr(item, "fixturenames", ()) or _group(item) == group]  # fmt: skip
        _LAST_USERS[fixture] = users[-1] if users else ""
    return _LAST_USERS[fixture] or None


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URI of a Milvus Lite gRPC server (``python -m milvus_lite server``) on a free localhost port."""
    pytest.importorskip(
        "milvus_lite", reason="milvus-lite is not installed (pip install 'proretrieval[milvus]')"
    )
    root = tmp_path_factory.mktemp("milvus-server")
    port = free_port()
    command = [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(root / "data"),
               "--host", "127.0.0.1", "--port", str(port)]  # fmt: skip
    with until_last_user("milvus_server") as stack:
        stack.enter_context(served(command, listening("127.0.0.1", port), root / "server.log",
                                   what="the Milvus Lite server", timeout_s=60, poll_s=0.2, grace_s=15))  # fmt: skip
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def milvus_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URI of a real Milvus standalone server (the ``milvus`` package's 2.3.5 binary, about 10 s to start),
    started once per test process on a free localhost port in a temporary directory, stopped at the end."""
    pytest.importorskip(
        "milvus", reason="the Milvus server is not installed (pip install 'proretrieval[milvus-server]')"
    )
    pytest.importorskip("pymilvus", reason="pymilvus is not installed (pip install 'proretrieval[milvus]')")
    from indexing.stores import server

    root = tmp_path_factory.mktemp("milvus-standalone")
    with until_last_user("milvus_standalone") as stack:
        info = server.start(root, port=server.free_port())
        stack.callback(server.stop, root, timeout_s=10)
        yield info.uri or ""


@pytest.fixture(scope="session")
def planner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialized Qwen3 (the ``xs`` size) with a byte-level BPE tokenizer trained on the
    project's prompts and example programs, saved as a Hugging Face checkpoint directory."""
    pytest.importorskip("transformers")
    from rl.train.model import SIZES, build_model
    from rl.train.tokenizer import train_tokenizer
    from serving.prompt import EXAMPLE_PROGRAMS, messages

    out = tmp_path_factory.mktemp("planner-ckpt")
    texts: list[str] = []
    for domain, program in EXAMPLE_PROGRAMS.items():
        for profile in ("short", "full"):
            texts += [
                m["content"] for m in messages(domain, "wireless headphones under $200", profile=profile)
            ]
        texts += [program] * 8
    tok = train_tokenizer(texts * 4, vocab_size=1024)
    model = build_model(dataclasses.replace(SIZES["xs"], max_positions=4096), tok, seed=0)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def vllm_server(planner_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of a vLLM CPU server serving the tiny checkpoint as ``planner``
    (``tests.serving.planner_support.PLANNER_NAME``), structured output on xgrammar.

    One per test process, started when a test first asks for it (about 45 s) and stopped at the end: the
    planner client's and KServe's tests (tests/serving) and the few-shot ``llm:`` baseline's (tests/rl) all
    send it requests and nothing else, so none of them may stop it or change what it serves. A test of how
    vLLM starts (the README's command) starts its own. A few-shot ``llm:`` request (the full prompt and 7
    exemplars) comes to about 1,800 of this tokenizer's tokens, 2,100 with its 256-token answer, within
    ``--max-model-len``."""
    pytest.importorskip("vllm")
    from tests.serving.planner_support import PLANNER_NAME

    port = free_port()
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"}
    # The model in the engine core's process, not a worker process of its own: a start in 0.7x the time and
    # CPU, for decoding up to 1.15x slower under a grammar (bench/vllm_server.py; README, Serving).
    env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    command = [
        *VLLM_SERVER, "--model", str(planner_checkpoint), "--served-model-name", PLANNER_NAME,
        "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager",
        "--max-model-len", "4096", "--seed", "0",
        "--structured-outputs-config", '{"backend": "xgrammar", "disable_any_whitespace": true}',
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    with until_last_user("vllm_server") as stack:
        stack.enter_context(served(command, url + "/models", log_path, what="the vLLM server", timeout_s=600,
                                   env=env))  # fmt: skip
        yield url


_WORDS = {
    "brand": ("Sony", "Bose", "Anker", "Levi's", "Acme"),
    "category": ("headphones", "speaker", "charger", "jeans", "lamp"),
    "color": ("black", "white", "red", "blue"),
    "praise": (
        "great noise cancelling",
        "long battery life",
        "sturdy build",
        "comfortable fit",
        "bright light",
    ),
    "look": ("matte white", "glossy black", "faded denim", "brushed metal", "bright red"),
    "topic": ("quarterly budget", "team offsite", "server outage", "contract renewal", "lunch plans"),
}


def _synthetic(schema_name: str, n: int, seed: int = 0) -> Any:
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    from indexing.corpora.files import arrow_schema
    from indexing.schema import schema_for

    schema = schema_for(schema_name)
    rng = np.random.default_rng(seed)

    def pick(kind: str) -> list[str]:
        options = _WORDS[kind]
        return [options[i] for i in rng.integers(0, len(options), n)]

    cols: dict[str, list[Any]]
    if schema.domain == "ecommerce":
        brand, cat, color, praise, look = (
            pick("brand"),
            pick("category"),
            pick("color"),
            pick("praise"),
            pick("look"),
        )
        cols = {
            "id": [f"P{i:05d}" for i in range(n)],
            "brand": brand,
            "category": cat,
            "price": [round(float(p), 2) for p in rng.uniform(5, 500, n)],
            "rating": [round(float(r), 1) for r in rng.uniform(1, 5, n)],
            "review_count": [int(c) for c in rng.integers(0, 5000, n)],
            "color": color,
            "in_stock": [bool(b) for b in rng.integers(0, 2, n)],
            "release_date": [
                dt.date(2020, 1, 1) + dt.timedelta(days=int(d)) for d in rng.integers(0, 1500, n)
            ],
            "title": [f"{b} {c} in {co}" for b, c, co in zip(brand, cat, color, strict=True)],
            "description": [
                f"A {c} by {b}, item {i}" for i, (b, c) in enumerate(zip(brand, cat, strict=True))
            ],
            "review": [f"{p}, would buy again" for p in praise],
            "image": [f"{lk} {c} on a plain background" for lk, c in zip(look, cat, strict=True)],
        }
    else:
        topic = pick("topic")
        people = [f"user{int(i)}@{d}" for i, d in zip(rng.integers(0, 20, n), pick("brand"), strict=True)]
        cols = {
            "id": [f"E{i:05d}" for i in range(n)],
            "sender": [p.lower() + ".com" for p in people],
            "sender_domain": [p.split("@")[1].lower() + ".com" for p in people],
            "recipient": ["me@example.com"] * n,
            "date": [
                dt.datetime(2023, 1, 1) + dt.timedelta(minutes=int(m)) for m in rng.integers(0, 500_000, n)
            ],
            "folder": [("inbox", "sent", "archive")[int(i)] for i in rng.integers(0, 3, n)],
            "is_read": [bool(b) for b in rng.integers(0, 2, n)],
            "is_starred": [bool(b) for b in rng.integers(0, 2, n)],
            "has_attachment": [bool(b) for b in rng.integers(0, 2, n)],
            "thread_id": [f"T{int(t):04d}" for t in rng.integers(0, n // 3 + 1, n)],
            "subject": [f"Re: {t}" for t in topic],
            "body": [f"Hi, about the {t}: message {i}." for i, t in enumerate(topic)],
        }
    return pa.table(cols, schema=arrow_schema(schema))


@pytest.fixture(scope="session")
def synthetic_table() -> Callable[..., Any]:
    """``synthetic_table(domain, n, seed=0)``: a small Arrow table of the corpus schema (not the generators')."""
    return _synthetic


@pytest.fixture(scope="session")
def write_synthetic_corpus() -> Callable[..., dict[str, Any]]:
    """``write_synthetic_corpus(cfg, domain, n, seed=0, chunk=...)`` writes a workspace corpus; returns its manifest."""
    from indexing.corpora.files import write_corpus
    from indexing.schema import schema_for
    from indexing.workspace import Workspace

    def write(cfg: Config, domain: str, n: int, seed: int = 0, chunk: int = 1000) -> dict[str, Any]:
        table = _synthetic(domain, n, seed)
        batches = [table.slice(i, chunk) for i in range(0, n, chunk)]
        return write_corpus(
            Workspace(cfg.workspace), schema_for(domain), batches, {"generator": "synthetic", "seed": seed}
        )

    return write


XDIST_GROUPS = {
    "vllm_server": "vllm",
    "milvus_standalone": "milvus-standalone",
    "milvus_server": "milvus-lite",
    "readme_root": "readme-serving",
}
"""Session servers that cost a start per test process (vLLM's CPU server, the Milvus standalone server, a
Milvus Lite gRPC server): every test that uses one runs on the same pytest-xdist worker (``make test``'s
``--dist loadgroup``), which starts it once. The modules that start standalone servers of their own join the
``milvus-standalone`` group by a mark, so that no two such servers start at once. The README's serving tests
share one workspace (``readme_root``), whose chDB store one server process at a time may open. (pytest 9.2 drops the group
suffix these marks give a node id, which is why the dev extra keeps pytest below it.)"""


GROUP_ORDER = ("milvus-standalone", "readme-serving", "vllm", "tiny-planner", "milvus-lite")
"""The groups, longest first (``make test``'s ``--durations``, kept in ``.ci/logs/test.log``). pytest-xdist
hands work out in collection order, so they are collected first and the other tests fill in around them; a
long group handed out near the end would run alone on one worker while the other idles."""


def pytest_configure(config: pytest.Config) -> None:
    interrupt_on_sigterm()
    if _THREADS is not None and "torch" in sys.modules:  # a plugin imported torch before the env was set
        sys.modules["torch"].set_num_threads(_THREADS)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Iterator[None]:
    """pytest-xdist's workers collect one at a time. Each imports every test module (and through them torch,
    transformers, ...), and on a fresh install the first import of a module compiles it to bytecode: two workers
    collecting at once both compiled the same modules (about 25 s of CPU of a fresh clone's run, py-spy); the
    second now reads what the first wrote. The cores are not idle meanwhile: the first worker's tests, lint and
    the verl suite run beside it."""
    basetemp = session.config.option.basetemp
    if not os.environ.get("PYTEST_XDIST_WORKER") or not basetemp:
        return (yield)
    from filelock import FileLock

    shared = _run_directory(Path(basetemp))
    shared.mkdir(parents=True, exist_ok=True)
    with FileLock(shared / "collection.lock"):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    interrupt_on_sigterm()  # again: Ray's driver and others install their own SIGTERM handler
    try:
        return (yield)
    finally:  # the test's fixtures are torn down: stop the session servers it was the last user of
        for fixture in [f for f in _STOPS if _last_user(item.session, f) == item.nodeid]:
            _STOPS.pop(fixture).close()


def _group(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name"))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        group = next((g for f, g in XDIST_GROUPS.items() if f in getattr(item, "fixturenames", ())), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            item.add_marker(pytest.mark.server)  # it starts (or shares) a server: outside make test-fast
    rank = {g: i for i, g in enumerate(GROUP_ORDER)}
    items.sort(key=lambda item: rank.get(_group(item) or "", len(rank)))  # stable: each group keeps its order


_FINISHED: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _FINISHED["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the test process with pytest's own status once every report is written: chDB 4.4 may abort in
    its destructors at interpreter shutdown (see :func:`indexing.index.exit_process`)."""
    if "status" in _FINISHED:
        from indexing.index import exit_process

        exit_process(_FINISHED["status"])
