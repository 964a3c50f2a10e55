"""The RL stage's learning curve: GRPO's policy every `rl.validate_every` steps (and AggreVaTe's, the SFT policy's
and each round's) plays greedy closed-loop episodes on a fixed validation seed set, and GRPO keeps the best
checkpoint (best-of-k validation). `LearningCurve` is the curve's one writer; `ValidationCallback` drives it from
GRPO's trainer, lib/training/aggrevate.py from its rounds.

Validation seeds are `train`-split seeds from their own block (lib/training/labelling.py), so they are disjoint
from the holdout splits by construction and from every corpus seed. Each point (the step, mean return with its
95% CI, invalid rate) is appended to `grpo/validation.jsonl`; the best adapter so far is saved atomically to
`grpo/adapter_best/`. Used by the grpo stage (lib/training/grpo.py); notebook 04_grpo and the report chart it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..io import append_record, atomic_write_json, read_records
from .labelling import validation_seeds

REFERENCES = "validation_references.json"  # the teacher's and the oracle's return on the validation seeds


def read_curve(path: Path) -> list[dict]:
    """The validation points of a run, in step order (`grpo/validation.jsonl`)."""
    return sorted(read_records(path), key=lambda p: p["step"])


def best_point(points: list[dict]) -> dict | None:
    """The point with the highest mean return; the earliest of equals (fewer steps away from SFT)."""
    return max(points, key=lambda p: (p["mean_return"], -p["step"]), default=None)


def validation_point(config, model, tokenizer, step: int, **extra) -> dict:
    """`model` (eval mode while it plays) on the validation seeds, greedy and closed loop: the curve's point at
    `step` (its mean return with a 95% CI, invalid rate, and `extra`)."""
    from ..evaluation.closed_loop import run_model_episodes, summarize

    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            episodes, actions = run_model_episodes(
                config,
                (model, tokenizer, {"policy": "grpo", "step": step}),
                validation_seeds(config.rl.validation_episodes),
                "train",
                desc=f"validation at step {step}",  # a lap of minutes on a CPU: show it
            )
    finally:
        model.train(was_training)
    summary = summarize(episodes, actions, resamples=1000)
    return {"step": step, **extra, **{k: summary[k] for k in ("n", "mean_return", "ci95", "invalid_rate")}}


def save_adapter_best(model, tokenizer, out: Path) -> None:
    """`model`'s adapter as `out`/adapter_best, replaced atomically."""
    target = Path(out) / "adapter_best"
    tmp = target.with_name(".adapter_best.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def write_references(config, out: Path) -> None:
    """The teacher's and the oracle's mean return on the validation seeds (scripted, milliseconds): the levels the
    curve is drawn against (`grpo/validation_references.json`)."""
    from ..evaluation.closed_loop import summarize
    from ..evaluation.scripted import run_policy_episodes

    spec, seeds = config.spec, validation_seeds(config.rl.validation_episodes)
    levels = {}
    for role in ("teacher", "oracle"):
        name = getattr(spec, role)
        summary = summarize(*run_policy_episodes(spec, name, seeds, "train"), resamples=1000)
        levels[role] = {"policy": name, "mean_return": summary["mean_return"], "ci95": summary["ci95"]}
    atomic_write_json(Path(out) / REFERENCES, {"split": "train", "n": len(seeds), **levels})


class LearningCurve:
    """The RL stage's learning curve, `grpo/validation.jsonl`: its one writer, whichever algorithm trains. A curve
    already on disk (a resumed run, a continued fork) goes on from its points."""

    def __init__(self, config, out_dir: Path):
        self.config, self.out = config, Path(out_dir)
        self.path = self.out / "validation.jsonl"
        points = read_curve(self.path) if self.path.exists() else []
        self.best: dict | None = best_point(points)
        self.done_steps: set[int] = {p["step"] for p in points}

    def references(self) -> None:
        """The levels the curve is drawn against (`write_references`)."""
        write_references(self.config, self.out)

    def add(self, model, tokenizer, step: int, **extra) -> dict | None:
        """The policy's point at `step` (`validation_point`, with `extra`), appended and returned; None where the
        curve already has that step."""
        if step in self.done_steps:
            return None
        point = validation_point(self.config, model, tokenizer, step, **extra)
        append_record(self.path, point)
        self.done_steps.add(step)
        if self.best is None or point["mean_return"] > self.best["mean_return"]:
            self.best = point
        return point

    def summary(self) -> dict:
        """The best point and how far the last fell short of it: the stable bar's reading."""
        points = read_curve(self.path)
        best = best_point(points)
        return {
            "validation_best_step": best["step"],
            "validation_best": best["mean_return"],
            "validation_last_minus_best": round(points[-1]["mean_return"] - best["mean_return"], 4),
        }


class ValidationCallback(TrainerCallback):
    """GRPO's curve: plays the validation episodes at step 0 (the SFT policy), every `every` steps and at the last
    step, with the model the trainer is training (the callback's `model`); saves each new best's adapter."""

    def __init__(self, config, out_dir: Path, tokenizer):
        self.curve, self.tokenizer = LearningCurve(config, out_dir), tokenizer
        self.every = config.rl.validate_every

    @property
    def best(self) -> dict | None:
        return self.curve.best

    def _validate(self, model, step: int) -> None:
        best = self.curve.best
        point = self.curve.add(model, self.tokenizer, step)
        if point is None:
            return
        if self.curve.best is not best:  # a new best
            save_adapter_best(model, self.tokenizer, self.curve.out)
        print(
            f"validation step {step}: {point['mean_return']:.3f} (best {self.best['mean_return']:.3f} at "
            f"step {self.best['step']})"
        )

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.curve.references()
        self._validate(model, state.global_step)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.every == 0:
            self._validate(model, state.global_step)

    def on_train_end(self, args, state, control, model=None, **kwargs):
        self._validate(model, state.global_step)
