"""Publishing directories atomically: staged writes, numbered versions, a ``CURRENT`` pointer and leases.

Every directory the project publishes (corpora, benchmarks, index versions, evaluation runs and
comparisons, BM25 indexes) is written aside and renamed into place by this module, so a reader never
sees a half-written one. A *publish root* holds numbered versions::

    root/CURRENT          the published version's name, one line, replaced atomically (temp file + rename)
    root/v0001/           a complete version; it never changes once renamed into place
    root/v0001/.readers   the lock file of the version's leases
    root/.stage-*/        a version being written (never read)

* **Writers** use :func:`publish`: the block fills a staged directory; on success it becomes the next
  ``vNNNN``, ``CURRENT`` switches to it, and old versions are collected.
* **Readers** resolve ``CURRENT`` with :func:`current_dir`. Between two renames of an old-style swap
  the directory did not exist; here the published directory is always there.
* **Leases.** A reader that reads for a while (an index handle, a long scan) holds a :class:`Lease`:
  a shared ``flock`` on the version's ``.readers`` file. A version is removed only by a collector
  that gets that lock exclusively, so a leased version is never removed. A lease ends with its
  process (the kernel drops the lock), so a crashed reader never pins a version.
* **Garbage.** :func:`collect` keeps ``CURRENT``, the newest ``keep`` versions (by default the
  previous one too, for readers that resolved ``CURRENT`` just before a switch without a lease),
  and every leased version.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CURRENT = "CURRENT"
READERS = ".readers"
LOCK = ".publish.lock"
VERSION_RE = re.compile(r"^v(\d{4,})$")
DEFAULT_KEEP = 2
"""Newest versions a publish keeps besides leased ones: the new one and the one before it."""


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
    """:func:`atomic_write_text` of ``data`` as indented, key-sorted JSON."""
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def version_name(number: int) -> str:
    """``3`` -> ``v0003``."""
    return f"v{number:04d}"


def version_number(name: str) -> int | None:
    """``v0003`` -> ``3``; ``None`` for a name that is not a version."""
    found = VERSION_RE.match(name)
    return int(found.group(1)) if found else None


def read_current(root: Path) -> str | None:
    """The version ``CURRENT`` names under ``root``, or ``None`` if none was ever published."""
    try:
        name = (Path(root) / CURRENT).read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return name if VERSION_RE.match(name) else None


def current_dir(root: Path) -> Path | None:
    """The published directory of ``root`` (``root/<CURRENT>``), or ``None`` before the first publish."""
    name = read_current(root)
    return Path(root) / name if name else None


def list_versions(root: Path) -> list[str]:
    """Names of the version directories under ``root``, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p.name for p in root.iterdir() if p.is_dir() and VERSION_RE.match(p.name)]
    return sorted(found, key=lambda n: version_number(n) or 0)


def next_version(root: Path) -> str:
    """The name after every version under ``root`` and the one ``CURRENT`` names."""
    names = [*list_versions(root), read_current(root) or ""]
    return version_name(max((version_number(n) or 0 for n in names), default=0) + 1)


@contextlib.contextmanager
def staged(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """Fill a hidden sibling of ``final`` in the block, then rename it to ``final``; on failure remove it.

    ``final`` must not exist, unless ``replace`` is set: then an existing ``final`` is removed just
    before the rename. That step is not atomic, so ``replace`` is only for directories no reader
    uses yet (the parts of a version still being built); published ones go through :func:`publish`.
    """
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".stage-{final.name}-"))
    try:
        yield tmp
        if replace and final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextlib.contextmanager
def publish(root: Path, *, keep: int = DEFAULT_KEEP) -> Iterator[Path]:
    """Write a new version of ``root`` in the block; on success publish it and collect old versions.

    The staged directory becomes the next ``vNNNN``, then ``CURRENT`` names it. A reader sees the
    previous version or the new one, whole. On failure nothing is published and the staged
    directory is removed. Concurrent publishers of one root are serialized at the switch.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=".stage-"))
    try:
        yield tmp
        (tmp / READERS).touch()
        with _root_lock(root):
            name = next_version(root)
            tmp.rename(root / name)
            atomic_write_text(root / CURRENT, name + "\n")
            _remove_loose_files(root)
            collect(root, keep=keep)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def collect(
    root: Path,
    *,
    keep: int = DEFAULT_KEEP,
    also_keep: frozenset[str] = frozenset(),
    drop: Callable[[Path], None] | None = None,
) -> list[str]:
    """Remove the versions of ``root`` that are not ``CURRENT``, not among the newest ``keep``, not in
    ``also_keep`` and not leased; return their names.

    ``drop(version_dir)`` removes a version (default: rename it aside, then delete it); it runs while
    the version is claimed, so no lease can start meanwhile.
    """
    versions = list_versions(root)
    kept = {read_current(root) or "", *also_keep, *(versions[-keep:] if keep > 0 else [])}
    gone = []
    for name in versions:
        if name in kept:
            continue
        with claim(Path(root) / name) as claimed:
            if claimed:
                (drop or _remove)(Path(root) / name)
                gone.append(name)
    return gone


@contextlib.contextmanager
def claim(version_dir: Path) -> Iterator[bool]:
    """Hold ``version_dir`` exclusively for removal: ``True`` if no lease is held, else ``False``.

    While claimed no lease can start; a reader trying one is told the version is gone.
    """
    try:
        fd = os.open(Path(version_dir) / READERS, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def in_use(version_dir: Path) -> bool:
    """Whether a lease is held on ``version_dir`` (by any process)."""
    with claim(version_dir) as claimed:
        return not claimed and Path(version_dir).is_dir()


class Lease:
    """A reader's hold on one version directory; :func:`collect` and index builds keep it while held.

    Get one with :meth:`acquire` (or :func:`lease_current`); end it with :meth:`release` or a
    ``with`` block. Holding costs one open file descriptor. Releasing twice is harmless.
    """

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path, *, marker: str | None = None) -> Lease | None:
        """A lease on ``directory``, or ``None`` if it is gone or being removed.

        ``marker`` names a file that must exist in a usable version (an index's ``version.json``);
        without one the directory itself must still exist under its name.
        """
        directory = Path(directory)
        try:
            fd = os.open(directory / READERS, os.O_RDONLY | os.O_CREAT, 0o644)
        except (FileNotFoundError, NotADirectoryError):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        # A collector that claimed the version before this lock removed the marker (or moved the
        # directory) before letting go, so checking after locking tells whether the version lives.
        usable = (directory / marker).is_file() if marker else directory.is_dir()
        if not usable:
            os.close(fd)
            return None
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"Lease({str(self.directory)!r}, held={self.held})"


def lease_current(root: Path, *, marker: str | None = None, attempts: int = 10) -> Lease | None:
    """A lease on the version ``CURRENT`` names, or ``None`` if nothing is published.

    ``CURRENT`` is read again when its version went away between reading and locking.
    """
    for _ in range(attempts):
        name = read_current(root)
        if name is None:
            return None
        lease = Lease.acquire(Path(root) / name, marker=marker)
        if lease is not None:
            return lease
    return None


def _remove(version_dir: Path) -> None:
    trash = version_dir.with_name(f".trash-{version_dir.name}-{uuid.uuid4().hex[:8]}")
    version_dir.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


def _remove_loose_files(root: Path) -> None:
    """Drop files of the layout before versions (parts and manifests directly in ``root``)."""
    for p in root.iterdir():
        if p.is_file() and not p.name.startswith(".") and p.name != CURRENT:
            p.unlink(missing_ok=True)


@contextlib.contextmanager
def _root_lock(root: Path) -> Iterator[None]:
    fd = os.open(root / LOCK, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
