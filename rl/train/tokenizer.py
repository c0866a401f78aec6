"""The planner's tokenizer: byte-level BPE trained with ``tokenizers`` on the project's prompts and programs.

Byte-level means every string encodes, and decoding gives back the exact text: every program round-trips,
case and punctuation included (:func:`check_round_trip` proves it over a dataset before training). Two
pre-splits (``split``) decide what a token may span:

- ``lines``: merges may cross word boundaries (tokens capped at ``max_token_chars``), so the repeated schema
  prompt and the program skeleton (``{"sql": "SELECT id FROM products WHERE``) cost few tokens. But a phrase
  then tokenizes by its neighbours: ``that it has a zipper`` in the request and ``"query": "has a zipper``
  in the program share few tokens, and the skeleton's last token swallows the phrase's first word.
- ``words``: GPT-2's pre-split (a word with its leading space, a number, a run of punctuation), so a phrase's
  words are the same tokens wherever they occur, apart from the first word's leading space. Copying a phrase
  from the request into the program is then a token-for-token copy, at the cost of longer sequences.

Either way lines are split first, so no token spans two lines of the prompt.

The chat template is Qwen's ChatML (``<|im_start|>role\\n...<|im_end|>\\n``), so a real Qwen3 checkpoint and
this tokenizer read the same chats.

>>> tok = train_tokenizer(['{"sql": "SELECT id FROM emails", "retrieval_list": []}'] * 4, vocab_size=300)
>>> p = '{"sql": "SELECT id FROM products WHERE brand = \\'Levi\\'\\'s\\'", "retrieval_list": []}'
>>> tok.decode(tok.encode(p), skip_special_tokens=True) == p
True
>>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
'<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

from rl.errors import TrainError

Split = Literal["lines", "words"]
SPLITS: tuple[Split, ...] = get_args(Split)
"""The tokenizer's pre-splits; see the module docstring."""

PAD, BOS, EOS = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (PAD, BOS, EOS)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML, as Qwen3 writes it (without a ``<think>`` block)."""


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 4096, max_token_chars: int = 24,
                    min_frequency: int = 2, split: Split = "lines") -> Any:  # fmt: skip
    """A ``PreTrainedTokenizerFast`` trained on ``texts`` (message contents: prompts, requests, programs).

    >>> tok = train_tokenizer(["it has a zipper", '"query": "has a zipper"'] * 50, vocab_size=300, split="words")
    >>> [tok.decode([t]) for t in tok.encode('"query": "has a zipper"')][-3:]
    [' a', ' zipper', '"']
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise TrainError(f"vocab_size must hold the 256 bytes and the special tokens, got {vocab_size}",
                         code="train_tokenizer")  # fmt: skip
    if split not in SPLITS:
        raise TrainError(f"unknown tokenizer split {split!r}; choose one of {', '.join(SPLITS)}",
                         code="train_tokenizer")  # fmt: skip
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split == "words"),
        ]
    )
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        max_token_length=max_token_chars,
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer)
    tok = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def chat_texts(chats: Iterable[Sequence[dict[str, str]]]) -> Iterable[str]:
    """The message contents of ``chats``, what the tokenizer is trained on."""
    for chat in chats:
        for message in chat:
            yield message["content"]


def check_round_trip(tokenizer: Any, texts: Iterable[str]) -> int:
    """How many ``texts`` were checked; a :class:`TrainError` naming the first that does not decode to itself."""
    n = 0
    for text in texts:
        ids = tokenizer.encode(text, add_special_tokens=False)
        back = tokenizer.decode(ids, skip_special_tokens=False)
        if back != text:
            raise TrainError(f"the tokenizer does not round-trip {text[:120]!r} (got {back[:120]!r})",
                             code="train_tokenizer")  # fmt: skip
        n += 1
    return n


def load_tokenizer(path: str | Path) -> Any:
    """A tokenizer saved with ``save_pretrained`` (this module's, or a real Qwen3's)."""
    from transformers import AutoTokenizer

    if not Path(path).is_dir():
        raise TrainError(f"no tokenizer directory at {path}", code="train_tokenizer")
    return AutoTokenizer.from_pretrained(str(path))
