"""Settings of the rl layer: the ``rl:`` section of the config file.

:data:`SECTIONS` declares it; ``prore`` registers it before it reads the file (see
:func:`indexing.config.load_config`). It holds one sub-section per part of the layer::

    rl:
      eval:             # defaults of `prore eval` (its flags override them)
        k: 20
        resamples: 1000
      reward_service:   # `prore reward serve` (rl.reward.settings.ServiceSettings; its flags override them)
        port: 8300
        reward:         # the reward it scores with (rl.reward.config.RewardConfig)
          accuracy: hit1

>>> from indexing.config import Config
>>> Config().section(RlSettings).eval.k
20
>>> EvalSettings(k=2)
Traceback (most recent call last):
...
core.errors.ConfigError: rl.eval.k must be at least 3 (Hit@3 and NDCG@3 need three ranks), got 2
"""

from __future__ import annotations

from dataclasses import dataclass, field

from core.errors import ConfigError
from core.settings import Section
from rl.eval.bootstrap import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES
from rl.eval.metrics import DEFAULT_CUTOFF
from rl.eval.runner import DEFAULT_BATCH, MIN_K
from rl.reward.settings import ServiceSettings

SECTION = "rl"


@dataclass(frozen=True)
class EvalSettings:
    """Defaults of an evaluation run (``prore eval``); a flag given on the command line wins."""

    k: int = DEFAULT_CUTOFF
    """Ranking depth scored: the paper's K (top-20 candidates). At least 3, for Hit@3 and NDCG@3."""
    batch_size: int = DEFAULT_BATCH
    """Queries handed to a method per call (an engine batches their vector searches and SQL)."""
    resamples: int = DEFAULT_RESAMPLES
    """Bootstrap resamples behind every confidence interval, paired differences included."""
    confidence: float = DEFAULT_CONFIDENCE
    """Coverage of the percentile-bootstrap intervals."""
    seed: int = 0
    """Seed of the bootstrap resamples, so a report is reproducible."""

    def __post_init__(self) -> None:
        where = f"{SECTION}.eval"
        if self.k < MIN_K:
            raise ConfigError(
                f"{where}.k must be at least {MIN_K} (Hit@3 and NDCG@3 need three ranks), got {self.k}"
            )
        if self.batch_size < 1:
            raise ConfigError(f"{where}.batch_size must be at least 1, got {self.batch_size}")
        if self.resamples < 1:
            raise ConfigError(f"{where}.resamples must be at least 1, got {self.resamples}")
        if not 0.0 < self.confidence < 1.0:
            raise ConfigError(f"{where}.confidence must be between 0 and 1, got {self.confidence}")


@dataclass(frozen=True)
class RlSettings:
    """Everything the rl layer is configured with."""

    eval: EvalSettings = field(default_factory=EvalSettings)
    """Evaluation defaults (``prore eval``)."""
    reward_service: ServiceSettings = field(default_factory=ServiceSettings)
    """The reward service (``prore reward serve``): how it listens, batches and sheds load, and the reward it
    scores with."""


SECTIONS: tuple[Section, ...] = (Section(SECTION, RlSettings),)
"""This layer's sections of the config file, registered by whoever loads it."""
