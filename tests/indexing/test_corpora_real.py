"""Opt-in checks of the loaders on the real data: each is skipped unless its variable names a copy.

``PRORE_ENRON_MAILDIR``: the ``maildir/`` of the Enron release (CMU's ``enron_mail_20150507``), loaded
whole (about 517,000 files; many minutes). ``PRORE_ESCI_DIR``: a directory holding
``shopping_queries_dataset_products.parquet`` somewhere beneath it (a clone of ``amazon-science/esci-data``
made with git-lfs) and, at its top, one Amazon Reviews 2023 review file ``<Category>.jsonl[.gz]`` with its
``meta_<Category>.jsonl[.gz]``. Each load goes through ``prore corpus load`` into a temporary workspace,
and its counts are checked against counts made here from the raw files, without the loaders' code.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from indexing.corpora.files import read_extras
from indexing.corpora.report import read_report
from indexing.workspace import Workspace
from prore.cli import main

_MESSAGE_ID = re.compile(rb"^message-id:[ \t]*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)
_DATE = re.compile(rb"^date:[ \t]*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_PLACEHOLDER = re.compile(rb"^date:[ \t]*mon, 31 dec 1979 16:00:00 -0800", re.IGNORECASE | re.MULTILINE)
_OUTLOOK_FILE = re.compile(rb"<<\s*File:\s*[^<>\r\n]+?\s*>>")
_NOTES_FILE = re.compile(rb"<<[^<>\s][^<>\r\n]*\.[A-Za-z0-9]{2,5}>>")
_MIME_ATTACHMENT = re.compile(
    rb"^content-disposition:[ \t]*attachment|filename=", re.IGNORECASE | re.MULTILINE
)
ATTACHMENT_TOLERANCE = 0.001
"""Share of loaded messages by which the attachment count may differ from the raw count: the raw count
reads every part of a file, the loader the first plain-text part's body."""


def _source(variable: str) -> Path:
    value = os.environ.get(variable)
    if not value:
        pytest.skip(f"{variable} is not set: it names a copy of the real data to check the loader on")
    path = Path(value)
    if not path.is_dir():
        pytest.fail(f"{variable}={value} is not a directory")
    return path


def _load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], domain: str, *argv: str
) -> tuple[Workspace, dict[str, Any]]:
    """``prore corpus load ARGV`` into a new workspace; the workspace and the corpus's load report."""
    ws = Workspace(tmp_path / "ws")
    rc = main(["--workspace", str(ws.root), "corpus", "load", *argv])
    _, err = capsys.readouterr()
    assert rc == 0, err
    report = read_report(ws.corpus_dir(domain))
    assert report is not None
    return ws, report


def _raw_messages(maildir: Path) -> dict[str, Any]:
    """Counts made from the raw files: every file not hidden, read as bytes, headers found by pattern."""
    files = placeholder = out_of_range = no_id = attached_no_id = 0
    ids: dict[bytes, int] = defaultdict(int)
    attached: dict[bytes, bool] = {}
    for dirpath, dirnames, filenames in os.walk(maildir):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith("."):
                continue
            files += 1
            data = Path(dirpath, name).read_bytes()
            head = re.split(rb"\r?\n\r?\n", data, maxsplit=1)[0].replace(b"\r", b"")
            if _PLACEHOLDER.search(head):
                placeholder += 1
                continue
            date = _DATE.search(head)
            when = parsedate_to_datetime(date.group(1).decode("ascii", "replace")) if date else None
            if when is not None and not 1970 <= when.year < 2106:
                out_of_range += 1
                continue
            found = bool(
                _OUTLOOK_FILE.search(data) or _NOTES_FILE.search(data) or _MIME_ATTACHMENT.search(data)
            )
            m = _MESSAGE_ID.search(head)
            if m is None:
                no_id += 1
                attached_no_id += found
                continue
            ids[m.group(1)] += 1
            attached[m.group(1)] = attached.get(m.group(1), False) or found
    return {
        "files": files,
        "placeholder": placeholder,
        "out_of_range": out_of_range,
        "messages": len(ids) + no_id,
        "copies": {k.decode("utf-8", "replace"): n for k, n in ids.items()},
        "attached": sum(attached.values()) + attached_no_id,
    }


def test_real_enron_maildir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    maildir = _source("PRORE_ENRON_MAILDIR")
    raw = _raw_messages(maildir)
    ws, report = _load(tmp_path, capsys, "email", "enron", "--maildir", str(maildir))
    dropped, dedup = report["dropped"], report["deduplicated"]
    # No message is lost: every file is loaded, dropped with a reason, or a copy of one loaded.
    assert report["read"] == raw["files"]
    assert report["loaded"] + sum(dropped.values()) + sum(dedup.values()) == raw["files"], report
    assert dropped.get("placeholder_date", 0) == raw["placeholder"]
    assert dropped.get("date_out_of_range", 0) == raw["out_of_range"]
    # One row per message: the distinct Message-IDs, a file without one counting alone.
    assert report["rows"] == raw["messages"]
    assert sum(dedup.values()) == sum(n - 1 for n in raw["copies"].values())
    # Duplicates are grouped: each loaded message lists every file holding its Message-ID.
    extras = read_extras(ws, "email")
    assert extras is not None and extras.num_rows == report["rows"]
    message_ids = [m for m in extras.column("message_id").to_pylist() if m]
    assert len(message_ids) == len(set(message_ids))
    copies = pc.list_value_length(extras.column("copies")).to_pylist()
    lengths = dict(zip(extras.column("message_id").to_pylist(), copies, strict=True))
    assert lengths.keys() >= raw["copies"].keys()
    wrong = {m: (lengths[m], n) for m, n in raw["copies"].items() if lengths[m] != n}
    assert not wrong, (
        f"{len(wrong)} messages list another number of copies than files: {list(wrong.items())[:3]}"
    )
    # has_attachment agrees with the raw markers (Outlook << File: ... >>, Notes <<name.ext>>) and MIME parts.
    parts = sorted(ws.corpus_dir("email").glob("part-*.parquet"))
    loaded = sum(pc.sum(pq.read_table(p, columns=["has_attachment"]).column(0)).as_py() or 0 for p in parts)
    tolerance = max(1, ATTACHMENT_TOLERANCE * report["rows"])
    assert abs(loaded - raw["attached"]) <= tolerance, f"has_attachment {loaded}, raw count {raw['attached']}"


def test_real_esci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = _source("PRORE_ESCI_DIR")
    products = next(directory.rglob("shopping_queries_dataset_products.parquet"), None)
    if products is None:
        pytest.skip(f"no shopping_queries_dataset_products.parquet under PRORE_ESCI_DIR={directory}")
    reviews = [p for p in directory.glob("*.jsonl*") if not p.name.startswith("meta_")]
    if len(reviews) != 1 or not (directory / f"meta_{reviews[0].name}").is_file():
        pytest.skip(
            f"PRORE_ESCI_DIR={directory} needs one <Category>.jsonl[.gz] and its meta_ file at its top"
        )
    meta = directory / f"meta_{reviews[0].name}"
    argv = ("esci", "--products", str(products), "--reviews", str(reviews[0]), "--meta", str(meta))
    ws, report = _load(tmp_path, capsys, "ecommerce", *argv)
    us = pq.read_table(products, columns=["product_id"], filters=[("product_locale", "=", "us")])
    ids = us.column("product_id").to_pylist()
    dropped, dedup = report["dropped"], report["deduplicated"]
    assert report["read"] == len(ids)
    assert report["loaded"] + sum(dropped.values()) + sum(dedup.values()) == len(ids), report
    assert sum(dedup.values()) == len(ids) - len(set(ids))
    extras = read_extras(ws, "ecommerce")
    assert extras is not None and extras.num_rows == report["rows"]
    asins = extras.column("asin").to_pylist()
    assert len(asins) == len(set(asins)) and set(asins) <= set(ids)
