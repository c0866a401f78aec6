"""Errors of the reward and its service: one kind, with a stable code per problem.

A program that fails is never an error here: it scores 0 on a layer and its code is in the result.
A :class:`RewardError` means the *request* cannot be scored: an unknown domain or instance, no gold
id, an accuracy mode whose data the item does not carry.

>>> RewardError("the item has no relevant set", code="no_relevant_set").one_line()
'error no_relevant_set: the item has no relevant set'
"""

from __future__ import annotations

from core.errors import ProReError


class RewardError(ProReError):
    """A reward request that cannot be scored as asked.

    Codes: ``bad_item`` (a field is missing or wrong), ``unknown_domain``, ``unknown_instance``,
    ``no_gold`` (neither a gold id nor an instance id), ``no_relevant_set`` (``satisfy`` needs the
    item's relevant set), ``bad_reward_config``.
    """

    code = "reward"


class RewardUnavailable(RewardError):
    """The reward service could not answer: overloaded, restarting or unreachable. Retrying may help."""

    code = "reward_unavailable"
    retryable = True
