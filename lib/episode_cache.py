"""Each live episode's key/value cache, kept from one state to the next: scoring a state then computes only the
tokens its prompt does not share with the previous state's (`score_answers` in lib/candidates.py).

An episode's prompt at one state mostly repeats the prompt of the state before: the instructions, the case, the
evidence so far. The cache of the previous state's prompt already holds the keys and values of that common leading
run, so only the tokens after it need a forward pass. The scores are the whole pass's up to float rounding
(tests/test_episode_cache.py).

A cache is lent only for the tokens and the weights it was computed with:
- tokens: only the leading run of token ids the stored prompt and the new one share is reused, compared id by id;
- weights: a fingerprint of every parameter (its storage, its in-place version counter and its sum) is taken at
  every scoring call, and a change empties the cache (`refused_weights` counts the entries it dropped).

Memory is bounded: `budget_mb` caps what all entries hold together (a state whose cache would pass it is scored
without one: `over_budget`), and an episode no longer live in a call is forgotten. SmolLM2-135M holds about 23 KB of
keys and values a token in bf16, so a 500-token prompt costs about 11 MB.
"""

from __future__ import annotations

from collections import Counter

import torch


@torch.no_grad()
def weights_fingerprint(model) -> tuple:
    """What identifies the weights a cache was computed with: each parameter's storage, its in-place version counter
    (an optimizer step bumps it) and its sum (a write through `.data`, which leaves the counter alone, changes it)."""
    return tuple((p.data_ptr(), p._version, float(p.sum(dtype=torch.float32))) for p in model.parameters())


def _shared_run(stored: tuple[int, ...], tokens: list[int], limit: int) -> int:
    """How many leading token ids `stored` and `tokens` share, at most `limit`."""
    limit = min(limit, len(stored), len(tokens))
    for position in range(limit):
        if stored[position] != tokens[position]:
            return position
    return limit


class EpisodeCache:
    """Per-episode key/value caches for `score_answers`, keyed by whatever identifies a live episode to the caller.

    A wrong key costs reuse, never correctness: what is lent is only the leading run of tokens the stored prompt
    shares with the new one, under the same weights."""

    def __init__(self, budget_mb: int):
        if budget_mb <= 0:
            raise ValueError(f"an episode cache needs a budget above 0 MB, got {budget_mb}")
        self.budget = budget_mb * 2**20
        self.entries: dict = {}  # key -> (token ids, [(keys, values) per layer, batch of one], bytes)
        self.weights: tuple | None = None
        self.stats: Counter = Counter()

    def open(self, model, keys) -> None:
        """The start of a scoring call over the live episodes `keys`: the weights are checked against those the
        entries were computed with (a change empties the cache), and the entries of episodes no longer live go."""
        fingerprint = weights_fingerprint(model)
        if fingerprint != self.weights:
            self.stats["refused_weights"] += len(self.entries)
            self.entries.clear()
            self.weights = fingerprint
        live = set(keys)
        for key in [k for k in self.entries if k not in live]:
            del self.entries[key]

    def lend(self, key, tokens: list[int], limit: int) -> tuple[int, list] | None:
        """(n, each layer's keys and values of the first n tokens) where the stored prompt of `key` shares its
        first n >= 1 token ids with `tokens` (n at most `limit`), else None."""
        entry = self.entries.get(key)
        if entry is None:
            return None
        stored, layers, _ = entry
        shared = _shared_run(stored, tokens, limit)
        if shared == 0:
            self.stats["refused_tokens"] += 1
            return None
        self.stats["lent"] += 1
        return shared, [(k[:, :, :shared], v[:, :, :shared]) for k, v in layers]

    def keep(self, key, tokens: list[int], layers: list) -> None:
        """Store `key`'s latest prompt and its cache (replacing the one before), unless the budget would be passed."""
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in layers)
        held = sum(e[2] for k, e in self.entries.items() if k != key)
        if held + size > self.budget:
            self.entries.pop(key, None)
            self.stats["over_budget"] += 1
            return
        self.entries[key] = (tuple(tokens), layers, size)

    @property
    def held_mb(self) -> float:
        return sum(e[2] for e in self.entries.values()) / 2**20
