"""Publishing directories: numbered versions behind CURRENT, leases that keep versions in use, staged writes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from indexing.publish import (
    CURRENT,
    Lease,
    collect,
    in_use,
    lease_current,
    list_versions,
    publish,
    read_current,
    staged,
)
from indexing.workspace import Workspace, staged_dir


def _publish_number(root: Path, n: int) -> None:
    with publish(root) as tmp:
        (tmp / "part-00000.parquet").write_bytes(b"x" * 64)
        (tmp / "manifest.json").write_text(json.dumps({"n": n}))


def test_a_reader_polling_during_publishes_never_sees_the_directory_missing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    root = ws.corpus_root("ecommerce")
    _publish_number(root, 0)
    stop = threading.Event()
    seen: list[int] = []
    failures: list[str] = []

    def writer() -> None:
        try:
            for n in range(1, 200):
                # Half through the workspace helper, given the published directory as callers do.
                if n % 2:
                    with staged_dir(ws.corpus_dir("ecommerce")) as tmp:
                        (tmp / "manifest.json").write_text(json.dumps({"n": n}))
                else:
                    _publish_number(root, n)
        finally:
            stop.set()

    def reader() -> None:
        while not stop.is_set():
            lease = lease_current(root)
            if lease is None:
                failures.append("nothing published")
                continue
            with lease:
                try:
                    seen.append(json.loads((lease.directory / "manifest.json").read_text())["n"])
                except FileNotFoundError as exc:
                    failures.append(str(exc))

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    assert seen and seen == sorted(seen)  # each read is one whole version, never an older one after a newer
    assert json.loads((ws.corpus_dir("ecommerce") / "manifest.json").read_text()) == {"n": 199}
    # A version the reader still held at the last publish outlived it; once released, collection drops it.
    collect(root)
    assert read_current(root) == "v0200" and list_versions(root) == ["v0199", "v0200"]


def test_a_failed_block_publishes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "bench"
    _publish_number(root, 1)
    with pytest.raises(RuntimeError), publish(root) as tmp:
        (tmp / "manifest.json").write_text("{}")
        raise RuntimeError("synthesis failed")
    assert read_current(root) == "v0001" and sorted(p.name for p in root.iterdir()) == [
        ".publish.lock",
        CURRENT,
        "v0001",
    ]


def test_a_leased_version_outlives_publishes_and_goes_after_release(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    _publish_number(root, 1)
    lease = lease_current(root)
    assert lease is not None and lease.directory.name == "v0001" and in_use(lease.directory)
    for n in range(2, 6):
        _publish_number(root, n)
    assert list_versions(root) == ["v0001", "v0004", "v0005"]
    assert json.loads((lease.directory / "manifest.json").read_text()) == {"n": 1}
    lease.release()
    lease.release()  # twice is harmless
    assert not in_use(root / "v0001")
    assert collect(root) == ["v0001"] and list_versions(root) == ["v0004", "v0005"]
    assert Lease.acquire(root / "v0001") is None  # gone: no lease on it


def test_a_lease_of_a_killed_process_does_not_pin_its_version(tmp_path: Path) -> None:
    root = tmp_path / "corpus"
    _publish_number(root, 1)
    script = (
        "import sys, time\n"
        "from indexing.publish import lease_current\n"
        f"lease = lease_current({str(root)!r})\n"
        "print(lease.directory.name, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "v0001"
        for n in range(2, 4):
            _publish_number(root, n)
        assert list_versions(root) == ["v0001", "v0002", "v0003"]  # held by the other process
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert collect(root) == ["v0001"]


def test_files_of_the_layout_before_versions_are_read_then_replaced(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    old = ws.bench_root("email")
    old.mkdir(parents=True)
    (old / "manifest.json").write_text('{"n": "old"}')
    assert ws.bench_dir("email") == old  # nothing published yet: the old layout is read as it is
    with staged_dir(ws.bench_dir("email")) as tmp:
        (tmp / "manifest.json").write_text('{"n": "new"}')
    assert ws.bench_dir("email") == old / "v0001"
    assert json.loads((ws.bench_dir("email") / "manifest.json").read_text()) == {"n": "new"}
    assert not (old / "manifest.json").exists()


def test_staged_renames_into_place_or_leaves_nothing(tmp_path: Path) -> None:
    final = tmp_path / "runs" / "r1"
    with staged(final) as tmp:
        (tmp / "summary.json").write_text("{}")
    assert (final / "summary.json").is_file()
    with pytest.raises(OSError), staged(final) as tmp:  # a published run is never replaced
        (tmp / "summary.json").write_text('{"again": 1}')
    assert (final / "summary.json").read_text() == "{}"
    with staged(final, replace=True) as tmp:
        (tmp / "other.json").write_text("{}")
    assert sorted(p.name for p in final.iterdir()) == ["other.json"]
    with pytest.raises(KeyError), staged(tmp_path / "runs" / "r2") as tmp:
        raise KeyError("x")
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["r1"]
