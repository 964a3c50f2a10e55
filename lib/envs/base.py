"""The environment protocol every workbook environment follows (OpenEnv-shaped), and the policy protocol.

Used by every stage: corpus building, GRPO rewards, evaluation and `python -m lib baselines`.

An environment exposes `reset(seed, split)`, `step(action_text)`, `state()`, one `render()` that turns an
observation into the chat messages a model sees, the `history` of action texts of the current episode, and
`restore(seed, split, history)`, which rebuilds a mid-episode state by replaying that history. Every
observation has a `candidates` tuple. Actions are strict: the only accepted form is one JSON object
`{"action": "<candidate id>"}` naming a candidate shown in the observation. Anything else is `Invalid` and is
never coerced into a default action.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

SPLITS = ("train", "holdout", "holdout_novel")
# Each split owns a disjoint block of internal seeds, so `train` and `holdout` can never share an episode.
SEEDS_PER_SPLIT = 1_000_000
MAX_CONSECUTIVE_INVALID = 3  # invalid answers in a row that end an episode (with return 0)
MAX_ACTION_CHARS = 256  # longer output is invalid before any parsing, so a 1 MB string costs nothing


@dataclass(frozen=True)
class Candidate:
    """One action offered to the policy: `id` is what the policy names; `kind`/`args` are what it does."""

    id: str
    kind: str
    args: tuple[str, ...]
    text: str

    @property
    def key(self) -> tuple:
        """Identity of the action independent of its (shuffled) id."""
        return (self.kind, *self.args)


@dataclass(frozen=True)
class Action:
    candidate: Candidate


@dataclass(frozen=True)
class Invalid:
    reason: str


@dataclass
class StepResult:
    observation: Any
    reward: float
    done: bool
    components: dict[str, float]
    info: dict[str, Any] = field(default_factory=dict)


def format_action(candidate_id: str) -> str:
    """The one canonical action text. SFT targets, teacher policies and the parser all agree on it."""
    return json.dumps({"action": candidate_id})


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def parse_action(text: object, candidates: tuple[Candidate, ...]) -> Action | Invalid:
    """Strictly parse model output into an offered candidate.

    >>> parse_action('{"action": "a2"}', (Candidate("a2", "finish", (), "finish"),)).candidate.kind
    'finish'
    >>> parse_action('finish', ()).reason
    'not a JSON object'
    """
    if not isinstance(text, str):
        return Invalid("not text")
    if len(text) > MAX_ACTION_CHARS:
        return Invalid("too long")
    body = text.strip()
    if not (body.startswith("{") and body.endswith("}")):
        return Invalid("not a JSON object")
    try:
        obj = json.loads(body, object_pairs_hook=_reject_duplicate_keys)
    except (ValueError, RecursionError):
        return Invalid("not a JSON object")
    if not isinstance(obj, dict) or set(obj) != {"action"}:
        return Invalid("object must have exactly one key, 'action'")
    chosen = obj["action"]
    if not isinstance(chosen, str):
        return Invalid("'action' must be a string id")
    for candidate in candidates:
        if candidate.id == chosen:
            return Action(candidate)
    return Invalid("id not offered")


def split_seed(seed: int, split: str) -> int:
    """Map (seed, split) to the internal seed; splits own disjoint blocks."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < SEEDS_PER_SPLIT:
        raise ValueError(f"seed must be an int in [0, {SEEDS_PER_SPLIT}), got {seed!r}")
    return SPLITS.index(split) * SEEDS_PER_SPLIT + seed


def combine(components: dict[str, float], weights: dict[str, float]) -> float:
    """Weighted sum of named components; components without a weight (e.g. penalties) add as they are."""
    return sum(weights.get(name, 1.0) * value for name, value in components.items())


class Environment(ABC):
    """The protocol. `invalid_penalty` is the fixed step reward of any invalid action; it is strictly
    below the worst return a legal action can lead to, so garbage never beats a real decision.

    `step` returns a `StepResult` whose `info` holds "invalid" (the parser's reason) for an invalid action and,
    when the episode ends, "episode_return" (in [0, 1]), "end_reason" and "exploit" (an anti-cheat rule the
    episode hit, or None)."""

    name: str
    invalid_penalty: float
    history: list[str]  # action texts of the current episode; an invalid action is recorded as ""
    seed: int  # the current episode's (seed, split), as given to reset()
    split: str

    @abstractmethod
    def reset(self, seed: int, split: str) -> Any: ...

    @abstractmethod
    def step(self, action_text: str) -> StepResult: ...

    @abstractmethod
    def state(self) -> dict[str, Any]: ...

    @abstractmethod
    def render(self, observation: Any) -> list[dict[str, str]]: ...

    @property
    def done(self) -> bool:
        """Whether the current episode has ended (environments keep `_done`)."""
        return self._done

    def _read_answer(self, action_text: str) -> tuple[Candidate | None, dict[str, Any]]:
        """The first half of every `step`: refuse a finished episode, count the step, parse the answer strictly
        against the current observation's candidates, record it in `history` (an invalid one as "", so any
        invalid text replays identically) and track the invalid streak. Returns (the chosen candidate or None,
        the step's info). Environments keep `_done`, `_obs`, `_steps` and `_consecutive_invalid`."""
        if self._done:
            raise RuntimeError("episode is over: call reset() first")
        parsed = parse_action(action_text, self._obs.candidates)
        self._steps += 1
        if isinstance(parsed, Invalid):
            self.history.append("")
            self._consecutive_invalid += 1
            return None, {"invalid": parsed.reason}
        self.history.append(action_text.strip())
        self._consecutive_invalid = 0
        candidate = parsed.candidate
        return candidate, {"action": candidate.text, "action_key": list(candidate.key)}

    @property
    def _invalid_limit_hit(self) -> bool:
        return self._consecutive_invalid >= MAX_CONSECUTIVE_INVALID

    def restore(self, seed: int, split: str, history: list[str]) -> Any:
        """Rebuild a mid-episode state by replaying its action history (GRPO step mode, corpus scoring)."""
        observation = self.reset(seed, split)
        for position, text in enumerate(history):
            result = self.step(text)
            if result.done:
                raise ValueError(f"history ends the episode at step {position + 1}; cannot restore past it")
            observation = result.observation
        return observation


class Policy:
    """A scripted policy: `begin(seed)` at the start of every episode, then `act(observation, env)` returns
    the canonical action text, exactly as a model would answer. Policies that read `env` beyond the
    observation (an oracle) see hidden state and are labelled so by their environment's spec."""

    name = "policy"

    def begin(self, seed: int) -> None:
        """Called at the start of every episode."""

    def act(self, observation: Any, env: Environment) -> str:
        raise NotImplementedError
