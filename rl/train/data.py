"""Training rows from a workspace benchmark: the same prompt (:mod:`rl.prompt`) and the same validation
hold-out (:func:`rl.verl.export.is_val`) as verl's parquet, as ``datasets`` tables TRL reads.

- SFT rows are conversational prompt-completion pairs: ``prompt`` (system and user messages) and
  ``completion`` (the gold program as the assistant's message), so the loss covers the program only.
- RL rows carry the ``prompt`` and what the reward needs: ``domain``, ``gold_id``, ``relevant`` and ``qid``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from indexing.workspace import Workspace
from rl.datasets.store import Instance, load_split
from rl.errors import TrainError
from rl.prompt import Profile, messages
from rl.verl.export import ExportConfig, is_val
from serving.exemplars import ExemplarIndex, Shot

VAL_FRACTION = ExportConfig.val_fraction


def split_train_val(
    instances: Sequence[Instance], fraction: float = VAL_FRACTION
) -> tuple[list[Instance], list[Instance]]:
    """The train split's instances minus, and then only, the held-out validation share (stable by query id)."""
    train = [i for i in instances if not is_val(i.qid, fraction)]
    val = [i for i in instances if is_val(i.qid, fraction)]
    if not train or not val:
        raise TrainError(f"{len(instances)} training instances are too few to hold out a validation share of {fraction}",
                         code="train_val")  # fmt: skip
    return train, val


def window(instances: Sequence[Instance], *, offset: int = 0, limit: int | None = None) -> list[Instance]:
    """``instances`` from ``offset`` on, at most ``limit`` of them: ``--offset N`` after an SFT run's ``--limit N``
    gives RL prompts that run never trained on.

    >>> window(list("abcdef"), offset=2, limit=3)
    ['c', 'd', 'e']
    """
    if offset < 0 or (limit is not None and limit <= 0):
        raise TrainError(
            f"--offset must be >= 0 and --limit > 0, got {offset} and {limit}", code="train_window"
        )
    if offset >= len(instances):
        raise TrainError(f"--offset {offset} skips all {len(instances)} training instances of the domain; "
                         "synthesize more (prore bench synth D --train N) or lower it", code="train_window")  # fmt: skip
    return list(instances[offset : offset + limit if limit is not None else None])


def load_instances(ws: Workspace, domains: Sequence[str], split: str) -> list[Instance]:
    """Instances of ``split`` over ``domains``, domain after domain."""
    out: list[Instance] = []
    for domain in domains:
        got = load_split(ws, domain, split)
        if not got:
            raise TrainError(f"the {domain} benchmark has no {split} split; run: prore bench synth {domain}",
                             code="no_benchmark")  # fmt: skip
        out.extend(got)
    return out


def sft_row(
    inst: Instance, profile: Profile, program: str | None = None, shots: Sequence[Shot] = ()
) -> dict[str, Any]:
    """One prompt-completion chat; ``program`` replaces the gold one (a verified mutant, say); ``shots`` are
    the request's exemplars (:mod:`serving.exemplars`)."""
    return {
        "prompt": messages(inst.domain, inst.nl, profile=profile, shots=shots),
        "completion": [{"role": "assistant", "content": program if program is not None else inst.program}],
    }


def rl_row(inst: Instance, profile: Profile, shots: Sequence[Shot] = ()) -> dict[str, Any]:
    """One prompt with the answer the reward scores against."""
    return {
        "prompt": messages(inst.domain, inst.nl, profile=profile, shots=shots),
        "domain": inst.domain,
        "gold_id": inst.gold_id,
        "relevant": list(inst.relevant_ids),
        "qid": inst.qid,
    }


def exemplar_shots(index: ExemplarIndex | None, k: int, instances: Sequence[Instance]) -> list[list[Shot]]:
    """The exemplars of each instance's request (none without an index), chosen domain by domain."""
    out: list[list[Shot]] = [[] for _ in instances]
    if index is None or k <= 0:
        return out
    for domain in dict.fromkeys(i.domain for i in instances):
        where = [n for n, i in enumerate(instances) if i.domain == domain]
        for n, shots in zip(where, index.select(domain, [instances[n].nl for n in where], k=k), strict=True):
            out[n] = shots
    return out


def to_dataset(rows: Sequence[dict[str, Any]]) -> Any:
    """A ``datasets.Dataset`` of ``rows``."""
    from datasets import Dataset

    if not rows:
        raise TrainError("no training rows", code="train_data")
    return Dataset.from_list(list(rows))
