"""GRPO's loss reads each group's prompt once: the log-probabilities of a micro-batch's completions, with the rows that
share a prompt (a GRPO group: step mode's samples, every_candidate's and soft_target's candidates) sharing one pass
over it.

TRL's `GRPOTrainer._get_per_token_logps_and_entropies` runs the model over every row's prompt and completion: a group
of 8 rows of a ~480-token prompt and a ~10-token answer reads the prompt 8 times, forward and backward, so
~98% of a step's tokens are the same prompt again. `shared_prompt_logps` reads each distinct prompt but its last token
once, with gradients (its keys and values depend on the LoRA adapters), repeats its key/value cache over the group's
rows, and runs the group's completions, each after the prompt's last token, through the same fused LM head TRL uses.
The log-probabilities, the entropies and the gradients are TRL's up to float rounding (tests/test_prompt_pass.py):
only the positions the RoPE sees shift by the left padding, and a rotary position is relative.

It runs on a CPU only. On a GPU TRL's pass is faster: one batched forward of a small model costs the card little,
and a step is bound by its launches. On one H200 (`gpu-smollm2`, groups of 8, 16 rows of ~520 tokens) a GRPO step
took 2.25 s with this pass (median of 100; 2.2 s with groups of 32) against 0.83 s with TRL's in an earlier run of
the same profile (another seed and commit; bench/README.md).

It also steps aside (returns None, and TRL's own pass runs) where it cannot help or is not known to be equal: a batch in
which no two rows share a prompt (multi-turn rows), gradient checkpointing (which turns the cache off), a multimodal
or MoE batch, a trainer whose method is not TRL's (Unsloth's GRPOTrainer has its own), and a prompt pass that left
no whole key/value cache (`kept_whole`). With LoRA dropout above 0 (the workbook's default is 0) a group shares one
dropout mask over its prompt where TRL draws one per row: the same expectation, not the same draw.
"""

from __future__ import annotations

import torch

# The extra inputs of TRL 1.15's `_get_per_token_logps_and_entropies` that only multimodal models pass.
MULTIMODAL = (
    "pixel_values",
    "image_grid_thw",
    "num_images",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)


def prompt_groups(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor) -> list[tuple[torch.Tensor, list[int]]]:
    """The distinct prompts of a left-padded batch, each with its rows, in the order they first appear."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, (ids, mask) in enumerate(zip(prompt_ids, prompt_mask)):
        groups.setdefault(tuple(ids[mask.bool()].tolist()), []).append(row)
    return [(torch.tensor(key, dtype=prompt_ids.dtype, device=prompt_ids.device), rows) for key, rows in groups.items()]


def shared_prompt_logps(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int, compute_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """(per-token log-probs, entropies or None) of the last `logits_to_keep` tokens of every row, as TRL's pass
    computes them, or None when no two rows share a prompt. The model must carry TRL's fused LM head
    (`fused_lm_head=True`), as the GRPOTrainer's does."""
    prompt_ids, prompt_mask = input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep]
    completion_ids, completion_mask = input_ids[:, -logits_to_keep:], attention_mask[:, -logits_to_keep:]
    groups = prompt_groups(prompt_ids, prompt_mask)
    if len(groups) == len(input_ids) or any(len(prompt) < 2 for prompt, _ in groups):
        return None
    logps, entropies, order = [], [], []
    for prompt, rows in groups:
        count = len(rows)
        head = model(input_ids=prompt[None, :-1], use_cache=True, logits_to_keep=1)
        cache = head.past_key_values
        if not kept_whole(cache, len(prompt) - 1):
            return None
        cache.batch_repeat_interleave(count)
        ids = torch.cat([prompt[-1:].expand(count, 1), completion_ids[rows]], dim=1)
        seen = torch.ones((count, len(prompt)), dtype=attention_mask.dtype, device=attention_mask.device)
        mask = torch.cat([seen, completion_mask[rows]], dim=1)
        labels = ids.clone()  # as TRL's: the completion's tokens, padding excluded
        labels[:, 0] = -100
        labels[:, 1:][completion_mask[rows] == 0] = -100
        out = model(input_ids=ids, attention_mask=mask, past_key_values=cache, labels=labels, fused_lm_head=True)
        logps.append(out.log_probs[:, -logits_to_keep:])
        if compute_entropy:
            entropies.append(out.entropy[:, -logits_to_keep:])
        order += rows
    back = torch.empty(len(order), dtype=torch.long, device=input_ids.device)
    back[torch.tensor(order, device=input_ids.device)] = torch.arange(len(order), device=input_ids.device)
    return torch.cat(logps)[back], torch.cat(entropies)[back] if compute_entropy else None


# Cache layers that `batch_repeat_interleave` repeats whole (a linear-attention layer's recurrent state is not).
REPEATABLE = ("DynamicLayer", "DynamicSlidingWindowLayer")


def kept_whole(cache, length: int) -> bool:
    """Whether the prompt pass left a key/value cache of `length` tokens that can be repeated over a group: a model
    whose layers drop the cache (gradient checkpointing switched on inside the model while the trainer's argument
    says off) would otherwise score each completion without its prompt, silently."""
    layers = getattr(cache, "layers", None)
    return (
        bool(layers)
        and all(type(layer).__name__ in REPEATABLE for layer in layers)
        and (cache.get_seq_length() == length)
    )


def can_share(trainer, compute_aux_loss: bool, extra: dict) -> bool:
    """Whether `shared_prompt_logps` may stand in for TRL's pass in `trainer` (see the module docstring)."""
    inherited = type(trainer).__mro__[1]._get_per_token_logps_and_entropies  # what the subclass stands in for
    original = inherited.__module__ == "trl.trainer.grpo_trainer"
    multimodal = any(extra.get(name) is not None for name in MULTIMODAL)
    on_cpu = trainer.args.device.type == "cpu"
    return on_cpu and original and not compute_aux_loss and not multimodal and not trainer.args.gradient_checkpointing
