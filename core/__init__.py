"""What every layer of ProRetrieval shares, and nothing product-specific: the root error, the registry, typed
settings and their command-line flags, processes, caches, logging filters and the one OpenAI-compatible client.

The bottom layer: ``core`` <- ``indexing`` <- ``serving`` <- ``rl`` <- ``prore``. It imports none of them.
"""
