"""How well each way of measuring a request's wording tells the training templates from wording never trained on.

The familiarity gate (:mod:`serving.familiarity`) answers a request worded like the planner's training requests by
the planner alone and fuses any other with the self-querying retriever. Its measure is the similarity of a request
to the nearest training request of its corpus, thresholded at the ``--quantile`` of the training requests' own
leave-one-out similarity. This script compares candidate measures side by side on one workspace's benchmark:

- ``minilm``: cosine of all-MiniLM-L6-v2 sentence vectors (what a request is about);
- ``word-1-2``, ``word-1-3``: TF-IDF of word n-grams (numbers masked);
- ``char-3-5``: TF-IDF of character n-grams within words (numbers masked), the gate's :data:`ANALYZER`.

For each candidate and corpus it reports the threshold, the share of the test split (the training templates'
wording), the OOD split (held-out families and paraphrases) and the hand-written human split that the gate calls
familiar, and the ROC AUC of the similarity separating test from OOD and from human. The threshold reads the
training requests alone; the AUCs read the evaluation splits, so a candidate is chosen on OOD, and the human
split is reported, not tuned on. Prints a table and writes ``bench/results/familiarity.json``. Needs a
workspace with a synthesized benchmark (``prore bench synth``; ``make demo PROFILE=medium`` makes one).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from common import RESULTS, machine, run_main, write_results

from serving.familiarity import DEFAULT_QUANTILE

TFIDF: dict[str, dict[str, Any]] = {
    "word-1-2": {"analyzer": "word", "ngram_range": [1, 2]},
    "word-1-3": {"analyzer": "word", "ngram_range": [1, 3]},
    "char-3-5": {"analyzer": "char_wb", "ngram_range": [3, 5]},
}
CANDIDATES = ("minilm", *TFIDF)


def auc(familiar: np.ndarray, other: np.ndarray) -> float:
    """ROC AUC of the similarity telling ``familiar`` requests (positives) from ``other`` ones."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([1] * len(familiar) + [0] * len(other), np.concatenate([familiar, other])))


def minilm_measure(
    train: Sequence[str], embedder: Any
) -> tuple[np.ndarray, Callable[[Sequence[str]], np.ndarray]]:
    """The training requests' leave-one-out similarities and a measure of new requests, by MiniLM vectors."""
    from indexing.embedders import shared_embedder
    from indexing.schema import Role
    from serving.familiarity import nearest_other

    model = shared_embedder(embedder, Role.TEXT)
    vectors = np.asarray(model.embed(list(train)), dtype=np.float32)
    own = nearest_other(vectors, train)
    return own, lambda texts: (np.asarray(model.embed(list(texts)), dtype=np.float32) @ vectors.T).max(axis=1)


def tfidf_measure(
    train: Sequence[str], analyzer: dict[str, Any]
) -> tuple[np.ndarray, Callable[[Sequence[str]], np.ndarray]]:
    """The same, by the gate's own TF-IDF space under ``analyzer``."""
    from serving.familiarity import Familiarity, nearest_other

    gate = Familiarity({"d": list(train)}, {}, analyzer=analyzer)
    own = nearest_other(gate.space("d").matrix, train)
    return own, lambda texts: np.asarray(gate.similarity("d", list(texts)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workspace", default=os.environ.get("PRORE_WORKSPACE", ".prore"),
                    help="workspace with the benchmark (default $PRORE_WORKSPACE, else .prore)")  # fmt: skip
    ap.add_argument("--config", help="the prore config file (its embedder section runs MiniLM)")
    ap.add_argument("--quantile", type=float, default=DEFAULT_QUANTILE,
                    help=f"the threshold's quantile (default {DEFAULT_QUANTILE:g}, the gate's)")  # fmt: skip
    ap.add_argument("--candidates", nargs="+", choices=CANDIDATES, default=list(CANDIDATES))
    ap.add_argument("--out", default=str(RESULTS / "familiarity.json"))
    args = ap.parse_args()

    from indexing.config import load_config
    from indexing.workspace import Workspace
    from rl.datasets.human import read_requests
    from rl.datasets.store import load_split

    cfg = load_config(args.config) if args.config else load_config()
    ws = Workspace(Path(args.workspace))
    info = machine()
    rows = []
    for domain in ("ecommerce", "email"):
        train = [i.nl for i in load_split(ws, domain, "train")]
        splits = {"test": [i.nl for i in load_split(ws, domain, "test")],
                  "ood": [i.nl for i in load_split(ws, domain, "ood")],
                  "human": [r.nl for r in read_requests(domain)]}  # fmt: skip
        for name in args.candidates:
            start = time.perf_counter()
            own, measure = (
                minilm_measure(train, cfg.embedder) if name == "minilm" else tfidf_measure(train, TFIDF[name])
            )
            threshold = float(np.quantile(own, args.quantile))
            sims = {s: measure(texts) for s, texts in splits.items()}
            rows.append({"domain": domain, "candidate": name, "threshold": round(threshold, 4),
                         **{f"familiar_{s}": round(float(np.mean(v >= threshold)), 3) for s, v in sims.items()},
                         "auc_ood": round(auc(sims["test"], sims["ood"]), 3),
                         "auc_human": round(auc(sims["test"], sims["human"]), 3),
                         "train": len(train), "seconds": round(time.perf_counter() - start, 1)})  # fmt: skip
    print(f"{'corpus':10} {'candidate':10} {'threshold':>9} {'fam test':>8} {'fam OOD':>8} {'fam human':>9} "
          f"{'AUC OOD':>8} {'AUC human':>9} {'s':>6}")  # fmt: skip
    for r in rows:
        print(f"{r['domain']:10} {r['candidate']:10} {r['threshold']:>9.3f} {r['familiar_test']:>8.0%} "
              f"{r['familiar_ood']:>8.0%} {r['familiar_human']:>9.0%} {r['auc_ood']:>8.3f} {r['auc_human']:>9.3f} "
              f"{r['seconds']:>6}")  # fmt: skip
    print(f"quantile {args.quantile}; {info}")
    write_results(args.out, {"machine": info, "quantile": args.quantile, "rows": rows})


if __name__ == "__main__":
    run_main(main)
