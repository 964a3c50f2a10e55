"""What crosses the wire: OpenEnv's `Action` and `Observation` models for every workbook environment, and how an
environment's own observation and step result become one.

The server renders the prompt (the environment's one `render`), so a client never needs the environment's code:
it receives the chat messages a model would see and the candidate answers it may give. Hidden state never leaves
the server: `state` carries the episode's identity and counters only.
"""

from __future__ import annotations

import json
import math
from typing import Any

from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

from ..envs.base import SPLITS, format_action

# The longest action text the server accepts (a 4xx above it). The environment already treats anything over
# its own MAX_ACTION_CHARS as an invalid answer; this bound only keeps a megabyte of text off the server.
MAX_WIRE_ACTION_CHARS = 8_192


class WorkbookAction(Action):
    """The model's answer, as text: the environment parses it strictly (one JSON object naming a candidate)."""

    text: str = Field(max_length=MAX_WIRE_ACTION_CHARS, description='the answer, e.g. {"action": "a3"}')


class WorkbookObservation(Observation):
    """One state of an episode as a model sees it, and the verdict on the answer that led to it."""

    env: str = Field(description="environment name")
    seed: int
    split: str
    step: int = Field(description="answers given so far in this episode")
    messages: list[dict[str, str]] = Field(description="the chat prompt (the environment's one renderer)")
    candidates: list[dict[str, Any]] = Field(description="offered actions: id, kind, args, text and the answer")
    components: dict[str, float] = Field(default_factory=dict, description="terminal reward components")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info: action, invalid, end_reason...")
    episode_return: float | None = Field(None, description="the episode's return in [0, 1], once it is done")


class WorkbookState(State):
    """The episode's identity and counters (never hidden state)."""

    env: str | None = None
    seed: int | None = None
    split: str | None = None
    done: bool = True


def json_safe(value: Any) -> Any:
    """`value` with tuples as lists and non-finite floats as None, so it encodes as strict JSON."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.loads(json.dumps(value, default=str))


def candidates_payload(observation) -> list[dict[str, Any]]:
    return [
        {"id": c.id, "kind": c.kind, "args": list(c.args), "text": c.text, "answer": format_action(c.id)}
        for c in observation.candidates
    ]


def observation_payload(env, observation, *, reward=None, done=False, components=None, info=None):
    """The wire observation of `env`'s current episode at `observation` (after a step: its verdict)."""
    info = json_safe(info or {})
    return WorkbookObservation(
        env=env.name,
        seed=env.seed,
        split=env.split,
        step=len(env.history),
        messages=env.render(observation),
        candidates=[] if done else candidates_payload(observation),
        components={k: float(v) for k, v in (components or {}).items()},
        info=info,
        episode_return=info.get("episode_return") if done else None,
        reward=reward,
        done=done,
    )


def check_split(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
    return split
