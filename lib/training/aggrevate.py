"""The RL stage as AggreVaTe (`rl.algorithm: aggrevate`): the improver's labels at the policy's own states.

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

`aggrevate.rounds` > 1 iterates (DAgger's loop): round k's policy, the SFT model with round k-1's adapter, plays as many
fresh episodes on the next seeds of the block, the improver labels the states it reached, and a fresh adapter on the
SFT model is fitted to every round's rows so far, as DAgger and AggreVaTe aggregate them (Ross et al. 2011; Ross and
Bagnell 2014). Round k trains k rounds' rows, so its fit costs k times round 1's. One round labels only states the
SFT policy reaches; a state that follows an action the teacher never takes (a substitution, say) is first reached,
and labelled, in round 2. (Until 2026-12-06 round k trained round k-1's adapter further on its own rows alone: two
rounds lost -0.152 [-0.208, -0.097] against one, docs/RESULTS.md of 2026-11-29.)

With `rl.validate_every` > 0 the SFT policy and each round's policy play the validation seeds (greedy, closed loop,
lib/training/validation.py), so the stage has a learning curve over its rounds in grpo/validation.jsonl, its points
at the cumulative training step, each with its `round` (0: the SFT). The last round's adapter is kept (`rl.keep:
last`): a further round trains it on.
"""

from __future__ import annotations

import json
from pathlib import Path

from datasets import Dataset

from ..config import rl_stage_params
from ..episodes import Improver
from ..inference import load_policy_model
from ..io import atomic_write_text, read_records
from ..models import backend_for, load_model, weights_sha256, with_lora
from ..runs import Run, seed_everything
from .harness import (
    FiniteLossGuard,
    JsonlLogger,
    NonFiniteLossError,
    check_prompt_length,
    progress_callbacks,
    save_atomically,
    sft_args,
    sft_trainer,
)
from .labelling import AGGREVATE_SEED_OFFSET, block_seeds, labelled_rows
from .validation import LearningCurve


def round_seeds(config, round_: int) -> range:
    """The train seeds round `round_` (1, 2, ...) plays: corpus.sft_episodes of them, each round its own."""
    episodes = config.corpus.sft_episodes
    return block_seeds(episodes, config.corpus.seed_offset + (round_ - 1) * episodes, AGGREVATE_SEED_OFFSET)


def train_aggrevate(config, run: Run, *, base_model: str, stage: str = "grpo") -> dict:
    """`aggrevate.rounds` AggreVaTe rounds on top of `base_model` (the SFT model), recorded as `stage` with its
    adapter in `stage`/adapter, as train_grpo records GRPO."""
    started = run.begin(stage)
    seed_everything(config.seed, config.deterministic)
    rounds_asked, out = config.aggrevate.rounds, run.stage_dir(stage)
    rounds, rows, losses = done_rounds(config, run, stage, base_model)
    logged = (out / "train_log.jsonl").read_text() if rounds else ""
    logger, guard = JsonlLogger(out / "train_log.jsonl"), FiniteLossGuard()
    if logged:  # the done rounds' records, in a file of this run's own (a fork's is a copy of its base's)
        atomic_write_text(out / "train_log.jsonl", logged)
    resumed = {"round": len(rounds), "adapter_sha256": rounds[-1]["adapter_sha256"]} if rounds else None
    run.log(f"{stage}_start", base_model=base_model, mode="aggrevate", rounds=rounds_asked, resumed_from=resumed)
    curve = None
    if config.rl.validate_every:
        curve = LearningCurve(config, out)
        curve.references()
    for round_ in range(len(rounds) + 1, rounds_asked + 1):
        seeds, labelled, agree = _play(config, run, stage, base_model, round_, rounds, curve)
        rows += [{**r, "round": round_} for r in labelled]
        atomic_write_text(out / "rows.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        logger.tag(round=round_)
        done, fitted, result = _train_round(
            config, run, stage, base_model, round_, seeds, labelled, rows, agree, guard, logger
        )
        losses += fitted
        rounds.append(done)
    kept = {"kept_step": sum(r["steps"] for r in rounds)}
    if curve is not None:
        with run.lap(stage, "validation"):
            _validate(
                curve, load_policy_model(base_model, config.model, out / "adapter"), kept["kept_step"], len(rounds)
            )
        kept.update(curve.summary())
    return run.stage_done(
        stage,
        started=started,
        params=rl_stage_params(config),
        inputs={"base_model": base_model, "seeds": [rounds[0]["seeds"][0], rounds[-1]["seeds"][1]]},
        outputs={"adapter": str(out / "adapter"), "base_model": base_model, "rows": str(out / "rows.jsonl")},
        metrics={
            "backend": backend_for(config.model),
            **_stage_metrics(config, rounds, rows, losses, result["train_loss"]),
            **kept,
            "resumed_from": resumed,
        },
    )


def _validate(curve: LearningCurve, loaded, step: int, round_: int) -> None:
    """The curve's point of the policy in `loaded` (the SFT's, or a round's) at the cumulative training step."""
    model, tokenizer, _ = loaded
    point = curve.add(model, tokenizer, step, round=round_)
    if point is not None:
        print(f"validation after round {round_} (step {step}): {point['mean_return']:.3f}")


def _play(config, run: Run, stage: str, base_model: str, round_: int, rounds: list[dict], curve) -> tuple:
    """Round `round_`'s policy (the SFT model with the previous round's adapter) on the curve, then playing its own
    episodes, the improver labelling every state it reached. Returns (its seeds, the labelled rows, the share of
    states where the policy already took the improver's answer)."""
    seeds = round_seeds(config, round_)
    previous = run.dir / stage / "adapter" if round_ > 1 else None
    policy = load_policy_model(base_model, config.model, previous)
    if curve is not None:  # the policy this round plays with: the SFT's, or the previous round's
        with run.lap(stage, "validation"):
            _validate(curve, policy, sum(r["steps"] for r in rounds), round_ - 1)
    with run.lap(stage, "policy's episodes, improver's labels"):
        labelled, agree = labelled_rows(config, policy, seeds, Improver.name, Improver.name)
        del policy
    if not labelled:
        raise ValueError(f"rl.algorithm aggrevate: the policy's {len(seeds)} episodes reached no state to label")
    changed = sum(r["completion"][-1]["content"] != r["teacher"] for r in labelled)
    at_labels = policy_at_labels(labelled)
    print(
        f"aggrevate round {round_}/{config.aggrevate.rounds}: {len(labelled)} states of the policy's own "
        f"{len(seeds)} episodes; the improver keeps its action at {agree:.3f} of them and differs from the teacher "
        f"at {changed}; the policy's mean probability of the teacher's answer {at_labels['policy_p_teacher']}, of "
        f"the improver's where they differ {at_labels['policy_p_label_differs']}"
    )
    return seeds, labelled, agree


def _train_round(config, run: Run, stage, base_model, round_, seeds, labelled, rows, agree, guard, logger) -> tuple:
    """Round `round_`'s fit (`_fit`): a fresh adapter on the SFT model fitted to `rows`, every round's labels so far
    (`labelled` are this round's), saved as the stage's adapter. Returns (the round's record, its logged losses, the
    trainer's train metrics)."""
    out = run.dir / stage
    adapter_dir = out / "adapter"
    trainer, result = _fit(config, run, out, stage, base_model, rows, [logger, guard])
    if guard.bad_step is not None:
        raise NonFiniteLossError(
            f"AggreVaTe loss became non-finite at round {round_}, step {guard.bad_step}; nothing was saved"
        )
    with run.lap(stage, "save"):
        save_atomically(trainer, trainer.processing_class, adapter_dir, merge=False)
    fitted = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    changed = sum(r["completion"][-1]["content"] != r["teacher"] for r in labelled)
    record = {
        "round": round_,
        "seeds": [seeds.start, seeds.stop],
        "rows": len(labelled),
        "trained_rows": len(rows),  # every round's rows so far
        "policy_agrees_with_improver": agree,
        "improver_differs_from_teacher": round(changed / len(labelled), 4),
        "frac_states_zero_spread": zero_spread(labelled),
        **policy_at_labels(labelled),
        "steps": trainer.state.global_step,
        "loss_first": fitted[0] if fitted else None,
        "loss_last": fitted[-1] if fitted else None,
        "train_runtime_s": round(result["train_runtime"], 3),
        "tokens": int(trainer.state.num_input_tokens_seen),
        # the next round's policy plays with this adapter and trains it further
        "adapter_sha256": weights_sha256(adapter_dir),
    }
    return record, fitted, result


def _stage_metrics(config, rounds: list[dict], rows: list[dict], losses: list[float], train_loss) -> dict:
    """The stage record's figures over all its rounds (each round's own: `rounds`). GRPO's reward and alarm fields
    hold None, [] and False: AggreVaTe draws no groups and raises no alarm."""
    runtime = sum(r["train_runtime_s"] for r in rounds)
    changed = sum(r["completion"][-1]["content"] != r["teacher"] for r in rows)
    agree = sum(r["policy_agrees_with_improver"] * r["rows"] for r in rounds) / len(rows)
    return {
        "mode": "aggrevate",  # the record's name for the algorithm (GRPO's records: grpo.mode)
        "label_source": "improver",
        "rounds": rounds,
        "episodes": config.corpus.sft_episodes * config.aggrevate.rounds,
        "rows": len(rows),
        "policy_agrees_with_improver": round(agree, 4),
        "improver_differs_from_teacher": round(changed / len(rows), 4),
        "frac_states_zero_spread": zero_spread(rows),
        # GRPO's `explore/p_reference` at the stage's start: the SFT policy's probability of the teacher's answer
        # at the states it reached in round 1 (None for a round recorded before it was)
        "p_reference_start": rounds[0].get("policy_p_teacher"),
        "steps": sum(r["steps"] for r in rounds),
        "train_loss": train_loss,  # the last round's mean over its steps (logged ones: losses)
        "losses": losses,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "train_runtime_s": round(runtime, 3),
        "tokens_per_s": round(sum(r["tokens"] for r in rounds) / runtime, 1) if runtime else None,
        "reward_first": None,
        "reward_last": None,
        "reward_mean": None,
        "frac_reward_zero_std_mean": None,
        "adapter_sha256": rounds[-1]["adapter_sha256"],
        "alarms": [],
        "stopped_early": False,
    }


def zero_spread(rows: list[dict]) -> float | None:
    """The share of labelled states where every candidate's return was the same: the label carries no signal there
    (AggreVaTe's counterpart of GRPO's frac_reward_zero_std). None for rows labelled before it was recorded."""
    spreads = [r["label_spread"] for r in rows if "label_spread" in r]
    return round(sum(s <= 1e-9 for s in spreads) / len(spreads), 4) if spreads else None


def policy_at_labels(rows: list[dict]) -> dict:
    """How the playing policy stood toward the labels at its own states (lib/training/labelling.py: `labelled_rows`):
    its mean probability of the teacher's answer (`policy_p_teacher`), of the improver's label
    (`policy_p_label`), and of the label where the improver differs from the teacher (`policy_p_label_differs`:
    what a GRPO sample would have had to find there). None where the policy's distribution was not recorded."""

    def mean(key: str, where: list[dict]) -> float | None:
        values = [r[key] for r in where if r.get(key) is not None]
        return round(sum(values) / len(values), 4) if values else None

    differs = [r for r in rows if r["completion"][-1]["content"] != r["teacher"]]
    return {
        "policy_p_teacher": mean("p_teacher", rows),
        "policy_p_label": mean("p_label", rows),
        "policy_p_label_differs": mean("p_label", differs),
    }


def done_rounds(config, run: Run, stage: str, base_model: str) -> tuple[list[dict], list[dict], list[float]]:
    """The rounds the stage folder already holds, to go on from: (their records, their rows, their logged losses).
    A fork that only raises aggrevate.rounds shares its base's RL stage (lib/pipeline/fork.py), and its rounds are kept
    when the record is a finished AggreVaTe stage on the same base model, its adapter on disk is the one it recorded,
    its rounds played the seeds this config gives them, and it has fewer rounds than asked. Otherwise nothing: the
    stage starts from round 1, as a re-run of a finished stage always has."""
    path = run.dir / stage / "stage.json"
    if not path.is_file():
        return [], [], []
    record = run.read_stage(stage)
    m = record.get("metrics", {})
    if record.get("status") != "ok" or m.get("mode") != "aggrevate":
        return [], [], []
    rounds = m.get("rounds") or [_legacy_round(record)]  # a record from before rounds had one round
    adapter = Path(record["outputs"]["adapter"])
    if len(rounds) >= config.aggrevate.rounds or record["outputs"]["base_model"] != base_model:
        return [], [], []
    if not adapter.is_dir() or weights_sha256(adapter) != rounds[-1]["adapter_sha256"]:
        raise ValueError(
            f"{path} records {len(rounds)} AggreVaTe round(s) ending in adapter {rounds[-1]['adapter_sha256'][:12]}, "
            f"but {adapter} is not that adapter: re-run the stage from round 1 on a fresh fork"
        )
    for done in rounds:
        if done["seeds"] != [round_seeds(config, done["round"]).start, round_seeds(config, done["round"]).stop]:
            raise ValueError(
                f"{path}: round {done['round']} played seeds {done['seeds']}, not the ones this config gives it "
                f"({round_seeds(config, done['round'])}); its rounds cannot be continued"
            )
    rows = [{"round": 1, **r} for r in read_records(record["outputs"]["rows"])]
    return rounds, rows, list(m.get("losses") or [])


def _legacy_round(record: dict) -> dict:
    m = record["metrics"]
    keys = ("rows", "policy_agrees_with_improver", "improver_differs_from_teacher", "steps", "loss_first", "loss_last")
    return {
        "round": 1,
        "seeds": record["inputs"]["seeds"],
        **{k: m[k] for k in keys},
        "trained_rows": m["rows"],  # one round: its own rows
        "frac_states_zero_spread": m.get("frac_states_zero_spread"),
        "train_runtime_s": m["train_runtime_s"],
        "tokens": round((m["tokens_per_s"] or 0) * m["train_runtime_s"]),
        "adapter_sha256": m["adapter_sha256"],
    }


def _fit(config, run: Run, out, stage: str, base_model: str, rows: list[dict], callbacks):
    """TRL's SFTTrainer on `rows` with the sft section's settings: a fresh adapter on the SFT model. Returns (trainer,
    its train metrics)."""
    with run.lap(stage, "model load"):
        model, tokenizer, backend = load_model(base_model, config.model)
        model, peft = with_lora(model, config.model, backend)
    limit = config.sft.max_length - config.grpo.max_completion_length  # TRL would cut a longer row's answer away
    check_prompt_length(tokenizer, [r["prompt"] for r in rows], limit, "sft.max_length less grpo.max_completion_length")
    trainer = sft_trainer(
        config,
        model=model,
        args=sft_args(config, run, out, stage),
        train_dataset=Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows]),
        processing_class=tokenizer,
        peft_config=peft,
        callbacks=[*callbacks, *progress_callbacks()],
    )
    with run.lap(stage, "train"):
        result = trainer.train().metrics
    return trainer, result
