"""The checkpoint sweep, read and drawn: `sweep/sweep.json` (written by `python -m lib sweep`, which plays every saved
GRPO checkpoint: lib/evaluation/sweep.py) as a table, and the `sweep` chart.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..evaluation.sweep import SWEEP
from ..runs import read_json_record
from .figures import _figure

__all__ = ["SWEEP", "read_sweep", "sweep_chart", "sweep_table"]


def read_sweep(run_dir: Path | str) -> dict:
    return read_json_record(Path(run_dir) / SWEEP, "the checkpoint sweep")


def sweep_table(run_dir: Path | str):
    """sweep.json as a table: one row per step (0 = SFT), mean return with CI and the paired difference to SFT."""
    import pandas as pd

    report = read_sweep(run_dir)
    return pd.DataFrame(
        [
            {
                "step": p["step"],
                "artifact": p["artifact"]["path"],
                "sha256": p["artifact"]["sha256"][:12],
                "kept": "= grpo/adapter" if p.get("is_grpo_adapter") else "",
                "episodes": p["n"],
                "mean return": round(p["mean_return"], 3),
                "95% CI": "[{:.3f}, {:.3f}]".format(*p["ci95"]),
                "minus SFT (paired)": "{:+.3f} [{:+.3f}, {:+.3f}]".format(
                    p["paired_vs_sft"]["mean"], *p["paired_vs_sft"]["ci95"]
                ),
            }
            for p in report["points"]
        ]
    )


def sweep_chart(run_dir: Path) -> Figure:
    """Closed-loop mean return (95% CI) of SFT (step 0) and every GRPO checkpoint against the GRPO step, on the same
    seeds, with the teacher's return on those seeds and the step the run kept."""
    report = read_sweep(run_dir)
    points = sorted(report["points"], key=lambda p: p["step"])
    if not points:
        raise ValueError(f"{SWEEP} has no points")
    steps, means = [p["step"] for p in points], [p["mean_return"] for p in points]
    lo, hi = np.array([p["ci95"] for p in points], dtype=float).T
    figure, (ax,) = _figure(width=6.5)
    ax.fill_between(steps, lo, hi, alpha=0.25, label="95% CI")
    ax.vlines(steps, lo, hi, color="black", linewidth=1)
    ax.plot(steps, means, marker="o", label="mean return (step 0: SFT)")
    reference = report.get("reference")
    if reference:
        ax.axhline(
            reference["mean_return"],
            color="grey",
            linestyle="--",
            linewidth=0.8,
            label=f"{reference['role']} ({reference['policy']})",
        )
    kept = [p for p in points if p.get("is_grpo_adapter")] or [
        p for p in points if p["step"] == report.get("kept_step")
    ]
    if kept:
        ax.scatter([kept[0]["step"]], [kept[0]["mean_return"]], s=120, facecolors="none", edgecolors="red")
        ax.annotate("kept", (kept[0]["step"], kept[0]["mean_return"]), textcoords="offset points", xytext=(6, 6))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(
        title=f"Checkpoint sweep: {report['split']}, {points[0]['n']} episodes per step, greedy",
        xlabel="GRPO step (0 = SFT)",
        ylabel="mean episode return",
    )
    ax.legend(fontsize=8)
    return figure
