"""Programs for the engine benchmark (``bench/engine.py``): L1 / L2 / L3-shaped programs cut from sampled
documents, and a GRPO-shaped batch of them (prompts x rollouts, phrases and whole programs repeating)."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from serving.engine import Engine

PROMPTS, ROLLOUTS = 32, 4
"""The GRPO-shaped batch: prompts, and rollouts of each."""

# -- programs -------------------------------------------------------------------------------------


def lit(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def phrases(text: str, words: int = 7) -> list[str]:
    """Short phrases cut from a document's text, as a planner would paraphrase them."""
    out = []
    for part in text.replace(";", ".").split("."):
        tokens = part.split()
        if len(tokens) >= 3:
            out.append(" ".join(tokens[:words]).lower())
    return out or [text[:40]]


def sample_docs(engine: Engine, n: int, seed: int) -> list[dict[str, Any]]:
    cols = ["id", "brand", "category", "price", "rating", "title", "review", "image"]
    rows = engine.handle.sql.query(
        f"SELECT {', '.join(cols)} FROM {engine.handle.table} ORDER BY cityHash64(id, {seed}) LIMIT {n}"
    )
    return [dict(zip(cols, r, strict=True)) for r in rows]


def program(
    level: int, d: dict[str, Any], other: dict[str, Any], rng: random.Random, **rpl: Any
) -> dict[str, Any]:
    """An L1 / L2 / L3-shaped program built from document ``d`` (``other`` gives a visual phrase to exclude)."""
    review = rng.choice(phrases(d["review"]))
    if level == 1:
        sql = "SELECT DISTINCT id FROM products WHERE id IN <text_1>"
        return {"sql": sql, "retrieval_list": [{"type": "text", "field": "review", "query": review, **rpl}]}
    if level == 2:
        sql = f"SELECT DISTINCT id FROM products WHERE brand = {lit(d['brand'])} AND price <= {math.ceil(d['price'])} AND id IN <text_1>"
        return {"sql": sql, "retrieval_list": [{"type": "text", "field": "review", "query": review, **rpl}]}
    sql = (
        f"SELECT DISTINCT id FROM products WHERE (brand = {lit(d['brand'])} OR category = {lit(d['category'])}) "
        "AND id IN <text_1> AND id NOT IN <image_2> "
        f"AND id IN (SELECT id FROM products WHERE rating >= {max(1.0, round(d['rating'] - 1, 1))} AND id IN <text_3>)"
    )
    return {
        "sql": sql,
        "retrieval_list": [
            {"type": "text", "field": "review", "query": review, **rpl},
            {"type": "image", "field": "image", "query": rng.choice(phrases(other["image"])), "k": 10},
            {"type": "text", "field": "title", "query": " ".join(d["title"].split()[:4]).lower(), "k": 50},
        ],
    }


VARIANTS: tuple[dict[str, Any], ...] = (
    {},
    {"k": 10},
    {"mode": "fuse"},
    {"mode": "sparse"},
    {"k": 20, "rerank": 5},
)
"""How a sampled program's first entry may differ from another rollout's: its width, mode or rerank."""


def grpo_batch(docs: Sequence[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """32 prompts x 4 rollouts: rollouts of a prompt share its phrases; some repeat outright."""
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(PROMPTS):
        d, other = docs[i], docs[(i + 1) % len(docs)]
        first = program(rng.choice((1, 2, 2, 3)), d, other, random.Random(f"{seed}-{i}"))
        out.append(first)
        for _ in range(ROLLOUTS - 1):
            choice = rng.random()
            if choice < 0.35:
                out.append(first)  # the policy sampled the same program again
            else:
                rpl = rng.choice(VARIANTS)
                out.append(
                    program(
                        rng.choice((1, 2, 3)), d, other, random.Random(f"{seed}-{i}-{rng.random()}"), **rpl
                    )
                )
    return out
