"""Corpus schemas: defined once, imported by the stores, the DSL validator and the benchmark generator.

>>> PRODUCTS.table, PRODUCTS.text_fields
('products', ('title', 'description', 'review'))
>>> schema_for("email").field("sender").role is Role.STRUCTURED
True
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from indexing.errors import CorpusError


class Role(StrEnum):
    """What a field is for: SQL predicates, text vector search, or image vector search."""

    STRUCTURED = "structured"
    TEXT = "text"
    IMAGE = "image"


class DType(StrEnum):
    """Logical types; each store maps them to its own column type."""

    STRING = "string"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    DATE = "date"
    DATETIME = "datetime"


@dataclass(frozen=True)
class Field:
    """One field of a corpus. Text and image fields are strings that get embedded."""

    name: str
    role: Role
    dtype: DType
    doc: str
    nullable: bool = False
    """Whether the column may hold NULL (``Nullable(T)`` in ClickHouse); planning passes that are exact
    only on two-valued conditions check it (:func:`serving.engine.plan.flatten_self_subqueries`)."""


@dataclass(frozen=True)
class CorpusSchema:
    """A corpus: its domain name (CLI), its table name (SQL) and its fields. ``id`` is the key."""

    domain: str
    table: str
    fields: tuple[Field, ...]
    id_prefix: str

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise CorpusError(f"{self.table} has no field {name!r}", code="unknown_field")

    def has(self, name: str) -> bool:
        return any(f.name == name for f in self.fields)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def names(self, role: Role) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.role is role)

    @property
    def structured_fields(self) -> tuple[str, ...]:
        return self.names(Role.STRUCTURED)

    @property
    def text_fields(self) -> tuple[str, ...]:
        return self.names(Role.TEXT)

    @property
    def image_fields(self) -> tuple[str, ...]:
        return self.names(Role.IMAGE)

    @property
    def nullable_fields(self) -> frozenset[str]:
        """Columns that may hold NULL."""
        return frozenset(f.name for f in self.fields if f.nullable)

    @property
    def vector_fields(self) -> tuple[str, ...]:
        """Fields with a vector index in Milvus: every text and image field."""
        return self.text_fields + self.image_fields


_S, _T, _I = Role.STRUCTURED, Role.TEXT, Role.IMAGE

PRODUCTS = CorpusSchema(
    domain="ecommerce",
    table="products",
    id_prefix="P",
    fields=(
        Field("id", _S, DType.STRING, "Product id, 'P' and a zero-padded number, e.g. P00042."),
        Field("brand", _S, DType.STRING, "Brand name; each brand sells in a few categories."),
        Field("category", _S, DType.STRING, "Product category, e.g. headphones."),
        Field("price", _S, DType.FLOAT, "Price in US dollars."),
        Field("rating", _S, DType.FLOAT, "Average review rating, 1.0 to 5.0."),
        Field("review_count", _S, DType.INT, "Number of reviews."),
        Field("color", _S, DType.STRING, "Main color, e.g. black."),
        Field("in_stock", _S, DType.BOOL, "Whether the product can be ordered now."),
        Field("release_date", _S, DType.DATE, "Date the product was first sold."),
        Field("title", _T, DType.STRING, "Product title as listed."),
        Field("description", _T, DType.STRING, "Seller's description."),
        Field("review", _T, DType.STRING, "A representative customer review."),
        Field(
            "image",
            _I,
            DType.STRING,
            "Visual description of the product photo (stands in for a VLM caption).",
        ),
    ),
)

EMAILS = CorpusSchema(
    domain="email",
    table="emails",
    id_prefix="E",
    fields=(
        Field("id", _S, DType.STRING, "Email id, 'E' and a zero-padded number, e.g. E00042."),
        Field("sender", _S, DType.STRING, "Sender address, e.g. jane.doe@acme.com."),
        Field("sender_domain", _S, DType.STRING, "Domain of the sender address."),
        Field("recipient", _S, DType.STRING, "Main recipient address."),
        Field(
            "date",
            _S,
            DType.DATETIME,
            "When the email was sent, in the sender's local time as its Date header reads.",
        ),
        Field("folder", _S, DType.STRING, "Mailbox folder: inbox, sent, archive, ..."),
        Field("is_read", _S, DType.BOOL, "Whether the email was opened."),
        Field("is_starred", _S, DType.BOOL, "Whether the email was starred."),
        Field("has_attachment", _S, DType.BOOL, "Whether the email carries an attachment."),
        Field("thread_id", _S, DType.STRING, "Conversation the email belongs to."),
        Field("subject", _T, DType.STRING, "Subject line."),
        Field("body", _T, DType.STRING, "Plain-text body."),
    ),
)

SCHEMAS: dict[str, CorpusSchema] = {s.domain: s for s in (PRODUCTS, EMAILS)}
DOMAINS: tuple[str, ...] = tuple(SCHEMAS)


def schema_for(domain: str) -> CorpusSchema:
    """The schema of a domain (``ecommerce`` or ``email``)."""
    try:
        return SCHEMAS[domain]
    except KeyError:
        raise CorpusError(f"unknown domain {domain!r}; choose one of {', '.join(DOMAINS)}") from None


def schema_for_table(table: str) -> CorpusSchema:
    """The schema whose SQL table is ``table`` (``products`` or ``emails``)."""
    for s in SCHEMAS.values():
        if s.table == table:
            return s
    raise CorpusError(f"unknown table {table!r}", code="unknown_table")
