"""What the sft and grpo stages put around a TRL trainer (lib/training/sft.py, grpo.py):
- the precision and tracking arguments;
- the guards that stop training loudly instead of training on bad input: prompts longer than
  grpo.max_prompt_length (never truncated), answers longer than grpo.max_completion_length (they would be cut off),
  and a NaN/inf loss;
- the callbacks that log every step to a jsonl file and write each checkpoint's manifest, and the atomic save of
  what was trained;
- a text step bar for a stage kernel whose output reaches a terminal (`progress_callbacks`);
- TRL on a CPU-only torch: TRL 1.15 computes SFT and GRPO log-probs with a fused LM head whose kernel is written in
  Triton, and the CPU torch wheel ships no Triton, so both trainers fail at their first step
  (`_ChunkedLogProbFunction` is None). When and only when that kernel is missing, `ensure_logprob_kernel()` plugs in
  the same computation in plain torch (full logits). The stages record the kernel they ran with.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import time
from pathlib import Path

import torch
from transformers import ProgressCallback, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..checkpoints import write_checkpoint_manifest
from ..config import RunConfig
from ..distributed import is_main, wait_for_everyone
from ..models import cuda_available, is_tiny, resolved_precision
from ..runs import TEXT_PROGRESS_ENV, Run


def precision_flags(config: RunConfig) -> dict:
    """The trainer's precision arguments: fp16 on a GPU only; bf16 (autocast) wherever the run resolved to bf16, a
    CPU with bf16 instructions included (the weights are loaded in bf16 too: lib.models.load_model)."""
    on_cuda, precision = cuda_available(), resolved_precision(config.model)
    return {"use_cpu": not on_cuda, "fp16": on_cuda and precision == "fp16", "bf16": precision == "bf16"}


class TrackingUnavailableError(RuntimeError):
    """`tracking` names a tracker whose package is not installed."""


def tracking_args(config: RunConfig, run: Run, stage: str) -> dict:
    """TRL's report_to (and trackio's project and run name) for `config.tracking`. Trackio logs locally: the Space
    id is pinned to None, so nothing leaves the machine."""
    if config.tracking == "none":
        return {"report_to": "none"}
    import importlib.util

    if importlib.util.find_spec(config.tracking) is None:
        raise TrackingUnavailableError(
            f"tracking: {config.tracking} needs the {config.tracking} package: pip install {config.tracking} "
            "(or set tracking: none)"
        )
    extra = {}
    if config.tracking == "trackio":
        extra = {"project": f"agent-rl-workbook-{config.env}", "trackio_space_id": None}
    return {"report_to": [config.tracking], "run_name": f"{run.dir.name}/{stage}", **extra}


def _peak_memory_mb() -> float:
    if cuda_available():  # pragma: no cover - CUDA only
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class JsonlLogger(TrainerCallback):
    """Writes every trainer log (loss, reward, timings, memory) to a jsonl file as it happens."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.writes = is_main()  # under accelerate / torchrun rank 0 alone writes the log
        if self.writes:
            self.path.unlink(missing_ok=True)
        self._last: tuple[float, float] | None = None  # (time, num_tokens) at the previous log
        self.fields: dict = {}  # added to every record, e.g. {"round": 2} while a stage's second trainer logs

    def tag(self, **fields) -> None:
        """Tag the records that follow (a stage training more than one trainer into one log: each starts at step 1)."""
        self.fields, self._last = fields, None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.writes:
            return
        record = {
            "step": state.global_step,
            "time": time.time(),
            "peak_memory_mb": round(_peak_memory_mb(), 1),
            **self.fields,
            **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))},
        }
        if all(k in record for k in ("step_time", "time/generation_s", "time/reward_s")):
            # TRL's step_time covers generation, reward and the optimisation step; the rest is forward+backward
            record["time/backward_s"] = record["step_time"] - record["time/generation_s"] - record["time/reward_s"]
        if "num_tokens" in record:
            if self._last is not None and record["time"] > self._last[0]:
                record["throughput_tokens_per_s"] = (record["num_tokens"] - self._last[1]) / (
                    record["time"] - self._last[0]
                )
            self._last = (record["time"], record["num_tokens"])
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


class TextProgress(ProgressCallback):
    """The trainer's step bar as text (tqdm on stderr), the last logged loss beside it. The logs themselves go to
    train_log.jsonl (JsonlLogger), not to the screen."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.training_bar is not None and logs and "loss" in logs:
            self.training_bar.set_postfix(loss=f"{logs['loss']:.4g}", refresh=False)


def progress_callbacks() -> list:
    """A text step bar where a stage kernel's output goes on to a terminal (`python -m lib run` sets
    TEXT_PROGRESS_ENV for its stage kernels) and the trainer's own bar is the notebook's HTML, which no terminal
    shows; elsewhere (a notebook opened by hand, `python -m lib stage`) nothing: the trainer's own bar is there."""
    from transformers import trainer

    if os.environ.get(TEXT_PROGRESS_ENV) != "1" or trainer.DEFAULT_PROGRESS_CALLBACK is ProgressCallback:
        return []
    return [TextProgress()]


class CheckpointManifestCallback(TrainerCallback):
    """After each checkpoint the trainer saves (<output_dir>/checkpoint-<step>/, with everything TRL adds to it),
    writes its manifest (lib/checkpoints.py); on the process that saves (args.should_save)."""

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and folder.is_dir():
            write_checkpoint_manifest(folder)


def _replace_folder(tmp: Path, target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)


def save_atomically(trainer, tokenizer, target: Path, merge: bool, adapter_target: Path | None = None) -> None:
    """Save into a temporary sibling folder and rename it into place, so a crash never leaves half a model. Under
    accelerate / torchrun rank 0 saves and every process waits until it has. With `merge` and `adapter_target`, the
    adapter alone is saved there too, before the merge: a few MB from which the merged folder can be rebuilt
    (`lib.merging.rebuild_missing`), so a run can be committed without its merged weights."""
    if not is_main():
        wait_for_everyone()
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = trainer.model
    if merge and adapter_target is not None:
        adapter_tmp = adapter_target.with_name(f".{adapter_target.name}.tmp")
        shutil.rmtree(adapter_tmp, ignore_errors=True)
        model.save_pretrained(adapter_tmp)
        _replace_folder(adapter_tmp, adapter_target)
    if merge:
        model = model.merge_and_unload()
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    _replace_folder(tmp, target)
    wait_for_everyone()


# ---- guards: bad input stops training loudly ----


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


def check_prompt_length(
    tokenizer, prompts: list[list[dict]], max_prompt_length: int, setting: str = "grpo.max_prompt_length"
) -> None:
    """An error naming the first offender when any chat prompt is longer than `max_prompt_length` tokens (the limit
    `setting` sets): a trainer would cut it, silently."""
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
            f"{len(too_long)} prompts exceed {setting}={max_prompt_length} "
            f"tokens (first: row {too_long[0][0]}, {too_long[0][1]} tokens); raise the limit or shorten prompts"
        )


# ---- TRL's fused log-prob kernel on a CPU-only torch ----

OPTIONAL_OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


class TorchChunkedLogProb:
    """Same signature and outputs as trl.kernels.ChunkedLogProbFunction.apply, differentiable through autograd."""

    @staticmethod
    def apply(
        hidden,
        weight,
        bias,
        targets,
        temperature,
        chunk_size,
        final_logit_softcapping=None,
        logit_scale=1.0,
        outputs=OPTIONAL_OUTPUTS,
    ):
        z = hidden.float() @ weight.float().t()
        if bias is not None:
            z = z + bias.float()
        z = z * logit_scale
        if final_logit_softcapping is not None:
            z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
        z = z / temperature
        log_z = torch.logsumexp(z, dim=-1)
        logprobs = z.gather(1, targets[:, None]).squeeze(1) - log_z
        log_p = z - log_z[:, None]
        entropy = -(log_p.exp() * log_p).sum(-1) if "entropy" in outputs else None
        with torch.no_grad():
            log_sum_sq_probs = torch.logsumexp(2 * log_p, dim=-1) if "log_sum_sq_probs" in outputs else None
            mean_logits = z.mean(-1) if "mean_logits" in outputs else None
            is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
        return logprobs, entropy, log_sum_sq_probs, mean_logits, is_top1


# Every SFT batch is padded up to a multiple of this many tokens, so the kernels meet a few shapes. On a CPU, oneDNN
# keeps kernels and buffers per shape: SmolLM2 (bf16, LoRA on the top 16 layers), 60 forward+backward passes of 2 rows
# over lengths of 300-1,000 tokens grew from 1.3 GB to 4.6 GB and was still growing; padded to multiples of 64, the
# same passes levelled at 3.0 GB (338 s against 318, the padded arm sharing the CPU for part of its run;
# docs/lab/memory/results.json, 2026-12-07). The tiny model's SFT (a few hundred MB) is left unpadded: there the
# padding would only cost time.
SFT_LENGTH_MULTIPLE = 64


def sft_length_multiple(config: RunConfig) -> int | None:
    """The multiple SFT pads its batches to (`SFT_LENGTH_MULTIPLE`; none for the tiny model)."""
    return None if is_tiny(config.model) else SFT_LENGTH_MULTIPLE


def sft_args(config: RunConfig, run: Run, out: Path, stage: str = "sft"):
    """TRL's SFTConfig from the `sft` section, logged under `stage`: the sft stage's, and the RL stage's AggreVaTe
    rounds (which fit their labels with the same settings)."""
    # only after load_model: with Unsloth, load_model imports it, and Unsloth replaces trl.SFTConfig with its own
    from trl import SFTConfig

    s = config.sft
    return SFTConfig(
        output_dir=str(out / "trainer"),
        num_train_epochs=s.epochs,
        per_device_train_batch_size=s.batch_size,
        gradient_accumulation_steps=s.grad_accum,
        learning_rate=s.learning_rate,
        max_length=s.max_length,
        max_steps=s.max_steps or -1,
        logging_steps=s.logging_steps,
        save_strategy="no",
        gradient_checkpointing=s.gradient_checkpointing,
        train_sampling_strategy="group_by_length" if s.group_by_length else "random",
        pad_to_multiple_of=sft_length_multiple(config),
        **tracking_args(config, run, stage),
        seed=config.seed,
        data_seed=config.seed,
        completion_only_loss=not s.prompt_loss,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        disable_tqdm=False,
        full_determinism=False,
        include_num_input_tokens_seen="non_padding",  # TrainerState.num_input_tokens_seen: the tokens trained on
        **precision_flags(config),
    )


def sft_batching(config: RunConfig) -> str:
    """How SFT (and an AggreVaTe round's fit) draws its batches: `prefix` under `env_args.turns: conversation` or
    `updates` (lib/training/packing.py: a row's prompt is then its episode so far, and a batch is one episode's rows,
    packed), else `length` (`sft.group_by_length`) or `random`."""
    if config.env_args.get("turns", "state") != "state":
        return "prefix"
    return "length" if config.sft.group_by_length else "random"


def sft_trainer(config: RunConfig, **kwargs):
    """TRL's SFTTrainer with `kwargs` (model, args, train_dataset, processing_class, ...), or where
    `sft_batching(config)` is `prefix` its prefix-packed subclass with the packing collator: a batch is one
    episode's rows (`sft.batch_size` does not apply; `sft.grad_accum` does)."""
    if sft_batching(config) != "prefix":
        from trl import SFTTrainer

        return SFTTrainer(**kwargs)
    from .packing import PrefixPacker, episode_key, packed_trainer_class

    collator = PrefixPacker(kwargs["processing_class"].pad_token_id, sft_length_multiple(config))
    rows = kwargs.pop("train_dataset")
    rows = rows.add_column("episode", [episode_key(prompt) for prompt in rows["prompt"]])
    return packed_trainer_class()(data_collator=collator, train_dataset=rows, **kwargs)


def ensure_logprob_kernel() -> str:
    """Returns the kernel the trainers will use: 'triton' (TRL's own) or 'torch' (this module's, only without
    Triton)."""
    import trl.trainer.utils as trl_utils

    if trl_utils._ChunkedLogProbFunction is None:
        trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return "torch" if trl_utils._ChunkedLogProbFunction is TorchChunkedLogProb else "triton"
