"""The noisy wording family: deterministic, keeps every value, held-out patterns for OOD; and the
relevance statement and visual paraphrase split it relies on."""

from __future__ import annotations

import random

import pytest

from indexing.corpora.vocab import product_vocab
from rl.datasets.noise import (
    ABBREVIATIONS,
    ABBREVIATIONS_OOD,
    OOD_PATTERNS,
    TRAIN_PATTERNS,
    add_noise,
    keeps_values,
)
from rl.datasets.phrases import PhraseBook

REQUESTS = [
    ("Show me Sony headphones with a long battery life under $200, released between March 3, 2023 and May 1, 2024.",
     ["Sony", "headphones", "$200", "March 3, 2023", "May 1, 2024"]),
    ("Find e-mails from someone at globex.com that mention the hiring freeze and are not starred.", ["globex.com"]),
    ("Looking for vacuum cleaners from Shark or Bissell that are not in white, rated 4.5 or higher.",
     ["vacuum cleaners", "Shark", "Bissell", "white", "4.5"]),
    ("I need items by The North Face whose reviews mention a waterproof shell, without reviews about a broken zipper.",
     ["The North Face"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "values"), REQUESTS)
def test_noise_is_deterministic_and_never_drops_or_changes_a_value(text: str, values: list[str]) -> None:
    changed = 0
    for seed in range(200):
        for ood in (False, True):
            noisy = add_noise(text, values, random.Random(seed), ood=ood)
            assert noisy == add_noise(text, values, random.Random(seed), ood=ood)
            assert keeps_values(noisy, values), noisy
            low = noisy.lower()
            assert low.count("not") >= text.lower().count(" not ")  # no negation is dropped
            assert low.count("without") + low.count("w/o") == text.lower().count("without")
            changed += noisy != text
    assert changed > 300


def test_ood_noise_uses_patterns_and_abbreviations_held_out_of_training() -> None:
    assert not set(TRAIN_PATTERNS) & set(OOD_PATTERNS)
    assert not {(k, v) for k, v in ABBREVIATIONS.items()} & {(k, v) for k, v in ABBREVIATIONS_OOD.items()}
    text = "Show me headphones with a long battery life made by Sony between $50 and $200."
    train = {add_noise(text, ["Sony"], random.Random(s)) for s in range(100)}
    ood = {add_noise(text, ["Sony"], random.Random(s), ood=True) for s in range(100)}
    assert any("w/" in t for t in train) and not any("w/" in t for t in ood)
    assert any("btwn" in t or "wth" in t for t in ood) and not any("btwn" in t for t in train)


def test_a_dropped_value_is_caught() -> None:
    assert not keeps_values("show me hdphones under $20", ["$200"])
    assert keeps_values("show me hdphones under $200", ["headphones", "$200"])


def test_visual_terms_carry_their_train_and_ood_paraphrases_in_the_vocabulary() -> None:
    book = PhraseBook("ecommerce")
    pv = product_vocab()
    for term in (*pv.colors.values(), *pv.finishes, *pv.settings):
        assert term.query_train and term.query_ood and not set(term.query_train) & set(term.query_ood)
        key = f"visual:{term.kind}={term.value}"
        assert book.paraphrases(key, ood=False) == term.query_train
        assert book.paraphrases(key, ood=True) == term.query_ood
