"""The stores: ClickHouse (chDB or a server), Milvus (Lite or a server) and BM25 indexes.

Heavy clients are imported by the modules that need them (``indexing.stores.clickhouse``,
``indexing.stores.milvus``, ``indexing.stores.bm25``), so importing this package stays cheap.
"""
