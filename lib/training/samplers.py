"""What GRPO samples from and how its trainer samples: the mode switch (`sampler`: step mode's dataset and candidate
rollout, or multi-turn episodes), the reward as TRL calls it (`logged_reward`), and TRL's GRPOTrainer subclassed to
sample without gradient checkpointing, to train micro-batches grouped by prompt length and to read each group's
prompt once in the loss (`timed_trainer_class`).

TRL is reached through its public hooks: callbacks, `reward_funcs` (whose `log_metric` argument logs the step
timings and the candidate sampler's explore/* metrics), `rollout_func`, `TrainerState`. Three private members remain:
`GRPOTrainer._generate`, overridden to sample without gradient checkpointing (no public hook sits between sampling
and the loss); `GRPOTrainer._prepare_inputs` with its `_buffered_inputs`, wrapped to regroup a step's
micro-batches by prompt length (`by_prompt_length`); and `GRPOTrainer._get_per_token_logps_and_entropies`, in front
of which a group's prompt is read once (lib/training/prompt_pass.py). tests/test_trl_compat.py fails naming any of
them if a TRL upgrade changes it.
"""

from __future__ import annotations

import functools
import json
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from datasets import Dataset

from ..config import RunConfig
from ..reward import make_reward_function
from .harness import check_prompt_length
from .prompt_pass import can_share, shared_prompt_logps
from .rollout import TARGET_KL, candidate_rollout, soft_targets


def _grpo_dataset(rows: list[dict], tokenizer, max_prompt_length: int) -> Dataset:
    check_prompt_length(tokenizer, [r["prompt"] for r in rows], max_prompt_length)
    return Dataset.from_list(
        [
            {
                "prompt": r["prompt"],
                "seed": r["seed"],
                "split": r["split"],
                "history": json.dumps(r["history"]),
                **({"reference_return": r["reference_return"]} if "reference_return" in r else {}),
            }
            for r in rows
        ]
    )


def sampler(config: RunConfig, rows: list[dict], tokenizer, out: Path) -> dict:
    """What GRPO samples from, by `grpo.mode`: the dataset, TRL's `rollout_func` (None: TRL generates free text),
    the reward (None: the step-mode environment reward) and the GRPOConfig values the mode sets. In multi_turn mode
    episodes are played in this process, or against `grpo.env_url` when one is given; no server is started."""
    g = config.grpo
    if g.mode == "multi_turn":
        from .multiturn import episode_starts, make_episode_reward, multi_turn_rollout, rows_per_start

        starts = episode_starts(config.spec, sorted({r["seed"] for r in rows}))
        check_prompt_length(tokenizer, [r["prompt"] for r in starts], g.max_prompt_length)
        group = rows_per_start(g)
        return {
            "dataset": Dataset.from_list(starts),
            "rollout": multi_turn_rollout(config.spec, starts, g, config.seed, env_url=g.env_url),
            "reward": make_episode_reward(out / "samples.jsonl", g.sample_completions),
            # TRL's group is one start's rows, and one start's rows are one micro-batch: the starts of a step are
            # accumulated into one optimizer step (the dapo loss is normalised over all of them, as in one batch).
            # With every turn trained the rollout hands over finished advantages.
            "trl": {
                "num_generations": group,
                "per_device_train_batch_size": group,
                "gradient_accumulation_steps": g.batch_size // g.num_generations,
                "scale_rewards": "none",
            },
        }
    rollout = None
    if config.model.action_space == "candidates":
        every = g.mode in ("every_candidate", "soft_target")  # groups of the offered candidates, not policy draws
        rollout = candidate_rollout(rows, config.spec, g.num_generations, g.temperature, config.seed, every=every)
    soft = g.mode == "soft_target"
    # soft_target: the rewards are already each candidate's move toward its target, summing to zero over the group:
    # TRL's mean subtraction leaves them as they are, and a std scale would undo the KL bound. The dapo loss (TRL's
    # default, pinned here) sums each answer's token terms over the batch's tokens, so every candidate counts once,
    # whatever its length; a loss normalised per answer would bend the target.
    return {
        "dataset": _grpo_dataset(rows, tokenizer, g.max_prompt_length),
        "rollout": rollout,
        "reward": soft_target_reward(make_reward_function(config, out / "samples.jsonl"), g.num_generations, TARGET_KL)
        if soft
        else None,
        "trl": {"scale_rewards": "none", "loss_type": "dapo"} if soft else {},
    }


def soft_target_reward(reward, group_size: int, kl: float):
    """grpo.mode soft_target: the step-mode reward (each candidate's environment return, the same function), turned
    into each candidate's move toward the state's bounded target (lib/training/rollout.py: soft_targets) with the
    policy's probabilities the sampler handed over (`policy_prob`). Logs the returns' mean
    (`soft_target/return_mean`, what the run's reward summary reads) and the probability mass each target moves
    (`explore/target_move`, total variation, mean over groups)."""

    @functools.wraps(reward)
    def soft(prompts, completions, *args, policy_prob=None, log_metric=None, **kwargs):
        if policy_prob is None:
            raise RuntimeError(
                "grpo.mode soft_target needs the candidate sampler's policy_prob (model.action_space: candidates)"
            )
        returns = reward(prompts, completions, *args, log_metric=log_metric, **kwargs)
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        rewards = soft_targets(texts, returns, list(policy_prob), group_size, kl)
        if log_metric is not None:
            groups = len(rewards) // group_size
            log_metric("soft_target/return_mean", sum(returns) / len(returns))
            log_metric("explore/target_move", sum(abs(r) for r in rewards) / 2 / groups)
        return rewards

    return soft


@contextmanager
def sampling_mode(model, gradient_checkpointing_kwargs=None):
    """Gradient checkpointing off while GRPO samples its completions.

    TRL 1.15 samples with the model in training mode, and GRPOConfig turns gradient checkpointing on by default.
    Under transformers 5, a checkpointed decoder layer in training mode drops `past_key_values`, so every token
    after the first is generated without seeing the prompt (SmolLM2 answers "The---------------" instead of
    "The capital of France is Paris."; tests/test_training.py). Sampling with checkpointing off gives the
    model's real distribution; training still checkpoints."""
    from trl.models.utils import disable_gradient_checkpointing

    with disable_gradient_checkpointing(model, gradient_checkpointing_kwargs):
        yield


def by_prompt_length(micro_batches: list[dict]) -> list[dict]:
    """A generation batch's micro-batches regrouped by prompt length, each without the padding columns all its rows
    share. TRL pads every row to the generation batch's longest prompt and shuffles the rows into micro-batches; when
    all of them accumulate into one optimizer step (one pass over the batch: `num_iterations` 1), which rows share a
    micro-batch does not change the update, only how much padding each forward pass carries."""
    count = len(micro_batches)
    merged: dict = {}
    for key, first in micro_batches[0].items():
        parts = [batch[key] for batch in micro_batches]
        if isinstance(first, torch.Tensor) and first.ndim >= 1:
            merged[key] = torch.cat(parts)
        elif isinstance(first, list):
            merged[key] = [item for part in parts for item in part]
        else:
            merged[key] = first  # a scalar the micro-batches share (e.g. num_items_in_batch)
    rows = len(merged["prompt_mask"])
    order = torch.argsort(merged["prompt_mask"].sum(1), stable=True).tolist()
    size = rows // count
    regrouped = []
    for index in range(count):
        chosen = order[index * size : (index + 1) * size]
        batch = {}
        for key, value in merged.items():
            if isinstance(value, torch.Tensor) and value.ndim >= 1 and len(value) == rows:
                batch[key] = value[chosen]
            elif isinstance(value, list) and len(value) == rows:
                batch[key] = [value[i] for i in chosen]
            else:
                batch[key] = value
        width = int(batch["prompt_mask"].sum(1).max())  # prompts are left-padded
        batch["prompt_ids"], batch["prompt_mask"] = batch["prompt_ids"][:, -width:], batch["prompt_mask"][:, -width:]
        regrouped.append(batch)
    return regrouped


def timed_trainer_class(timings: dict):
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer, sampling without gradient checkpointing and timing it (into `timings`, which the
        reward function logs: `logged_reward`), training micro-batches grouped by prompt length
        (`by_prompt_length`), and reading each group's prompt once in the loss (lib/training/prompt_pass.py)."""

        def _generate(self, prompts):  # private in TRL 1.15: tests/test_trl_compat.py checks it
            start = time.perf_counter()
            with sampling_mode(self.model, self.args.gradient_checkpointing_kwargs):
                result = super()._generate(prompts)
            timings["time/generation_s"] = time.perf_counter() - start
            return result

        def _prepare_inputs(self, generation_batch):  # private in TRL 1.15: tests/test_trl_compat.py checks it
            fresh = self.model.training and (
                self._buffered_inputs is None
                or self._step % (self.args.steps_per_generation * self.num_iterations) == 0
            )
            inputs = super()._prepare_inputs(generation_batch)
            if fresh and self.args.steps_per_generation > 1 and self.num_iterations == 1:
                self._buffered_inputs = by_prompt_length(self._buffered_inputs)
                inputs = self._buffered_inputs[self._step % self.args.steps_per_generation]
            return inputs

        def _get_per_token_logps_and_entropies(  # private in TRL 1.15: tests/test_trl_compat.py checks it
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **extra,
        ):
            if can_share(self, compute_aux_loss, extra):
                with self.accelerator.autocast():
                    shared = shared_prompt_logps(model, input_ids, attention_mask, logits_to_keep, compute_entropy)
                if shared is not None:
                    return (*shared, None)
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss, **extra
            )

    return TimedGRPOTrainer


def logged_reward(reward, timings: dict):
    """The reward function as TRL calls it, which also logs, through TRL's public `log_metric` reward argument,
    this step's `time/reward_s` (the reward itself), `time/generation_s` (the sampler, measured into `timings`)
    and the candidate sampler's explore/* metrics (a `rollout_func`'s extra output, which TRL forwards to the
    reward functions as `rollout_metrics`)."""

    @functools.wraps(reward)
    def logged(*args, log_metric=None, rollout_metrics=None, **kwargs):
        start = time.perf_counter()
        rewards = reward(*args, log_metric=log_metric, **kwargs)
        if log_metric is not None:
            log_metric("time/reward_s", time.perf_counter() - start)
            for name, value in {**timings, **(rollout_metrics[0] if rollout_metrics else {})}.items():
                log_metric(name, value)
        timings.clear()
        return rewards

    return logged
