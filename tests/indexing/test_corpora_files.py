"""Workspace corpus files: atomic replacement and a content fingerprint independent of parts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from indexing.corpora.files import corpus_manifest, iter_corpus, read_extras, write_corpus
from indexing.corpora.loading import LoadStats
from indexing.corpora.products import generate_products
from indexing.corpora.report import read_report
from indexing.errors import CorpusError
from indexing.schema import PRODUCTS
from indexing.workspace import Workspace


def test_fingerprint_follows_content_not_parts(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    a = write_corpus(ws, PRODUCTS, generate_products(700, seed=1, chunk_rows=100), {})
    b = write_corpus(ws, PRODUCTS, generate_products(700, seed=1, chunk_rows=700), {})
    c = write_corpus(ws, PRODUCTS, generate_products(700, seed=2, chunk_rows=700), {})
    assert (a["parts"], b["parts"]) == (7, 1)
    assert a["fingerprint"] == b["fingerprint"] != c["fingerprint"]
    table = pa.concat_tables(generate_products(700, seed=2))
    prices = table.column("price").to_pylist()
    prices[5] += 1.0
    changed = table.set_column(table.schema.get_field_index("price"), "price", pa.array(prices))
    assert write_corpus(ws, PRODUCTS, [changed], {})["fingerprint"] != c["fingerprint"]


def test_bad_batch_leaves_previous_corpus(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    before = write_corpus(ws, PRODUCTS, generate_products(30), {"source": "generated"})
    assert before["rows"] == 30
    bad = pa.concat_tables(generate_products(5)).drop_columns(["title"])
    with pytest.raises(CorpusError):
        write_corpus(ws, PRODUCTS, [bad], {"source": "broken"})
    assert corpus_manifest(ws, "ecommerce") == before
    assert sum(t.num_rows for t in iter_corpus(ws, PRODUCTS)) == 30


def test_load_report_and_extra_columns_are_written_with_the_corpus(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    table = pa.concat_tables(generate_products(20, seed=3))
    titles = table.column("title").to_pylist()
    titles[4] = ""
    table = table.set_column(table.schema.get_field_index("title"), "title", pa.array(titles))
    stats = LoadStats(read=23, rows=20, dropped=Counter(no_price=2, duplicate_product=1))
    stats.extras = pa.table({"id": table.column("id"), "asin": [f"B{k}" for k in range(20)]})
    write_corpus(ws, PRODUCTS, [table.slice(0, 8), table.slice(8)], {"source": "esci"}, stats)
    report = read_report(ws.corpus_dir("ecommerce"))
    assert report is not None
    assert (report["read"], report["loaded"], report["rows"]) == (23, 20, 20)
    assert report["dropped"] == {"no_price": 2} and report["deduplicated"] == {"duplicate_product": 1}
    assert report["columns"]["title"] == {"empty": 1} and report["columns"]["brand"] == {"empty": 0}
    dates = table.column("release_date").to_pylist()
    assert report["columns"]["release_date"] == {"range": [str(min(dates)), str(max(dates))]}
    assert report["extras"] == ["asin"]
    extras = read_extras(ws, "ecommerce", ["P00002", "P00019"])
    assert extras is not None and extras.to_pylist() == [
        {"id": "P00002", "asin": "B1"},
        {"id": "P00019", "asin": "B18"},
    ]
    before = corpus_manifest(ws, "ecommerce")
    stats.extras = stats.extras.slice(1)
    with pytest.raises(CorpusError) as err:
        write_corpus(ws, PRODUCTS, [table], {"source": "esci"}, stats)
    assert err.value.code == "extras" and corpus_manifest(ws, "ecommerce") == before


def test_a_generated_corpus_has_a_report_and_no_extras(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    write_corpus(ws, PRODUCTS, generate_products(30), {"source": "generated"})
    report = read_report(ws.corpus_dir("ecommerce"))
    assert report is not None and report["rows"] == 30 and report["extras"] is None and "read" not in report
    assert read_extras(ws, "ecommerce") is None
