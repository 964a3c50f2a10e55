"""Run whole episodes of a policy in an environment. Used by baselines, the corpus and evaluation."""
from __future__ import annotations

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
    rebuilt from `history`, then `reference` finishes the episode. Invalid output scores the environment's
    fixed penalty and is never turned into an action. Returns (score, info).

    This is the one scoring function for GRPO rewards, corpus filtering and the anti-hacking suite."""
    env.restore(seed, split, history)
    result = env.step(action_text)
    if "invalid" in result.info:
        return env.invalid_penalty, {"invalid": result.info["invalid"], "components": {}}
    total = result.reward
    reference.begin(seed)
    while not result.done:
        result = env.step(reference.act(result.observation, env))
        total += result.reward
    return total, {"components": result.components, "end_reason": result.info["end_reason"],
                   "exploit": result.info.get("exploit")}


def teacher_states(env, policy, seeds, split: str) -> list[tuple[int, list[str]]]:
    """(seed, history) for every position of `policy`'s episodes: fixed, replayable mid-episode states."""
    return [(seed, t["history"]) for seed in seeds
            for t in run_episode(env, policy, seed, split, keep_transitions=True).transitions]
