"""The GRPO reward, step mode: the environment's verdict on each completion, plus the per-step env/* and explore/*
metrics. Used by the grpo stage (lib/training/train.py) and the anti-hacking suite (lib/evaluation/antihack.py),
so training and the attacks are scored by the same function.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import RunConfig
from ..envs import get_spec
from ..episodes import action_returns, policy_actor
from .explore import group_metrics, policy_candidate_distribution


def model_continuation(policy: dict, max_new_tokens: int):
    """An actor (see `episodes.play`) in which the model in `policy["model"]` acts greedily,
    one batched generate call per step for all unfinished episodes. `policy` is filled in once the trainer
    exists, so the continuation always uses the weights being trained."""
    from ..inference import generate_actions

    def act(live) -> list[str]:
        model, tokenizer = policy["model"], policy["tokenizer"]
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                return generate_actions(
                    model,
                    tokenizer,
                    [e.env.render(e.observation) for e in live],
                    greedy=True,
                    max_new_tokens=max_new_tokens,
                )
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
    spec = get_spec(config.env)
    if g.continuation == "policy":
        if policy is None:
            raise ValueError("grpo.continuation is 'policy' but no policy model was given to the reward function")
        continuation = model_continuation(policy, g.max_completion_length)
    else:
        continuation = policy_actor(spec.make_policy(config.reference_policy))
    envs = []
    blocklist = [b.lower() for b in g.blocklist]

    explore_env = spec.make_env()

    def log_exploration(prompts, rewards, seed, split, history, reference_return, log_metric) -> None:
        """explore/* metrics (lib/training/explore.py): did some sample beat the reference's own action at its
        state, and how spread is the policy over the candidate set there."""
        if reference_return is None or log_metric is None:
            return
        injected = max(1, round(g.cover_share * g.num_generations)) if g.group_sampling == "cover_candidates" else 0
        for name, value in group_metrics(
            rewards, list(reference_return), g.num_generations, sampled=g.num_generations - injected
        ).items():
            log_metric(name, value)  # the policy's own samples only
        if injected:
            log_metric(
                "explore/beats_reference_with_injected",
                group_metrics(rewards, list(reference_return), g.num_generations)["explore/beats_reference"],
            )
        if not g.log_candidate_entropy or policy is None or "model" not in policy:
            return
        model, tokenizer = policy["model"], policy["tokenizer"]
        was_training = model.training
        model.eval()
        try:
            spreads = [
                policy_candidate_distribution(model, tokenizer, prompt, explore_env.restore(s, sp, json.loads(h)))
                for prompt, s, sp, h in list(zip(prompts, seed, split, history))[:: g.num_generations]
            ]
        finally:
            model.train(was_training)
        log_metric("explore/candidate_entropy", sum(d["entropy"] for d in spreads) / len(spreads))
        log_metric("explore/candidate_mass", sum(d["mass"] for d in spreads) / len(spreads))

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
            rule = spec.anti_cheat_rule(info) if "invalid" not in info else None
            if rule is not None:
                rules[rule] = rules.get(rule, 0) + 1
            for name, value in info["components"].items():
                components_sum[name] = components_sum.get(name, 0.0) + value
            if any(b in text.lower() for b in blocklist):
                blocked += 1
                score = min(score, 0.0)
            rewards.append(float(score))
        if samples_path is not None and config.grpo.sample_completions:
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
        log_exploration(prompts, rewards, seed, split, history, reference_return, log_metric)
        return rewards

    return environment_reward
