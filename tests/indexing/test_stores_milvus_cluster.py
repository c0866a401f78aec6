"""Milvus collections for a cluster (partition key, shard count): the spec as data, and created on the
real local Milvus server where that server supports the options."""

from __future__ import annotations

import pytest

from indexing.errors import StoreError
from indexing.schema import EMAILS, PRODUCTS
from indexing.stores.milvus_cluster import MilvusLayout, build_schema, collection_spec, create_kwargs


def test_spec_partition_key_and_shards() -> None:
    spec = collection_spec(EMAILS, "body", 384, MilvusLayout(shards_num=3, num_partitions=16))
    assert spec["collection_name"] == "emails__body"
    assert create_kwargs(spec) == {"shards_num": 3, "num_partitions": 16}
    keys = [f["name"] for f in spec["fields"] if f.get("is_partition_key")]
    assert keys == ["folder"]
    assert spec["fields"][0] == {"name": "id", "type": "VARCHAR", "is_primary": True, "max_length": 256}
    assert spec["fields"][-1] == {"name": "body_vec", "type": "FLOAT_VECTOR", "dim": 384}


def test_no_partition_key_when_the_domain_has_none() -> None:
    spec = collection_spec(PRODUCTS, "title", 8, MilvusLayout(partition_keys={}))
    assert "num_partitions" not in spec and not any(f.get("is_partition_key") for f in spec["fields"])


def test_bad_layouts() -> None:
    with pytest.raises(StoreError, match="partition key 'price' must be a string or integer field"):
        collection_spec(PRODUCTS, "title", 8, MilvusLayout(partition_keys={"ecommerce": "price"}))
    with pytest.raises(StoreError, match="shards_num and num_partitions must be at least 1"):
        MilvusLayout(shards_num=0)


@pytest.mark.server
def test_created_on_the_local_milvus_server(milvus_server: str) -> None:
    pymilvus = pytest.importorskip("pymilvus")
    spec = collection_spec(PRODUCTS, "review", 8, MilvusLayout(shards_num=2, num_partitions=8),
                           name="cluster_spec_products")  # fmt: skip
    client = pymilvus.MilvusClient(uri=milvus_server)
    try:
        if client.has_collection(spec["collection_name"]):
            client.drop_collection(spec["collection_name"])
        try:
            client.create_collection(
                spec["collection_name"], schema=build_schema(spec, pymilvus), **create_kwargs(spec)
            )
        except pymilvus.MilvusException as exc:
            pytest.skip(f"the local Milvus server does not support this layout: {exc}")
        info = client.describe_collection(spec["collection_name"])
        fields = {f["name"]: f for f in info["fields"]}
        assert fields["category"].get("is_partition_key") is True
        assert {"id", "brand", "review_vec"} <= set(fields)
        # Milvus Lite keeps its own partition count (16) and shard count; a cluster honours both. What
        # must hold everywhere: the key's hash partitions exist, so filtered searches can prune them.
        assert any(p.startswith("_pk_") for p in client.list_partitions(spec["collection_name"]))
    finally:
        client.close()
