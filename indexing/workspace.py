"""The workspace directory: one place for corpora, embedded stores, indexes and reports.

Layout::

    workspace/
      corpora/<domain>/part-00000.parquet ...   + manifest.json (written last: its presence = complete)
      indexes/<domain>/CURRENT                  name of the published version, switched atomically
      indexes/<domain>/<version>/               BM25 indexes and the build journal of that version
      chdb/                                     embedded ClickHouse files
      milvus.db                                 embedded Milvus Lite file
      bench/<domain>/                           benchmark splits (parquet) and manifest
      reports/                                  evaluation reports
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Workspace:
    root: Path

    def corpus_dir(self, domain: str) -> Path:
        return self.root / "corpora" / domain

    def index_root(self, domain: str) -> Path:
        return self.root / "indexes" / domain

    def index_dir(self, domain: str, version: str) -> Path:
        return self.index_root(domain) / version

    @property
    def chdb_path(self) -> Path:
        return self.root / "chdb"

    @property
    def milvus_path(self) -> Path:
        return self.root / "milvus.db"

    def bench_dir(self, domain: str) -> Path:
        return self.root / "bench" / domain

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new one, never a half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Build a directory beside ``final`` and swap it into place only if the block succeeds.

    Readers see the previous ``final`` or the new one, never a partial one; on failure the staged
    directory is removed and ``final`` is left as it was.
    """
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        old = final.with_name(final.name + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if final.exists():
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
