"""GRPO, one algorithm of the RL stage (`rl.algorithm: grpo`; the stage itself: lib/training/rl.py): TRL's
GRPOTrainer on top of the SFT model, with the environment's verdict as the reward, into grpo/adapter. What it
samples from and the trainer subclass: lib/training/samplers.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..checkpoints import verify_checkpoint
from ..config import RunConfig, rl_stage_params
from ..distributed import is_main, wait_for_everyone
from ..io import read_records
from ..models import load_model, weights_sha256, with_lora
from ..reward import make_reward_function, reward_key
from ..runs import Run, seed_everything
from .alarms import CollapseAlarm, read_alarms
from .harness import (
    CheckpointManifestCallback,
    FiniteLossGuard,
    JsonlLogger,
    NonFiniteLossError,
    ensure_logprob_kernel,
    precision_flags,
    progress_callbacks,
    save_atomically,
    tracking_args,
)
from .samplers import logged_reward, sampler, timed_trainer_class
from .validation import ValidationCallback


def _grpo_args(config: RunConfig, run: Run, stage: str, out: Path, mode_args: dict):
    # only after load_model: with Unsloth, load_model imports it, and Unsloth's GRPOTrainer needs its own GRPOConfig
    # subclass (it reads args.unsloth_num_chunks); a GRPOConfig imported before that is TRL's original class
    from trl import GRPOConfig

    g = config.grpo
    return GRPOConfig(
        output_dir=str(out / "trainer"),
        max_steps=g.max_steps,
        **{
            "per_device_train_batch_size": g.batch_size,
            "num_generations": g.num_generations,
            "scale_rewards": g.scale_rewards,
            **mode_args,
        },
        learning_rate=g.learning_rate,
        lr_scheduler_type=g.lr_scheduler_type,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        gradient_checkpointing=g.gradient_checkpointing,
        logging_steps=g.logging_steps,
        **tracking_args(config, run, stage),
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="steps" if g.checkpoint_every else "no",
        save_steps=g.checkpoint_every or 500,
        disable_tqdm=False,
        **precision_flags(config),
    )


def _train(trainer, guard: FiniteLossGuard, resume_from: str | None) -> None:
    try:
        trainer.train(resume_from_checkpoint=resume_from)
    except RuntimeError as error:  # NaN weights can also surface as a sampling error inside generation
        if "nan" not in str(error).lower() and "inf" not in str(error).lower():
            raise
        guard.bad_step = trainer.state.global_step + 1


def _fail_non_finite(run: Run, stage: str, started: float, params: dict, out: Path, bad_step: int) -> None:
    """Record the stage as failed with its last good checkpoint, and raise NonFiniteLossError."""
    good = sorted((out / "trainer").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    last = str(good[-1]) if good else "none"
    run.stage_done(
        stage,
        started=started,
        params=params,
        inputs={},
        outputs={"last_good_checkpoint": last},
        metrics={"bad_step": bad_step},
        status="failed: non-finite loss",
    )
    raise NonFiniteLossError(f"GRPO loss became non-finite at step {bad_step}; last good checkpoint: {last}")


def _keep_adapter(trainer, validation: ValidationCallback | None, out: Path, keep: str) -> dict:
    """Which step grpo/adapter holds: the last, or with `rl.keep: best` the validation's best (copied over it)."""
    adapter_dir = out / "adapter"
    kept = {"kept_step": trainer.state.global_step}
    if validation is not None and validation.best is not None:
        kept.update(validation_best_step=validation.best["step"], validation_best=validation.best["mean_return"])
        if keep == "best" and validation.best["step"] != trainer.state.global_step:
            tmp = adapter_dir.with_name(".adapter.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(out / "adapter_best", tmp)
            shutil.rmtree(adapter_dir)
            tmp.rename(adapter_dir)
            kept["kept_step"] = validation.best["step"]
    return kept


def _explore_summary(history: list[dict]) -> dict:
    """Mean of each explore/* metric over the whole run and over its first quarter (where exploration must start)."""
    summary = {}
    for key in sorted({k for h in history for k in h if k.startswith("explore/")}):
        values = [h[key] for h in history if key in h]
        quarter = values[: max(1, len(values) // 4)]
        summary[f"{key}_mean"] = sum(values) / len(values)
        summary[f"{key}_first_quarter"] = sum(quarter) / len(quarter)
    return summary


def _reward_metrics(log_history: list[dict]) -> dict:
    """The reward's first, last and mean over the logged steps, the mean zero-std share and the explore/* means."""
    history = [h for h in log_history if "reward" in h]
    returned = reward_key(history)  # multi-turn's episode returns, soft_target's candidate returns, else TRL's
    zero_std = [h["frac_reward_zero_std"] for h in history if "frac_reward_zero_std" in h]
    return {
        "reward_first": history[0][returned] if history else None,
        "reward_last": history[-1][returned] if history else None,
        "reward_mean": sum(h[returned] for h in history) / len(history) if history else None,
        "frac_reward_zero_std_mean": sum(zero_std) / len(zero_std) if zero_std else None,
        **_explore_summary(history),
    }


def _trainer(config: RunConfig, run: Run, stage: str, out: Path, base_model: str, extra_callbacks) -> tuple:
    """GRPO's trainer on `base_model` with its adapter, sampler, reward and callbacks (validation and the collapse
    alarm on rank 0). Returns (trainer, tokenizer, its sampler, the finite-loss guard, the validation callback or
    None, the backend)."""
    with run.lap(stage, "model load"):
        model, tokenizer, backend = load_model(base_model, config.model)
        model, peft = with_lora(model, config.model, backend)
    with run.lap(stage, "trainer set-up"):
        prompts = read_records(run.read_stage("corpus")["outputs"]["grpo_prompts.jsonl"], missing_ok=False)
        source = sampler(config, prompts, tokenizer, out)
        args = _grpo_args(config, run, stage, out, source["trl"])
        guard = FiniteLossGuard()
        reward = source["reward"] or make_reward_function(config, out / "samples.jsonl")
        timings: dict[str, float] = {}
        trainer = timed_trainer_class(timings)(
            model=model,
            reward_funcs=logged_reward(reward, timings),
            args=args,
            train_dataset=source["dataset"],
            processing_class=tokenizer,
            peft_config=peft,
            rollout_func=source["rollout"],
            # the checkpoint manifest first: a later on_save callback may stop the run (tests kill it there)
            callbacks=[CheckpointManifestCallback(), JsonlLogger(out / "train_log.jsonl"), guard]
            + [*progress_callbacks(), *extra_callbacks],
        )
    validation = None
    if config.rl.validate_every and is_main():  # rank 0 plays the validation episodes and keeps the best adapter
        validation = ValidationCallback(config, out, tokenizer)
        trainer.add_callback(validation)
    if is_main():  # after validation: a step's point is on disk when the alarm reads the curve
        trainer.add_callback(CollapseAlarm(config, out))
    return trainer, tokenizer, source, guard, validation, backend


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

    started = run.begin(stage)
    with run.lap(stage, "kernel check"):
        logprob_kernel = ensure_logprob_kernel()
    seed_everything(config.seed, config.deterministic)
    corpus = run.read_stage("corpus")
    if resume_from is not None:
        verify_checkpoint(Path(resume_from))
    out = run.stage_dir(stage)
    base_model = base_model or run.read_stage("sft")["outputs"]["model"]
    g = config.grpo
    built = _trainer(config, run, stage, out, base_model, extra_callbacks)
    trainer, tokenizer, source, guard, validation, backend = built
    run.log(
        f"{stage}_start", resume_from=resume_from, prompts=len(source["dataset"]), base_model=base_model, mode=g.mode
    )
    with run.lap(stage, "train"):
        _train(trainer, guard, resume_from)
    if guard.bad_step is not None:
        _fail_non_finite(run, stage, started, rl_stage_params(config), out, guard.bad_step)
    adapter_dir = out / "adapter"
    with run.lap(stage, "save"):
        save_atomically(trainer, tokenizer, adapter_dir, merge=False)
    kept = _keep_adapter(trainer, validation, out, config.rl.keep)
    wait_for_everyone()  # the kept adapter is in place before any process hashes it
    return run.stage_done(
        stage,
        started=started,
        params=rl_stage_params(config),
        inputs={"grpo_prompts.jsonl": corpus["outputs"]["grpo_prompts.jsonl"], "base_model": base_model},
        outputs={"adapter": str(adapter_dir), "base_model": base_model},
        metrics={
            "backend": backend,
            "logprob_kernel": logprob_kernel,
            "steps": trainer.state.global_step,
            **_reward_metrics(trainer.state.log_history),
            **kept,
            "mode": g.mode,
            **({"env_url": g.env_url} if g.mode == "multi_turn" and g.env_url else {}),
            **({"episode_starts": len(source["dataset"])} if g.mode == "multi_turn" else {}),
            "adapter_sha256": weights_sha256(adapter_dir),
            "resumed_from": resume_from,
            **_alarm_metrics(out, trainer.state.global_step, g.max_steps),
        },
    )


def _alarm_metrics(out: Path, steps: int, max_steps: int) -> dict:
    """The run's collapse alarms (grpo/alarms.jsonl) and whether it stopped before its last step."""
    alarms = read_alarms(out)
    return {
        "alarms": [f"step {a['step']}: {a['kind']}: {a['message']}" for a in alarms],
        "stopped_early": steps < max_steps,
    }
