"""Stage `sft`: TRL's SFTTrainer on the corpus's teacher transcripts (completion-only loss), into sft/model.

`python -m lib stage sft --profile P --run-dir outputs/<id>` (or under `accelerate launch`); notebook 03_sft calls
the same function.
"""

from __future__ import annotations

import random
from pathlib import Path

from datasets import Dataset

from ..config import RunConfig
from ..distributed import is_main, wait_for_everyone
from ..embedded import source_record
from ..inference import load_policy_model
from ..io import read_records
from ..models import build_tiny, is_tiny, load_model, resolved_precision, weights_sha256, with_lora
from ..runs import Run, seed_everything
from .balance import answer_kinds, balanced, kind_mix
from .harness import (
    FiniteLossGuard,
    JsonlLogger,
    NonFiniteLossError,
    check_answer_length,
    check_prompt_length,
    ensure_logprob_kernel,
    progress_callbacks,
    save_atomically,
    sft_args,
    sft_batching,
    sft_trainer,
)
from .imitation import announce, imitation_check


def _sft_dataset(rows: list[dict]) -> Dataset:
    """The rows as TRL's prompt-completion dataset."""
    return Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])


def _trained_rows(config: RunConfig, rows: list[dict]) -> tuple[list[dict], dict | None]:
    """The rows SFT trains on: the corpus's, or with `sft.kind_balance` resampled toward the rare kinds of answer
    (lib/training/balance.py), with the kind mix before and after for the stage record."""
    if not config.sft.kind_balance:
        return rows, None
    kinds = answer_kinds(config.spec, rows)
    drawn = balanced(kinds, config.sft.kind_balance, random.Random(f"{config.seed}/kind-balance"))
    mix = {"corpus": kind_mix(kinds), "trained": kind_mix([kinds[i] for i in drawn])}
    print(f"sft kind balance {config.sft.kind_balance}: answer kinds {mix['corpus']} -> {mix['trained']}")
    return [rows[i] for i in drawn], mix


def _trained_tokens(trainer) -> int:
    """The non-pad tokens trained on, counted by the trainer (include_num_input_tokens_seen); the logged num_tokens
    lags behind by up to logging_steps, so it is only the fallback."""
    return int(trainer.state.num_input_tokens_seen) or max(
        (h["num_tokens"] for h in trainer.state.log_history if "num_tokens" in h), default=0
    )


def _base_model(config: RunConfig, rows: list[dict], out: Path) -> str:
    """The model SFT starts from: the profile's, or for the tiny model one built here (tokenizer and untrained
    weights) from the corpus's texts."""
    if not is_tiny(config.model):
        return config.model.name
    texts = [m["content"] for r in rows for m in r["prompt"] + r["completion"]] + [config.spec.vocabulary()]
    if is_main():  # one process builds the tokenizer and the untrained model; the others load what it saved
        build_tiny(texts, config.model.tiny, out / "base_model", config.seed)
    wait_for_everyone()
    return str(out / "base_model")


def trains_adapter(config) -> bool:
    """Whether SFT trains LoRA adapters (every model but a tiny one set to `model.sft_full_finetune`)."""
    return not (is_tiny(config.model) and config.model.sft_full_finetune)


def run_sft(config: RunConfig, run: Run, extra_callbacks=()) -> dict:
    started = run.begin("sft")
    with run.lap("sft", "kernel check"):
        logprob_kernel = ensure_logprob_kernel()
    seed_everything(config.seed, config.deterministic)
    corpus = run.read_stage("corpus")
    rows = read_records(corpus["outputs"]["sft.jsonl"], missing_ok=False)
    out = run.stage_dir("sft")
    with run.lap("sft", "model load"):
        base = _base_model(config, rows, out)
        run.update_manifest(model_source=source_record(config.model.name))
        model, tokenizer, backend = load_model(base, config.model)
        answer_tokens = check_answer_length(
            tokenizer, [r["completion"][-1]["content"] for r in rows], config.grpo.max_completion_length
        )
    trained, kinds = _trained_rows(config, rows)
    with run.lap("sft", "length check"):  # TRL would cut a longer row's answer away, and drop the row unsaid
        limit = config.sft.max_length - answer_tokens
        check_prompt_length(tokenizer, [r["prompt"] for r in trained], limit, "sft.max_length less the longest answer")
    adapter, peft = trains_adapter(config), None
    with run.lap("sft", "trainer set-up"):
        if adapter:
            model, peft = with_lora(model, config.model, backend)
        guard = FiniteLossGuard()
        # only now: with Unsloth, load_model imports it, and Unsloth replaces trl.SFTConfig/SFTTrainer with its own
        trainer = sft_trainer(
            config,
            model=model,
            args=sft_args(config, run, out),
            train_dataset=_sft_dataset(trained),
            processing_class=tokenizer,
            peft_config=peft,
            callbacks=[JsonlLogger(out / "train_log.jsonl"), guard, *progress_callbacks(), *extra_callbacks],
        )
    with run.lap("sft", "train"):
        runtime = trainer.train().metrics["train_runtime"]
    if guard.bad_step is not None:
        raise NonFiniteLossError(f"SFT loss became non-finite at step {guard.bad_step}; nothing was saved")
    model_dir, adapter_dir = out / "model", out / "adapter"
    with run.lap("sft", "save"):
        save_atomically(trainer, tokenizer, model_dir, merge=adapter, adapter_target=adapter_dir if adapter else None)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    candidate_ce = [h["candidate_ce"] for h in trainer.state.log_history if "candidate_ce" in h]
    tokens = _trained_tokens(trainer)
    imitation = None
    if config.sft.check_episodes and is_main():  # the saved model, as every later stage loads it
        with run.lap("sft", "imitation check"):
            loaded = load_policy_model(model_dir, config.model)
            imitation = imitation_check(config, loaded, config.sft.check_episodes, config.sft.collapse_ratio)
        announce(imitation)
    return run.stage_done(
        "sft",
        started=started,
        params=config.sft.model_dump(),
        inputs={"sft.jsonl": corpus["outputs"]["sft.jsonl"], "base": base},
        outputs={"model": str(model_dir), **({"adapter": str(adapter_dir)} if adapter else {})},
        metrics={
            "backend": backend,
            "precision": resolved_precision(config.model),
            "batching": sft_batching(config),
            "logprob_kernel": logprob_kernel,
            "steps": trainer.state.global_step,
            "answer_tokens_max": answer_tokens,
            "loss_first": losses[0] if losses else None,
            "loss_last": losses[-1] if losses else None,
            "losses": losses,
            **({"candidate_ce_first": candidate_ce[0], "candidate_ce_last": candidate_ce[-1]} if candidate_ce else {}),
            "train_tokens": tokens,
            "rows": len(trained),
            **({"kind_mix": kinds} if kinds else {}),
            "train_runtime_s": round(runtime, 3),
            "tokens_per_s": round(tokens / runtime, 1) if runtime else None,
            "weights_sha256": weights_sha256(model_dir),
            # the merged folder's recipe: `base` with this adapter merged in (lib/merging.py)
            **({"adapter_sha256": weights_sha256(adapter_dir)} if adapter else {}),
            "full_finetune": not adapter,
            "imitation": imitation,
        },
    )
