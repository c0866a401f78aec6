"""The ``ray`` engine of the index build on a real local Ray: the same index as the ``local`` engine, and a
driver killed with SIGKILL resumes to exactly the index of an uninterrupted build.

One Ray instance serves the module (starting one costs seconds): the builds in this process use it as
the initialized Ray, and builds in processes of their own join it through ``RAY_ADDRESS``, as a
KubeRay RayJob's entrypoint joins its cluster. The command-line test starts and stops its own.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("chdb", reason="needs the clickhouse extra")
pytest.importorskip("pymilvus", reason="needs the milvus extra")
pytest.importorskip("bm25s", reason="needs the bm25 extra")
pytest.importorskip("ray.data", reason="needs the ray extra (pip install 'proretrieval[ray]')")

import ray

from core.errors import ConfigError
from indexing.build import JOURNAL, KILL_ENV, build_index, store_counts
from indexing.config import BuildConfig, Config, EmbedderConfig
from indexing.errors import StoreError
from indexing.index import read_current
from indexing.ray_build import CHUNK_COLUMN, VECTOR_PREFIX, RayChunks, plan_parts, regroup
from indexing.schema import schema_for
from indexing.stores.clickhouse import make_sql_store
from indexing.stores.milvus import make_vector_store
from indexing.workspace import Workspace
from tests.indexing.digest import index_digest

ROOT = Path(__file__).resolve().parents[2]
ROWS, PART_ROWS, BATCH_ROWS = 330, 120, 50
"""Parts of 120 rows in chunks of 50: 50, 50, 20 per part, so chunks end short inside the corpus (8 in all)."""

_CONFIG = """
from pathlib import Path
from indexing.config import BuildConfig, ClickHouseConfig, Config, EmbedderConfig
ws = Path({ws!r})
cfg = Config(workspace=ws, clickhouse=ClickHouseConfig(chdb_path=str(ws / "chdb")),
             embedder=EmbedderConfig(text="hashing", image="hashing", hashing_dim=64),
             build=BuildConfig(engine={engine!r}, ray_actors=2))
"""

_BUILD = f"""
from indexing.build import build_index
print(build_index(cfg, "ecommerce", batch_rows={BATCH_ROWS}, progress=False).summary())
"""

# The digest of what the build published, on the line after its summary.
_DIGEST = """
from tests.indexing.digest import print_digest
print_digest(cfg, "ecommerce")
"""

# chDB may abort in its destructors at interpreter shutdown (see indexing.index.exit_process).
_EXIT = """
from indexing.index import exit_process
exit_process(0)
"""


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """A local Ray of 3 CPUs (2 embedding actors and the read tasks), initialized in this process."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=3, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


def _python(
    ws: Path, code: str, engine: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``cfg`` bound to workspace ``ws`` (its own chDB path) in a process of its own."""
    script = textwrap.dedent(_CONFIG.format(ws=str(ws), engine=engine)) + textwrap.dedent(code) + _EXIT
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, **(env or {})},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def _ray_cfg(cfg: Config, actors: int = 2) -> Config:
    return cfg.replace(build=BuildConfig(engine="ray", ray_actors=actors))


@pytest.mark.slow
def test_ray_build_publishes_the_same_index_as_the_local_build(
    ray_address: str, workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    local = workspace_config("local_engine", text="hashing", image="hashing", hashing_dim=64)
    on_ray = _ray_cfg(workspace_config("ray_engine", text="hashing", image="hashing", hashing_dim=64))
    for cfg in (local, on_ray):
        write_synthetic_corpus(cfg, "ecommerce", ROWS, chunk=PART_ROWS)
    committed: list[int] = []
    built = build_index(on_ray, "ecommerce", batch_rows=BATCH_ROWS, progress=False, on_chunk=committed.append)
    assert (built.status, built.version, built.rows, built.rows_written) == ("built", "v0001", ROWS, ROWS)
    assert committed == list(range(8))  # whole chunks, in order, each once
    assert build_index(local, "ecommerce", batch_rows=BATCH_ROWS, progress=False).status == "built"

    reference, digest = index_digest(local, "ecommerce"), index_digest(on_ray, "ecommerce")
    assert len(reference["ids"]) == len(set(reference["ids"])) == reference["milvus"] == ROWS
    # The workspaces keep apart by ClickHouse database (one chDB path per process): tables differ by it alone.
    tables = [d["meta"].pop("table") for d in (reference, digest)]
    assert tables == [f"{cfg.clickhouse.database}.products__v0001" for cfg in (local, on_ray)]
    assert digest == reference  # rows, vectors, dense and sparse hits, and the build key
    ws = Workspace(on_ray.workspace)
    counts = store_counts(
        on_ray, ws, schema_for("ecommerce"), "v0001", make_sql_store(on_ray), make_vector_store(on_ray)
    )
    assert set(counts.values()) == {ROWS}, counts

    # Same build key: the other engine finds the index up to date and leaves it alone.
    assert (
        build_index(_ray_cfg(local), "ecommerce", batch_rows=BATCH_ROWS, progress=False).status
        == "up_to_date"
    )
    local_on_ray_ws = on_ray.replace(build=BuildConfig())
    assert (
        build_index(local_on_ray_ws, "ecommerce", batch_rows=BATCH_ROWS, progress=False).status
        == "up_to_date"
    )


@pytest.fixture(scope="module")
def uninterrupted(
    tmp_path_factory: pytest.TempPathFactory, write_synthetic_corpus: Callable[..., Any]
) -> dict[str, Any]:
    """The digest of the index an uninterrupted ``local`` build publishes, built in a process of its own."""
    ws = tmp_path_factory.mktemp("uninterrupted")
    write_synthetic_corpus(Config(workspace=ws), "ecommerce", ROWS, chunk=PART_ROWS)
    done = _python(ws, _BUILD + _DIGEST, "local")
    assert done.returncode == 0, done.stderr
    summary, digest = done.stdout.splitlines()
    assert summary == f"ecommerce: published v0001 with {ROWS} docs (built)"
    loaded: dict[str, Any] = json.loads(digest)
    return loaded


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "chunk"), [("embedded", 0), ("milvus", 5)])
def test_killed_ray_build_resumes_to_the_index_of_an_uninterrupted_build(
    stage: str,
    chunk: int,
    ray_address: str,
    uninterrupted: dict[str, Any],
    tmp_path: Path,
    write_synthetic_corpus: Callable[..., Any],
) -> None:
    ws = tmp_path / "ws"
    write_synthetic_corpus(Config(workspace=ws), "ecommerce", ROWS, chunk=PART_ROWS)
    joined = {"RAY_ADDRESS": ray_address}

    killed = _python(ws, _BUILD, "ray", env={**joined, KILL_ENV: f"{stage}:{chunk}"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    journal = json.loads((ws / "indexes" / "ecommerce" / "v0001" / JOURNAL).read_text())
    # Chunk N was embedded (and, at the milvus point, written to both stores) but never committed.
    assert (journal["chunks"], journal["state"]) == (chunk, "building")
    assert not (ws / "indexes" / "ecommerce" / "CURRENT").exists()

    resumed = _python(ws, _BUILD + _DIGEST, "ray", env=joined)
    assert resumed.returncode == 0, resumed.stderr
    summary, digest = resumed.stdout.splitlines()
    assert summary == f"ecommerce: published v0001 with {ROWS} docs (resumed at chunk {chunk})"
    assert json.loads(digest) == uninterrupted


@pytest.mark.slow
def test_cli_builds_on_a_ray_of_its_own(tmp_path: Path, write_synthetic_corpus: Callable[..., Any]) -> None:
    """``prore index build --engine ray`` with no Ray around starts a local one and stops it when done."""
    ws = tmp_path / "ws"
    write_synthetic_corpus(Config(workspace=ws), "ecommerce", 120, chunk=PART_ROWS)
    config = tmp_path / "prore.yaml"
    config.write_text("embedder: {text: hashing, image: hashing, hashing_dim: 64}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cmd = [
        sys.executable,
        "-m",
        "prore",
        "--workspace",
        str(ws),
        "--config",
        str(config),
        "index",
        "build",
        "ecommerce",
    ]
    done = subprocess.run(
        [*cmd, "--engine", "ray", "--actors", "1", "--batch-rows", "40", "--no-progress"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ecommerce: published v0001 with 120 docs (built)"
    assert read_current(Workspace(ws), "ecommerce") == "v0001"
    bad = subprocess.run(
        [*cmd, "--engine", "ray", "--actors", "0"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert (bad.returncode, bad.stderr.strip()) == (
        2,
        "error config: build.ray_actors must be at least 1, got 0",
    )


def test_a_typed_error_in_a_ray_task_reaches_the_driver_as_itself(
    ray_address: str, tmp_path: Path, write_synthetic_corpus: Callable[..., Any]
) -> None:
    """A part that no longer matches the plan fails in its read task; the driver raises that StoreError."""
    write_synthetic_corpus(Config(workspace=tmp_path), "ecommerce", PART_ROWS, chunk=PART_ROWS)
    schema = schema_for("ecommerce")
    (plan,) = plan_parts(Workspace(tmp_path), schema, BATCH_ROWS)
    stale = dataclasses.replace(plan, rows=plan.rows + 1)
    source = RayChunks(EmbedderConfig(text="hashing", image="hashing", hashing_dim=8), actors=1)
    with pytest.raises(StoreError) as caught:
        list(source._stream([stale], schema, BATCH_ROWS, 0))
    assert type(caught.value) is StoreError and caught.value.code == "corpus_changed"
    assert (
        caught.value.one_line()
        == f"error corpus_changed: corpus part {plan.path} changed while the index was built"
    )


def test_regroup_rebuilds_whole_chunks_in_order_and_refuses_a_broken_stream(
    tmp_path: Path, write_synthetic_corpus: Callable[..., Any]
) -> None:
    """The driver's side of the stream, on the plan of a real corpus: blocks cut anywhere give whole chunks."""
    import numpy as np
    import pyarrow as pa

    from indexing.corpora.files import iter_corpus

    schema = schema_for("ecommerce")
    ws = Workspace(tmp_path)
    write_synthetic_corpus(Config(workspace=tmp_path), "ecommerce", ROWS, chunk=PART_ROWS)
    plans = plan_parts(ws, schema, BATCH_ROWS)
    assert [(p.first_chunk, p.chunk_rows(BATCH_ROWS)) for p in plans] == [
        (0, [50, 50, 20]),
        (3, [50, 50, 20]),
        (6, [50, 40]),
    ]
    chunks = list(iter_corpus(ws, schema, BATCH_ROWS))
    tagged = []
    for i, c in enumerate(chunks):
        t = c.append_column(CHUNK_COLUMN, pa.array(np.full(c.num_rows, i), pa.int64()))
        for f in schema.vector_fields:
            vec = np.full((c.num_rows, 3), float(i), np.float32)
            t = t.append_column(
                VECTOR_PREFIX + f, pa.FixedSizeListArray.from_arrays(pa.array(vec.reshape(-1)), 3)
            )
        tagged.append(t)
    stream = pa.concat_tables(tagged)
    expected = {i: c.num_rows for i, c in enumerate(chunks)}
    blocks = [stream.slice(s, 37) for s in range(0, stream.num_rows, 37)]  # blocks that straddle chunks
    out = list(regroup(blocks, schema, expected))
    assert [c.index for c in out] == list(range(len(chunks)))
    for got, want in zip(out, chunks, strict=True):
        assert got.table.equals(want)
        assert {f: v.shape for f, v in got.vectors.items()} == {
            f: (want.num_rows, 3) for f in schema.vector_fields
        }
        assert all((v == got.index).all() for v in got.vectors.values())

    with pytest.raises(StoreError, match="more than once") as twice:
        list(regroup([*blocks, blocks[0]], schema, expected))
    assert twice.value.code == "ray_stream"
    with pytest.raises(StoreError, match="ended before chunk 7 was complete"):
        list(regroup(blocks[:-1], schema, expected))


def test_bad_engine_settings_fail_before_anything_is_written(
    workspace_config: Callable[..., Config], write_synthetic_corpus: Callable[..., Any]
) -> None:
    with pytest.raises(ConfigError, match=r"build\.ray_actors must be at least 1, got 0"):
        BuildConfig(engine="ray", ray_actors=0)
    cfg = workspace_config("bad_engine", text="hashing", image="hashing")
    write_synthetic_corpus(cfg, "ecommerce", 10)
    bogus = cfg.replace(build=dataclasses.replace(BuildConfig(), engine="spark"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"build\.engine must be one of local, ray, got 'spark'"):
        build_index(bogus, "ecommerce")
    assert not Workspace(cfg.workspace).index_root("ecommerce").exists()
