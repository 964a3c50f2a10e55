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
import random
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .turns import conversation

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


def candidate_lines(candidates: tuple[Candidate, ...], listed: bool = True) -> list[str]:
    """The prompt's candidate list, as every renderer writes it: a "Candidates:" line, then each id quoted as the
    answer writes it (so an answer's tokens are a copy of one listed line's); none at all when not `listed`, for a
    learner that scores the offered answers itself (the environment argument `list_candidates: false`)."""
    return ["Candidates:", *(f'- "{c.id}"' for c in candidates)] if listed else []


# how an episode's prompts are written (the environment argument `turns`): each state whole; the episode as one
# conversation (`turns.conversation`); the same without the answers given (`updates`)
TURNS = ("state", "conversation", "updates")


def completion_action(completion: str) -> str:
    """The candidate id an action text names (`format_action`'s inverse), for counting what a policy played; a text
    that is no such object is its own "action"."""
    try:
        return str(json.loads(completion)["action"])
    except (ValueError, TypeError, KeyError):
        return completion


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


def combine(components: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """Weighted sum of named components; components without a weight (e.g. penalties) add as they are."""
    return sum(weights.get(name, 1.0) * value for name, value in components.items())


def clamp(value: float) -> float:
    """A return into [0, 1]."""
    return min(1.0, max(0.0, value))


class Environment(ABC):
    """The protocol, and the one implementation of its bookkeeping. `reset` and `step` live here; an environment
    implements only what is its own:

    - `_begin(internal_seed)`: set up a new episode (the scenario of `self.seed`, `self.split`);
    - `_observe()`: the current observation (it carries the `candidates` tuple);
    - `_apply(candidate, info)`: carry out one legal action; returns `(exploit, end_reason)`, the anti-cheat
      rule it broke (which ends the episode) and the end it caused (e.g. "finish"), each None if none;
      it may add entries to the step's `info`;
    - `_after_step()` (optional): after any answer that did not end the episode, move on what moves by itself
      (a clock) and return the end reason when the episode is now over, else None; by default the episode ends
      ("budget") once it has taken `self.budget` steps, the budget `_begin` sets;
    - `_score(exploit)`: the terminal reward components of an episode that ended other than by the invalid
      limit (combined with `weights`, clamped to [0, 1]);
    - `_hidden()`: the environment's own part of `state()`, hidden parts included;
    - `renderer`: the environment's one prompt renderer, a function of the observation (`staticmethod(render)`),
      which `render` calls; it writes the candidate list with `candidate_lines`, and takes `list_candidates=False`
      (a keyword) to leave it out; it lives beside the observation types, in a module that does not import the
      environment;
    - optionally `_on_invalid()` (what an invalid answer costs beyond `invalid_penalty`), `_end_info(info,
      end_reason)` (extra facts about an ended episode) and `_rule_hit(exploit, components)` (the anti-cheat
      rule an ended episode hit; by default the exploit that ended it).

    `invalid_penalty` is the fixed step reward of any invalid action; it is strictly below the worst return a
    legal action can lead to, so garbage never beats a real decision. `step` returns a `StepResult` whose
    `info` holds "invalid" (the parser's reason) for an invalid action, or "action" and "action_key" for a
    legal one, and, when the episode ends, "end_reason", "exploit", "anti_cheat" (the rule hit, or None),
    "terminal_reward" and "episode_return" (in [0, 1]; 0 for an episode lost to MAX_CONSECUTIVE_INVALID
    invalid answers in a row). The base owns `seed`, `split`, `history`, `done` and the counters
    `_steps`, `_total` (the return so far), `_internal` (the internal seed) and `_obs`, and `_shuffled`, the one
    order candidates are listed in."""

    name: str
    invalid_penalty: float
    weights: Mapping[str, float]
    renderer: Callable[..., list[dict[str, str]]]  # the one prompt renderer: staticmethod(render)
    list_candidates: bool = True  # whether the prompt lists the candidates (`lib.envs.get_spec` sets it per spec)
    turns: str = "state"  # "conversation": an episode's prompt is one conversation (`render`; set by get_spec)
    stochastic: bool = False  # whether outcomes are drawn at random, beyond the actions (`redraw_future` redraws them)
    budget: int  # the steps an episode may take (set by `_begin`), for the default `_after_step`
    history: list[str]  # action texts of the current episode; an invalid action is recorded as ""
    seed: int  # the current episode's (seed, split), as given to reset()
    split: str
    _done: bool = True

    # ---- the protocol (implemented here) --------------------------------------------------------
    def reset(self, seed: int, split: str) -> Any:
        """Start the episode of (seed, split) and return its first observation."""
        internal = split_seed(seed, split)
        self.seed, self.split, self._internal = seed, split, internal
        self.history = []
        self._steps = self._consecutive_invalid = 0
        self._total = 0.0
        self._done = False
        self._begin(internal)
        self._obs = self._observe()
        self._said: list[tuple[Any, list[dict[str, str]]]] = []  # turns: conversation's states, with what was said
        self._answers: list[str] = []
        self._keep_state()
        return self._obs

    def _keep_state(self) -> None:
        """Under `turns: conversation` or `updates`, the current observation and its one-state messages (`render`)."""
        if self.turns != "state":
            self._said.append((self._obs, self._render_state(self._obs)))

    def step(self, action_text: str) -> StepResult:
        """Parse the answer strictly against the current candidates, apply it (or its invalid penalty), and end
        the episode when a rule, the environment or MAX_CONSECUTIVE_INVALID invalid answers in a row say so."""
        if self._done:
            raise RuntimeError("episode is over: call reset() first")
        parsed = parse_action(action_text, self._obs.candidates)
        self._steps += 1
        # what was said, for turns: conversation (cut where it is invalid unread: a huge answer stays small)
        self._answers.append(action_text.strip()[:MAX_ACTION_CHARS] if isinstance(action_text, str) else "")
        exploit = end_reason = None
        if isinstance(parsed, Invalid):
            self.history.append("")  # any invalid text replays identically
            self._consecutive_invalid += 1
            info: dict[str, Any] = {"invalid": parsed.reason}
            reward = self.invalid_penalty
            self._on_invalid()
            if self._consecutive_invalid >= MAX_CONSECUTIVE_INVALID:
                end_reason = "invalid_limit"
        else:
            self.history.append(action_text.strip())
            self._consecutive_invalid = 0
            candidate = parsed.candidate
            info = {"action": candidate.text, "action_key": list(candidate.key)}
            reward = 0.0
            exploit, end_reason = self._apply(candidate, info)
            if exploit is not None and end_reason is None:
                end_reason = "exploit"
        if end_reason is None:
            end_reason = self._after_step()
        components: dict[str, float] = {}
        if end_reason is not None:
            self._done = True
            if end_reason == "invalid_limit":
                terminal, components = 0.0, {"invalid_limit": 1.0}  # an episode lost to garbage earns nothing
            else:
                components = self._score(exploit)
                terminal = clamp(combine(components, self.weights))
            reward += terminal
            info.update(
                end_reason=end_reason,
                exploit=exploit,
                anti_cheat=None if end_reason == "invalid_limit" else self._rule_hit(exploit, components),
                terminal_reward=terminal,
            )
            self._end_info(info, end_reason)
        self._total += reward
        if self._done:
            info["episode_return"] = 0.0 if end_reason == "invalid_limit" else clamp(self._total)
        else:
            self._obs = self._observe()
            self._keep_state()
        return StepResult(self._obs, reward, self._done, components, info)

    @property
    def done(self) -> bool:
        """Whether the current episode has ended."""
        return self._done

    def restore(self, seed: int, split: str, history: list[str]) -> Any:
        """Rebuild a mid-episode state by replaying its action history (GRPO step mode, corpus scoring)."""
        observation = self.reset(seed, split)
        for position, text in enumerate(history):
            result = self.step(text)
            if result.done:
                raise ValueError(f"history ends the episode at step {position + 1}; cannot restore past it")
            observation = result.observation
        return observation

    def redraw_future(self, draw: int) -> None:
        """Give the rest of the current episode fresh chance outcomes, numbered `draw` (the same draw at the same
        state replays identically); the past stays as it was. An environment whose outcomes are drawn at random
        (`stochastic`) overrides it, so a lookahead can average a state's possible futures instead of reading the
        one this episode's seed holds; a deterministic one has nothing to redraw."""
        return None

    def state(self) -> dict[str, Any]:
        """Debugging and oracle view of the whole state, hidden parts included: who the episode is (environment,
        seed, split), how far it has gone (step, done, history), the environment's `_hidden()`, then the return so
        far. Never show it to a policy that is not labelled as reading hidden state."""
        return {
            "env": self.name,
            "seed": self.seed,
            "split": self.split,
            "step": self._steps,
            "done": self._done,
            "history": list(self.history),
            **self._hidden(),
            "return_so_far": self._total,
        }

    def render(self, observation: Any) -> list[dict[str, str]]:
        """The chat messages a model sees for `observation`: the environment's `renderer`, the one renderer of
        every prompt (SFT data, GRPO rollouts, evaluation and post-save inference); without the candidate list
        when this environment was built with `list_candidates: false`.

        Built with `turns: conversation` (or `updates`), `observation` must be a state of this environment's current
        episode, and its prompt is the episode so far as one conversation (`conversation`): a model that keeps its
        cache across the episode then reads each state's changed parts (and the answer before them) only."""
        if self.turns == "state":
            return self._render_state(observation)
        said = getattr(self, "_said", [])
        for index in range(len(said) - 1, -1, -1):
            if said[index][0] is observation:
                states = [messages for _, messages in said[: index + 1]]
                return conversation(states, self._answers[:index], with_answers=self.turns == "conversation")
        raise ValueError(
            f"{self.name}: with turns: {self.turns}, render takes a state of this environment's current episode "
            "(its conversation so far is the prompt); this observation is not one"
        )

    def _render_state(self, observation: Any) -> list[dict[str, str]]:
        """One state's messages, as `turns: state` shows them."""
        if self.list_candidates:
            return self.renderer(observation)
        return self.renderer(observation, list_candidates=False)

    # ---- what each environment implements -------------------------------------------------------
    @abstractmethod
    def _begin(self, internal_seed: int) -> None: ...

    @abstractmethod
    def _observe(self) -> Any: ...

    @abstractmethod
    def _apply(self, candidate: Candidate, info: dict[str, Any]) -> tuple[str | None, str | None]: ...

    def _after_step(self) -> str | None:
        """The end of the episode by itself: by default, once it has taken `self.budget` steps."""
        return "budget" if self._steps >= self.budget else None

    @abstractmethod
    def _score(self, exploit: str | None) -> dict[str, float]: ...

    @abstractmethod
    def _hidden(self) -> dict[str, Any]:
        """The environment's own part of `state()`: its whole state, hidden parts included."""

    def _shuffled(self, items: list) -> tuple:
        """`items` in this step's order: shuffled from the internal seed and the step number, so a candidate's
        position carries no meaning and the same episode lists them the same way every time."""
        random.Random(self._internal * 1009 + self._steps).shuffle(items)
        return tuple(items)

    def _on_invalid(self) -> None:
        """What an invalid answer costs besides `invalid_penalty` (default: nothing)."""
        return None

    def _end_info(self, info: dict[str, Any], end_reason: str) -> None:
        """Add facts about the ended episode to its last step's `info` (default: none)."""
        return None

    def _rule_hit(self, exploit: str | None, components: dict[str, float]) -> str | None:
        """The anti-cheat rule an ended episode hit: by default the exploit that ended it."""
        return exploit


class Policy:
    """A scripted policy: `begin(seed)` at the start of every episode, then `act(observation, env)` returns
    the canonical action text, exactly as a model would answer. Policies that read `env` beyond the
    observation (an oracle) see hidden state and are labelled so by their environment's spec."""

    name = "policy"

    def begin(self, seed: int) -> None:
        """Called at the start of every episode."""

    def act(self, observation: Any, env: Environment) -> str:
        raise NotImplementedError
