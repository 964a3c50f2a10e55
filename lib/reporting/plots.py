"""Charts of one run: `show(run_dir, name)` in the stage notebooks, `draw_all(run_dir)` in 07_report.

Each chart reads only files earlier stages wrote under `outputs/<run_id>/` and is saved to `charts/<name>.png`.
A chart whose input is missing is not drawn; an input lacking what it needs raises ValueError. No placeholders.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from ..io import atomic_write_bytes
from ..runs import read_config
from .figures import (  # noqa: F401 (the input file names are re-exported: tests and notebooks name them here)
    ANTI_HACKING,
    BASELINES,
    EPISODES,
    EVAL,
    GRPO_LOG,
    MANIFEST,
    POSTSAVE,
    SFT_LOG,
    VALIDATION,
    NothingToDraw,
    _figure,
    _grouped_bars,
    _read,
    _rows,
    not_evaluated,
    run_label,
    shown,
)
from .sweep import SWEEP, sweep_chart
from .training_charts import exploration, grpo_reward, sft_loss, validation_curve


def _holdout_episodes(run_dir: Path) -> list[dict]:
    # Ablation episodes replay holdout seeds under other settings; they are not the evaluated policies.
    return _rows(
        run_dir,
        EPISODES,
        lambda r: r["split"] == "holdout" and "ablation" not in r,
        "holdout episode outside the ablations",
    )


def baseline_bars(run_dir: Path) -> Figure:
    """Mean return (95% CI) of every baseline and trivial policy, one bar per split."""
    reports = _read(run_dir, BASELINES)
    policies = list(reports["holdout"]["policies"])
    figure, (ax,) = _figure(width=11)
    _grouped_bars(
        ax,
        policies,
        {split: [r["policies"][p]["mean_return"] for p in policies] for split, r in reports.items()},
        {split: [r["policies"][p]["ci95"] for p in policies] for split, r in reports.items()},
    )
    episodes = ", ".join(f"{split} {r['episodes']}" for split, r in reports.items())
    ax.set(
        title=f"Baselines: mean episode return, 95% CI (episodes: {episodes})",
        xlabel="policy",
        ylabel="mean episode return",
    )
    return figure


def reward_components(run_dir: Path) -> Figure:
    """Each weighted reward component's mean contribution per policy on holdout, stacked, with the mean return.

    Averaged over every episode from episodes.jsonl: an episode lost to invalid output has no components and
    earns 0, which the per-component means in eval.json (taken only over episodes that have the component) miss."""
    records = _holdout_episodes(run_dir)
    config = read_config(run_dir)  # the run's environment, built with its env_args
    env, weights = config.env, config.spec.reward_weights
    unknown = {c for r in records for c in r["components"]} - set(weights) - {"invalid_limit"}
    if unknown:
        raise ValueError(f"{EPISODES} has components with no weight in {env}'s reward weights: {sorted(unknown)}")
    policies = list(dict.fromkeys(r["policy"] for r in records))
    by_policy = {p: [r for r in records if r["policy"] == p] for p in policies}
    figure, (ax,) = _figure(width=11)
    x, up, down = np.arange(len(policies)), np.zeros(len(policies)), np.zeros(len(policies))
    for component, weight in weights.items():
        values = np.array(
            [weight * np.mean([r["components"].get(component, 0.0) for r in by_policy[p]]) for p in policies]
        )
        ax.bar(x, values, 0.7, bottom=np.where(values >= 0, up, down), label=f"{component} (x{weight:g})")
        up, down = up + values.clip(min=0), down + values.clip(max=0)
    ax.scatter(
        x,
        [np.mean([r["return"] for r in by_policy[p]]) for p in policies],
        marker="D",
        color="black",
        zorder=3,
        clip_on=False,
        label="mean return (clamped to [0, 1], after invalid-step penalties)",
    )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(x, policies, rotation=40, ha="right")
    ax.set(
        title="Holdout: weight x mean reward component, per policy",
        xlabel="policy",
        ylabel="contribution to episode return",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return figure


def per_seed_deltas(run_dir: Path) -> Figure:
    """Holdout return differences paired by seed for each pair eval.json compares, with its paired mean and CI."""
    report = _read(run_dir, EVAL)
    paired, role = report["splits"]["holdout"]["paired"], report.get("roles", {})
    if not paired:
        raise ValueError(f"{EVAL} has no paired holdout comparisons")
    returns: dict[str, dict[int, float]] = {}
    for r in _holdout_episodes(run_dir):
        returns.setdefault(r["policy"], {})[r["seed"]] = r["return"]
    order, label = list(paired), run_label(run_dir)
    rows = [
        (pair, returns[a][seed] - returns[b][seed])
        for pair in order
        for a, b in [(role.get(x, x) for x in pair.split("-"))]
        for seed in sorted(set(returns[a]) & set(returns[b]))
    ]
    figure, (ax,) = _figure()
    for plot, style in (
        (sns.boxplot, {"color": "0.9", "showfliers": False}),
        (sns.stripplot, {"alpha": 0.6, "jitter": 0.2}),
    ):
        plot(
            x=[shown(pair, label) for pair, _ in rows],
            y=[delta for _, delta in rows],
            order=[shown(pair, label) for pair in order],
            ax=ax,
            **style,
        )
    ax.vlines(range(len(order)), *np.array([paired[p]["ci95"] for p in order]).T, color="black", linewidth=2.5)
    ax.scatter(
        range(len(order)),
        [paired[p]["mean"] for p in order],
        marker="D",
        color="black",
        zorder=3,
        label="paired mean, 95% CI (eval.json)",
    )
    ax.axhline(0, color="black", linewidth=0.8, linestyle="--")
    ax.set(title="Holdout: per-seed return differences", xlabel="comparison (a - b)", ylabel="return difference")
    ax.legend()
    return figure


def train_holdout_gap(run_dir: Path) -> Figure:
    """Mean return (95% CI) of each model on train seeds against holdout seeds."""
    report = _read(run_dir, EVAL)
    if reason := not_evaluated(report, "train", "holdout"):
        raise NothingToDraw(reason)
    models, splits = ("untrained", "sft", "grpo"), {s: report["splits"][s]["policies"] for s in ("train", "holdout")}
    figure, (ax,) = _figure()
    _grouped_bars(
        ax,
        [f"{shown(m, run_label(run_dir))}\n(gap {report['train_holdout_gap'][m]:+.3f})" for m in models],
        {s: [policies[m]["mean_return"] for m in models] for s, policies in splits.items()},
        {s: [policies[m]["ci95"] for m in models] for s, policies in splits.items()},
    )
    ax.set(title="Train vs holdout mean return (gap = train - holdout)", xlabel="model", ylabel="mean episode return")
    return figure


def anti_cheat(run_dir: Path) -> Figure:
    """Each attack's mean score against the mean worst legal score, and GRPO's training rule-hit rates."""
    report = _read(run_dir, ANTI_HACKING)
    attacks, hits = report["attacks"], report.get("training_rule_hits", {})
    tested = {name: a for name, a in attacks.items() if a.get("states")}
    if not tested:
        raise ValueError(f"{ANTI_HACKING} has no attack scored at any state")
    skipped = f"\ntraining rule hits skipped: {hits['skipped']}" if "skipped" in hits else ""
    one_panel = bool(skipped) or not hits
    figure, axes = _figure(ncols=1 if one_panel else 2, width=12 if one_panel else 9, height=5)
    _grouped_bars(
        axes[0],
        [f"{name} [{a['kind']}, {'pass' if a['passed'] else 'FAIL'}]" for name, a in tested.items()],
        {
            "attack: mean score": [a["mean_score"] for a in tested.values()],
            "worst legal action: mean score": [a["mean_worst_legal"] for a in tested.values()],
        },
    )
    untested = ", ".join(sorted(set(attacks) - set(tested)))
    axes[0].set(
        title=f"Anti-hacking attacks (all passed: {report['all_attacks_passed']})"
        + (f"; not tested (no applicable state): {untested}" if untested else "")
        + skipped,
        xlabel="attack",
        ylabel="score (GRPO reward)",
    )
    if not one_panel:
        axes[1].bar(list(hits), list(hits.values()))
        axes[1].set(
            title="GRPO training: anti-cheat rule-hit rates",
            xlabel="rule",
            ylabel="mean rate per step",
            ylim=(0, max(1.0, *hits.values())),
        )
    return figure


def postsave(run_dir: Path) -> Figure:
    """Validity rate and per-action latency of the saved model reloaded from disk."""
    report = _read(run_dir, POSTSAVE)
    figure, (left, right) = _figure(ncols=2, width=4)
    left.bar_label(left.bar(["valid actions"], [report["validity_rate"]], width=0.5), fmt="%.3f")
    left.set(
        title=f"Validity rate ({report['episodes']} episodes)",
        xlabel="saved model",
        ylabel="share of actions",
        ylim=(0, 1),
    )
    right.bar_label(
        right.bar(["p50", "p95"], [report["latency_s_p50"], report["latency_s_p95"]], width=0.5, color="tab:orange"),
        fmt="%.3f",
    )
    right.set(
        title=f"Latency per action ({report.get('batch_size', 1)} episodes at a time)",
        xlabel="percentile",
        ylabel="seconds",
    )
    figure.suptitle(f"Post-save inference (mean return {report['mean_return']:.3f})")
    return figure


def ablations(run_dir: Path) -> Figure:
    """Each ablation's holdout mean return (95% CI), and its paired difference with what it is compared with."""
    recorded = _read(run_dir, EVAL)["ablations"]
    if not recorded:
        raise NothingToDraw("the run measured no ablations (eval.ablations is empty)")
    entries = {name: a for name, a in recorded.items() if a["mean_return"] is not None}  # measured ones only
    missing = sorted(set(recorded) - set(entries))  # e.g. no_sft when its model was not trained in this run
    if not entries:
        raise ValueError(f"{EVAL} records no measured ablations" + (f" (not measured: {missing})" if missing else ""))
    compared = {name: a for name, a in entries.items() if "paired_vs_compared" in a}
    figure, axes = _figure(ncols=2 if compared else 1, width=5.5)
    _grouped_bars(
        axes[0],
        [f"{name}\n({a['policy']}, n={a['n']})" for name, a in entries.items()],
        {"mean return": [a["mean_return"] for a in entries.values()]},
        {"mean return": [a["ci95"] for a in entries.values()]},
    )
    title = "Ablations: holdout mean return, 95% CI" + (
        f"\n(not measured in this run: {', '.join(missing)})" if missing else ""
    )
    axes[0].set(title=title, xlabel="ablation", ylabel="mean episode return")
    if compared:
        diffs, y = [a["paired_vs_compared"] for a in compared.values()], np.arange(len(compared))
        axes[1].hlines(y, *np.array([d["ci95"] for d in diffs]).T, color="black", linewidth=2)
        axes[1].scatter([d["mean"] for d in diffs], y, marker="D", color="black", zorder=3)
        axes[1].axvline(0, color="black", linewidth=0.8, linestyle="--")
        axes[1].set_yticks(y, [f"{name} - {a['compared_with']}" for name, a in compared.items()])
        axes[1].set(
            title="Paired by seed: ablation - compared (95% CI)", xlabel="return difference", ylabel="comparison"
        )
    return figure


CHARTS: dict[str, tuple[Callable[[Path], Figure], tuple[str, ...]]] = {
    "baseline_bars": (baseline_bars, (BASELINES,)),
    "sft_loss": (sft_loss, (SFT_LOG,)),
    "grpo_reward": (grpo_reward, (GRPO_LOG, MANIFEST)),
    "validation_curve": (validation_curve, (VALIDATION,)),
    "exploration": (exploration, (GRPO_LOG, MANIFEST)),
    "reward_components": (reward_components, (MANIFEST, EPISODES)),
    "per_seed_deltas": (per_seed_deltas, (EPISODES, EVAL)),
    "train_holdout_gap": (train_holdout_gap, (EVAL,)),
    "anti_cheat": (anti_cheat, (ANTI_HACKING,)),
    "postsave": (postsave, (POSTSAVE,)),
    "ablations": (ablations, (EVAL,)),
    "sweep": (sweep_chart, (SWEEP,)),  # only after `python -m lib sweep` (lib/evaluation/sweep.py)
}
OPTIONAL_CHARTS = ("sweep",)  # drawn only when a command run after the stages wrote their input


@dataclass
class Chart:
    """One chart of a run: its figure and saved PNG, or the input files whose absence kept it from being drawn."""

    name: str
    figure: Figure | None
    missing: list[str]
    path: Path | None
    skipped: str | None = None  # why a chart with all its inputs has nothing to draw (NothingToDraw)

    @property
    def message(self) -> str:
        state = (
            f"not drawn: missing {', '.join(self.missing)}"
            if self.missing
            else f"not drawn: {self.skipped}"
            if self.skipped
            else f"saved to {self.path}"
            if self.path
            else "drawn"
        )
        return f"chart {self.name!r} {state}"


def draw(run_dir, name: str, save: bool = True) -> Chart:
    """Draw one chart if every input file exists, and save it atomically to `charts/<name>.png`."""
    if name not in CHARTS:
        raise ValueError(f"unknown chart {name!r}; charts: {', '.join(CHARTS)}")
    run_dir = Path(run_dir)
    function, inputs = CHARTS[name]
    missing = [relative for relative in inputs if not (run_dir / relative).is_file()]
    if missing:
        return Chart(name, None, missing, None)
    try:
        figure = function(run_dir)
    except NothingToDraw as reason:
        stale = run_dir / "charts" / f"{name}.png"
        if save and stale.is_file():
            stale.unlink()  # a chart drawn before (a fork's base, say) would show what this run did not measure
        return Chart(name, None, [], None, skipped=str(reason))
    except (KeyError, IndexError, TypeError) as error:
        # A file from a broken or older stage: name the chart and its inputs, not only the missing key.
        raise ValueError(f"chart {name!r}: {', '.join(inputs)} lack what it needs ({error!r})") from error
    path = None
    if save:
        figure.savefig(buffer := io.BytesIO(), format="png", dpi=110)
        path = run_dir / "charts" / f"{name}.png"
        atomic_write_bytes(path, buffer.getvalue())
    return Chart(name, figure, [], path)


def show(run_dir, name: str):
    """For a notebook cell: draw and save one chart and return the saved PNG for display (exactly the file the
    report links), or print why it was not drawn and return None."""
    from IPython.display import Image

    chart = draw(run_dir, name)
    if chart.figure is None:
        print(chart.message)
        return None
    return Image(data=chart.path.read_bytes(), format="png")


def draw_all(run_dir, names=None, save: bool = True) -> list[Chart]:
    """Every chart (or those named), in CHARTS order; charts with missing inputs come back undrawn."""
    return [draw(run_dir, name, save) for name in (names or CHARTS)]
