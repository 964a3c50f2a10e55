"""The model's policy over the offered candidates: every answer it can give is one of the observation's candidate
answers, with the probability the model gives that answer's tokens, renormalised over the candidates.

This is the candidate-scoring policy of TWOSOME (Tan et al., ICLR 2024) and GLAM (Carta et al., ICML 2023): the
log-likelihood of each complete answer (`{"action": "<id>"}` and the end-of-turn token) under the prompt, softmax
over the candidates. Answers are valid by construction, and sampling from it covers every legal action with its
exact probability. Used wherever the model acts when `model.action_space` is `candidates`: GRPO sampling
(lib/training/rollout.py), evaluation and post-save (lib/inference.py's actors), the probes and the validation
curve.

The prompt is read once per state, in a batch with no padding mask, and every candidate's own tokens are then
scored against its cache in one small second pass (`score_answers`), so scoring k candidates costs little more
than reading the prompt once. The tokens every prompt of a call begins with (the chat template's start and the
environment's instructions) are read once per call, not once per state.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
from collections import Counter

import torch

from .candidate_passes import score_rows
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


@functools.lru_cache(maxsize=4096)
def _answer_ids_cached(tokenizer, answer: str) -> tuple[int, ...]:
    return tuple(answer_ids(tokenizer, answer))


def _shared_prefix(tails: list[tuple[int, ...]]) -> int:
    """How many leading tokens every answer shares (each keeps at least one token of its own)."""
    common = 0
    while all(len(t) > common + 1 for t in tails) and len({t[common] for t in tails}) == 1:
        common += 1
    return common


# Prompt tokens per forward pass, by device. On a CPU a pass of a few states is fastest: 100 evaluation episodes of the
# cpu-smoke SFT model (754 states, 413k scoring tokens) took 4.2-4.3 s at 4,096 tokens a pass, 4.4-4.5 s at 2,048,
# 4.7-4.8 s at 1,024 and 5.8 s at 32,768 (2-core Xeon, avx512f): the attention of a large pass outgrows the caches.
# A GPU wants the large pass.
PASS_TOKENS = {"cpu": 4_096, "cuda": 32_768}
# Key/value columns a pass may hold: its rows x (the columns lent to it + its own tokens). A pass copies its rows'
# lent caches into one padded cache and then appends to it, so late states of a long episode, few new tokens each,
# would otherwise put 64 rows of 2,000 columns (5.9 GB for SmolLM2 in fp32) into one pass. SmolLM2's RL policy on
# 32 holdout episodes as updates, in lockstep (2-core AMD EPYC, avx2, fp32): unbounded 298 s at a peak of 8,297 MB,
# 16,384 columns 279 s and 5,876 MB, 8,192 246 s and 4,463 MB, 4,096 240 s and 3,948 MB (docs/RESULTS.md).
PASS_COLUMNS = {"cpu": 4_096, "cuda": 262_144}


def pass_tokens(device: torch.device, bounds: dict[str, int] = PASS_TOKENS) -> int:
    """How many prompt tokens `score_answers` puts in one forward pass on `device` (PASS_TOKENS, or another table of
    bounds such as PASS_COLUMNS; cuda's elsewhere)."""
    return bounds.get(device.type, bounds["cuda"])


@torch.no_grad()
def score_answers(
    model,
    tokenizer,
    message_batches: list[list[dict]],
    answer_batches: list[list[str]],
    max_tokens: int | None = None,
    *,
    max_columns: int | None = None,
    cache=None,
    keys: list | None = None,
) -> list[list[float]]:
    """log p(answer, then end of turn | prompt) of every answer of every prompt.

    Two forward passes per batch of states, neither of which copies a cache per answer:
    1. the prompts, each followed by the tokens all its answers share (`{"action": "`), right-padded, so no row needs
       a mask (a causal model never looks ahead to the padding): the key/value cache and the hidden states;
    2. every answer's own tokens, all answers of a state side by side in one row, under a 4D attention mask by
       which each answer sees its state's cache and its own earlier tokens only (position ids continue the prompt).
    Only the hidden states that predict answer tokens go through the output layer. States are sorted by length and
    batched up to `max_tokens` prompt tokens a pass (default: `pass_tokens` of the model's device; a state longer than
    that has a pass of its own) and up to `max_columns` key/value columns (PASS_COLUMNS); the scores come back in
    the order given. The pass size changes the arithmetic's
    blocking, so scores differ between pass sizes by float rounding only (about 5e-6).

    The tokens that every prompt of the call begins with are read once, in a pass of their own, and their key/value
    cache is lent to every pass (`_common_prefix`; not inside `whole_prompts()`): the same scores up to float
    rounding, without reading an environment's instructions once per state.

    With `cache` (an `EpisodeCache`, lib/episode_cache.py) and `keys` (one per state: the episode it belongs to),
    each state reuses its episode's cache of the previous state's prompt for the leading tokens the two share, so
    only the tokens after them are computed, and leaves its own cache for the next state."""
    device = next(model.parameters()).device
    max_tokens = max_tokens or pass_tokens(device)
    pad = _pad_id(tokenizer)
    rows = _rows(tokenizer, message_batches, answer_batches)
    prefix = _common_prefix(model, rows, device) if _SHARE_PREFIX.get() else None
    lent = _lent(model, rows, prefix, cache, keys)
    new = [len(row[0]) - start for row, (start, _) in zip(rows, lent)]
    _tally(rows, new, prefix)
    scores: list[list[float]] = [[] for _ in rows]
    columns = max_columns or pass_tokens(device, PASS_COLUMNS)
    for batch in _passes(new, [start for start, _ in lent], max_tokens, columns):
        kept = None if cache is None else [keys[i] for i in batch]
        for index, values in zip(
            batch, score_rows(model, [rows[i] for i in batch], pad, device, [lent[i] for i in batch], cache, kept)
        ):
            scores[index] = values.tolist()
    return scores


def _passes(new: list[int], starts: list[int], max_tokens: int, max_columns: int) -> list[list[int]]:
    """The states' indices in passes, by their count of new tokens: a pass holds at most `max_tokens` new tokens
    and `max_columns` key/value columns (its rows x (its longest lent cache + its widest row)); a state over either
    alone has a pass of its own."""
    order, passes = sorted(range(len(new)), key=lambda i: new[i]), []
    for index in order:
        batch = passes[-1] if passes else []
        rows, past = len(batch) + 1, max([starts[i] for i in batch] + [starts[index]])
        if batch and (rows * new[index] > max_tokens or rows * (past + new[index]) > max_columns):
            batch = []
        if not batch:
            passes.append(batch)
        batch.append(index)
    return passes


def score_episodes(model, tokenizer, episodes: list[list[tuple]], cache_mb: int) -> list[list[list[float]]]:
    """`score_answers` of every state of every episode ((messages, answers) per state), the episodes' states in
    lockstep (every episode's first state in one call, then every second state, ...), each episode keeping its key
    /value cache from one state to the next within `cache_mb` MB (lib/episode_cache.py)."""
    from .episode_cache import EpisodeCache

    cache = EpisodeCache(cache_mb)
    scores: list[list[list[float]]] = [[] for _ in episodes]
    for step in range(max(map(len, episodes), default=0)):
        live = [i for i, states in enumerate(episodes) if step < len(states)]
        states = [episodes[i][step] for i in live]
        values = score_answers(model, tokenizer, [m for m, _ in states], [a for _, a in states], cache=cache, keys=live)
        for i, value in zip(live, values):
            scores[i].append(value)
    return scores


_TALLY: contextvars.ContextVar[Counter | None] = contextvars.ContextVar("tally", default=None)


@contextlib.contextmanager
def tally_tokens():
    """Inside it, `score_answers` counts what it reads: states, their prompt tokens (each with the tokens all its
    answers share), the prompt tokens it computed, and the answer tokens. Yields the Counter (the tokens benchmark)."""
    counts: Counter = Counter()
    token = _TALLY.set(counts)
    try:
        yield counts
    finally:
        _TALLY.reset(token)


def _tally(rows, new: list[int], prefix) -> None:
    counts = _TALLY.get()
    if counts is None:
        return
    counts["states"] += len(rows)
    counts["prompt_tokens"] += sum(len(row[0]) for row in rows)
    counts["computed_prompt_tokens"] += sum(new) + (prefix[0] if prefix else 0)
    counts["answer_tokens"] += sum(len(tail) - common for _, _, common, tails in rows for tail in tails)


def _lent(model, rows, prefix, cache, keys) -> list[tuple[int, list | None]]:
    """Per state: (how many leading tokens of its row come from a cache, that cache's layers or None for none): its
    episode's cache where it shares more than the call's common prefix, else the common prefix, else nothing. A
    state's last prompt token is always computed: its hidden state predicts the first answer token."""
    shared = (prefix[0], prefix[1]) if prefix else (0, None)
    if cache is None:
        return [shared] * len(rows)
    if keys is None or len(keys) != len(rows):
        raise ValueError(f"an episode cache needs one key per state: {len(rows)} states, keys {keys!r:.80}")
    cache.open(model, keys)
    lent = []
    for key, (ids, prompt_length, *_) in zip(keys, rows):
        found = cache.lend(key, ids, prompt_length - 1)
        lent.append(found if found is not None and found[0] > shared[0] else shared)
    return lent


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def _rows(tokenizer, message_batches, answer_batches) -> list[tuple]:
    """Per state: (its prompt ids then the tokens all its answers share, the prompt's length, how many tokens the
    answers share, every answer's ids)."""
    rows = []
    for messages, offered in zip(message_batches, answer_batches):
        tails = [_answer_ids_cached(tokenizer, a) for a in offered]
        common = _shared_prefix(tails)
        prompt = prompt_ids(tokenizer, messages)
        rows.append((prompt + list(tails[0][:common]), len(prompt), common, tails))
    return rows


_SHARE_PREFIX = contextvars.ContextVar("share_prefix", default=True)


@contextlib.contextmanager
def whole_prompts():
    """Inside it, `score_answers` reads every prompt whole, as it did before the shared prefix: the benchmark's
    baseline (lib/bench/bench_learner.py), through the actors that call it."""
    token = _SHARE_PREFIX.set(False)
    try:
        yield
    finally:
        _SHARE_PREFIX.reset(token)


# The fewest tokens worth a pass of their own as the shared prefix of a call's prompts.
MIN_PREFIX = 16


def _common_prefix(model, rows, device) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]] | None:
    """The tokens every row's prompt begins with, read once: (their count, each layer's keys and values for a batch of
    one), or None when fewer than MIN_PREFIX tokens or fewer than two rows share them. The prefix stops before the
    shortest prompt's last token, whose hidden state predicts its first answer token."""
    if len(rows) < 2:
        return None
    first = rows[0][0]
    length = min(prompt_length for _, prompt_length, *_ in rows) - 1
    for shared, *_ in rows[1:]:
        length = next((q for q in range(length) if shared[q] != first[q]), length)
    if length < MIN_PREFIX:
        return None
    cache = model.get_decoder()(input_ids=torch.tensor([first[:length]], device=device), use_cache=True).past_key_values
    return length, [(layer.keys, layer.values) for layer in cache.layers]


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
