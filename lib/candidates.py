"""The model's policy over the offered candidates: every answer it can give is one of the observation's candidate
answers, with the probability the model gives that answer's tokens, renormalised over the candidates.

This is the candidate-scoring policy of TWOSOME (Tan et al., ICLR 2024) and GLAM (Carta et al., ICML 2023): the
log-likelihood of each complete answer (`{"action": "<id>"}` and the end-of-turn token) under the prompt, softmax
over the candidates. Answers are valid by construction, and sampling from it covers every legal action with its
exact probability. Used wherever the model acts when `model.action_space` is `candidates`: GRPO sampling
(lib/training/rollout.py), evaluation and post-save (lib/inference.py's actors), the probes and the validation
curve.

The prompt is run once per state and its key/value cache is shared by every candidate's answer, so scoring k
candidates costs about as much as generating one answer.
"""

from __future__ import annotations

import math

import torch

from .envs.base import format_action


class NonFiniteScoreError(RuntimeError):
    """A candidate's log-likelihood is nan or inf: the model's weights are broken (GRPO stops on it)."""


def answers(observation) -> list[str]:
    """The candidate answers of an observation, in its (shuffled) candidate order."""
    return [format_action(c.id) for c in observation.candidates]


def prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of the chat prompt the model answers (the chat template with the generation prompt)."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def answer_ids(tokenizer, answer: str) -> list[int]:
    """An answer's token ids as a completion: its text, then the end-of-turn token."""
    return tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]


def _select_cache(cache, rows: torch.Tensor):
    from transformers import DynamicCache

    selected = DynamicCache()
    for index, layer in enumerate(cache.layers):
        selected.update(layer.keys.index_select(0, rows), layer.values.index_select(0, rows), index)
    return selected


@torch.no_grad()
def score_answers(
    model, tokenizer, message_batches: list[list[dict]], answer_batches: list[list[str]], max_rows: int = 256
) -> list[list[float]]:
    """log p(answer, then end of turn | prompt) of every answer of every prompt.

    One forward pass over the prompts (left-padded, in chunks of `max_rows`) fills a key/value cache; each
    answer's tokens are then scored against its own prompt's cache, `max_rows` answers at a time."""
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id
    scores: list[list[float]] = [[] for _ in message_batches]
    for start in range(0, len(message_batches), max_rows):
        prompts = [prompt_ids(tokenizer, m) for m in message_batches[start : start + max_rows]]
        width = max(len(p) for p in prompts)
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        out = model(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
        first = out.logits[:, -1].float().log_softmax(-1)  # predicts each answer's first token
        pairs = [
            (row, answer_ids(tokenizer, a))
            for row, batch in enumerate(answer_batches[start : start + max_rows])
            for a in batch
        ]
        totals: list[float] = []
        for chunk in range(0, len(pairs), max_rows):
            part = pairs[chunk : chunk + max_rows]
            rows = torch.tensor([r for r, _ in part], device=device)
            length = max(len(t) for _, t in part)
            tails = torch.full((len(part), length), pad, dtype=torch.long, device=device)
            for i, (_, t) in enumerate(part):
                tails[i, : len(t)] = torch.tensor(t, device=device)
            cache = _select_cache(out.past_key_values, rows)
            tail_mask = torch.cat([mask.index_select(0, rows), torch.ones_like(tails)], dim=1)
            logits = model(input_ids=tails, attention_mask=tail_mask, past_key_values=cache).logits.float()
            following = logits[:, :-1].log_softmax(-1)  # position j predicts tail token j + 1
            for i, (row, t) in enumerate(part):
                target = tails[i, : len(t)]
                total = first[row, target[0]]
                if len(t) > 1:
                    total = total + following[i, torch.arange(len(t) - 1, device=device), target[1:]].sum()
                totals.append(float(total))
        position = 0
        for row, batch in enumerate(answer_batches[start : start + max_rows]):
            scores[start + row] = totals[position : position + len(batch)]
            position += len(batch)
    return scores


def distribution(logprobs: list[float], temperature: float = 1.0) -> list[float]:
    """The policy over the candidates: softmax of the answers' log-likelihoods at `temperature`.

    >>> [round(p, 3) for p in distribution([math.log(0.3), math.log(0.1)])]
    [0.75, 0.25]
    """
    if not all(math.isfinite(lp) for lp in logprobs):
        raise NonFiniteScoreError(f"candidate log-likelihoods are not finite (nan/inf): {logprobs[:4]}...")
    top = max(logprobs)
    weights = [math.exp((lp - top) / temperature) for lp in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


def entropy(probs: list[float]) -> float:
    """Entropy in nats. >>> round(entropy([0.5, 0.5]), 4)
    0.6931"""
    return -sum(p * math.log(p) for p in probs if p > 0)


def mass(logprobs: list[float]) -> float:
    """The probability the unconstrained model puts on the candidate answers at all (the rest is other text).

    >>> round(mass([math.log(0.25), math.log(0.25)]), 4)
    0.5
    """
    top = max(logprobs)
    return min(1.0, math.exp(top) * sum(math.exp(lp - top) for lp in logprobs))


def choose(probs: list[float], *, greedy: bool, generator: torch.Generator | None = None, draws: int = 1) -> list[int]:
    """Indices of the chosen candidates: the most likely one (ties: the first listed), or `draws` i.i.d. samples."""
    if greedy:
        return [max(range(len(probs)), key=probs.__getitem__)] * draws
    return torch.multinomial(
        torch.tensor(probs, dtype=torch.double), draws, replacement=True, generator=generator
    ).tolist()
