"""Store credentials: read from the process environment, never from a config file, a flag or a URL.

On Kubernetes the chart and the operator set these variables from a named Secret (``secretKeyRef``), so no
password appears in a rendered manifest, a config file or a command line::

    CLICKHOUSE_USER, CLICKHOUSE_PASSWORD   ClickHouse server (clickhouse-connect); chDB ignores them
    MILVUS_USER, MILVUS_PASSWORD           Milvus server with authentication on (``user:password``)
    MILVUS_TOKEN                           Milvus API key (Zilliz Cloud), instead of user and password

A URL that carries its own user (``http://user:pass@host:8123``) keeps it: credentials named in the URL are
the caller's explicit choice. Absent variables mean no credentials (the servers' defaults), as on a laptop.
The password is kept out of ``repr``, logs and error messages.

>>> c = Credentials.from_env("CLICKHOUSE", {"CLICKHOUSE_USER": "reader", "CLICKHOUSE_PASSWORD": "s3cret"})
>>> c
Credentials(user='reader', password='***')
>>> c.clickhouse_args("http://ch.stores.svc:8123")
{'username': 'reader', 'password': 's3cret'}
>>> c.clickhouse_args("http://admin:x@ch.stores.svc:8123")
{}
>>> Credentials.from_env("MILVUS", {"MILVUS_USER": "reader", "MILVUS_PASSWORD": "s3cret"}).milvus_args()
{'user': 'reader', 'password': 's3cret'}
>>> Credentials.from_env("MILVUS", {}).milvus_args()
{}
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from core.errors import ConfigError

ENV_KEYS = ("CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD", "MILVUS_USER", "MILVUS_PASSWORD", "MILVUS_TOKEN")
"""Every variable the stores read credentials from: the keys of a credentials Secret."""


@dataclass(frozen=True)
class Credentials:
    """A store's user and password (or token), as the environment gives them."""

    user: str | None = None
    password: str | None = None
    token: str | None = None

    def __repr__(self) -> str:
        hidden = ", password='***'" if self.password else ""
        hidden += ", token='***'" if self.token else ""
        return f"Credentials(user={self.user!r}{hidden})"

    @classmethod
    def from_env(cls, prefix: str, env: Mapping[str, str] | None = None) -> Credentials:
        """``<PREFIX>_USER``, ``<PREFIX>_PASSWORD`` and ``<PREFIX>_TOKEN``; empty values count as unset.

        >>> Credentials.from_env("CLICKHOUSE", {"CLICKHOUSE_PASSWORD": "x"})
        Traceback (most recent call last):
        ...
        core.errors.ConfigError: CLICKHOUSE_PASSWORD is set without CLICKHOUSE_USER
        """
        env = os.environ if env is None else env
        user, password, token = (env.get(f"{prefix}_{key}") or None for key in ("USER", "PASSWORD", "TOKEN"))
        if password and not user:
            raise ConfigError(f"{prefix}_PASSWORD is set without {prefix}_USER", code="credentials")
        if token and user:
            raise ConfigError(f"set either {prefix}_TOKEN or {prefix}_USER, not both", code="credentials")
        return cls(user, password, token)

    def clickhouse_args(self, url: str) -> dict[str, str]:
        """clickhouse-connect's ``get_client`` arguments; none for a URL with its own user or for chDB."""
        if url.startswith("chdb:") or urlsplit(url).username or not self.user:
            return {}
        return {"username": self.user, "password": self.password or ""}

    def milvus_args(self) -> dict[str, str]:
        """pymilvus ``MilvusClient`` arguments (``user``/``password`` or ``token``); none without credentials."""
        if self.token:
            return {"token": self.token}
        if self.user:
            return {"user": self.user, "password": self.password or ""}
        return {}
