"""`python -m lib compare`: the ablation table of forks (`python -m lib fork`), each quickchecked on the same seeds.

Reads each run's quickcheck.json (or quickcheck_<split>.json), manifest.json and grpo/stage.json; writes nothing
(the command writes the table to --out).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..stats import paired_difference


def compare_table(runs: list, split: str = "holdout") -> str:
    """Markdown: for each run (forks of one base, quickchecked on the same seeds) its overrides, GRPO's mean return,
    GRPO - SFT and GRPO - teacher with their paired CIs, the mean frac_reward_zero_std and explore/beats_reference
    over the first quarter, and its GRPO minus the first run's GRPO, paired by seed."""

    def load(run):
        run = Path(run)
        name = "quickcheck.json" if split == "holdout" else f"quickcheck_{split}.json"
        path = run / name
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: run `python -m lib quickcheck --run-dir {run} --episodes N"
                f"{'' if split == 'holdout' else ' --split ' + split}` first"
            )
        quick = json.loads(path.read_text())
        if "returns" not in quick:
            raise ValueError(f"{path} has no per-seed returns (made by an older quickcheck); run it again")
        manifest = json.loads((run / "manifest.json").read_text())
        grpo = json.loads((run / "grpo" / "stage.json").read_text())["metrics"]
        return quick, manifest.get("forked_from", {}).get("overrides", {}), grpo

    def ci(d):
        return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"

    loaded = [load(r) for r in runs]
    reference = {int(k): v for k, v in loaded[0][0]["returns"]["grpo"].items()}
    lines = [
        "| run | change | GRPO | GRPO - SFT | GRPO - teacher | zero-std | beats ref. (1st quarter) "
        "| GRPO - first run's GRPO |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, (quick, overrides, grpo) in zip(runs, loaded):
        returns = {int(k): v for k, v in quick["returns"]["grpo"].items()}
        change = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "(base recipe)"
        versus = "reference" if run == runs[0] else ci(paired_difference(returns, reference))
        lines.append(
            f"| {Path(run).name} | {change} | {quick['policies']['grpo']['mean_return']:.3f} | "
            f"{ci(quick['paired']['grpo-sft'])} | {ci(quick['paired']['grpo-teacher'])} | "
            f"{grpo.get('frac_reward_zero_std_mean', float('nan')):.3f} | "
            f"{grpo.get('explore/beats_reference_first_quarter', float('nan')):.3f} | {versus} |"
        )
    return "\n".join(lines)
