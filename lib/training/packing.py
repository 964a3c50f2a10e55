"""Prefix packing (`sft.batching: prefix`): the rows of an SFT batch as one sequence in which every prompt token the
rows share is computed once.

The rows of one episode share their prompts' beginnings: the instructions, the case, and under `turns:
conversation` (lib/envs/base.py) the whole episode before each state. `pack` writes a batch's rows as a tree of
tokens: rows that begin alike share the nodes of their common beginning, each row then has a branch of its own (its
last prompt token, which predicts the answer's first, and its answer). Every token sees its ancestors only (a 4D
attention mask) at the position it has in its own row, so each answer token is predicted from exactly the tokens of
its own row: the loss of a packed batch is the loss of its rows, to float rounding (tests/test_packing.py), over
fewer tokens. `PrefixSampler` orders the rows so that a batch holds rows that begin alike (sorted by their tokens,
cut into batches, the batches shuffled); `PrefixPackedSFTTrainer` is TRL's SFTTrainer with that sampler and mask.
"""

from __future__ import annotations

import random

import torch
from torch.utils.data import Sampler

IGNORE = -100


def _prompt_length(labels: list[int]) -> int:
    """How many leading tokens carry no loss (at least 1: the first token predicts, it is never predicted)."""
    start = next((i for i, label in enumerate(labels) if label != IGNORE), None)
    if start is None:
        raise ValueError("prefix packing: a row has no answer token to train on")
    return max(start, 1)


def pack(examples: list[dict], pad_id: int, multiple: int | None = None) -> dict[str, torch.Tensor]:
    """The rows `examples` (each `input_ids` and `labels`, -100 on its prompt: TRL's prepared rows) as one packed
    sequence: `input_ids`, `position_ids` (each token's position in its own row), `packed_mask` (True where a token
    may attend: its ancestors and itself), `shift_labels` (each token's next token where that one carries loss, else
    -100), `labels` (all -100; the trainer reads `shift_labels`) and `packed_tokens` (the tokens before padding),
    padded to a multiple of `multiple` with tokens that see themselves only."""
    ids: list[int] = []
    parent: list[int] = []
    depth: list[int] = []
    targets: list[int] = []
    shared: dict[tuple[int, int], int] = {}

    def node(token: int, above: int, target: int) -> int:
        ids.append(token)
        parent.append(above)
        depth.append(0 if above < 0 else depth[above] + 1)
        targets.append(target)
        return len(ids) - 1

    for example in examples:
        row, labels = list(example["input_ids"]), list(example["labels"])
        start, at = _prompt_length(labels), -1
        for token in row[: start - 1]:  # the shared part: the prompt but its last token
            if (at, token) not in shared:
                shared[at, token] = node(token, at, IGNORE)
            at = shared[at, token]
        for q in range(start - 1, len(row)):  # its own branch: the token before the answer, then the answer
            at = node(row[q], at, labels[q + 1] if q + 1 < len(row) else IGNORE)
    real = len(ids)
    width = -(-real // multiple) * multiple if multiple else real
    allowed = torch.zeros((width, width), dtype=torch.bool)
    for j in range(real):
        if parent[j] >= 0:
            allowed[j] = allowed[parent[j]]
        allowed[j, j] = True
    for j in range(real, width):
        allowed[j, j] = True
    pad = width - real
    return {
        "input_ids": torch.tensor([ids + [pad_id] * pad]),
        "position_ids": torch.tensor([depth + [0] * pad]),
        "packed_mask": allowed[None, None],
        "shift_labels": torch.tensor([targets + [IGNORE] * pad]),
        "labels": torch.full((1, width), IGNORE),
        "packed_tokens": torch.tensor(real),
    }


class PrefixPacker:
    """The data collator: a batch of prepared rows, packed (`pack`)."""

    def __init__(self, pad_id: int, multiple: int | None = None):
        self.pad_id, self.multiple = pad_id, multiple

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        return pack(examples, self.pad_id, self.multiple)


class PrefixSampler(Sampler):
    """Row indices in batches of rows that begin alike: sorted by their tokens, cut into batches of `batch_size`,
    the batches shuffled with `seed` (a short last batch stays last, so no other batch is cut)."""

    def __init__(self, rows: list[list[int]], batch_size: int, seed: int):
        order = sorted(range(len(rows)), key=lambda i: rows[i])
        batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        tail = batches.pop() if batches and len(batches[-1]) < batch_size else None
        random.Random(f"{seed}/prefix-batches").shuffle(batches)
        self.order = [i for batch in batches + ([tail] if tail else []) for i in batch]

    def __iter__(self):
        return iter(self.order)

    def __len__(self) -> int:
        return len(self.order)


def packed_trainer_class():
    """`PrefixPackedSFTTrainer`: TRL's SFTTrainer drawing `PrefixSampler` batches and reading `pack`'s mask (built
    on first use, as TRL's classes are imported only once the model is loaded: with Unsloth, after it patches TRL)."""
    from trl import SFTTrainer

    class PrefixPackedSFTTrainer(SFTTrainer):
        def _get_train_sampler(self, train_dataset=None):
            dataset = self.train_dataset if train_dataset is None else train_dataset
            size = self.args.per_device_train_batch_size
            return PrefixSampler(dataset["input_ids"], size, self.args.seed)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            allowed = inputs.pop("packed_mask")
            dtype = model.get_input_embeddings().weight.dtype
            inputs["attention_mask"] = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
                ~allowed, torch.finfo(dtype).min
            )
            real = int(inputs.pop("packed_tokens").sum())
            before = self._total_train_tokens
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if model.training:  # TRL counts a 2D mask's tokens; this mask is 4D
                self._total_train_tokens = before + real
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
            return result

    return PrefixPackedSFTTrainer
