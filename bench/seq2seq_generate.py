"""The encoder-decoder planner's grammar cost: one compile per request against one per sampled row.

``Seq2SeqPlanner.generate`` lays an llguidance matcher over every output row. A grounded grammar carries the
corpus's values (about 150 kB of Lark for 1,000 products), so compiling it is not free, and a request asked
for ``n`` samples (execution-guided decoding in ``prore serve``, the RL rollouts' groups) has ``n`` rows. This
benchmark builds the grammar mask of real test-split requests both ways, side by side in one run:

- ``per-row``: each of the ``n`` rows compiles the request's grammar (what the planner did before);
- ``once``: the request's grammar is compiled once and the matcher copied for the other rows (``GrammarMask``
  with ``copies=n``, what it does now);

and times ``generate`` itself at the same ``n`` (sampled at temperature 0.7), to show what share of a
request the difference is.

Then the model server's batching (:class:`serving.kserve_seq2seq.Batcher`): ``--concurrency`` greedy requests
in flight at once under their grounded grammars, as ``prore serve`` sends them, one at a time
(``--max_batch 1``) against batched (``--max_batch 8``, 5 ms wait), side by side: requests per second and the
ratio, and whether every program is the one the request gets alone. Prints tables; writes
``bench/results/seq2seq_generate.json``.

    python bench/seq2seq_generate.py --model RUN/final --workspace W [--domain ecommerce] [--requests 16]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from common import RESULTS, machine, run_main, write_results

DEFAULT_OUT = RESULTS / "seq2seq_generate.json"
SAMPLES = (1, 4, 8, 16)


def _ms(seconds: list[float]) -> float:
    return round(1000 * statistics.median(seconds), 2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--model", required=True, type=Path, help="an encoder-decoder planner (RUN/final)")
    parser.add_argument(
        "--workspace", required=True, type=Path, help="workspace with the domain's index and benchmark"
    )
    parser.add_argument("--config", type=Path, default=None, help="the workspace's YAML config, if any")
    parser.add_argument("--domain", default="ecommerce", choices=("ecommerce", "email"))
    parser.add_argument("--requests", type=int, default=16, help="test-split requests timed (default 16)")
    parser.add_argument(
        "--samples", default=",".join(map(str, SAMPLES)), help="values of n (default 1,4,8,16)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight in the batching table")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import torch

    from indexing.config import load_config
    from indexing.index import open_index
    from indexing.workspace import Workspace
    from rl.datasets import load_split
    from serving.dsl.grounding import read_column_values
    from serving.dsl.structured import STRUCTURED_LIMITS, constraint_grammar
    from serving.prompt import request_text
    from serving.seq2seq import GrammarMask, Seq2SeqPlanner

    torch.set_num_threads(1)
    cfg = load_config(args.config).replace(workspace=args.workspace)
    planner = Seq2SeqPlanner(args.model)
    eos = planner.tokenizer.eos_token_id
    requests = [i.nl for i in load_split(Workspace(args.workspace), args.domain, "test")][: args.requests]
    with open_index(cfg, args.domain) as index:
        values = read_column_values(index, index.schema)
        grammars = [constraint_grammar(index.schema, "grounded", STRUCTURED_LIMITS, request=nl, values=values,
                                       lark=True) for nl in requests]  # fmt: skip
    _ = planner.lltok  # made once, outside the timings
    rows: list[dict[str, Any]] = []
    print(f"{len(requests)} {args.domain} test requests, grounded grammars of {min(map(len, grammars)):,}-"
          f"{max(map(len, grammars)):,} characters, 1 torch thread")  # fmt: skip
    print(f"{'n':>3} | {'mask per-row ms':>15} | {'mask once ms':>12} | {'per-row / once':>14} | "
          f"{'generate ms':>11} | {'saved of a request':>18}")  # fmt: skip
    for n in (int(x) for x in args.samples.split(",")):
        per_row, once, generate = [], [], []
        for nl, g in zip(requests, grammars, strict=True):
            t = time.perf_counter()
            GrammarMask(planner.lltok, eos, [g] * n, copies=1)
            per_row.append(time.perf_counter() - t)
            t = time.perf_counter()
            GrammarMask(planner.lltok, eos, [g], copies=n)
            once.append(time.perf_counter() - t)
            t = time.perf_counter()
            planner.generate([request_text(args.domain, nl)], grammars=[g], max_tokens=planner.max_tokens,
                             samples=n, temperature=0.7, seed=0)  # fmt: skip
            generate.append(time.perf_counter() - t)
        row = {"n": n, "mask_per_row_ms": _ms(per_row), "mask_once_ms": _ms(once),
               "ratio": round(statistics.median(per_row) / statistics.median(once), 2),
               "generate_ms": _ms(generate)}  # fmt: skip
        # generate now pays "once"; before, it paid "per-row" instead
        row["saved_share"] = round((row["mask_per_row_ms"] - row["mask_once_ms"])
                                   / (row["generate_ms"] - row["mask_once_ms"] + row["mask_per_row_ms"]), 3)  # fmt: skip
        rows.append(row)
        print(f"{n:>3} | {row['mask_per_row_ms']:>15} | {row['mask_once_ms']:>12} | {row['ratio']:>13}x | "
              f"{row['generate_ms']:>11} | {100 * row['saved_share']:>17.1f}%")  # fmt: skip
    batching = _batching(
        planner, [request_text(args.domain, nl) for nl in requests], grammars, args.concurrency
    )
    path = write_results(args.out, {"machine": machine(), "model": str(args.model), "domain": args.domain,
                                    "requests": len(requests), "medians": "per request", "rows": rows,
                                    "batching": batching})  # fmt: skip
    print(f"wrote {path}")
    return 0


def _batching(planner: Any, texts: list[str], grammars: list[str], concurrency: int) -> list[dict[str, Any]]:
    """Greedy requests, ``concurrency`` in flight, through the model server's batcher at max_batch 1 and 8."""
    import asyncio

    from serving.kserve_seq2seq import Batcher

    alone = [planner.generate([t], grammars=[g], max_tokens=planner.max_tokens)[0][0].text
             for t, g in zip(texts, grammars, strict=True)]  # fmt: skip

    async def load(batcher: Batcher) -> tuple[float, list[str]]:
        gate = asyncio.Semaphore(concurrency)

        async def one(t: str, g: str) -> str:
            async with gate:
                [got] = await batcher.generate(t, g, samples=1, temperature=0.0, seed=None,
                                               max_tokens=planner.max_tokens)  # fmt: skip
                return str(got.text)

        start = time.perf_counter()
        texts_ = await asyncio.gather(*(one(t, g) for t, g in zip(texts, grammars, strict=True)))
        return time.perf_counter() - start, list(texts_)

    out: list[dict[str, Any]] = []
    print(f"\n{len(texts)} greedy requests, {concurrency} in flight | {'req/s':>6} | {'x one at a time':>15} | "
          "same programs as alone")  # fmt: skip
    for max_batch in (1, 8):
        seconds, got = asyncio.run(load(Batcher(planner, max_batch=max_batch)))
        row = {"max_batch": max_batch, "seconds": round(seconds, 2), "requests_per_s": round(len(texts) / seconds, 2),
               "same_as_alone": sum(a == b for a, b in zip(got, alone, strict=True))}  # fmt: skip
        row["ratio"] = round(row["requests_per_s"] / out[0]["requests_per_s"], 2) if out else 1.0
        out.append(row)
        print(f"{'max_batch ' + str(max_batch):>38} | {row['requests_per_s']:>6} | {row['ratio']:>14}x | "
              f"{row['same_as_alone']} of {len(texts)}")  # fmt: skip
    return out


if __name__ == "__main__":
    run_main(main)
