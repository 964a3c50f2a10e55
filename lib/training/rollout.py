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

Logged every step (explore/*): the policy's entropy over the candidates, its probability of the reference
policy's own answer and of the best answer at the state (from the corpus row's candidate returns). They leave as
the rollout's extra output `rollout_metrics`, which TRL forwards to the reward functions; the grpo stage's reward
logs them with TRL's `log_metric` (lib/training/samplers.py: `logged_reward`).
"""

from __future__ import annotations

import json
import zlib

import torch

from ..candidates import answer_ids, answers, choose, distribution, entropy, prompt_ids, score_answers
from ..distributed import rank_key


def _prompt_key(prompt) -> str:
    return json.dumps(prompt, sort_keys=True)


def every_candidate(count: int, group_size: int, generator: torch.Generator) -> list[int]:
    """A group of `group_size` candidate indices out of `count`: a seeded permutation of them all, repeated
    round-robin (each candidate appears group_size // count or one more times); a seeded random subset of
    `group_size` of them when there are more candidates than that."""
    order = torch.randperm(count, generator=generator).tolist()
    return [order[i % count] for i in range(group_size)]


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
        entropies, p_best, p_reference, coverage = [], [], [], []
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
        return {"prompt_ids": ids, "completion_ids": completion_ids, "logprobs": None, "rollout_metrics": metrics}

    return rollout
