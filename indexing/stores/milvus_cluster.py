"""Milvus collections for a cluster: a partition key on a corpus field and a configurable shard count.

A corpus of a million documents or more lives in a Milvus cluster (``platform/``: the Milvus operator's
``Milvus`` resource with query-node and proxy replicas). Each vector field's collection there is

- split into ``shards_num`` shards (write channels spread over the data nodes), and
- partitioned by a *partition key*: Milvus hashes a structured field's value into ``num_partitions``
  partitions, and a search filtered on that field reads only the matching partitions.

:func:`collection_spec` is that layout as plain data (a pure function, no client), and
:func:`build_schema` turns it into a pymilvus schema. The field list is the one the embedded store writes
(:mod:`indexing.stores.milvus`): ``id``, the structured fields, then the vector.

>>> from indexing.schema import PRODUCTS
>>> spec = collection_spec(PRODUCTS, "review", 384, MilvusLayout(shards_num=4))
>>> spec["shards_num"], spec["num_partitions"], [f["name"] for f in spec["fields"] if f.get("is_partition_key")]
(4, 64, ['category'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from indexing.errors import StoreError
from indexing.schema import CorpusSchema, DType
from indexing.stores.milvus import VARCHAR_MAX, field_collection, vector_field

DEFAULT_PARTITION_KEYS: dict[str, str] = {"ecommerce": "category", "email": "folder"}
"""Partition key per domain: a low-cardinality field that programs filter on often."""

_TYPES = {DType.STRING: "VARCHAR", DType.INT: "INT64", DType.FLOAT: "DOUBLE", DType.BOOL: "BOOL"}


@dataclass(frozen=True)
class MilvusLayout:
    """How a corpus's collections are spread over a Milvus cluster."""

    shards_num: int = 2
    """Shards of each collection (Milvus's default is 1; one per data node is a good start)."""
    num_partitions: int = 64
    """Partitions the partition key hashes into (Milvus's default)."""
    partition_keys: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_PARTITION_KEYS))
    """Partition key field per domain; a domain without one gets no partition key."""

    def __post_init__(self) -> None:
        if self.shards_num < 1 or self.num_partitions < 1:
            raise StoreError(f"shards_num and num_partitions must be at least 1, got {self.shards_num} and "
                             f"{self.num_partitions}", code="milvus_layout")  # fmt: skip


def collection_spec(schema: CorpusSchema, vector: str, dim: int, layout: MilvusLayout, *,
                    name: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The collection of vector field ``vector`` of ``schema`` on a cluster, as data."""
    key = layout.partition_keys.get(schema.domain)
    if key is not None and (
        key not in schema.structured_fields or schema.field(key).dtype not in (DType.STRING, DType.INT)
    ):
        raise StoreError(
            f"partition key {key!r} must be a string or integer field of {schema.domain}",
            code="milvus_layout",
        )
    fields: list[dict[str, Any]] = [{"name": "id", "type": "VARCHAR", "is_primary": True, "max_length": 256}]
    for fname in schema.structured_fields:
        if fname == "id":
            continue
        kind = _TYPES.get(schema.field(fname).dtype, "INT64")  # dates and datetimes: epoch seconds
        f: dict[str, Any] = {"name": fname, "type": kind}
        if kind == "VARCHAR":
            f["max_length"] = VARCHAR_MAX
        if fname == key:
            f["is_partition_key"] = True
        fields.append(f)
    fields.append({"name": vector_field(vector), "type": "FLOAT_VECTOR", "dim": dim})
    spec: dict[str, Any] = {
        "collection_name": field_collection(name or schema.table, vector),
        "fields": fields,
        "shards_num": layout.shards_num,
    }
    if key is not None:
        spec["num_partitions"] = layout.num_partitions
    return spec


def build_schema(spec: dict[str, Any], pymilvus: Any) -> Any:
    """The pymilvus ``CollectionSchema`` of a :func:`collection_spec`."""
    sch = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
    for f in spec["fields"]:
        extra = {k: v for k, v in f.items() if k not in ("name", "type")}
        sch.add_field(f["name"], getattr(pymilvus.DataType, f["type"]), **extra)
    return sch


def create_kwargs(spec: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``MilvusClient.create_collection`` besides name and schema."""
    out = {"shards_num": spec["shards_num"]}
    if "num_partitions" in spec:
        out["num_partitions"] = spec["num_partitions"]
    return out
