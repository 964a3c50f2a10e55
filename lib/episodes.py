"""The one episode runner, `play`, and what is built on it: whole episodes of a scripted policy (`run_episode`),
the environment's verdict on one action at a mid-episode state (`action_returns`), and replayable states.

Baselines, the corpus, GRPO rewards, the anti-hacking suite, evaluation and post-save all play episodes here.
Episodes advance in lockstep: each round, one `act` call answers every live episode, so a model can act for
all of them in one batched generate call, and a finished episode's slot goes to the next start. A per-step
hook (`on_step`) sees every step: evaluation records provenance and latency there, the corpus transitions.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from .envs.base import Policy, format_action


@dataclass
class Episode:
    seed: int
    split: str
    episode_return: float
    steps: int
    invalid: int
    end_reason: str
    components: dict[str, float]
    transitions: list[dict] = field(default_factory=list)
    exploit: str | None = None
    anti_cheat: str | None = None  # the anti-cheat rule the episode hit (the environment names it)
    invalid_reason: str | None = None  # a forced first action the parser rejected (the episode ended there)


@dataclass(frozen=True)
class Start:
    """Where an episode begins: `reset(seed, split)`, or the state rebuilt from `history`. With `forced`, that
    text is the first action; if it is invalid the episode ends there, scored the environment's invalid penalty.
    With `redraw`, the chance outcomes from the rebuilt state on are that numbered draw (`redraw_future`), not the
    ones the seed holds."""

    seed: int
    split: str
    history: tuple[str, ...] = ()
    forced: str | None = None
    redraw: int | None = None


@dataclass
class Live:
    """One running episode, as `act` and `on_step` see it. `extra` is the actor's per-step note to the hook."""

    index: int
    start: Start
    env: Any
    observation: Any
    steps: int = 0
    invalid: int = 0
    extra: dict = field(default_factory=dict)

    @property
    def seed(self) -> int:
        return self.start.seed


@dataclass(frozen=True)
class Step:
    """What `on_step` receives: the episode, the observation and history the action was chosen at, the action
    text, the environment's StepResult and the act call's latency per episode."""

    live: Live
    observation: Any
    history: list[str]
    text: str
    result: Any
    latency_s: float


Actor = Callable[[list[Live]], list[str]]
CUT_OFF = "cut_off"  # the end reason of an episode `play` stopped at `max_turns`


def play(
    make_env: Callable[[], Any],
    starts: Iterable[Start],
    act: Actor,
    *,
    batch_size: int = 1,
    on_step: Callable[[Step], None] | None = None,
    desc: str | None = None,
    max_turns: int | None = None,
) -> list[Episode]:
    """Play every start to its end; returns the episodes in the order of `starts`.

    Up to `batch_size` episodes are live at once (each in its own `make_env()` environment, made once per slot
    and reused); `act(live)` returns one action text per live episode. With `max_turns`, an episode still running
    after that many answers is cut off: end reason `cut_off`, return 0 (multi-turn GRPO's bound on a policy that
    never ends its episodes)."""
    queue = list(starts)[::-1]
    total = len(queue)
    results: list[Episode | None] = [None] * total
    free: list[Any] = []
    live: list[Live] = []
    progress = tqdm(total=total, desc=desc, leave=False) if desc else None
    while queue or live:
        while queue and len(live) < batch_size:
            start = queue.pop()
            entry = _begin(start, total - len(queue) - 1, free.pop() if free else make_env(), results, free, progress)
            if entry is not None:
                live.append(entry)
        if not live:
            continue
        histories = [list(e.env.history) for e in live] if on_step else None
        began = time.perf_counter()
        texts = act(live)
        latency = (time.perf_counter() - began) / len(live)
        still = []
        for position, (entry, text) in enumerate(zip(live, texts)):
            result = entry.env.step(text)
            entry.steps += 1
            entry.invalid += "invalid" in result.info
            if on_step is not None:
                on_step(Step(entry, entry.observation, histories[position], text, result, latency))
            entry.extra = {}
            if _finish(entry, result, results, free, progress):
                continue
            if max_turns is not None and entry.steps >= max_turns:
                results[entry.index] = Episode(
                    entry.seed, entry.start.split, 0.0, entry.steps, entry.invalid, CUT_OFF, {}
                )
                free.append(entry.env)
                if progress is not None:
                    progress.update(1)
                continue
            entry.observation = result.observation
            still.append(entry)
        live = still
    if progress is not None:
        progress.close()
    return results


def _begin(start: Start, index: int, env, results: list, free: list, progress) -> Live | None:
    """A start's episode in `env`: reset (or restored to its history), its forced first action taken. None when
    that action already ended it (its result recorded, the environment freed)."""
    observation = (
        env.restore(start.seed, start.split, list(start.history))
        if start.history
        else env.reset(start.seed, start.split)
    )
    if start.redraw is not None:
        env.redraw_future(start.redraw)
    entry = Live(index, start, env, observation)
    if start.forced is None:
        return entry
    result = env.step(start.forced)
    entry.steps = 1
    if "invalid" in result.info:
        reason = result.info["invalid"]
        results[index] = Episode(
            start.seed, start.split, env.invalid_penalty, 1, 1, "invalid_action", {}, invalid_reason=reason
        )
        free.append(env)
        return None
    if _finish(entry, result, results, free, progress):
        return None
    entry.observation = result.observation
    return entry


def _finish(entry: Live, result, results: list, free: list, progress) -> bool:
    if not result.done:
        return False
    info = result.info
    results[entry.index] = Episode(
        entry.seed,
        entry.start.split,
        info["episode_return"],
        entry.steps,
        entry.invalid,
        info["end_reason"],
        result.components,
        exploit=info.get("exploit"),
        anti_cheat=info.get("anti_cheat"),
    )
    free.append(entry.env)
    if progress is not None:
        progress.update(1)
    return True


def policy_actor(policy, *, copies: bool = True) -> Actor:
    """An actor in which a scripted policy acts. With `copies`, each episode gets its own copy of `policy`,
    begun at the episode's seed (needed when episodes are live at once); without, `policy` itself is begun
    at every episode's first step (one episode at a time)."""
    own: dict[int, Any] = {}

    def act(live: list[Live]) -> list[str]:
        texts = []
        for entry in live:
            if entry.index not in own:
                own[entry.index] = copy.copy(policy) if copies else policy
                own[entry.index].begin(entry.seed)
            texts.append(own[entry.index].act(entry.observation, entry.env))
        return texts

    return act


def run_episode(env, policy, seed: int, split: str, *, keep_transitions: bool = False) -> Episode:
    """Play one episode of a scripted policy. With `keep_transitions`, each step records the observation, the
    action text and the history before it."""
    transitions: list[dict] = []

    def record(step: Step) -> None:
        transitions.append({"observation": step.observation, "action": step.text, "history": step.history})

    episode = play(
        lambda: env,
        [Start(seed, split)],
        policy_actor(policy, copies=False),
        on_step=record if keep_transitions else None,
    )[0]
    episode.transitions = transitions
    return episode


def action_returns(envs, items, actor: Actor, *, redraw: int | None = None) -> list[tuple[float, dict]]:
    """The environment's verdict on actions at mid-episode states: item i is (seed, split, history, action_text),
    played in `envs[i]`. The action is applied at the state rebuilt from `history`, then `actor` (see `play`)
    finishes the episode; every item is live at once. Invalid output scores the environment's fixed penalty and
    is never turned into an action. With `redraw`, chance outcomes from the state on are that draw (`Start`), else
    the ones the seed holds: one sample of the action's worth. Returns (score, info) per item.

    This is the one scoring function for GRPO rewards, corpus filtering and the anti-hacking suite. A legal
    action scores the episode's return, in [0, 1], so it always scores above the invalid-output penalty."""
    pool = iter(envs)
    starts = [Start(seed, split, tuple(history), text, redraw) for seed, split, history, text in items]
    episodes = play(lambda: next(pool), starts, actor, batch_size=max(1, len(starts)))
    return [
        (e.episode_return, {"invalid": e.invalid_reason, "components": {}})
        if e.invalid_reason is not None
        else (
            e.episode_return,
            {"components": e.components, "end_reason": e.end_reason, "exploit": e.exploit, "anti_cheat": e.anti_cheat},
        )
        for e in episodes
    ]


def action_return(
    env, seed: int, split: str, history: list[str], action_text: str, reference, redraw: int | None = None
) -> tuple[float, dict]:
    """`action_returns` for one state, the episode finished by `reference` (a Policy)."""
    return action_returns([env], [(seed, split, history, action_text)], policy_actor(reference), redraw=redraw)[0]


FUTURE_DRAWS = 16  # futures a lookahead averages on an environment whose outcomes are drawn at random
FUTURE_MARGIN = 0.01  # what a candidate must beat the teacher's answer by there: closer means are the draws' noise


def candidate_returns(
    env, seed: int, split: str, history: list[str], observation, reference, draws: int | None = None
) -> dict[str, float]:
    """What each legal action at this state is worth when `reference` finishes the episode, keyed by the
    candidate's answer text. On a deterministic environment that is one `action_return`. Where outcomes are
    drawn at random (`env.stochastic`) it is the mean over `draws` (default FUTURE_DRAWS) fresh futures, the
    same draws for every candidate: the seed's own future would let the lookahead pick the specialist that
    happens to answer right this time, which nothing in the observation shows. `draws=0` reads that future."""
    draws = (FUTURE_DRAWS if env.stochastic else 0) if draws is None else draws
    futures = list(range(draws)) or [None]
    return {
        format_action(c.id): sum(
            action_return(env, seed, split, history, format_action(c.id), reference, redraw)[0] for redraw in futures
        )
        / len(futures)
        for c in observation.candidates
    }


def teacher_states(env, policy, seeds, split: str) -> list[tuple[int, list[str]]]:
    """(seed, history) for every position of `policy`'s episodes: fixed, replayable mid-episode states."""
    return [
        (seed, t["history"])
        for seed in seeds
        for t in run_episode(env, policy, seed, split, keep_transitions=True).transitions
    ]


class Improver(Policy):
    """The policy-improvement reference: at every state it takes the candidate whose return is highest
    when `reference` (the teacher) finishes the episode from there: the argmax of the teacher's Q. By the
    policy-improvement theorem it is at least as good as the teacher. It looks ahead with the simulator, so it
    is a reference for what step-mode GRPO optimises, not a competitor. Ties keep the teacher's own answer, and so
    does a candidate that beats it by no more than `margin` (default: FUTURE_MARGIN where outcomes are drawn at
    random, as the returns are then means over FUTURE_DRAWS futures; else exact ties only)."""

    name = "improver"

    def __init__(self, spec, reference: str | None = None, draws: int | None = None, margin: float | None = None):
        self.spec, self.reference, self.draws = spec, reference or spec.teacher, draws  # draws: `candidate_returns`
        self.scratch = spec.make_env()  # lookahead never touches the live episode's environment
        self.margin = max((FUTURE_MARGIN if self.scratch.stochastic else 0.0) if margin is None else margin, 1e-12)

    def begin(self, seed: int) -> None:
        self.seed = seed
        self.teacher = self.spec.make_policy(self.reference)  # its own, also in a copy made per episode
        self.teacher.begin(seed)

    def act(self, observation, env) -> str:
        return self.choose(observation, env)[0]

    def choose(self, observation, env) -> tuple[str, dict[str, float]]:
        """The answer it takes at this state, and every candidate's return it chose by (how much the choice
        mattered: all equal, no signal)."""
        returns = candidate_returns(
            self.scratch,
            self.seed,
            env.split,
            list(env.history),
            observation,
            self.spec.make_policy(self.reference),
            self.draws,
        )
        own = self.teacher.act(observation, env)
        best = max(returns.values())
        if returns.get(own, float("-inf")) >= best - self.margin:
            return own, returns
        return next(answer for answer, value in returns.items() if value >= best - 1e-12), returns


def scripted_policy(spec, name: str) -> Policy:
    """One of the environment's own policies by name, the generic `improver` reference built on its teacher, or
    `improver:<policy>`: the same lookahead with the episode finished by that policy of the environment."""
    kind, _, reference = name.partition(":")
    if kind != Improver.name:
        return spec.make_policy(name)
    if reference and reference not in spec.policies:
        raise ValueError(f"{name!r}: {spec.name} has no policy {reference!r}; choose from {sorted(spec.policies)}")
    return Improver(spec, reference or None)
