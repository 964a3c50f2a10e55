"""What stops training loudly instead of training on bad input: prompts longer than grpo.max_prompt_length (never
truncated), answers longer than grpo.max_completion_length (they would be cut off), and a NaN/inf loss.

Used by the sft and grpo stages (lib/training/sft.py, grpo.py).
"""

from __future__ import annotations

import math

from transformers import TrainerCallback


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/inf loss; the run stopped and the last good checkpoint was kept."""


class PromptTooLongError(ValueError):
    """A prompt is longer than grpo.max_prompt_length tokens; prompts are never silently truncated."""


class AnswerTooLongError(ValueError):
    """An answer of the corpus needs more tokens than grpo.max_completion_length, so GRPO sampling and evaluation
    (which generate at most that many) would cut it off and every such answer would be invalid."""


def check_answer_length(tokenizer, answers: list[str], limit: int) -> int:
    """The most tokens an answer takes, its end-of-turn token included; an error if that exceeds `limit`."""
    longest = max(len(tokenizer(a, add_special_tokens=False)["input_ids"]) + 1 for a in answers)
    if longest > limit:
        example = max(answers, key=len)
        raise AnswerTooLongError(
            f"answers take up to {longest} tokens with the end-of-turn token (e.g. {example!r}), but "
            f"grpo.max_completion_length is {limit}: GRPO and evaluation would cut them off; "
            f"raise it to {longest} or more"
        )
    return longest


class FiniteLossGuard(TrainerCallback):
    """Stops training at the first NaN/inf loss, before anything is saved from that step."""

    def __init__(self):
        self.bad_step: int | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        for key in ("loss", "grad_norm"):
            value = (logs or {}).get(key)
            if value is not None and not math.isfinite(value):
                self.bad_step = state.global_step
                control.should_training_stop = True
                control.should_save = False


def check_prompt_length(tokenizer, prompts: list[list[dict]], max_prompt_length: int) -> None:
    """An error naming the first offender when any chat prompt is longer than `max_prompt_length` tokens."""
    too_long = []
    for i, prompt in enumerate(prompts):
        n = len(
            tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        if n > max_prompt_length:
            too_long.append((i, n))
    if too_long:
        raise PromptTooLongError(
            f"{len(too_long)} GRPO prompts exceed grpo.max_prompt_length={max_prompt_length} "
            f"tokens (first: row {too_long[0][0]}, {too_long[0][1]} tokens); raise the limit or shorten prompts"
        )
