"""Phrase recombination for SFT: copies of training pairs whose search phrases are swapped for other words.

A small planner trained from scratch on the benchmark's phrase book learns to *recall* a search phrase it has
seen, not to *copy* the one the request says: on held-out wording it writes a memorized phrase that the
request never mentions. Data recombination (Jia and Liang, 2016, "Data Recombination for Neural Semantic
Parsing") teaches copying by breaking that shortcut: in a copy of a training pair, every entry whose
``query`` the request says verbatim gets another phrase, in the request and in the program alike, so the only
way to write the program is to copy the request.

The replacement phrases are spans of 1 to 4 words drawn from the corpus's own text fields (what any
deployment has); never from the benchmark generator's phrase book, its held-out paraphrases or its label
table. A recombined pair is a well-formed program for its request; its gold document is no longer known, so
recombined pairs are for SFT only, never for RL or evaluation.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Sequence
from typing import Any

from indexing.corpora.files import iter_corpus
from indexing.schema import schema_for
from indexing.workspace import Workspace
from rl.datasets.store import Instance

MAX_SPAN_WORDS = 4
SPAN_POOL = 20_000
"""Spans kept per domain (sampled evenly over the corpus)."""
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")


def corpus_spans(ws: Workspace, domain: str, *, seed: int = 0, pool: int = SPAN_POOL) -> list[str]:
    """Word spans (1 to :data:`MAX_SPAN_WORDS` words, lower case) of the text fields of ``domain``'s corpus."""
    schema = schema_for(domain)
    rng = random.Random(seed)
    spans: list[str] = []
    for table in iter_corpus(ws, schema):
        for field in schema.text_fields + schema.image_fields:
            for text in table.column(field).to_pylist():
                words = _WORD.findall(str(text or "").lower())
                if len(words) < 2:
                    continue
                n = rng.randint(1, MAX_SPAN_WORDS)
                start = rng.randrange(0, max(1, len(words) - n + 1))
                spans.append(" ".join(words[start : start + n]))
    rng.shuffle(spans)
    return list(dict.fromkeys(spans))[:pool]


def recombine(inst: Instance, spans: Sequence[str], rng: random.Random) -> tuple[str, str] | None:
    """``inst``'s request and program with every verbatim-said entry phrase swapped for a corpus span, or
    None when the request says no entry's phrase verbatim (a paraphrased or noisy one cannot be swapped)."""
    program: dict[str, Any] = json.loads(inst.program)
    nl = inst.nl
    swapped = 0
    for entry in program.get("retrieval_list", []):
        phrase = str(entry.get("query", ""))
        if len(phrase) < 3 or nl.count(phrase) != 1:
            continue
        new = rng.choice(spans)
        if new in nl:
            continue
        nl = nl.replace(phrase, new)
        entry["query"] = new
        swapped += 1
    if not swapped:
        return None
    return nl, json.dumps(program)


def recombined_rows(
    ws: Workspace, instances: Sequence[Instance], copies: int, *, seed: int = 0
) -> list[tuple[str, str, str]]:
    """``copies`` recombined (domain, request, program) pairs per instance that has a phrase to swap."""
    if copies <= 0:
        return []
    out: list[tuple[str, str, str]] = []
    rng = random.Random(seed)
    pools = {d: corpus_spans(ws, d, seed=seed) for d in dict.fromkeys(i.domain for i in instances)}
    for _ in range(copies):
        for inst in instances:
            got = recombine(inst, pools[inst.domain], rng) if pools[inst.domain] else None
            if got is not None:
                out.append((inst.domain, got[0], got[1]))
    return out
