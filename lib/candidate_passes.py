"""The two forward passes that score a batch of states' candidate answers (`score_answers` in lib/candidates.py):
the prompts after what their lent caches hold, then every answer's own tokens against that cache under one mask."""

from __future__ import annotations

import torch
from transformers import DynamicCache


def prompt_pass(model, rows, pad: int, device, lent):
    """Pass 1: each row's tokens after those its lent cache holds, right-padded. (the model's output with its key/value
    cache, how many cache columns come before this pass's tokens)"""
    count, decoder = len(rows), model.get_decoder()
    starts = [start for start, _ in lent]
    past = max(starts)
    width = max(len(shared) - start for (shared, *_), start in zip(rows, starts))
    ids = torch.full((count, width), pad, dtype=torch.long)
    for i, ((shared, *_), start) in enumerate(zip(rows, starts)):
        ids[i, : len(shared) - start] = torch.tensor(shared[start:])
    if all(layers is lent[0][1] for _, layers in lent):  # one cache lent to every row, or none: no mask needed
        cache = None
        if lent[0][1] is not None:  # expanded views: no copy until the pass appends to them
            layers = [(k.expand(count, *k.shape[1:]), v.expand(count, *v.shape[1:])) for k, v in lent[0][1]]
            cache = DynamicCache(layers, config=model.config)
        return decoder(input_ids=ids.to(device), past_key_values=cache, use_cache=True), past
    # rows lent caches of their own, of different lengths: one padded cache, a mask that hides its padding
    template = next(layers for _, layers in lent if layers is not None)
    padded = []
    for index, (k0, v0) in enumerate(template):
        keys, values = (
            k0.new_zeros((count, k0.shape[1], past, k0.shape[3])),
            v0.new_zeros((count, v0.shape[1], past, v0.shape[3])),
        )
        for i, (start, layers) in enumerate(lent):
            if start:
                keys[i, :, :start], values[i, :, :start] = layers[index][0][0], layers[index][1][0]
        padded.append((keys, values))
    new = torch.tensor([len(shared) - start for (shared, *_), start in zip(rows, starts)])
    column = torch.arange(width)
    sees_past = (torch.arange(past)[None, None, :] < torch.tensor(starts)[:, None, None]).expand(count, width, past)
    sees_new = (column[None, None, :] <= column[None, :, None]) & (column[None, None, :] < new[:, None, None])
    sees_new = sees_new | torch.eye(width, dtype=torch.bool)[None]  # a padding token sees itself: no row all masked
    allowed = torch.cat([sees_past, sees_new], dim=2)[:, None]
    dtype = template[0][0].dtype
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    positions = torch.tensor(starts)[:, None] + column[None, :]
    first = decoder(
        input_ids=ids.to(device),
        position_ids=positions.to(device),
        attention_mask=mask.to(device),
        past_key_values=DynamicCache(padded, config=model.config),
        use_cache=True,
    )
    return first, past


def score_rows(model, rows, pad: int, device, lent, cache=None, keys=None) -> list[torch.Tensor]:
    count = len(rows)
    starts = [start for start, _ in lent]
    first, past = prompt_pass(model, rows, pad, device, lent)
    news = [len(shared) - start for (shared, *_), start in zip(rows, starts)]
    if cache is not None:  # before pass 2, which appends the answers' tokens to the same cache
        for i, key in enumerate(keys):
            layers = [
                tuple(
                    torch.cat([t[i : i + 1, :, : starts[i]], t[i : i + 1, :, past : past + news[i]]], dim=2)
                    for t in (layer.keys, layer.values)
                )
                for layer in first.past_key_values.layers
            ]
            cache.keep(key, rows[i][0], layers)
    width = past + first.last_hidden_state.shape[1]  # the cache's columns: lent (up to `past`), then this pass's
    # pass 2: the answers' own tokens, a state's answers side by side
    suffix_width = max(sum(len(t) - common for t in tails) for _, _, common, tails in rows)
    suffix_ids = torch.full((count, suffix_width), pad, dtype=torch.long)
    owner = torch.full((count, suffix_width), -1, dtype=torch.long)  # which answer a token is of (-1: padding)
    positions = torch.zeros((count, suffix_width), dtype=torch.long)
    for i, (shared, _, common, tails) in enumerate(rows):
        column = 0
        for j, tail in enumerate(tails):
            own = tail[common:]
            suffix_ids[i, column : column + len(own)] = torch.tensor(own)
            owner[i, column : column + len(own)] = j
            positions[i, column : column + len(own)] = torch.arange(len(shared), len(shared) + len(own))
            column += len(own)
    cached = torch.arange(width)[None, :]
    lent_to = torch.tensor(starts)[:, None]
    computed = (cached < lent_to) | ((cached >= past) & (cached < past + torch.tensor(news)[:, None]))
    real = owner >= 0
    sees_prompt = computed[:, None, :] & real[:, :, None]
    column = torch.arange(suffix_width)
    sees_own = (
        (owner[:, None, :] == owner[:, :, None]) & (column[None, None, :] <= column[None, :, None]) & real[:, :, None]
    )
    sees_own |= torch.eye(suffix_width, dtype=torch.bool)[None]  # a padding token sees itself: no row is all masked
    allowed = torch.cat([sees_prompt, sees_own], dim=2)[:, None]
    dtype = first.last_hidden_state.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)
    second = model.get_decoder()(
        input_ids=suffix_ids.to(device),
        position_ids=positions.to(device),
        attention_mask=mask.to(device),
        past_key_values=first.past_key_values,
        use_cache=False,
    )
    # every answer token with the hidden state that predicts it
    vectors, targets, answer_of = [], [], []
    total = 0
    for i, (_, prompt_length, common, tails) in enumerate(rows):
        column = 0
        for j, tail in enumerate(tails):
            own = tail[common:]
            predictors = [first.last_hidden_state[i, prompt_length - 1 + q - starts[i]] for q in range(common + 1)]
            predictors += [second.last_hidden_state[i, column + q] for q in range(len(own) - 1)]
            vectors += predictors
            targets += list(tail)
            answer_of += [total + j] * len(tail)
            column += len(own)
        total += len(tails)
    logprobs = model.get_output_embeddings()(torch.stack(vectors)).float().log_softmax(-1)
    picked = logprobs[torch.arange(len(targets), device=logprobs.device), torch.tensor(targets, device=logprobs.device)]
    sums = torch.zeros(total, dtype=torch.double, device=logprobs.device)
    sums = sums.index_add(0, torch.tensor(answer_of, device=logprobs.device), picked.double())
    return list(sums.split([len(tails) for *_, tails in rows]))
