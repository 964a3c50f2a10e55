"""The training charts of a run (registered in lib/reporting/plots.py's CHARTS): SFT loss, GRPO reward and
zero-spread groups, exploration per step, and GRPO's validation curve."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..reward import reward_key
from .figures import (
    EVAL,
    GRPO_LOG,
    SFT_LOG,
    VALIDATION,
    VALIDATION_REFERENCES,
    NothingToDraw,
    _figure,
    _read,
    _rows,
    rl_mode,
    run_label,
)


def sft_loss(run_dir: Path) -> Figure:
    """SFT training loss per logged step."""
    rows = _rows(run_dir, SFT_LOG, lambda r: "loss" in r, "per-step 'loss' line (fewer steps than logging_steps?)")
    figure, (ax,) = _figure()
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker="o" if len(rows) < 40 else None)
    ax.set(title="SFT loss", xlabel="training step", ylabel="loss")
    return figure


def grpo_reward(run_dir: Path) -> Figure:
    """GRPO mean reward per step, and the share of prompt groups whose rewards were all equal. An AggreVaTe RL stage
    has neither: its chart is the loss on the improver's labels per step, a line per round."""
    if rl_mode(run_dir) == "aggrevate":
        return _aggrevate_loss(run_dir)
    rows = _rows(
        run_dir,
        GRPO_LOG,
        lambda r: "reward" in r and "frac_reward_zero_std" in r,
        "line with 'reward' and 'frac_reward_zero_std'",
    )
    figure, (left, right) = _figure(ncols=2, width=5.5)
    returned = reward_key(rows)  # multi-turn's and soft_target's TRL `reward` is not a return: their own key is
    rows = [r for r in rows if returned in r]
    for ax, key, title, ylabel in (
        (left, returned, "GRPO: mean return of the step's samples", "mean return"),
        (right, "frac_reward_zero_std", "Groups with zero reward spread (no signal)", "share of groups"),
    ):
        ax.plot([r["step"] for r in rows], [r[key] for r in rows], marker="o" if len(rows) < 40 else None)
        ax.set(title=title, xlabel="training step", ylabel=ylabel)
    return figure


def _aggrevate_loss(run_dir: Path) -> Figure:
    rows = _rows(run_dir, GRPO_LOG, lambda r: "loss" in r, "per-step 'loss' line (fewer steps than logging_steps?)")
    figure, (ax,) = _figure()
    for round_ in sorted({r.get("round", 1) for r in rows}):
        kept = [r for r in rows if r.get("round", 1) == round_]
        ax.plot([r["step"] for r in kept], [r["loss"] for r in kept], label=f"round {round_}")
    ax.set(title="AggreVaTe: loss on the improver's labels (no GRPO reward)", xlabel="training step", ylabel="loss")
    ax.legend(fontsize=8)
    return figure


def exploration(run_dir: Path) -> Figure:
    """Per GRPO step. Step mode: how often some sample beat the teacher's own action at its state, by how much the
    best sample beat it, and (sampling over the candidates) the policy's entropy over the candidate set and its
    probability of the best candidate (lib/reward.py, lib/training/rollout.py). Multi-turn mode: the
    length and mean return of the episodes the policy played, and its entropy at the trained turns
    (lib/training/multiturn.py)."""
    if rl_mode(run_dir) == "aggrevate":
        raise NothingToDraw("the RL stage is AggreVaTe (rl.algorithm aggrevate): it samples nothing to explore with")
    panels = [
        ("explore/beats_reference", "Groups where a sample beats the teacher", "share of groups"),
        ("explore/best_minus_reference", "Best sample - teacher's action", "return difference"),
        ("multi_turn/return_mean", "Return of the episodes played", "mean return"),
        ("explore/target_move", "Probability each soft target moves", "total variation"),
        ("multi_turn/episode_len", "Length of the episodes played", "turns"),
        ("explore/candidate_entropy", "Entropy over the candidate set", "nats"),
        ("explore/p_best", "Probability of the best candidate", "probability"),
    ]
    rows = _rows(
        run_dir,
        GRPO_LOG,
        lambda r: any(key in r for key, _, _ in panels),
        "line with 'explore/*' or 'multi_turn/*' metrics",
    )
    panels = [panel for panel in panels if any(panel[0] in r for r in rows)]
    figure, axes = _figure(ncols=len(panels), width=4.5)
    for ax, (key, title, ylabel) in zip(axes, panels):
        kept = [r for r in rows if key in r]
        ax.plot([r["step"] for r in kept], [r[key] for r in kept], marker="o" if len(kept) < 40 else None)
        ax.set(title=title, xlabel="training step", ylabel=ylabel)
        if key == "explore/best_minus_reference":
            ax.axhline(0, color="grey", linewidth=0.8)
    return figure


def validation_curve(run_dir: Path) -> Figure:
    """The RL stage's learning curve (titled with the algorithm that ran): greedy closed-loop return (95% CI) on the
    validation seeds against the step, the SFT start at step 0, the kept (best) step marked, the teacher's and the
    oracle's return on the same seeds, and, once the run is evaluated, the kept adapter's holdout return (its own
    seeds: beside the curve, not on it)."""
    points = sorted(_read(run_dir, VALIDATION), key=lambda p: p["step"])
    if not points:
        raise ValueError(f"{VALIDATION} has no points")
    steps, means = [p["step"] for p in points], [p["mean_return"] for p in points]
    figure, (ax,) = _figure(width=6.5)
    ax.fill_between(steps, *np.array([p["ci95"] for p in points]).T, alpha=0.25, label="95% CI")
    ax.plot(steps, means, marker="o", label="validation return")
    best = max(points, key=lambda p: (p["mean_return"], -p["step"]))
    ax.axhline(points[0]["mean_return"], color="grey", linestyle="--", linewidth=0.8, label="SFT (step 0)")
    ax.scatter([best["step"]], [best["mean_return"]], s=120, facecolors="none", edgecolors="red", label="best")
    references = _optional(run_dir, VALIDATION_REFERENCES)
    for role, color in (("teacher", "tab:orange"), ("oracle", "tab:green")):
        if references and role in references:
            level = references[role]
            ax.axhline(level["mean_return"], color=color, linewidth=1, label=f"{role} ({level['policy']})")
    evaluated = _optional(run_dir, EVAL)
    if evaluated and "grpo" in evaluated["splits"].get("holdout", {}).get("policies", {}):
        final = evaluated["splits"]["holdout"]["policies"]["grpo"]
        low, high = final["ci95"]
        kept = (_optional(run_dir, "grpo/stage.json") or {}).get("metrics", {}).get("kept_step", steps[-1])
        ax.errorbar(
            [kept], [final["mean_return"]], yerr=[[final["mean_return"] - low], [high - final["mean_return"]]],
            fmt="D", color="black", capsize=4, label=f"kept adapter (step {kept}) on holdout ({final['n']} seeds)",
        )  # fmt: skip
    title, xlabel = f"{run_label(run_dir)} validation curve ({points[0]['n']} episodes)", "GRPO step"
    if "round" in points[0]:  # an AggreVaTe stage: one point per policy, the SFT's (round 0) and each round's
        xlabel = "training step (round marked)"
        for p in points:
            ax.annotate(f"round {p['round']}", (p["step"], p["mean_return"]), textcoords="offset points", xytext=(4, 6))
    ax.set(title=title, xlabel=xlabel, ylabel="mean return")
    ax.legend(fontsize=7, loc="best")
    return figure


def _optional(run_dir: Path, name: str) -> dict | None:
    """A file of the run that may not exist yet (evaluation runs after GRPO; older runs lack the levels)."""
    return _read(Path(run_dir), name) if (Path(run_dir) / name).is_file() else None
