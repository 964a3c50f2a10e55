"""Stages `sft` and `grpo`: TRL's SFTTrainer and GRPOTrainer, with the environment's verdict as the reward.

`python -m lib stage sft|grpo --profile P --run-dir outputs/<id>` (or under `accelerate launch`); notebooks
03_sft and 04_grpo call the same functions. The grpo stage also trains the no-SFT ablation's model (GRPO from the
untrained model, into grpo_no_sft/) when `eval.ablations` lists `no_sft`; the evaluate stage only loads it.

TRL is reached through its public hooks: callbacks, `reward_funcs` (whose `log_metric` argument logs the step
timings and the candidate sampler's explore/* metrics), `rollout_func`, `TrainerState`. Two private members remain:
`GRPOTrainer._generate`, overridden to sample without gradient checkpointing (no public hook sits between sampling
and the loss), and `GRPOTrainer._prepare_inputs` with its `_buffered_inputs`, wrapped to regroup a step's
micro-batches by prompt length (`by_prompt_length`); tests/test_trl_compat.py fails naming either if a TRL upgrade
changes it.
"""

from __future__ import annotations

import functools
import json
import resource
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from datasets import Dataset
from transformers import TrainerCallback

from ..config import RunConfig
from ..distributed import is_main, wait_for_everyone
from ..embedded import source_record
from ..models import build_tiny, cuda_available, is_tiny, load_model, resolved_precision, weights_sha256, with_lora
from ..reward import make_reward_function
from ..runs import Run, seed_everything
from .checkpoints import CheckpointManifestCallback, verify_checkpoint
from .corpus import read_jsonl
from .guards import FiniteLossGuard, NonFiniteLossError, check_answer_length, check_prompt_length
from .rollout import candidate_rollout
from .validation import ValidationCallback


def _precision_flags(config: RunConfig) -> dict:
    on_cuda, precision = cuda_available(), resolved_precision(config.model)
    return {"use_cpu": not on_cuda, "fp16": on_cuda and precision == "fp16", "bf16": on_cuda and precision == "bf16"}


class TrackingUnavailableError(RuntimeError):
    """`tracking` names a tracker whose package is not installed."""


def _tracking(config: RunConfig, run: Run, stage: str) -> dict:
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

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.writes:
            return
        record = {
            "step": state.global_step,
            "time": time.time(),
            "peak_memory_mb": round(_peak_memory_mb(), 1),
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


def _sft_dataset(rows: list[dict]) -> Dataset:
    return Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])


def run_sft(config: RunConfig, run: Run, extra_callbacks=()) -> dict:
    from .trl_compat import ensure_logprob_kernel

    started = time.time()
    logprob_kernel = ensure_logprob_kernel()
    seed_everything(config.seed, config.deterministic)
    corpus = run.read_stage("corpus")
    rows = read_jsonl(corpus["outputs"]["sft.jsonl"])
    out = run.stage_dir("sft")
    base = config.model.name
    if is_tiny(config.model):
        texts = [m["content"] for r in rows for m in r["prompt"] + r["completion"]] + [config.spec.vocabulary()]
        if is_main():  # one process builds the tokenizer and the untrained model; the others load what it saved
            build_tiny(texts, config.model.tiny, out / "base_model", config.seed)
        wait_for_everyone()
        base = str(out / "base_model")
    run.update_manifest(model_source=source_record(config.model.name))
    model, tokenizer, backend = load_model(base, config.model)
    answer_tokens = check_answer_length(
        tokenizer, [r["completion"][-1]["content"] for r in rows], config.grpo.max_completion_length
    )
    # only now: with Unsloth, load_model imports it, and Unsloth replaces trl.SFTConfig/SFTTrainer with its own
    from trl import SFTConfig, SFTTrainer

    adapter = not (is_tiny(config.model) and config.model.sft_full_finetune)
    peft = None
    if adapter:
        model, peft = with_lora(model, config.model, backend)
    s = config.sft
    args = SFTConfig(
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
        **_tracking(config, run, "sft"),
        seed=config.seed,
        data_seed=config.seed,
        completion_only_loss=True,
        lr_scheduler_type="cosine",
        warmup_steps=0.05,
        disable_tqdm=False,
        full_determinism=False,
        include_num_input_tokens_seen="non_padding",  # TrainerState.num_input_tokens_seen: the tokens trained on
        **_precision_flags(config),
    )
    guard = FiniteLossGuard()
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=_sft_dataset(rows),
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[JsonlLogger(out / "train_log.jsonl"), guard, *extra_callbacks],
    )
    runtime = trainer.train().metrics["train_runtime"]
    if guard.bad_step is not None:
        raise NonFiniteLossError(f"SFT loss became non-finite at step {guard.bad_step}; nothing was saved")
    model_dir = out / "model"
    _save_atomically(trainer, tokenizer, model_dir, merge=adapter)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    # the non-pad tokens trained on, counted by the trainer (include_num_input_tokens_seen); the logged num_tokens
    # lags behind by up to logging_steps, so it is only the fallback
    tokens = int(trainer.state.num_input_tokens_seen) or max(
        (h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h), default=0
    )
    return run.stage_done(
        "sft",
        started=started,
        params=s.model_dump(),
        inputs={"sft.jsonl": corpus["outputs"]["sft.jsonl"], "base": base},
        outputs={"model": str(model_dir)},
        metrics={
            "backend": backend,
            "logprob_kernel": logprob_kernel,
            "steps": trainer.state.global_step,
            "answer_tokens_max": answer_tokens,
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "losses": losses,
            "train_tokens": tokens,
            "train_runtime_s": round(runtime, 3),
            "tokens_per_s": round(tokens / runtime, 1) if runtime else None,
            "weights_sha256": weights_sha256(model_dir),
            "full_finetune": not adapter,
        },
    )


def _save_atomically(trainer, tokenizer, target: Path, merge: bool) -> None:
    """Save into a temporary sibling folder and rename it into place, so a crash never leaves half a model. Under
    accelerate / torchrun rank 0 saves and every process waits until it has."""
    if not is_main():
        wait_for_everyone()
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = trainer.model
    if merge:
        model = model.merge_and_unload()
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    wait_for_everyone()


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


def _timed_trainer_class(timings: dict):
    from trl import GRPOTrainer

    class TimedGRPOTrainer(GRPOTrainer):
        """TRL's GRPOTrainer, sampling without gradient checkpointing and timing it (into `timings`, which the
        reward function logs: `_logged_reward`), and training micro-batches grouped by prompt length
        (`by_prompt_length`)."""

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

    return TimedGRPOTrainer


def _logged_reward(reward, timings: dict):
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


def _explore_summary(history: list[dict]) -> dict:
    """Mean of each explore/* metric over the whole run and over its first quarter (where exploration must start)."""
    summary = {}
    for key in sorted({k for h in history for k in h if k.startswith("explore/")}):
        values = [h[key] for h in history if key in h]
        quarter = values[: max(1, len(values) // 4)]
        summary[f"{key}_mean"] = sum(values) / len(values)
        summary[f"{key}_first_quarter"] = sum(quarter) / len(quarter)
    return summary


def _sampler(config: RunConfig, rows: list[dict], tokenizer, out: Path) -> dict:
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
                **({"scale_rewards": "none"} if g.train_turns == "all" else {}),
            },
        }
    rollout = None
    if config.model.action_space == "candidates":
        rollout = candidate_rollout(rows, config.spec, g.num_generations, g.temperature, config.seed)
    return {
        "dataset": _grpo_dataset(rows, tokenizer, g.max_prompt_length),
        "rollout": rollout,
        "reward": None,
        "trl": {},
    }


NO_SFT = "no_sft"  # the eval.ablations entry that asks the grpo stage for GRPO from the untrained model


def run_grpo(config: RunConfig, run: Run, resume_from: str | None = None, extra_callbacks=()) -> dict:
    """The grpo stage: GRPO on top of the SFT model (grpo/), then, when `eval.ablations` lists `no_sft`, GRPO with
    the same settings from the untrained model (grpo_no_sft/), which the evaluate stage compares with it. Returns
    the grpo record."""
    record = train_grpo(config, run, resume_from, extra_callbacks)
    if NO_SFT in config.eval.ablations:
        train_grpo_no_sft(config, run)
    return record


def train_grpo_no_sft(config: RunConfig, run: Run) -> dict:
    """GRPO from the untrained model (the one the evaluate stage reports as `untrained`), recorded as stage
    grpo_no_sft: the no-SFT ablation's model."""
    from ..evaluation.closed_loop import model_artifacts

    untrained = model_artifacts(config, run)["untrained"]["model"]
    return train_grpo(config, run, base_model=untrained, stage="grpo_no_sft")


def train_grpo(
    config: RunConfig,
    run: Run,
    resume_from: str | None = None,
    extra_callbacks=(),
    *,
    base_model: str | None = None,
    stage: str = "grpo",
) -> dict:
    """GRPO on top of the SFT model (or `base_model`, for the no-SFT ablation), recorded as `stage`."""
    from .trl_compat import ensure_logprob_kernel

    started = time.time()
    logprob_kernel = ensure_logprob_kernel()
    seed_everything(config.seed, config.deterministic)
    corpus = run.read_stage("corpus")
    sft = run.read_stage("sft")
    if resume_from is not None:
        verify_checkpoint(Path(resume_from))
    out = run.stage_dir(stage)
    base_model = base_model or sft["outputs"]["model"]
    model, tokenizer, backend = load_model(base_model, config.model)
    model, peft = with_lora(model, config.model, backend)
    # only now: with Unsloth, load_model imports it, and Unsloth's GRPOTrainer needs its own GRPOConfig subclass
    # (it reads args.unsloth_num_chunks); a GRPOConfig imported before that is TRL's original class
    from trl import GRPOConfig

    rows = read_jsonl(corpus["outputs"]["grpo_prompts.jsonl"])
    g = config.grpo
    sampler = _sampler(config, rows, tokenizer, out)
    args = GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=g.max_steps,
        **{
            "per_device_train_batch_size": g.batch_size,
            "num_generations": g.num_generations,
            "scale_rewards": g.scale_rewards,
            **sampler["trl"],
        },
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler_type,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        top_k=g.top_k,
        beta=g.beta,
        gradient_checkpointing=g.gradient_checkpointing,
        epsilon_high=g.epsilon_high,
        entropy_coef=g.entropy_coef,
        use_adaptive_entropy=g.use_adaptive_entropy,
        entropy_target=g.entropy_target,
        logging_steps=g.logging_steps,
        **_tracking(config, run, stage),
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="steps" if g.checkpoint_every else "no",
        save_steps=g.checkpoint_every or 500,
        disable_tqdm=False,
        **_precision_flags(config),
    )
    guard = FiniteLossGuard()
    policy = {"tokenizer": tokenizer}
    reward = sampler["reward"] or make_reward_function(config, out / "samples.jsonl", policy)
    timings: dict[str, float] = {}
    trainer = _timed_trainer_class(timings)(
        model=model,
        reward_funcs=_logged_reward(reward, timings),
        args=args,
        train_dataset=sampler["dataset"],
        processing_class=tokenizer,
        peft_config=peft,
        rollout_func=sampler["rollout"],
        # the checkpoint manifest first: a later on_save callback may stop the run (tests kill it there)
        callbacks=[CheckpointManifestCallback(), JsonlLogger(out / "train_log.jsonl"), guard, *extra_callbacks],
    )
    policy["model"] = trainer.model
    validation = None
    if g.validate_every and is_main():  # rank 0 plays the validation episodes and keeps the best adapter
        validation = ValidationCallback(config, out, tokenizer, policy)
        trainer.add_callback(validation)
    run.log(
        f"{stage}_start", resume_from=resume_from, prompts=len(sampler["dataset"]), base_model=base_model, mode=g.mode
    )
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except RuntimeError as error:  # NaN weights can also surface as a sampling error inside generation
        if "nan" not in str(error).lower() and "inf" not in str(error).lower():
            raise
        guard.bad_step = trainer.state.global_step + 1
    if guard.bad_step is not None:
        good = sorted((out / "trainer").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
        last = str(good[-1]) if good else "none"
        run.stage_done(
            stage,
            started=started,
            params=g.model_dump(),
            inputs={},
            outputs={"last_good_checkpoint": last},
            metrics={"bad_step": guard.bad_step},
            status="failed: non-finite loss",
        )
        raise NonFiniteLossError(f"GRPO loss became non-finite at step {guard.bad_step}; last good checkpoint: {last}")
    adapter_dir = out / "adapter"
    _save_atomically(trainer, tokenizer, adapter_dir, merge=False)
    kept = {"kept_step": trainer.state.global_step}
    if validation is not None and validation.best is not None:
        kept.update(validation_best_step=validation.best["step"], validation_best=validation.best["mean_return"])
        if g.keep == "best" and validation.best["step"] != trainer.state.global_step:
            tmp = adapter_dir.with_name(".adapter.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(out / "adapter_best", tmp)
            shutil.rmtree(adapter_dir)
            tmp.rename(adapter_dir)
            kept["kept_step"] = validation.best["step"]
    wait_for_everyone()  # the kept adapter is in place before any process hashes it
    history = [h for h in trainer.state.log_history if "reward" in h]
    # multi_turn with every turn trained: the rows' rewards are advantages, the episodes' returns are the reward
    returned = "multi_turn/return_mean" if any("multi_turn/return_mean" in h for h in history) else "reward"
    zero_std = [h["frac_reward_zero_std"] for h in history if "frac_reward_zero_std" in h]
    return run.stage_done(
        stage,
        started=started,
        params=g.model_dump(),
        inputs={"grpo_prompts.jsonl": corpus["outputs"]["grpo_prompts.jsonl"], "base_model": base_model},
        outputs={"adapter": str(adapter_dir), "base_model": base_model},
        metrics={
            "backend": backend,
            "logprob_kernel": logprob_kernel,
            "steps": trainer.state.global_step,
            "reward_first": history[0][returned] if history else None,
            "reward_last": history[-1][returned] if history else None,
            "reward_mean": sum(h[returned] for h in history) / len(history) if history else None,
            "frac_reward_zero_std_mean": sum(zero_std) / len(zero_std) if zero_std else None,
            **_explore_summary(history),
            **kept,
            "mode": g.mode,
            **({"env_url": g.env_url} if g.mode == "multi_turn" and g.env_url else {}),
            **({"episode_starts": len(sampler["dataset"])} if g.mode == "multi_turn" else {}),
            "adapter_sha256": weights_sha256(adapter_dir),
            "resumed_from": resume_from,
        },
    )
