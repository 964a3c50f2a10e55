"""Prefix packing (`sft.batching: prefix`): the rows of an SFT batch as one sequence in which every prompt token the
rows share is computed once.

The rows of one episode share their prompts' beginnings: the instructions, the case, and under `turns:
conversation` (lib/envs/base.py) the whole episode before each state. `pack` writes a batch's rows as a tree of
tokens: rows that begin alike share the nodes of their common beginning, each row then has a branch of its own (its
last prompt token, which predicts the answer's first, and its answer). Every token sees its ancestors only (a 4D
attention mask) at the position it has in its own row, so each answer token is predicted from exactly the tokens of
its own row: the loss of a packed batch is the loss of its rows, to float rounding (tests/test_packing.py), over
fewer tokens. The tree's longest chain (under `turns: updates`, the episode's last prompt and its answer) is laid out
first, so its block of the mask is causal: under SDPA the trainer computes that block with the kernel's causal path,
which skips the masked half, and only the branches under the mask (`trunk_attention`). `EpisodeBatches` makes
each batch one episode's rows, so the episode's conversation is computed once; `PrefixPackedSFTTrainer` is TRL's
SFTTrainer with those batches and that mask.
"""

from __future__ import annotations

import contextlib
import json
import random

import torch
from torch.utils.data import DataLoader, Sampler

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
    -100), `labels` (all -100; the trainer reads `shift_labels`), `packed_tokens` (the tokens before padding) and
    `trunk_length` (the longest chain of the tree, laid out first: its tokens see exactly the tokens before them),
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
    order, trunk = _trunk_first(parent)  # the longest chain first: a causal block (`trunk_attention`)
    new_index = {old: new for new, old in enumerate(order)}
    ids, targets, depth = ([values[old] for old in order] for values in (ids, targets, depth))
    parent = [new_index[parent[old]] if parent[old] >= 0 else -1 for old in order]
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
        "trunk_length": torch.tensor(trunk),
    }


def _trunk_first(parent: list[int]) -> tuple[list[int], int]:
    """(an order of the tree's nodes, the length of its trunk): the longest chain down from the first node comes
    first, then every other node in its given order, each still after its ancestors. A trunk node's ancestors are
    exactly the trunk nodes before it, so the first `trunk` rows of the mask are causal (`trunk_attention`)."""
    if not parent:
        return [], 0
    height = [0] * len(parent)  # the longest chain below a node; a child always comes after its parent
    for node in reversed(range(len(parent))):
        if parent[node] >= 0:
            height[parent[node]] = max(height[parent[node]], height[node] + 1)
    children: dict[int, list[int]] = {}
    for node, above in enumerate(parent):
        children.setdefault(above, []).append(node)
    chain = [0]
    while children.get(chain[-1]):
        chain.append(max(children[chain[-1]], key=lambda child: (height[child], -child)))
    on_chain = set(chain)
    return chain + [node for node in range(len(parent)) if node not in on_chain], len(chain)


TRUNK_ATTENTION = "sdpa_packed_trunk"


def trunk_attention(module, query, key, value, attention_mask, trunk_length=None, **kwargs):
    """SDPA for a packed batch laid out trunk first (`pack`): the trunk's tokens attend causally among themselves
    (the kernel's causal path, which skips the masked half), then the branches' tokens attend under their rows of the
    4D mask. The same attention as one masked call, to float rounding; without `trunk_length`, plain SDPA."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    if not trunk_length:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if kwargs.get("dropout"):
        raise ValueError("trunk attention: attention dropout is not supported")
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    trunk, scale = int(trunk_length), kwargs.get("scaling")
    sdpa = torch.nn.functional.scaled_dot_product_attention
    parts = [sdpa(query[:, :, :trunk], key[:, :, :trunk], value[:, :, :trunk], is_causal=True, scale=scale)]
    if query.shape[2] > trunk:
        parts.append(sdpa(query[:, :, trunk:], key, value, attn_mask=attention_mask[:, :, trunk:], scale=scale))
    return torch.cat(parts, dim=2).transpose(1, 2).contiguous(), None


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`pack`'s boolean `packed_mask` as the additive 4D mask a model reads: 0 where a token may attend, the dtype's
    lowest value where it may not."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


@contextlib.contextmanager
def trunk_attention_on(model):
    """Within: `model` (a PEFT model or a transformers one) attends with `trunk_attention`, where it attends with SDPA
    (yields True; any other implementation is left alone and it yields False). Its own implementation is put back
    after, so what it saves or plays later is unchanged."""
    from transformers import AttentionInterface

    config = model.get_base_model().config if hasattr(model, "get_base_model") else model.config
    if config._attn_implementation != "sdpa":
        yield False
        return
    AttentionInterface.register(TRUNK_ATTENTION, trunk_attention)
    config._attn_implementation = TRUNK_ATTENTION
    try:
        yield True
    finally:
        config._attn_implementation = "sdpa"


class PrefixPacker:
    """The data collator: a batch of prepared rows, packed (`pack`)."""

    def __init__(self, pad_id: int, multiple: int | None = None):
        self.pad_id, self.multiple = pad_id, multiple

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        return pack(examples, self.pad_id, self.multiple)


def episode_key(prompt: list[dict]) -> str:
    """Which episode a conversation row belongs to: its messages up to the first user turn (the episode's first
    state), as JSON. Rows of one episode under `turns: conversation` begin with them and share everything up to the
    earlier of their two states."""
    first = next((i for i, m in enumerate(prompt) if m["role"] == "user"), len(prompt) - 1)
    return json.dumps(prompt[: first + 1], sort_keys=True)


class EpisodeBatches(Sampler):
    """A batch sampler: each batch the rows of one episode (`episode_key`), the episodes in an order shuffled with
    `seed`, each episode's rows in the order given."""

    def __init__(self, keys: list[str], seed: int):
        groups: dict[str, list[int]] = {}
        for index, key in enumerate(keys):
            groups.setdefault(key, []).append(index)
        self.batches = list(groups.values())
        random.Random(f"{seed}/episode-batches").shuffle(self.batches)

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def packed_trainer_class():
    """`PrefixPackedSFTTrainer`: TRL's SFTTrainer drawing `EpisodeBatches` and reading `pack`'s mask (built
    on first use, as TRL's classes are imported only once the model is loaded: with Unsloth, after it patches TRL)."""
    from trl import SFTTrainer

    class PrefixPackedSFTTrainer(SFTTrainer):
        def get_train_dataloader(self):
            keys = self.train_dataset["episode"]
            dataset = self._remove_unused_columns(self.train_dataset, description="Training")
            batches = EpisodeBatches(keys, self.args.seed)
            return self.accelerator.prepare(DataLoader(dataset, batch_sampler=batches, collate_fn=self.data_collator))

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            dtype = model.get_input_embeddings().weight.dtype
            inputs["attention_mask"] = additive_mask(inputs.pop("packed_mask"), dtype)
            real = int(inputs.pop("packed_tokens").sum())
            trunk = int(inputs.pop("trunk_length").max())
            before = self._total_train_tokens
            with trunk_attention_on(model) as split:  # the trunk's causal half skipped under SDPA
                if split:
                    inputs["trunk_length"] = trunk
                result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            if model.training:  # TRL counts a 2D mask's tokens; this mask is 4D
                self._total_train_tokens = before + real
                self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
                # the tokens computed under the trunk's causal attention (0 where attention is not SDPA)
                self._metrics["train"]["trunk_share"].append(trunk / real if split else 0.0)
            return result

    return PrefixPackedSFTTrainer
