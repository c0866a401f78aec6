"""01: execute a retrieval program.

Builds a small generated product corpus and its index (chDB + Milvus Lite + MiniLM) in a temporary
workspace, then runs the example program of DESIGN.md section 3 and prints the ranked products.

    python examples/01_execute_program.py [--size 200]
"""

from __future__ import annotations

import argparse
import os
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the MiniLM weights ship with the package

from indexing.config import load_config
from prore.cli import main as prore
from serving.dsl import parse_program
from serving.engine import Engine

PROGRAM = {
    "sql": "SELECT DISTINCT id FROM products WHERE price < 200 AND (brand = 'Sony' OR brand = 'Bose') "
    "AND id IN <text_1> AND id NOT IN <image_2>",
    "retrieval_list": [
        {"type": "text", "field": "review", "query": "great noise cancelling"},
        {"type": "image", "field": "image", "query": "matte white over-ear headphones"},
    ],
}


def run(size: int) -> None:
    with tempfile.TemporaryDirectory(prefix="prore-example-") as workspace:
        # The same two commands a user types: generate a corpus, then index it.
        for command in (
            ["corpus", "build", "ecommerce", "--size", str(size)],
            ["index", "build", "ecommerce", "--no-progress"],
        ):
            if prore(["--workspace", workspace, *command]) != 0:
                raise SystemExit(f"prore {' '.join(command)} failed")

        engine = Engine.open(load_config(workspace=workspace), "ecommerce")
        result = engine.execute(parse_program(PROGRAM), k=5)
        docs = {d["id"]: d for d in engine.handle.fetch_docs(list(result.ids), ["title", "brand", "price"])}

        print("\nprogram SQL :", PROGRAM["sql"])
        print("candidates  :", {name: len(ids) for name, ids in result.candidates.items()})
        print("ranked results (RRF over the positive placeholders, ties by id):")
        for rank, (doc_id, score) in enumerate(zip(result.ids, result.scores, strict=True), start=1):
            d = docs[doc_id]
            print(f"  {rank}. {doc_id}  {score:.4f}  ${d['price']:<8} {d['brand']:<5} {d['title']}")
        if not result.ids:
            print("  (no product matches every condition)")
        print("timings (ms):", {stage: round(ms, 1) for stage, ms in result.timings.items()})
        engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200, help="products to generate (default 200)")
    run(parser.parse_args().size)
