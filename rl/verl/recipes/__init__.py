"""SFT, GRPO and DAPO as verl overrides, read from the one defaults file (``defaults.yaml`` beside this module).

A recipe is an ordered mapping from verl config paths to values; :func:`overrides` fills in the launch
parameters (model, cluster shape, data and checkpoint directories) and renders Hydra override strings.

>>> o = overrides("dapo", {"model": "/models/qwen3-4b"})
>>> "actor_rollout_ref.actor.clip_ratio_high=0.28" in o, "actor_rollout_ref.model.path=/models/qwen3-4b" in o
(True, True)
>>> recipe("grpo")["actor_rollout_ref.rollout.n"]
4
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from rl.errors import TrainError

Algorithm = Literal["sft", "grpo", "dapo"]
ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)
DEFAULTS_FILE = Path(__file__).with_name("defaults.yaml")

_PARAM = re.compile(r"\{([a-z_]+)\}")
# Hydra's grammar reads these characters unquoted; anything else in a string value gets quoted.
_PLAIN = re.compile(r"^[A-Za-z0-9_./:\-+@]+$")


@cache
def defaults() -> Mapping[str, Any]:
    """The parsed defaults file."""
    data: dict[str, Any] = yaml.safe_load(DEFAULTS_FILE.read_text())
    return data


def params() -> dict[str, Any]:
    """The launch parameters and their defaults."""
    return dict(defaults()["params"])


def recipe(name: str, *, dynamic_sampling: bool = False) -> dict[str, Any]:
    """The verl keys of recipe ``name`` with ``{param}`` placeholders left in; later sections win.

    GRPO and DAPO are the ``rl`` section plus their own; ``dynamic_sampling`` (DAPO only) adds verl's
    group filtering.
    """
    if name not in ALGORITHMS:
        raise TrainError(
            f"unknown recipe {name!r}; choose one of {', '.join(ALGORITHMS)}", code="train_recipe"
        )
    if dynamic_sampling and name != "dapo":
        raise TrainError(
            "dynamic sampling (algorithm.filter_groups) belongs to the DAPO recipe", code="train_recipe"
        )
    d = defaults()
    sections = ["sft"] if name == "sft" else ["rl", name]
    if dynamic_sampling:
        sections.append("dynamic_sampling")
    out: dict[str, Any] = {}
    for section in sections:
        out.update(d[section])
    return out


def _fill(value: Any, values: Mapping[str, Any]) -> Any:
    if not isinstance(value, str):
        return value
    whole = _PARAM.fullmatch(value)
    if whole:  # a lone placeholder keeps the parameter's type (an int stays an int)
        return values[whole.group(1)]
    return _PARAM.sub(lambda m: str(values[m.group(1)]), value)


def resolve(
    name: str, given: Mapping[str, Any] | None = None, *, dynamic_sampling: bool = False
) -> dict[str, Any]:
    """Recipe ``name`` with every placeholder filled from ``given`` over the defaults of :func:`params`."""
    values = params()
    unknown = sorted(set(given or {}) - set(values))
    if unknown:
        raise TrainError(f"unknown launch parameter(s) {', '.join(unknown)}; known: {', '.join(values)}",
                         code="train_param")  # fmt: skip
    values.update({k: v for k, v in (given or {}).items() if v is not None})
    return {key: _fill(v, values) for key, v in recipe(name, dynamic_sampling=dynamic_sampling).items()}


def hydra_value(value: Any) -> str:
    """A value as Hydra's override grammar reads it back.

    >>> hydra_value(True), hydra_value(1e-6), hydra_value(["console"]), hydra_value("pkg://rl.verl.reward_fn")
    ('true', '1e-06', '[console]', 'pkg://rl.verl.reward_fn')
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{hydra_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.match(text) and text not in ("true", "false", "null") and not _looks_numeric(text):
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _looks_numeric(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


REWARD_URL_KEY = "reward.custom_reward_function.reward_kwargs.reward_url"
"""Where the reward service's URL goes: verl passes ``reward_kwargs`` to the reward function as keywords.
verl's files do not declare ``reward_kwargs``, so the override appends it (``+``)."""


def overrides(
    name: str,
    given: Mapping[str, Any] | None = None,
    *,
    dynamic_sampling: bool = False,
    reward_url: str | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """Hydra overrides (``key=value``) of recipe ``name``, then the reward URL (RL recipes) and ``extra``
    overrides as given (verbatim, so they win)."""
    keys = resolve(name, given, dynamic_sampling=dynamic_sampling)
    out = [f"{k}={hydra_value(v)}" for k, v in keys.items()]
    if reward_url is not None:
        if name == "sft":
            raise TrainError("the SFT recipe has no reward; drop the reward URL", code="train_param")
        out.append(f"+{REWARD_URL_KEY}={hydra_value(reward_url)}")
    return out + list(extra)
