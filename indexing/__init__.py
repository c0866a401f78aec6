"""Corpora, embedders and stores: the lowest product layer of ProRetrieval, over :mod:`core`.

Dependencies point one way: ``core`` <- ``indexing`` <- ``serving`` <- ``rl`` <- ``prore``.
"""
