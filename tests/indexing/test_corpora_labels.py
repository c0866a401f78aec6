"""The label table beside a generated corpus: what the generators decided, equal to what the text says."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from indexing.corpora import generate, generate_labeled
from indexing.corpora.files import corpus_manifest, iter_corpus, part_paths, read_labels, write_corpus
from indexing.corpora.labels import LABEL_SCHEMA, LabeledBatch, find_labels
from indexing.errors import CorpusError
from indexing.schema import DOMAINS, EMAILS, PRODUCTS, schema_for
from indexing.workspace import Workspace

SIZE = 2_500  # more than two generator blocks


@pytest.mark.parametrize("domain", DOMAINS)
def test_labels_agree_with_the_facets_found_in_every_document(domain: str) -> None:
    schema = schema_for(domain)
    checked = 0
    for batch in generate_labeled(domain, SIZE, seed=4, chunk_rows=777):
        by_doc: dict[tuple[str, str], list[str]] = defaultdict(list)
        for row in batch.labels.to_pylist():
            by_doc[(row["doc_id"], row["field"])].append(row["facet"])
        assert set(f for _, f in by_doc) <= set(schema.vector_fields)
        for doc in batch.table.to_pylist():
            for name in schema.vector_fields:
                found = find_labels(domain, name, doc[name], doc.get("category"))
                assert sorted(found) == sorted(by_doc.get((doc["id"], name), [])), (doc["id"], name)
                checked += 1
    assert checked == SIZE * len(schema.vector_fields)


@pytest.mark.parametrize("domain", DOMAINS)
def test_labeled_documents_equal_the_plain_generator_and_every_document_is_labeled(domain: str) -> None:
    labeled = list(generate_labeled(domain, 1_100, seed=2, chunk_rows=300))
    plain = list(generate(domain, 1_100, seed=2, chunk_rows=300))
    assert [b.table for b in labeled] == plain
    ids = {i for b in labeled for i in b.labels.column("doc_id").to_pylist()}
    assert ids == {i for t in plain for i in t.column("id").to_pylist()}
    assert all(b.labels.schema.equals(LABEL_SCHEMA) for b in labeled)


def test_labels_are_written_beside_the_parts_and_change_the_fingerprint(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    a = write_corpus(ws, PRODUCTS, generate_labeled("ecommerce", 700, seed=1, chunk_rows=100), {})
    labels = read_labels(ws, "ecommerce")
    assert labels is not None and labels.num_rows == a["labels"]["rows"] > 700
    b = write_corpus(ws, PRODUCTS, generate_labeled("ecommerce", 700, seed=1, chunk_rows=700), {})
    assert a["fingerprint"] == b["fingerprint"] and a["labels"] == b["labels"]
    # The index build reads the parts alone: no label column and no label file among them.
    assert all(p.name.startswith("part-") for p in part_paths(ws, "ecommerce"))
    assert all("facet" not in pq.read_schema(p).names for p in part_paths(ws, "ecommerce"))
    assert all("facet" not in t.column_names for t in iter_corpus(ws, PRODUCTS))
    plain = write_corpus(ws, PRODUCTS, generate("ecommerce", 700, seed=1, chunk_rows=700), {})
    assert plain["labels"] is None and read_labels(ws, "ecommerce") is None
    assert plain["fingerprint"] != a["fingerprint"]
    # One label more is another corpus.
    docs, lab = next(generate_labeled("ecommerce", 700, seed=1, chunk_rows=700))
    extra = pa.table(
        {"doc_id": ["P00001"], "field": ["review"], "facet": ["general.build_quality"]}, schema=LABEL_SCHEMA
    )
    c = write_corpus(ws, PRODUCTS, [LabeledBatch(docs, pa.concat_tables([lab, extra]))], {})
    assert c["fingerprint"] != a["fingerprint"]


def test_a_corpus_mixing_labeled_and_plain_batches_is_refused(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    before = write_corpus(ws, EMAILS, generate_labeled("email", 50, seed=0), {})
    docs = list(generate("email", 100, seed=0, chunk_rows=50))
    mixed = [next(generate_labeled("email", 50, seed=0)), docs[1]]
    with pytest.raises(CorpusError, match="labels"):
        write_corpus(ws, EMAILS, mixed, {})
    assert corpus_manifest(ws, "email") == before
