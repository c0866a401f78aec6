"""Programs and checks shared by the engine's batch tests (``execute_many``) and its service tests: a few
corpus documents, program shapes built from them, a mixed batch with repeats and runtime failures, and the
equality of two outcomes."""

from __future__ import annotations

from typing import Any

from core.errors import ProReError
from serving.dsl import Program, parse_program
from serving.engine import ExecutionResult


def docs(handle: Any, n: int) -> list[dict[str, Any]]:
    cols = ["id", "brand", "category", "price", "review", "image"]
    rows = handle.sql.query(f"SELECT {', '.join(cols)} FROM {handle.table} ORDER BY id LIMIT {n} OFFSET 50")
    return [dict(zip(cols, r, strict=True)) for r in rows]


def lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def plain(d: dict[str, Any], mode: str = "dense") -> dict[str, Any]:
    phrase = d["review"].split(". ")[0]
    return {
        "sql": f"SELECT DISTINCT id FROM products WHERE price <= {d['price']} AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "review", "query": phrase, "mode": mode, "k": 20}],
    }


def ordered(d: dict[str, Any]) -> dict[str, Any]:
    return {
        "sql": f"SELECT id FROM products WHERE category = {lit(d['category'])} AND id NOT IN <image_1> ORDER BY rating DESC, id LIMIT 7",
        "retrieval_list": [{"type": "image", "field": "image", "query": d["image"], "k": 5}],
    }


def failing_at_runtime(d: dict[str, Any]) -> dict[str, Any]:
    # Valid for the language, refused by ClickHouse: a price compared with text that is no number.
    return {
        "sql": "SELECT id FROM products WHERE price < 'cheap' AND id IN <text_1>",
        "retrieval_list": [{"type": "text", "field": "review", "query": d["review"][:40]}],
    }


def mixed_batch(handle: Any) -> list[Program]:
    ds = docs(handle, 8)
    raw = [
        plain(ds[0]),
        {"sql": "SELECT id FROM products WHERE id IN <text_2>", "retrieval_list": []},
        ordered(ds[1]),
        plain(ds[2], mode="fuse"),
        failing_at_runtime(ds[3]),
        plain(ds[0]),  # a repeated rollout
        {"sql": "SELECT id FROM products WHERE colour = 'red'", "retrieval_list": []},
        plain(ds[4], mode="sparse"),
        ordered(ds[5]),
        plain(ds[6]),
        failing_at_runtime(ds[7]),
        plain(ds[7]),
    ]
    return [parse_program(p) for p in raw]


def programs(raw: list[dict[str, Any]]) -> list[Program]:
    return [parse_program(p) for p in raw]


def same(a: ExecutionResult | ProReError, b: ExecutionResult | ProReError) -> None:
    if isinstance(a, ProReError):
        assert type(a) is type(b) and a.code == b.code, (a, b)
        return
    assert isinstance(b, ExecutionResult)
    assert (a.ids, a.scores, dict(a.candidates), a.sql) == (b.ids, b.scores, dict(b.candidates), b.sql)
