"""Corpus generators (seeded, streamed), loaders for real formats, and the workspace corpus files."""
