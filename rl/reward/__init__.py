"""The layered reward (DESIGN.md section 5), defined once, and the service that serves it.

>>> from rl.reward import combine
>>> combine(1, 1, 1, 0.5)
3.5
"""

from rl.reward.config import ACCURACY_MODES, Accuracy, RewardConfig
from rl.reward.errors import RewardError, RewardUnavailable
from rl.reward.length import LengthCounter
from rl.reward.parse import Parsed, parse_completion
from rl.reward.scorer import TIMEOUT_CODE, RewardItem, RewardResult, RewardScorer, score_one
from rl.reward.terms import LAYERS, Terms, accuracy_term, combine, length_term

__all__ = [
    "ACCURACY_MODES",
    "LAYERS",
    "TIMEOUT_CODE",
    "Accuracy",
    "LengthCounter",
    "Parsed",
    "RewardConfig",
    "RewardError",
    "RewardItem",
    "RewardResult",
    "RewardScorer",
    "RewardUnavailable",
    "Terms",
    "accuracy_term",
    "combine",
    "length_term",
    "parse_completion",
    "score_one",
]
