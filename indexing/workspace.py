"""The workspace directory: one place for corpora, embedded stores, indexes and reports.

Layout::

    workspace/
      corpora/<domain>/CURRENT                  name of the published corpus version, switched atomically
      corpora/<domain>/<version>/               part-00000.parquet ... + manifest.json
      indexes/<domain>/CURRENT                  name of the published index version, switched atomically
      indexes/<domain>/<version>/               BM25 indexes and the build journal of that version
      chdb/                                     embedded ClickHouse files
      milvus.db                                 embedded Milvus Lite file
      bench/<domain>/CURRENT, <version>/        benchmark splits (parquet) and manifest
      reports/                                  evaluation reports
      cache/                                    rewriter and other caches

Corpora and benchmarks are published with :func:`indexing.publish.publish` (see that module for
versions, leases and garbage collection); ``corpus_dir`` and ``bench_dir`` resolve ``CURRENT``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from indexing.publish import CURRENT, VERSION_RE, atomic_write_json, atomic_write_text, current_dir, publish

__all__ = ["Workspace", "atomic_write_json", "atomic_write_text", "published_dir", "staged_dir"]


def published_dir(root: Path) -> Path:
    """The published version of a publish root; ``root`` itself before the first publish.

    ``root`` is also what a workspace written before versioned publishing holds its files in.
    """
    return current_dir(root) or root


@dataclass(frozen=True)
class Workspace:
    root: Path

    def corpus_root(self, domain: str) -> Path:
        """Publish root of the corpus of ``domain`` (``CURRENT`` and the versions)."""
        return self.root / "corpora" / domain

    def corpus_dir(self, domain: str) -> Path:
        """The published corpus directory of ``domain`` (resolved through ``CURRENT``)."""
        return published_dir(self.corpus_root(domain))

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

    def bench_root(self, domain: str) -> Path:
        """Publish root of the benchmark of ``domain``."""
        return self.root / "bench" / domain

    def bench_dir(self, domain: str) -> Path:
        """The published benchmark directory of ``domain`` (resolved through ``CURRENT``)."""
        return published_dir(self.bench_root(domain))

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache"


@contextmanager
def staged_dir(final: Path) -> Iterator[Path]:
    """Write a new version of the publish root ``final`` in the block; publish it only if the block succeeds.

    Readers (``Workspace.corpus_dir``/``bench_dir``) see the previous version or the new one, whole,
    and the published directory always exists; on failure nothing changes. ``final`` may also be
    the published directory of a root, as ``corpus_dir`` returns it: the new version goes beside it.
    """
    final = Path(final)
    if VERSION_RE.match(final.name) and (final.parent / CURRENT).is_file():
        final = final.parent
    with publish(final) as tmp:
        yield tmp
