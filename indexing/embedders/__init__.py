"""Embedders, chosen by name: ``minilm`` (offline all-MiniLM-L6-v2), ``hashing`` and ``openai``."""
