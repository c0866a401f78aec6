"""The one prompt builder, for training code: a re-export of :mod:`serving.prompt`, where it is defined.

The served planner builds its chat messages with the same functions, so a model sees the same words at
training and at serving time; the definition sits in the serving layer because serving may not import ``rl``.

>>> from serving import prompt
>>> messages is prompt.messages
True
"""

from __future__ import annotations

from serving.prompt import (
    CARD,
    EXAMPLE_PROGRAMS,
    PROFILES,
    Message,
    Profile,
    PromptConfig,
    PromptError,
    card_profile,
    example_values,
    messages,
    read_card,
    system_prompt,
)

__all__ = [
    "CARD",
    "EXAMPLE_PROGRAMS",
    "PROFILES",
    "Message",
    "Profile",
    "PromptConfig",
    "PromptError",
    "card_profile",
    "example_values",
    "messages",
    "read_card",
    "system_prompt",
]
