"""GRPO's sampler when the model chooses among the candidates (`model.action_space: candidates`): a TRL
`rollout_func` that draws each group's completions from the policy over the state's candidate answers.

Each state of the batch is scored once (lib/candidates.py: every candidate answer's log-likelihood, one forward
pass sharing the prompt), and its `num_generations` completions are drawn i.i.d. from the softmax at
`grpo.temperature`. At temperature 1 this is exactly on-policy: a candidate is sampled with the probability the
policy gives it, and TRL's loss then uses the log-likelihood of the sampled answer's tokens. Because the
advantages of a group sum to zero, the gradient of that log-likelihood equals the gradient of the candidate-
normalised log-probability (the normaliser's term cancels), so GRPO's update is the policy gradient of the
candidate policy itself. A temperature other than 1 samples off-policy; the run's config records it.

With `grpo.mode: every_candidate` a group is not drawn from the policy: it is the state's offered candidates
themselves, in a seeded random order, repeated round-robin to fill the group (a state with more candidates than
the group has a seeded random subset). TRL's loss then moves each candidate's log-likelihood by its return's
advantage over the group, however unlikely the policy finds it: the all-action update of AggreVaTe (Ross and
Bagnell, 2014) rather than a policy gradient, a signal that does not wait for the policy to sample a better answer.
Its share of the state's candidates is logged as explore/group_coverage.

With `grpo.mode: soft_target` the groups are the same, and each candidate's reward (its environment return,
scored by the same function as in step mode) is replaced by how far a bounded target moves its probability
(`soft_targets`): the target is the policy tilted toward the higher returns, q(a) proportional to
pi(a) exp(A(a) / eta) with A the return's advantage over the policy's mean (the improvement step of MPO,
Abdolmaleki et al. 2018), eta chosen so that KL(q || pi) is TARGET_KL (0.1 nats). A candidate's reward is
(q(a) - pi(a)) / k(a), k(a) its appearances in the group; they sum to zero over the group, so with TRL's mean
subtracted and no std scale the update is the gradient of the cross-entropy to q: every candidate moves, the
unlikely better ones by as much as the bound allows and no further, and ties give no signal at all.

Logged every step (explore/*): the policy's entropy over the candidates, its probability of the reference
policy's own answer and of the best answer at the state (from the corpus row's candidate returns). They leave as
the rollout's extra output `rollout_metrics`, which TRL forwards to the reward functions; the grpo stage's reward
logs them with TRL's `log_metric` (lib/training/samplers.py: `logged_reward`).
"""

from __future__ import annotations

import json
import math
import zlib

import torch

from ..candidates import answer_ids, answers, choose, distribution, entropy, prompt_ids, score_answers
from ..distributed import rank_key

# The soft target's KL bound per state. It was a setting, `grpo.target_kl`, retired: 0.5 lost -0.034 [-0.057, -0.011]
# against 0.1 on the tiny model (docs/RESULTS.md, 2026-11-28 night)
TARGET_KL = 0.1


def _prompt_key(prompt) -> str:
    return json.dumps(prompt, sort_keys=True)


def every_candidate(count: int, group_size: int, generator: torch.Generator) -> list[int]:
    """A group of `group_size` candidate indices out of `count`: a seeded permutation of them all, repeated
    round-robin (each candidate appears group_size // count or one more times); a seeded random subset of
    `group_size` of them when there are more candidates than that."""
    order = torch.randperm(count, generator=generator).tolist()
    return [order[i % count] for i in range(group_size)]


def tilt(probs: list[float], returns: list[float], kl: float) -> list[float]:
    """q(a) proportional to probs(a) exp(A(a) / eta), A the return's advantage over the mean under probs, with eta
    such that KL(q || probs) = kl (bisection on log eta); when even the limit eta -> 0 (all the mass on the best
    returns, in proportion to probs) stays within kl, that limit. Equal returns leave probs as they are.

    >>> [round(x, 3) for x in tilt([0.5, 0.5], [1.0, 0.0], 0.1)]
    [0.72, 0.28]
    >>> tilt([0.9, 0.1], [0.0, 1.0], 10.0)
    [0.0, 1.0]
    """
    mean = sum(p * r for p, r in zip(probs, returns))
    advantages = [r - mean for r in returns]
    top = max(returns)
    if top - min(returns) <= 1e-12:
        return list(probs)
    best_mass = sum(p for p, r in zip(probs, returns) if r == top)
    if best_mass > 0 and -math.log(best_mass) <= kl:  # the KL of the limit eta -> 0: all on the best, renormalised
        return [p / best_mass if r == top else 0.0 for p, r in zip(probs, returns)]

    def target(log_eta: float) -> tuple[list[float], float]:
        eta = math.exp(log_eta)
        shift = max(a for p, a in zip(probs, advantages) if p > 0) / eta  # the largest weight is exp(0)
        weights = [p * math.exp(a / eta - shift) if p > 0 else 0.0 for p, a in zip(probs, advantages)]
        total = sum(weights)
        q = [w / total for w in weights]
        return q, sum(x * math.log(x / p) for x, p in zip(q, probs) if x > 0)

    low, high = math.log(1e-6), math.log(1e6)  # KL falls as eta grows: widen the top until it is within kl
    while target(high)[1] > kl and high < math.log(1e300):
        low, high = high, high + math.log(1e6)
    for _ in range(80):
        middle = (low + high) / 2
        if target(middle)[1] > kl:
            low = middle
        else:
            high = middle
    return target(high)[0]


def soft_targets(keys: list[str], returns: list[float], probs: list[float], group_size: int, kl: float) -> list[float]:
    """The soft_target rewards of a batch of groups (see the module docstring). Per completion: its candidate's
    key (the answer text), its environment return and its probability under the policy. A group holds each of
    its candidates k times (or a subset: then the policy is renormalised over the group's candidates); each
    completion gets (q(a) - pi(a)) / k(a), so a group's rewards sum to zero.

    >>> soft_targets(["a", "b", "a", "b"], [1.0, 0.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5], 4, 0.1)
    [0.109897, -0.109897, 0.109897, -0.109897]
    """
    if not len(keys) == len(returns) == len(probs) or len(keys) % group_size:
        raise ValueError(
            f"{len(keys)} completions, {len(returns)} returns and {len(probs)} probabilities do not "
            f"make groups of {group_size}"
        )
    rewards: list[float] = []
    for start in range(0, len(keys), group_size):
        group = range(start, start + group_size)
        unique = list(dict.fromkeys(keys[i] for i in group))
        count = {key: sum(keys[i] == key for i in group) for key in unique}
        first = {key: next(i for i in group if keys[i] == key) for key in unique}
        mass = sum(probs[first[key]] for key in unique)
        if mass <= 0:
            raise ValueError(f"the group at {start} has no probability under the policy")
        pi = [probs[first[key]] / mass for key in unique]
        q = tilt(pi, [returns[first[key]] for key in unique], kl)
        move = {key: (q_a - p_a) / count[key] for key, q_a, p_a in zip(unique, q, pi)}
        rewards.extend(round(move[keys[i]], 6) for i in group)
    return rewards


def candidate_rollout(rows: list[dict], spec, group_size: int, temperature: float, seed: int, every: bool = False):
    """The `rollout_func` (see the module docstring): groups drawn from the policy, or with `every` made of every
    offered candidate. `rows` are the GRPO prompts of the corpus: each state is rebuilt from its (seed, split,
    history) to read its candidates."""
    by_prompt = {_prompt_key(r["prompt"]): r for r in rows}
    env = spec.make_env()

    def rollout(prompts, trainer):
        tokenizer = trainer.processing_class
        model = trainer.model
        starts = list(range(0, len(prompts), group_size))
        states = [by_prompt[_prompt_key(prompts[start])] for start in starts]
        offered = [answers(env.restore(r["seed"], r["split"], r["history"])) for r in states]
        was_training = model.training
        model.eval()  # in eval mode no layer is checkpointed, so the prompt's cache is kept for the answers
        try:
            with torch.no_grad():
                scores = score_answers(model, tokenizer, [r["prompt"] for r in states], offered)
        finally:
            model.train(was_training)
        completion_ids: list[list[int]] = []
        entropies, p_best, p_reference, coverage, policy_prob = [], [], [], [], []
        for start, row, options, logprobs in zip(starts, states, offered, scores):
            probs = distribution(logprobs, temperature)
            # seeded by (run seed, step, group): a run resumed from a checkpoint draws the same completions
            generator = torch.Generator().manual_seed(
                zlib.crc32(f"{seed}/{trainer.state.global_step}/{start}{rank_key()}".encode())
            )
            if every:
                group = every_candidate(len(options), group_size, generator)
            else:
                group = choose(probs, greedy=False, generator=generator, draws=group_size)
            completion_ids.extend(answer_ids(tokenizer, options[index]) for index in group)
            policy = distribution(logprobs, 1.0)  # the policy itself, whatever the sampling temperature
            policy_prob.extend(policy[index] for index in group)
            coverage.append(len(set(group)) / len(options))
            entropies.append(entropy(probs))
            returns = row.get("returns")
            if returns:
                best = max(returns.values())
                p_best.append(sum(p for a, p in zip(options, probs) if returns.get(a) == best))
            if row.get("reference_answer") in options:
                p_reference.append(probs[options.index(row["reference_answer"])])
        metrics = {
            "explore/candidate_entropy": sum(entropies) / len(entropies),
            "explore/group_coverage": sum(coverage) / len(coverage),
        }
        if p_best:
            metrics["explore/p_best"] = sum(p_best) / len(p_best)
        if p_reference:
            metrics["explore/p_reference"] = sum(p_reference) / len(p_reference)
        ids = [prompt_ids(tokenizer, p) for p in prompts]
        return {
            "prompt_ids": ids,
            "completion_ids": completion_ids,
            "logprobs": None,
            "rollout_metrics": metrics,
            "policy_prob": policy_prob,
        }

    return rollout
