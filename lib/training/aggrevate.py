"""The RL stage as AggreVaTe (`grpo.mode: aggrevate`): the improver's labels at the policy's own states.

GRPO learns from the policy's samples, and a sharp SFT rarely samples the answer that beats its teacher. AggreVaTe
(Ross and Bagnell, 2014) brings the signal from outside the samples: the SFT policy plays fresh train episodes
(greedy, its own path), and at every state it reached the improver, which scores every offered candidate by its
return when the teacher finishes the episode (the argmax of the teacher's Q, lib/episodes.py: Improver), names the
best one. TRL's SFTTrainer then fits a new adapter on top of the SFT model to those labels. It is one round of
approximate policy iteration: the labels come from the environment's returns, read through the simulator on train
seeds, never from the evaluated splits.

The SFT row stays the teacher's clone; this stage is where the improver's signal enters, and its record says so
(`mode: aggrevate`, `label_source: improver`). It trains with the `sft` section's settings (epochs, batch, learning
rate) on as many episodes of the policy's own play as the teacher's corpus has (`corpus.sft_episodes`), on train
seeds of their own block (`AGGREVATE_SEED_OFFSET`), and writes grpo/adapter as GRPO does, so the evaluate stage, the
gate and the report read it the same way.
"""

from __future__ import annotations

import json
import time

from datasets import Dataset

from ..episodes import Improver
from ..inference import load_policy_model
from ..io import atomic_write_text
from ..models import load_model, weights_sha256, with_lora
from ..runs import Run, seed_everything
from .dagger import AGGREVATE_SEED_OFFSET, dagger_seeds, labelled_rows
from .harness import FiniteLossGuard, JsonlLogger, NonFiniteLossError, save_atomically
from .sft import sft_args


def train_aggrevate(config, run: Run, *, base_model: str, stage: str = "grpo") -> dict:
    """One AggreVaTe round on top of `base_model` (the SFT model), recorded as `stage` with its adapter in
    `stage`/adapter, as train_grpo records GRPO."""
    from trl import SFTTrainer

    started = time.time()
    seed_everything(config.seed, config.deterministic)
    g, out = config.grpo, run.stage_dir(stage)
    seeds = dagger_seeds(config.corpus.sft_episodes, config.corpus.seed_offset, AGGREVATE_SEED_OFFSET)
    with run.lap(stage, "policy's episodes, improver's labels"):
        policy = load_policy_model(base_model, config.model)
        rows, agree = labelled_rows(config, policy, seeds, Improver.name, "improver")
        del policy
    if not rows:
        raise ValueError(f"grpo.mode aggrevate: the policy's {len(seeds)} episodes reached no state to label")
    atomic_write_text(out / "rows.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    changed = sum(r["completion"][-1]["content"] != r["teacher"] for r in rows)
    print(
        f"aggrevate: {len(rows)} states of the policy's own {len(seeds)} episodes; the improver keeps its action at "
        f"{agree:.3f} of them and differs from the teacher at {changed}"
    )
    with run.lap(stage, "model load"):
        model, tokenizer, backend = load_model(base_model, config.model)
        model, peft = with_lora(model, config.model, backend)
    guard = FiniteLossGuard()
    trainer = SFTTrainer(
        model=model,
        args=sft_args(config, run, out, stage),
        train_dataset=Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]),
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[JsonlLogger(out / "train_log.jsonl"), guard],
    )
    run.log(f"{stage}_start", base_model=base_model, mode=g.mode, rows=len(rows), episodes=len(seeds))
    with run.lap(stage, "train"):
        result = trainer.train().metrics
    runtime = result["train_runtime"]
    if guard.bad_step is not None:
        raise NonFiniteLossError(f"AggreVaTe loss became non-finite at step {guard.bad_step}; nothing was saved")
    adapter_dir = out / "adapter"
    with run.lap(stage, "save"):
        save_atomically(trainer, tokenizer, adapter_dir, merge=False)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return run.stage_done(
        stage,
        started=started,
        params=g.model_dump(),
        inputs={"base_model": base_model, "seeds": [seeds.start, seeds.stop]},
        outputs={"adapter": str(adapter_dir), "base_model": base_model, "rows": str(out / "rows.jsonl")},
        metrics={
            "backend": backend,
            "mode": g.mode,
            "label_source": "improver",
            "episodes": len(seeds),
            "rows": len(rows),
            "policy_agrees_with_improver": agree,
            "improver_differs_from_teacher": round(changed / len(rows), 4),
            "steps": trainer.state.global_step,
            "kept_step": trainer.state.global_step,
            "train_loss": result["train_loss"],  # the mean over every step (logged ones: losses)
            "losses": losses,
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "train_runtime_s": round(runtime, 3),
            "tokens_per_s": round(int(trainer.state.num_input_tokens_seen) / runtime, 1) if runtime else None,
            "reward_first": None,
            "reward_last": None,
            "reward_mean": None,
            "frac_reward_zero_std_mean": None,
            "adapter_sha256": weights_sha256(adapter_dir),
            "resumed_from": None,
            "alarms": [],
            "stopped_early": False,
        },
    )
