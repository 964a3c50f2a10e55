"""The GRPO reward, step mode: the environment's verdict on each completion, plus the per-step env/* and explore/*
metrics. Used by the grpo stage (lib/training/train.py) and the anti-hacking suite (lib/evaluation/antihack.py),
so training and the attacks are scored by the same function.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import RunConfig
from ..distributed import is_main
from ..episodes import action_returns, policy_actor
from .explore import group_metrics


def model_continuation(policy: dict, config: RunConfig):
    """An actor (see `episodes.play`) in which the model in `policy["model"]` acts greedily (choosing among the
    candidates or generating free text, as `model.action_space` says), one batched call per step for all
    unfinished episodes. `policy` is filled in once the trainer exists, so the continuation always uses the
    weights being trained."""
    from ..inference import model_actor

    def act(live) -> list[str]:
        model, tokenizer = policy["model"], policy["tokenizer"]
        actor = model_actor(
            model,
            tokenizer,
            action_space=config.model.action_space,
            greedy=True,
            max_new_tokens=config.grpo.max_completion_length,
        )
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return actor(live)
        finally:
            model.train(was_training)

    return act


def make_reward_function(config: RunConfig, samples_path: Path | None = None, policy: dict | None = None):
    """GRPO reward, step mode: the completion is applied at the sampled state and the episode is finished by
    the reference policy (`grpo.continuation: reference`) or by the policy being trained (`policy`: the model
    in `policy["model"]`, greedy); the reward is that episode's true return. Invalid output gets the
    environment's penalty. A blocklisted substring in the completion (never the prompt) forfeits any positive
    reward."""
    g = config.grpo
    spec = config.spec
    if g.continuation == "policy":
        if policy is None:
            raise ValueError("grpo.continuation is 'policy' but no policy model was given to the reward function")
        continuation = model_continuation(policy, config)
    else:
        continuation = policy_actor(spec.make_policy(config.reference_policy))
    envs = []
    blocklist = [b.lower() for b in g.blocklist]

    def log_exploration(rewards, reference_return, log_metric) -> None:
        """explore/* metrics (lib/training/explore.py): did some sample beat the reference's own action at its
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
