"""Settings of the reward service (``prore reward serve``), one frozen object, documented field by field.

>>> ServiceSettings().window_ms, ServiceSettings().retry_after_s
(5.0, 1)
>>> ServiceSettings(window_ms=-1)
Traceback (most recent call last):
...
rl.reward.errors.RewardError: window_ms must be zero or more, got -1
"""

from __future__ import annotations

from dataclasses import dataclass, field

from indexing.schema import DOMAINS
from rl.datasets.store import SPLITS
from rl.reward.config import RewardConfig
from rl.reward.errors import RewardError

DEFAULT_PORT = 8300
URL_ENV = "PRORE_REWARD_URL"
"""Environment variable a client reads the service's base URL from (for example ``http://reward:8300``)."""


@dataclass(frozen=True)
class ServiceSettings:
    """How the reward service listens, batches and sheds load."""

    host: str = "127.0.0.1"
    """Interface to listen on; ``0.0.0.0`` in a container."""
    port: int = DEFAULT_PORT
    """TCP port."""
    domains: tuple[str, ...] = DOMAINS
    """Domains served; each gets one engine, opened at start."""
    splits: tuple[str, ...] = SPLITS
    """Benchmark splits whose instance ids the service resolves to gold ids."""
    window_ms: float = 5.0
    """How long the first request of a batch waits for others to join it. verl calls the reward once
    per sample from many workers; a few milliseconds turn those calls into one ``execute_many``."""
    max_batch_items: int = 2048
    """Most items in one ``execute_many`` batch; more pending items wait for the next batch."""
    max_request_items: int = 8192
    """Most items in one request (413 past it): one DAPO step is 512 prompts x 16 samples."""
    max_queue_items: int = 16384
    """Most items waiting to be scored; a request that would pass it gets 429 with ``Retry-After``."""
    max_concurrent_requests: int = 1024
    """Most requests in flight at once; past it a request gets 429 with ``Retry-After``."""
    batch_timeout_s: float = 30.0
    """Deadline of one batch. Each program already runs under the engine's limits
    (``clickhouse.max_execution_time_s``: past it the program scores ``S_e = 0``, code ``exec_timeout``);
    this is the service's backstop: items of a batch still running at the deadline are answered with
    ``S_e = 0`` (code ``reward_timeout``), and the next batch starts when the engine is free."""
    engine_workers: int = 1
    """Batches scored at once, each on its own engine thread. The engine's Python work holds the GIL,
    while query embedding, ClickHouse and Milvus release it; a second worker fills those waits with the
    next batch's parsing and validation. Scores do not depend on it. ``bench/reward.py --engine-workers``
    measures it."""
    retry_after_s: int = 1
    """Seconds a rejected caller is told to wait (the ``Retry-After`` header, whole seconds)."""
    warmup: bool = True
    """Score one program per domain before reporting ready, so the first batch pays no model load."""
    reward: RewardConfig = field(default_factory=RewardConfig)
    """The reward's own settings (accuracy mode, length budget, ranking depth)."""

    def __post_init__(self) -> None:
        if self.window_ms < 0:
            raise RewardError(
                f"window_ms must be zero or more, got {self.window_ms}", code="bad_reward_config"
            )
        for name in ("max_batch_items", "max_request_items", "max_queue_items", "max_concurrent_requests",
                     "retry_after_s", "engine_workers"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise RewardError(
                    f"{name} must be a positive integer, got {value!r}", code="bad_reward_config"
                )
        if self.batch_timeout_s <= 0:
            raise RewardError(
                f"batch_timeout_s must be positive, got {self.batch_timeout_s}", code="bad_reward_config"
            )
        unknown = [d for d in self.domains if d not in DOMAINS]
        if unknown or not self.domains:
            raise RewardError(
                f"domains must be some of {', '.join(DOMAINS)}, got {', '.join(self.domains) or 'none'}",
                code="unknown_domain",
            )
