"""02: build a corpus, from the generator and from a real source format.

Generates a small seeded e-commerce corpus, shows that the same seed gives the same documents, then
writes a tiny Enron-style maildir (the project's own fixture writer) and loads it through the real
maildir loader into the same ``emails`` schema.

    python examples/02_build_corpus.py [--size 500]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from indexing.corpora import generate
from indexing.corpora.files import corpus_manifest, iter_corpus
from indexing.corpora.fixtures import write_enron_fixture
from indexing.schema import EMAILS, PRODUCTS
from indexing.workspace import Workspace
from prore.cli import main as prore


def run(size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="prore-example-") as tmp:
        ws = Workspace(Path(tmp) / "workspace")
        if prore(["--workspace", str(ws.root), "corpus", "build", "ecommerce", "--size", str(size)]) != 0:
            raise SystemExit("prore corpus build failed")
        manifest = corpus_manifest(ws, "ecommerce")
        first = next(iter_corpus(ws, PRODUCTS, batch_rows=3)).to_pylist()
        print(f"\nproducts: {manifest['rows']} rows, fingerprint {manifest['fingerprint']}")
        for doc in first:
            print(
                f"  {doc['id']}  {doc['brand']:<12} {doc['category']:<14} ${doc['price']:<8} {doc['title']}"
            )

        # Same seed and size: the very same documents, however the stream is chunked.
        again = next(generate("ecommerce", size, seed=0, chunk_rows=7)).to_pylist()[:3]
        print("same seed, same documents:", again == first)

        maildir = write_enron_fixture(Path(tmp) / "enron", n=12).maildir  # <tmp>/enron/maildir/<user>/...
        if prore(["--workspace", str(ws.root), "corpus", "load", "enron", "--maildir", str(maildir)]) != 0:
            raise SystemExit("prore corpus load enron failed")
        emails = next(iter_corpus(ws, EMAILS)).to_pylist()
        print(f"\nemails loaded from a maildir: {len(emails)}")
        for mail in emails[:3]:
            print(f"  {mail['id']}  {mail['date']}  {mail['sender']:<32} {mail['subject']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size", type=int, default=500, help="products to generate (default 500)")
    run(parser.parse_args().size)
