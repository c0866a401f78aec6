"""Corpora, embedders and stores: the bottom layer of ProRetrieval.

Dependencies point one way: ``indexing`` <- ``serving`` <- ``rl``.
"""
