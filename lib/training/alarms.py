"""Collapse alarms for GRPO: a run that is falling apart says so, in its log, its stage record and its report.

Two signs, each measured, never guessed:
- **the validation return falls** more than `rl.alarm_drop` below its best so far (grpo/validation.jsonl);
- **the groups stop varying**: over the last `ZERO_STD_WINDOW` logged steps, TRL's `frac_reward_zero_std` (the share
  of groups whose samples all got the same reward, so their advantages are zero) averages above
  `grpo.alarm_zero_std`. With no spread left no update can pull the policy back: the collapse that ended a run
  with every episode finishing at once looked like this.

Each alarm is printed, warned and appended to `grpo/alarms.jsonl`. With `rl.stop_on_alarm` the trainer stops at
the first one; the run then keeps its best validated adapter, as always. Stopping is an alarm, not a cure: the stage
record lists the alarms and whether the run stopped early (`lib/training/grpo.py`), and the report shows them.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from transformers import TrainerCallback

from ..io import append_record, read_records
from .validation import read_curve

ZERO_STD_WINDOW = 10
ALARMS_FILE = "alarms.jsonl"


def validation_drop(points: list[dict], drop: float) -> dict | None:
    """The alarm for the last validation point, when it lies more than `drop` below the best point before it."""
    if len(points) < 2:
        return None
    last, earlier = points[-1], points[:-1]
    best = max(earlier, key=lambda p: p["mean_return"])
    if best["mean_return"] - last["mean_return"] > drop:
        return {
            "step": last["step"],
            "kind": "validation_drop",
            "message": f"validation return {last['mean_return']:.3f} at step {last['step']} is "
            f"{best['mean_return'] - last['mean_return']:.3f} below its best ({best['mean_return']:.3f} at step "
            f"{best['step']}; the alarm is at {drop})",
        }
    return None


def groups_stopped_varying(fractions: list[float], threshold: float, window: int = ZERO_STD_WINDOW) -> bool:
    """Whether the last `window` steps' `frac_reward_zero_std` average above `threshold` (a full window only)."""
    return len(fractions) >= window and sum(fractions[-window:]) / window > threshold


def read_alarms(grpo_dir: Path) -> list[dict]:
    return read_records(Path(grpo_dir) / ALARMS_FILE)


class CollapseAlarm(TrainerCallback):
    """Raises the two alarms above; add it after the validation callback, so that a step's point is on disk."""

    def __init__(self, config, out_dir: Path):
        self.g, self.rl, self.out = config.grpo, config.rl, Path(out_dir)
        self.fractions: list[float] = []
        self.raised = {(a["kind"], a["step"]) for a in read_alarms(self.out)}  # a resumed run keeps its alarms
        self.zero_std_raised = any(kind == "zero_std" for kind, _ in self.raised)

    def _raise(self, alarm: dict, control) -> None:
        if (alarm["kind"], alarm["step"]) in self.raised:
            return
        self.raised.add((alarm["kind"], alarm["step"]))
        append_record(self.out / ALARMS_FILE, alarm)
        print(f"ALARM ({alarm['kind']}, step {alarm['step']}): {alarm['message']}", flush=True)
        warnings.warn(f"GRPO {alarm['kind']} at step {alarm['step']}: {alarm['message']}", stacklevel=2)
        if self.rl.stop_on_alarm:
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "frac_reward_zero_std" in logs:
            self.fractions.append(float(logs["frac_reward_zero_std"]))
            if not self.zero_std_raised and groups_stopped_varying(self.fractions, self.g.alarm_zero_std):
                self.zero_std_raised = True
                mean = sum(self.fractions[-ZERO_STD_WINDOW:]) / ZERO_STD_WINDOW
                self._raise(
                    {
                        "step": state.global_step,
                        "kind": "zero_std",
                        "message": f"{mean:.2f} of the groups had no reward spread over the last {ZERO_STD_WINDOW} "
                        f"steps (the alarm is above {self.g.alarm_zero_std}): nothing is left to learn from",
                    },
                    control,
                )

    def on_step_end(self, args, state, control, **kwargs):
        every = self.rl.validate_every
        if every and state.global_step % every == 0:
            alarm = validation_drop(read_curve(self.out / "validation.jsonl"), self.rl.alarm_drop)
            if alarm is not None and alarm["step"] == state.global_step:
                self._raise(alarm, control)
