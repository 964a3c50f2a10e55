"""Shared pieces of the run charts (lib/reporting/plots.py, lib/reporting/training_charts.py): the input files
each chart reads, reading them, and seaborn-styled figures and bars."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

MANIFEST = "manifest.json"  # the run's config: its environment and env_args
BASELINES = "baselines/baselines.json"
SFT_LOG = "sft/train_log.jsonl"
GRPO_LOG = "grpo/train_log.jsonl"
VALIDATION = "grpo/validation.jsonl"
VALIDATION_REFERENCES = "grpo/validation_references.json"  # lib/training/validation.py: REFERENCES
EVAL = "evaluate/eval.json"
EPISODES = "evaluate/episodes.jsonl"
ANTI_HACKING = "evaluate/anti_hacking_report.json"
POSTSAVE = "postsave/postsave_inference.json"


class NothingToDraw(Exception):
    """The run chose not to measure what a chart shows (for example `eval.ablations: []`): the chart is left out
    with this reason, and the stage goes on."""


def rl_mode(run_dir: Path) -> str:
    """The run's RL stage, from its manifest (migrated, `lib.config.migrate_config`): aggrevate (rl.algorithm; no
    GRPO: no rewards, groups or samples to chart), else GRPO's `grpo.mode`: step, every_candidate, soft_target or
    multi_turn."""
    from ..config import migrate_config

    config = migrate_config(_read(run_dir, MANIFEST)["config"])
    return "aggrevate" if config["rl"]["algorithm"] == "aggrevate" else config["grpo"].get("mode", "step")


def run_label(run_dir: Path) -> str:
    """The run's RL stage as reports name it, "RL (GRPO)" or "RL (AggreVaTe)" (`lib.config.rl_label`); "RL" for a
    folder without a manifest (a chart drawn from loose files)."""
    from ..config import rl_label

    return rl_label(_read(run_dir, MANIFEST)["config"]) if (Path(run_dir) / MANIFEST).is_file() else "RL"


def shown(key: str, label: str | None) -> str:
    """An eval.json key as a reader reads it: the RL stage's model (`grpo`, a stable data key whatever algorithm
    ran) named by `label`, and a paired difference `a-b` as "a - b" ("grpo-teacher": "RL (AggreVaTe) - teacher");
    the key itself where `label` is None."""
    if label is None:
        return key
    names = {"grpo": label, "sft": "SFT"}
    if "-" in key:
        return " - ".join(names.get(part, part) for part in key.split("-"))
    return label if key == "grpo" else key


def _read(run_dir: Path, relative: str):
    """A JSON file's object, or a JSONL file's list of objects."""
    text = (run_dir / relative).read_text()
    return (
        [json.loads(line) for line in text.splitlines() if line.strip()]
        if relative.endswith(".jsonl")
        else json.loads(text)
    )


def _figure(ncols: int = 1, width: float = 7.0, height: float = 4.5):
    """A seaborn-styled figure kept out of pyplot's registry: nothing to close, and a notebook shows it once."""
    with sns.axes_style("whitegrid"):
        figure = Figure(figsize=(width * ncols, height), layout="constrained")
        return figure, figure.subplots(1, ncols, squeeze=False)[0]


def _grouped_bars(ax, labels: list[str], series: dict[str, list[float]], cis: dict[str, list] | None = None) -> None:
    """One bar per series side by side at each label, with each bar's 95% CI as a black line when given."""
    x, width = np.arange(len(labels)), 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        positions = x + (i - (len(series) - 1) / 2) * width
        bars = ax.bar(positions, values, width, label=name)
        if len(labels) * len(series) <= 24:  # more value labels than that overlap
            ax.bar_label(bars, fmt="%.2f", fontsize=7)
        if cis:
            # vlines, not yerr: a constant sample's mean can sit 1e-17 outside its CI and yerr rejects that.
            lo, hi = np.asarray(cis[name], dtype=float).T
            ax.vlines(positions, lo, hi, color="black", linewidth=1.2)
    ax.set_xticks(x, labels, rotation=40 if len(labels) > 4 else 0, ha="right" if len(labels) > 4 else "center")
    ax.margins(y=0.15)  # headroom for the legend
    if len(series) > 1:
        ax.legend(fontsize=8)


def _rows(run_dir: Path, relative: str, keep: Callable[[dict], bool], wanted: str) -> list[dict]:
    """The lines of a JSONL file that `keep` accepts; a file without any cannot be charted."""
    rows = [r for r in _read(run_dir, relative) if keep(r)]
    if not rows:
        raise ValueError(f"{relative} has no {wanted}")
    return rows


def not_evaluated(report: dict, *splits: str) -> str | None:
    """Why a table or chart of `splits` has nothing to show: those of them the run did not evaluate (`eval.splits`)
    named, or None when it evaluated them all."""
    left_out = [split for split in splits if split not in report["splits"]]
    if not left_out:
        return None
    evaluated = ", ".join(report["splits"]) or "none"
    return f"{' or '.join(left_out)} was not evaluated in this run (eval.splits: {evaluated})"
