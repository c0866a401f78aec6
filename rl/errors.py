"""Errors of the training tools: local training (rl.train) and the cluster path (export, reward function, recipes, launch)."""

from __future__ import annotations

from core.errors import ProReError


class TrainError(ProReError):
    """A training dataset, recipe or launch cannot be made as asked: bad option, missing export, bad data."""

    code = "train"
