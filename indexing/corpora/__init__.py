"""Corpora: seeded generators, loaders for the real formats, and the workspace corpus files.

- :mod:`~indexing.corpora.vocab`: the vocabulary (facets, visual terms, brands, email topics).
- :mod:`~indexing.corpora.products`, :mod:`~indexing.corpora.emails`: streamed generators.
- :mod:`~indexing.corpora.esci` (Amazon ESCI + Reviews 2023) and :mod:`~indexing.corpora.enron` (Enron
  maildir): loaders of the real formats, sharing :mod:`~indexing.corpora.loading`;
  :mod:`~indexing.corpora.fixtures` writes small files in those formats.
- :mod:`~indexing.corpora.labels`: the label table (facets per document and field) of a generated corpus.
- :mod:`~indexing.corpora.files`: parquet parts (and label parts) plus a manifest written last.
- :mod:`~indexing.corpora.commands`: ``prore corpus build|load|show``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from indexing.corpora.labels import LabeledBatch
from indexing.errors import CorpusError


def generate(domain: str, size: int, seed: int = 0, chunk_rows: int = 10_000) -> Iterator[pa.Table]:
    """Stream the generated corpus of ``domain`` (``ecommerce`` or ``email``)."""
    if domain == "ecommerce":
        from indexing.corpora.products import generate_products

        return generate_products(size, seed, chunk_rows)
    if domain == "email":
        from indexing.corpora.emails import generate_emails

        return generate_emails(size, seed, chunk_rows)
    raise CorpusError(f"unknown domain {domain!r}; choose one of ecommerce, email")


def generator_version(domain: str) -> str:
    """Version of the generator of ``domain``; manifests record it."""
    if domain == "ecommerce":
        from indexing.corpora.products import GENERATOR_VERSION
    elif domain == "email":
        from indexing.corpora.emails import GENERATOR_VERSION
    else:
        raise CorpusError(f"unknown domain {domain!r}; choose one of ecommerce, email")
    return GENERATOR_VERSION


def generate_labeled(
    domain: str, size: int, seed: int = 0, chunk_rows: int = 10_000
) -> Iterator[LabeledBatch]:
    """The batches of :func:`generate`, each with the label rows of its documents (see
    :mod:`indexing.corpora.labels`)."""
    if domain == "ecommerce":
        from indexing.corpora.products import labeled_products

        return labeled_products(size, seed, chunk_rows)
    if domain == "email":
        from indexing.corpora.emails import labeled_emails

        return labeled_emails(size, seed, chunk_rows)
    raise CorpusError(f"unknown domain {domain!r}; choose one of ecommerce, email")
