"""Instance id -> what its reward is scored against, from the workspace's benchmark splits.

A trainer sends the instance id its prompt came from (verl's ``extra_info``); the service looks the
gold id (and the relevant set, once the benchmark carries one) up here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from indexing.workspace import Workspace
from rl.datasets.errors import BenchError
from rl.datasets.store import SPLITS, load_split
from rl.reward.errors import RewardError


@dataclass(frozen=True)
class Answer:
    """What an instance's completion is scored against."""

    gold_id: str
    relevant: frozenset[str] | None = None


class InstanceIndex:
    """Every instance of the given domains' benchmarks, by ``(domain, instance id)``."""

    def __init__(self, answers: dict[tuple[str, str], Answer] | None = None) -> None:
        self._answers = dict(answers or {})
        self.missing: dict[str, str] = {}
        """Domains without a benchmark, with the one-line reason."""

    @classmethod
    def load(cls, ws: Workspace, domains: Iterable[str], splits: Iterable[str] = SPLITS) -> InstanceIndex:
        """Load every split present; a domain without a benchmark is noted in :attr:`missing`."""
        index = cls()
        for domain in domains:
            for split in splits:
                try:
                    instances = load_split(ws, domain, split)
                except BenchError as exc:
                    if exc.code == "no_bench":
                        index.missing[domain] = exc.message
                        break
                    continue  # a benchmark without this split
                for inst in instances:
                    # Relevant sets come with benchmarks that record them; older ones have none.
                    relevant = getattr(inst, "relevant", None)
                    index._answers[(domain, inst.qid)] = Answer(
                        inst.gold_id, frozenset(relevant) if relevant is not None else None
                    )
        return index

    def __len__(self) -> int:
        return len(self._answers)

    def answer(self, domain: str, instance_id: str) -> Answer:
        """The instance's answer, or a :class:`RewardError` ``unknown_instance``."""
        found = self._answers.get((domain, instance_id))
        if found is None:
            hint = self.missing.get(domain)
            why = f" ({hint})" if hint else ""
            raise RewardError(f"no {domain} instance {instance_id!r}{why}", code="unknown_instance")
        return found
