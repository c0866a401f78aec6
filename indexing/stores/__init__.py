"""The stores: ClickHouse (chDB or a server), Milvus (Lite or a server) and BM25 indexes."""
