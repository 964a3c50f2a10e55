"""Run whole episodes of a policy in an environment, and score one action at a mid-episode state. Used by
baselines, the corpus, GRPO rewards, the anti-hacking suite and evaluation."""
from __future__ import annotations

import copy
from dataclasses import dataclass, field


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


def run_episode(env, policy, seed: int, split: str, *, keep_transitions: bool = False) -> Episode:
    """Play one episode. With `keep_transitions`, each step records the observation and action text."""
    observation = env.reset(seed, split)
    policy.begin(seed)
    transitions, invalid = [], 0
    while True:
        action_text = policy.act(observation, env)
        if keep_transitions:
            transitions.append({"observation": observation, "action": action_text, "history": list(env.history)})
        result = env.step(action_text)
        invalid += "invalid" in result.info
        if result.done:
            return Episode(seed, split, result.info["episode_return"], env.state()["step"], invalid,
                           result.info["end_reason"], result.components, transitions)
        observation = result.observation


def action_return(env, seed: int, split: str, history: list[str], action_text: str, reference) -> tuple[float, dict]:
    """The environment's verdict on one action at a mid-episode state: the action is applied at the state
    rebuilt from `history`, then `reference` (a Policy) finishes the episode. Invalid output scores the
    environment's fixed penalty and is never turned into an action. Returns (score, info).

    This is the one scoring function for GRPO rewards, corpus filtering and the anti-hacking suite; it is
    `action_returns` for a single state."""
    return action_returns([env], [(seed, split, history, action_text)], policy_continuation(reference))[0]


def candidate_returns(env, seed: int, split: str, history: list[str], observation, reference) -> dict[str, float]:
    """`action_return` of every candidate the observation lists, keyed by the candidate's answer text: what
    each legal action at this state is worth when `reference` finishes the episode."""
    from .envs.base import format_action

    return {format_action(c.id): action_return(env, seed, split, history, format_action(c.id), reference)[0]
            for c in observation.candidates}


def policy_continuation(policy):
    """A continuation (see `action_returns`) in which a copy of `policy`, begun at the episode's seed, acts
    in each episode."""
    copies: dict[int, object] = {}

    def act(pending: list[tuple]) -> list[str]:
        texts = []
        for key, env, observation, seed, first in pending:
            if first:
                copies[key] = copy.copy(policy)
                copies[key].begin(seed)
            texts.append(copies[key].act(observation, env))
        return texts
    return act


def action_returns(envs, items, continuation) -> list[tuple[float, dict]]:
    """Batched `action_return`: item i is (seed, split, history, action_text) and is played in `envs[i]`.
    After each item's action, `continuation(pending)` chooses the next action of every unfinished episode at
    once; pending holds (i, env, observation, seed, first) with `first` true on the episode's first call.
    Episodes advance in lockstep, so a model can act for all of them in one batched generate call.

    A legal action scores the episode's return, in [0, 1] (a continuation's own invalid answers cost what
    they cost in any episode), so it always scores above the invalid-output penalty."""
    results: list[tuple[float, dict] | None] = [None] * len(items)
    running: list[tuple[int, object, bool]] = []  # (i, step result, first)
    for i, (env, (seed, split, history, action_text)) in enumerate(zip(envs, items)):
        env.restore(seed, split, history)
        result = env.step(action_text)
        if "invalid" in result.info:
            results[i] = (env.invalid_penalty, {"invalid": result.info["invalid"], "components": {}})
        else:
            running.append((i, result, True))
    while True:
        for i, result, _ in running:
            if result.done:
                info = result.info
                results[i] = (info["episode_return"], {"components": result.components, "end_reason": info["end_reason"],
                                                       "exploit": info.get("exploit")})
        running = [(i, r, first) for i, r, first in running if not r.done]
        if not running:
            return results
        texts = continuation([(i, envs[i], r.observation, items[i][0], first) for i, r, first in running])
        running = [(i, envs[i].step(text), False) for (i, _, _), text in zip(running, texts)]


def teacher_states(env, policy, seeds, split: str) -> list[tuple[int, list[str]]]:
    """(seed, history) for every position of `policy`'s episodes: fixed, replayable mid-episode states."""
    return [(seed, t["history"]) for seed in seeds
            for t in run_episode(env, policy, seed, split, keep_transitions=True).transitions]
