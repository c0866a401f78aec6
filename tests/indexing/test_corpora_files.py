"""Workspace corpus files: atomic replacement and a content fingerprint independent of parts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from indexing.corpora.files import corpus_manifest, iter_corpus, write_corpus
from indexing.corpora.products import generate_products
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


def test_bad_batch_leaves_previous_corpus_and_meta_after_is_merged(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    before = write_corpus(ws, PRODUCTS, generate_products(30), {"source": "generated"}, lambda: {"extra": 1})
    assert before["extra"] == 1 and before["rows"] == 30
    bad = pa.concat_tables(generate_products(5)).drop_columns(["title"])
    with pytest.raises(CorpusError):
        write_corpus(ws, PRODUCTS, [bad], {"source": "broken"})
    assert corpus_manifest(ws, "ecommerce") == before
    assert sum(t.num_rows for t in iter_corpus(ws, PRODUCTS)) == 30
