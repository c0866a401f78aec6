"""Whether a request is worded like the planner's training requests: the ``familiar`` fusion gate.

Fusing the planner's programs with the self-querying retriever (``serving.api.fuse``) wins on wording the
planner never saw and loses on the wording it was trained on: where a program is right, the retriever's
documents displace its first one (README, "Fusing the planner's programs with self-query"). So the gate asks
the one thing a deployment can know about a request before answering it: *is it worded like a training
request?* A familiar request whose program ranks something is answered by the planner alone; any other is fused.

- **The measure: wording, not topic.** The cosine similarity between the request's TF-IDF vector of character
  n-grams (scikit-learn's ``TfidfVectorizer``, ``char_wb`` 3-5 grams, numbers masked; :data:`ANALYZER`) and
  that of the nearest training request of its corpus. A sentence embedder says what a request is *about*:
  measured on the medium benchmark, MiniLM's nearest similarity told test requests (the training templates)
  from held-out wording with an AUC of 0.80-0.87 and called 74% of the hand-written ecommerce requests
  familiar; character n-grams, which see the templates' phrasing, 0.87-0.95 (README, "Training the planner").
- **The threshold, from the training requests alone.** Each training request's similarity to its nearest
  *other* training request (leave one out, identical wording excluded) is what a request drawn like the
  training set scores; the threshold is its :data:`DEFAULT_QUANTILE` quantile, so about 80% of requests
  worded like the training set are judged familiar. No evaluation split, and no human request, sets the
  threshold; the quantile is the one knob, chosen on test and OOD (:data:`DEFAULT_QUANTILE`).
- **Where it lives.** The training requests (``familiarity/requests.json``, per corpus) in the planner's model
  directory, named by the planner card's ``familiarity`` section (version, analyzer, thresholds, quantile).
  The vectorizer is fitted again from them when the gate is opened (a second for ten thousand requests, and
  no pickled object to trust), so a checkpoint carries its gate to evaluation (``&gate=familiar``), to
  ``prore serve --fuse-gate familiar`` and to the KServe transformer.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from core.errors import ProReError

FAMILIARITY_DIR = "familiarity"
"""The gate's folder inside a model directory."""
REQUESTS_FILE = "requests.json"
DEFAULT_QUANTILE = 0.2
"""The share of training-like requests the gate may call unfamiliar (the threshold's quantile). Swept over 0.05-0.5
on the medium benchmark's test and OOD splits (README, "The familiarity gate"): the largest OOD P@1 in both
corpora while test Hit@1 stays above the planner's program alone."""
ANALYZER: dict[str, Any] = {"analyzer": "char_wb", "ngram_range": [3, 5]}
"""How a request becomes a vector (``TfidfVectorizer`` arguments), recorded on the card."""
CHUNK = 1024
"""Training requests compared at a time while calibrating."""
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


class FamiliarityError(ProReError):
    """A familiarity gate that cannot be built, read or used as asked."""

    code = "familiarity"


def mask_numbers(text: str) -> str:
    """``text`` lowercased, each number a ``0``: a price or a date is a value, not wording.

    >>> mask_numbers("Headphones under $199.99 from 2024")
    'headphones under $0 from 0'
    """
    return _NUMBER.sub("0", text.lower())


def nearest_other(vectors: Any, requests: Sequence[str]) -> np.ndarray:
    """Each row's cosine similarity to its nearest other row whose request differs (leave one out); rows are
    L2-normalized (dense or sparse).

    >>> v = np.array([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [1.0, 0.0]])
    >>> nearest_other(v, ["a", "b", "c", "a"]).round(2).tolist()
    [0.8, 0.8, 0.6, 0.8]
    """
    n = vectors.shape[0]
    if n < 2:
        raise FamiliarityError("calibrating familiarity needs at least two training requests of a corpus",
                               code="familiarity_pairs")  # fmt: skip
    names = np.asarray(list(requests), dtype=object)
    out = np.empty(n, dtype=np.float64)
    for at in range(0, n, CHUNK):
        sims = vectors[at : at + CHUNK] @ vectors.T
        sims = np.asarray(sims.toarray() if hasattr(sims, "toarray") else sims, dtype=np.float64)
        sims[names[at : at + CHUNK, None] == names[None, :]] = -np.inf  # itself and identical wordings
        out[at : at + CHUNK] = sims.max(axis=1)
    if not np.isfinite(out).all():
        raise FamiliarityError(
            "every training request of a corpus has the same wording", code="familiarity_pairs"
        )
    return out


def version_of(analyzer: Mapping[str, Any], requests: Mapping[str, Sequence[str]]) -> str:
    """A digest of what decides the gate: the analyzer and every corpus's training requests, in order."""
    h = hashlib.sha256(json.dumps(analyzer, sort_keys=True).encode())
    for domain in sorted(requests):
        h.update(json.dumps([domain, list(requests[domain])]).encode())
    return h.hexdigest()[:16]


class Space:
    """One corpus's training requests as TF-IDF vectors."""

    def __init__(self, requests: Sequence[str], analyzer: Mapping[str, Any]) -> None:
        from sklearn.feature_extraction.text import TfidfVectorizer

        args = {**analyzer, "ngram_range": tuple(analyzer.get("ngram_range", (1, 1)))}
        self.vectorizer = TfidfVectorizer(preprocessor=mask_numbers, dtype=np.float32, **args)
        self.matrix = self.vectorizer.fit_transform(list(requests))
        self.by_gram = self.matrix.T.tocsr()
        """The training requests' vectors by n-gram (an inverted index), transposed once."""

    def similarity(self, requests: Sequence[str]) -> np.ndarray:
        sims = self.vectorizer.transform(list(requests)) @ self.by_gram  # touches only the requests' n-grams
        return np.asarray(sims.max(axis=1).toarray(), dtype=np.float64).ravel()


class Familiarity:
    """The training requests per corpus and the similarity at or above which a request is familiar."""

    def __init__(self, requests: Mapping[str, Sequence[str]], threshold: Mapping[str, float], *,
                 quantile: float = DEFAULT_QUANTILE, analyzer: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self.requests = {d: list(r) for d, r in requests.items()}
        self.threshold = dict(threshold)
        self.quantile = quantile
        self.analyzer = dict(analyzer or ANALYZER)
        self.version = version_of(self.analyzer, self.requests)
        self._spaces: dict[str, Space] = {}
        self._lock = threading.Lock()

    @classmethod
    def calibrate(cls, requests: Mapping[str, Sequence[str]], quantile: float = DEFAULT_QUANTILE, *,
                  analyzer: Mapping[str, Any] | None = None) -> Familiarity:  # fmt: skip
        """The gate over each corpus's training ``requests``, its threshold the ``quantile`` of their
        leave-one-out nearest similarity (:func:`nearest_other`)."""
        if not 0 < quantile < 1:
            raise FamiliarityError(f"the familiarity quantile must be in (0, 1), got {quantile}",
                                   code="familiarity_quantile")  # fmt: skip
        gate = cls(requests, {}, quantile=quantile, analyzer=analyzer)
        for domain, texts in gate.requests.items():
            own = nearest_other(gate.space(domain).matrix, texts)
            gate.threshold[domain] = round(float(np.quantile(own, quantile)), 6)
        return gate

    def space(self, domain: str) -> Space:
        with self._lock:
            if domain not in self._spaces:
                if domain not in self.requests:
                    raise FamiliarityError(f"the planner's familiarity gate knows no {domain!r} training requests "
                                           f"(it has {', '.join(sorted(self.requests))})", code="familiarity_domain")  # fmt: skip
                self._spaces[domain] = Space(self.requests[domain], self.analyzer)
            return self._spaces[domain]

    def similarity(self, domain: str, requests: Sequence[str]) -> list[float]:
        """Each request's cosine similarity to the nearest training request of ``domain``."""
        space = self.space(domain)
        return [float(s) for s in space.similarity(requests)] if requests else []

    def reaches(self, domain: str, similarity: float) -> bool:
        """Whether a request of ``domain`` this similar to its nearest training request counts as familiar."""
        return similarity >= self.threshold[domain]

    def familiar(self, domain: str, requests: Sequence[str]) -> list[bool]:
        """Whether each request is worded like ``domain``'s training requests."""
        return [self.reaches(domain, s) for s in self.similarity(domain, requests)]

    # -- files and the card ------------------------------------------------------------------------

    def card(self) -> dict[str, Any]:
        """What the planner card records of the gate."""
        return {"index": FAMILIARITY_DIR, "version": self.version, "analyzer": self.analyzer,
                "threshold": self.threshold, "quantile": self.quantile,
                "requests": {d: len(r) for d, r in self.requests.items()}}  # fmt: skip

    def save(self, model_dir: Path) -> dict[str, Any]:
        """Write the training requests into ``model_dir/familiarity`` (replacing a gate there) and return the
        card section to record."""
        out = Path(model_dir) / FAMILIARITY_DIR
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / REQUESTS_FILE).write_text(json.dumps(self.requests))
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return self.card()


def card_familiarity(card: Mapping[str, Any]) -> dict[str, Any] | None:
    """The familiarity section of a planner card, or None when the planner has no gate."""
    got = card.get("familiarity")
    if got is None:
        return None
    threshold = got.get("threshold") if isinstance(got, dict) else None
    if (
        not isinstance(got, dict)
        or not isinstance(got.get("version"), str)
        or not isinstance(got.get("analyzer"), dict)
        or not isinstance(threshold, dict)
        or not all(isinstance(v, int | float) for v in threshold.values())
    ):
        raise FamiliarityError(f"the planner card's familiarity section is malformed: {got!r}",
                               code="familiarity_card")  # fmt: skip
    return got


def load_familiarity(model_dir: Path, section: Mapping[str, Any]) -> Familiarity:
    """The gate a card's ``section`` names, read from ``model_dir``; another version is refused."""
    folder = Path(model_dir) / str(section.get("index", FAMILIARITY_DIR))
    try:
        requests = json.loads((folder / REQUESTS_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise FamiliarityError(f"{model_dir}: no readable familiarity gate at {folder} ({exc})",
                               code="familiarity_index") from exc  # fmt: skip
    gate = Familiarity(requests, {k: float(v) for k, v in section["threshold"].items()},
                       quantile=float(section.get("quantile", DEFAULT_QUANTILE)), analyzer=section["analyzer"])  # fmt: skip
    if gate.version != section["version"]:
        raise FamiliarityError(f"{model_dir}: the card names familiarity gate {section['version']} but the "
                               f"folder holds {gate.version}", code="familiarity_version")  # fmt: skip
    return gate


_OPEN: dict[str, Familiarity] = {}
_OPEN_LOCK = threading.Lock()


def open_familiarity(model_dir: str | Path) -> Familiarity:
    """The familiarity gate of the planner at ``model_dir`` (a model directory or its card; cached per process).
    A planner whose card names none is refused with a one-line :class:`FamiliarityError`."""
    from serving.prompt import read_card

    section = card_familiarity(read_card(model_dir))
    folder = Path(model_dir).parent if Path(model_dir).is_file() else Path(model_dir)
    if section is None:
        raise FamiliarityError(f"{folder}: the planner card names no familiarity gate; add one with "
                               f"`prore train familiarity {folder}`", code="familiarity_missing")  # fmt: skip
    key = f"{folder.resolve()}|{section['version']}"
    with _OPEN_LOCK:
        if key not in _OPEN:
            _OPEN[key] = load_familiarity(folder, section)
        return _OPEN[key]
