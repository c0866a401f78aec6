"""``S_l``'s measure: a completion's length in tokens when a tokenizer is given, else in characters.

A tokenizer is anything that counts: a Hugging Face tokenizer (``encode``), a ``tokenizers.Tokenizer``
(``encode`` returning an ``Encoding``), or a plain callable returning token ids or a count.

>>> counter = LengthCounter(None)
>>> counter.unit, counter("héllo")
('chars', 5)
>>> LengthCounter(str.split).unit, LengthCounter(str.split)("three short words")
('tokens', 3)
>>> LengthCounter(lambda text: 7)("anything")
7
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rl.reward.config import LengthUnit


class LengthCounter:
    """Counts a completion in :attr:`unit` (``tokens`` with a tokenizer, ``chars`` without)."""

    def __init__(self, tokenizer: Any | None = None) -> None:
        self.unit: LengthUnit = "chars" if tokenizer is None else "tokens"
        self._count = _counter(tokenizer)

    def __call__(self, text: str) -> int:
        return self._count(text)


def _counter(tokenizer: Any | None) -> Callable[[str], int]:
    if tokenizer is None:
        return len
    encode = getattr(tokenizer, "encode", None)
    if callable(encode):

        def count_encoded(text: str) -> int:
            try:
                out = encode(text, add_special_tokens=False)
            except TypeError:  # an encode() without that keyword
                out = encode(text)
            return _size(out)

        return count_encoded
    if callable(tokenizer):
        return lambda text: _size(tokenizer(text))
    raise TypeError(f"a tokenizer is a callable or has encode(), not {type(tokenizer).__name__}")


def _size(out: Any) -> int:
    if isinstance(out, int) and not isinstance(out, bool):
        return out
    ids = getattr(out, "ids", None)  # tokenizers.Encoding
    if ids is None and callable(getattr(out, "get", None)):
        ids = out.get("input_ids")  # a BatchEncoding from calling a transformers tokenizer
    return len(ids if ids is not None else out)
