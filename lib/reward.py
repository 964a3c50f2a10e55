"""The GRPO reward, step mode: the environment's verdict on each completion, plus the per-step env/* and explore/*
metrics. Used by the grpo stage (lib/training/grpo.py) and the anti-hacking suite (lib/evaluation/antihack.py),
so training and the attacks are scored by the same function; it stands below both.

Exploration, measured while GRPO trains (can it sample what beats the teacher?): `group_metrics` is called every
GRPO step by the reward function, which logs
- `explore/beats_reference`: the share of groups in which some sample scores above the reference policy's own
  action at that state (the corpus row's `reference_return`, scored the same way);
- `explore/best_minus_reference`: the mean over groups of the best sample's return minus that reference return.
The candidate sampler (lib/training/rollout.py) adds `explore/candidate_entropy` (the policy's entropy over the
state's candidates), `explore/p_best` and `explore/p_reference` (its probability of the best answer and of the
reference's own answer). `python -m lib probe-explore` (lib/bench/probe_explore.py) measures the same numbers, in
expectation, for any model folder or adapter on a fixed set of states.
"""

from __future__ import annotations

import json
from pathlib import Path

from .config import RunConfig
from .distributed import is_main
from .episodes import action_returns, policy_actor


def group_metrics(
    rewards: list[float],
    reference_returns: list[float],
    group_size: int,
    tolerance: float = 1e-9,
) -> dict:
    """Per-step exploration metrics over consecutive groups of `group_size` samples (TRL keeps each prompt's
    samples together), each group compared with the reference policy's return at its state.

    >>> group_metrics([0.2, 0.9, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5], 2)
    {'explore/beats_reference': 0.5, 'explore/best_minus_reference': 0.2, 'explore/mean_minus_reference': 0.025}
    """
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    beats, best_gap, mean_gap = [], [], []
    for start in range(0, len(rewards), group_size):
        group, reference = rewards[start : start + group_size], reference_returns[start]
        beats.append(max(group) > reference + tolerance)
        best_gap.append(max(group) - reference)
        mean_gap.append(sum(group) / len(group) - reference)
    n = len(beats)
    return {
        "explore/beats_reference": sum(beats) / n,
        "explore/best_minus_reference": round(sum(best_gap) / n, 6),
        "explore/mean_minus_reference": round(sum(mean_gap) / n, 6),
    }


# The per-step logs' key that holds what the policy's samples returned, where TRL's `reward` holds something else:
# multi-turn with every turn trained hands TRL finished advantages, soft_target each candidate's move to its target.
RETURN_KEYS = ("multi_turn/return_mean", "soft_target/return_mean")


def reward_key(rows: list[dict]) -> str:
    """Which per-step key of a GRPO log is the reward to report and chart: a RETURN_KEYS key the log has, else
    TRL's `reward`."""
    return next((key for key in RETURN_KEYS if any(key in row for row in rows)), "reward")


def make_reward_function(config: RunConfig, samples_path: Path | None = None):
    """GRPO reward, step mode: the completion is applied at the sampled state and the episode is finished by
    the reference policy (the environment's teacher unless `grpo.reference_policy` names another); the reward is that
    episode's true return (finishing with the policy being trained was measured worse and retired: docs/RESULTS.md,
    lever index). Invalid output gets the environment's penalty. A blocklisted substring in the completion (never
    the prompt) forfeits any positive reward."""
    g = config.grpo
    spec = config.spec
    continuation = policy_actor(spec.make_policy(config.reference_policy))
    envs = []
    blocklist = [b.lower() for b in g.blocklist]

    def log_exploration(rewards, reference_return, log_metric) -> None:
        """explore/* metrics (`group_metrics`): did some sample beat the reference's own action at its
        state (the corpus row's `reference_return`, scored the same way). The sampler logs the policy's spread."""
        if reference_return is None or log_metric is None:
            return
        for name, value in group_metrics(rewards, list(reference_return), g.num_generations).items():
            log_metric(name, value)

    def environment_reward(
        prompts, completions, seed, split, history, reference_return=None, log_metric=None, log_extra=None, **_
    ):
        rewards, invalid, blocked, exploits = [], 0, 0, 0
        rules: dict[str, int] = {}
        components_sum: dict[str, float] = {}
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        envs.extend(spec.make_env() for _ in range(len(texts) - len(envs)))
        scored = action_returns(
            envs, [(s, sp, json.loads(h), t) for s, sp, h, t in zip(seed, split, history, texts)], continuation
        )
        for text, (score, info) in zip(texts, scored):
            invalid += "invalid" in info
            exploits += bool(info.get("exploit"))
            rule = info.get("anti_cheat")
            if rule is not None:
                rules[rule] = rules.get(rule, 0) + 1
            for name, value in info["components"].items():
                components_sum[name] = components_sum.get(name, 0.0) + value
            if any(b in text.lower() for b in blocklist):
                blocked += 1
                score = min(score, 0.0)
            rewards.append(float(score))
        if samples_path is not None and config.grpo.sample_completions and is_main():
            with Path(samples_path).open("a", encoding="utf-8") as handle:
                for text, score in list(zip(completions, rewards))[: config.grpo.sample_completions]:
                    content = text[-1]["content"] if isinstance(text, list) else text
                    handle.write(json.dumps({"completion": content, "reward": score}) + "\n")
        if log_metric is not None:
            n = len(rewards)
            log_metric("env/invalid_rate", invalid / n)
            log_metric("env/blocklist_rate", blocked / n)
            log_metric("env/exploit_rate", exploits / n)
            for name, total in components_sum.items():
                log_metric(f"env/component/{name}", total / n)
            for name in spec.anti_cheat_rules:
                log_metric(f"env/anti_cheat/{name}", rules.get(name, 0) / n)
        log_exploration(rewards, reference_return, log_metric)
        return rewards

    return environment_reward
