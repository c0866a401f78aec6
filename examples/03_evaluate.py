"""03: evaluate retrieval methods on a benchmark.

Builds a small generated product corpus, its index and a small benchmark in a temporary workspace,
evaluates two baselines on the test split (Hit@1/3, MRR, NDCG@3, execution rate, bootstrap 95% CIs)
and prints them side by side, as ``prore eval compare`` does.

    python examples/03_evaluate.py [--size 200] [--test 20] [--methods bm25 self-query]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the MiniLM weights ship with the package

from indexing.config import load_config
from indexing.workspace import Workspace
from prore.cli import main as prore
from rl.datasets import load_split
from rl.eval.compare import compare
from rl.eval.report import write_run
from rl.eval.runner import evaluate


def run(size: int, test: int, methods: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="prore-example-") as workspace:
        # What a user types: generate a corpus, index it, synthesize a benchmark on it.
        for command in (
            ["corpus", "build", "ecommerce", "--size", str(size)],
            ["index", "build", "ecommerce", "--no-progress"],
            ["bench", "synth", "ecommerce", "--train", "4", "--test", str(test), "--ood", "4", "--quiet"],
        ):
            if prore(["--workspace", workspace, *command]) != 0:
                raise SystemExit(f"prore {' '.join(command)} failed")

        cfg = load_config(workspace=workspace)
        ws = Workspace(Path(workspace))
        instances = load_split(ws, "ecommerce", "test")
        for method in methods:
            # The same as: prore eval ecommerce --method <method>
            result = evaluate(cfg, "ecommerce", method, instances, split="test", progress=False)
            write_run(ws, result)
        print(f"\n{len(instances)} test queries over {size} products\n")
        print(compare(ws, domain="ecommerce", split="test").table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200, help="products to generate (default 200)")
    parser.add_argument("--test", type=int, default=20, help="test queries to synthesize (default 20)")
    parser.add_argument("--methods", nargs="+", default=["bm25", "self-query"], help="methods to evaluate")
    args = parser.parse_args()
    run(args.size, args.test, args.methods)
