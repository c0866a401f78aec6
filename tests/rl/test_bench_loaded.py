"""Benchmark synthesis on a loaded corpus (no label table): it says what it judges, or refuses in one line."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from indexing.build import build_index
from indexing.config import Config
from indexing.corpora.enron import iter_enron
from indexing.corpora.files import corpus_manifest, write_corpus
from indexing.corpora.fixtures import write_enron_fixture
from indexing.corpora.loading import LoadStats
from indexing.schema import EMAILS
from indexing.workspace import Workspace
from rl.datasets import SynthConfig, load_split, synthesize
from rl.datasets.errors import BenchError
from rl.datasets.store import SPLITS
from rl.datasets.synth import NO_LABELS, unlabeled_note

SIZES = {"train": 12, "test": 4, "ood": 4}
WORDS = [
    "gas",
    "power",
    "desk",
    "contract",
    "deal",
    "pipeline",
    "curve",
    "schedule",
    "counsel",
    "capacity",
    "storage",
    "invoice",
    "hedge",
    "swap",
    "basis",
]


def _load(cfg: Config, maildir: Path) -> None:
    stats = LoadStats()
    write_corpus(
        Workspace(cfg.workspace), EMAILS, iter_enron(maildir, stats=stats), {"source": "enron"}, stats
    )
    build_index(cfg, "email", progress=False)


def _plain_maildir(root: Path, n: int) -> Path:
    """Messages whose text holds none of the vocabulary's phrasings, as real mail mostly does."""
    rng = random.Random(0)
    for k in range(n):
        text = " ".join(rng.choice(WORDS) for _ in range(12))
        path = root / "maildir" / f"user{k % 4}-x" / ("inbox", "sent")[k % 2] / f"{k + 1}."
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"Message-ID: <{k}.JavaMail.evans@thyme>\nDate: Mon, {k % 28 + 1} May 2001 10:00:00 -0700\n"
            f"From: user{k % 5}@enron.com\nTo: user{k % 3}@enron.com\nSubject: {text[:30]}\n\n{text}\n"
        )
    return root / "maildir"


def test_a_loaded_corpus_is_synthesized_without_relevant_sets_and_says_so(
    workspace_config: Callable[..., Config], tmp_path: Path
) -> None:
    cfg = workspace_config("loaded", text="hashing", image="hashing", hashing_dim=64)
    _load(cfg, write_enron_fixture(tmp_path / "enron", n=120, seed=2).maildir)
    manifest = corpus_manifest(Workspace(cfg.workspace), "email")
    note = unlabeled_note("email", manifest)
    assert note is not None and "source enron" in note and "not computed" in note and "\n" not in note
    bench = synthesize(cfg, "email", SynthConfig(sizes=SIZES, seed=1, progress=False))
    assert bench["relevance"] == {"available": False, "reason": NO_LABELS}
    items = [i for s in SPLITS for i in load_split(Workspace(cfg.workspace), "email", s)]
    assert len(items) == sum(SIZES.values()) and all(i.relevant_n is None for i in items)


def test_a_loaded_corpus_without_vocabulary_facets_is_refused_in_one_line(
    workspace_config: Callable[..., Config], tmp_path: Path
) -> None:
    cfg = workspace_config("plain", text="hashing", image="hashing", hashing_dim=64)
    _load(cfg, _plain_maildir(tmp_path, 60))
    with pytest.raises(BenchError) as err:
        synthesize(cfg, "email", SynthConfig(sizes=SIZES, seed=1, progress=False))
    assert err.value.code == "bench_no_facets" and "\n" not in err.value.one_line()
    assert "prore corpus build email" in err.value.message
    assert not Workspace(cfg.workspace).bench_root("email").exists()


def test_a_generated_corpus_needs_no_note() -> None:
    assert unlabeled_note("email", {"source": "generated", "labels": {"rows": 3, "fingerprint": "x"}}) is None
