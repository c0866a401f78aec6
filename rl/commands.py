"""CLI subcommands of ``rl``, registered into ``prore`` by :func:`register`."""

from __future__ import annotations

from typing import Any

from rl.datasets.commands import register_bench
from rl.eval.commands import register_eval
from rl.reward.commands import register_reward
from rl.train.commands import register_local
from rl.verl.commands import register_train


def register(sub: Any) -> None:
    """Add this layer's subcommands (``bench``, ``eval``, ``reward``, ``train``) to the ``prore`` parser."""
    register_bench(sub)
    register_eval(sub)
    register_reward(sub)
    register_local(register_train(sub))
