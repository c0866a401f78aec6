"""The vocabulary as benchmark synthesis sees it: facets a field carries and how a query says them.

Text fields carry the vocabulary's facets (:func:`indexing.corpora.vocab.find_facets`); a query says a
facet with one of its training or OOD paraphrases. Image descriptions carry visual terms
(:func:`indexing.corpora.vocab.find_visual`); a visual "facet" here is one term (a color, finish,
shape, material or setting), keyed as the corpus's label table keys it
(:func:`indexing.corpora.labels.visual_key`). Pairs of terms were tried and dropped: they rarely rank
a document first, and each costs a vector search per paraphrase. Terms carry their train/OOD split of
paraphrases in the vocabulary, as facets do.

>>> book = PhraseBook("ecommerce")
>>> book.carried("review", "Honestly, it has excellent ANC.")
['headphones.noise_cancelling']
>>> set(book.paraphrases("headphones.noise_cancelling", ood=False)) & set(book.paraphrases("headphones.noise_cancelling", ood=True))
set()
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from functools import cached_property

from indexing.corpora.labels import VISUAL
from indexing.corpora.vocab import VisualTerm, facets, find_facets, find_visual, product_vocab
from indexing.schema import schema_for


def _term_key(t: VisualTerm) -> str:
    return f"{t.kind}={t.value}"


class PhraseBook:
    """Facet lookups for one domain (implements :class:`rl.datasets.leaves.PhraseBook`)."""

    def __init__(self, domain: str) -> None:
        self.domain = domain
        self.schema = schema_for(domain)

    @cached_property
    def _terms(self) -> Mapping[str, VisualTerm]:
        if self.domain != "ecommerce":
            return {}
        pv = product_vocab()
        out: dict[str, VisualTerm] = {}
        for term in (*pv.colors.values(), *pv.finishes, *pv.settings):
            out[_term_key(term)] = term
        for cat in pv.categories.values():
            for term in (*cat.shapes, *cat.materials):
                out[_term_key(term)] = term
        return out

    def _is_image(self, fieldname: str) -> bool:
        return fieldname in self.schema.image_fields

    def found(self, fieldname: str, text: str, category: str | None = None) -> list[tuple[str, str]]:
        """``(facet key, words of the document)`` for every facet the text carries."""
        if not self._is_image(fieldname):
            return find_facets(self.domain, text)
        return [(f"{VISUAL}:{_term_key(t)}", t.value) for t in find_visual(text, category)]

    def carried(self, fieldname: str, text: str, category: str | None = None) -> list[str]:
        """Facet keys the text carries."""
        return [key for key, _ in self.found(fieldname, text, category)]

    def doc_phrasings(self, facet: str) -> tuple[str, ...]:
        """How documents word ``facet`` (for a visual facet: its terms)."""
        if facet.startswith(VISUAL + ":"):
            return tuple(self._terms[k].value for k in facet.split(":", 1)[1].split("+") if k in self._terms)
        return facets(self.domain)[facet].doc_phrasings

    def paraphrases(self, facet: str, ood: bool) -> tuple[str, ...]:
        """How a query says ``facet``: the held-out OOD paraphrases, or the training ones."""
        if not facet.startswith(VISUAL + ":"):
            f = facets(self.domain)[facet]
            return f.query_ood if ood else f.query_train
        parts = [self._terms[k] for k in facet.split(":", 1)[1].split("+") if k in self._terms]
        options = [t.query_ood if ood else t.query_train for t in parts]
        if not parts or any(not o for o in options):
            return ()
        return tuple(" ".join(words) for words in itertools.product(*options))
