"""`python -m lib compare`: the ablation table of forks (`python -m lib fork`), each quickchecked on the same seeds;
and, with `--pairs`, the table of run pairs on the same corpus, SFT and seeds (e.g. step mode against multi-turn).

Reads each run's quickcheck.json (or quickcheck_<split>.json), manifest.json and grpo/stage.json, or for pairs its
evaluate/episodes.jsonl and gate.json; writes nothing (the command writes the table to --out).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..config import rl_label
from ..runs import quickcheck_path, read_json_record
from ..stats import paired_difference


def compare_table(runs: list, split: str = "holdout") -> str:
    """Markdown: for each run (forks of one base, quickchecked on the same seeds) its overrides, its RL stage (the
    algorithm that ran, `lib.config.rl_label`), the RL stage's mean return, RL - SFT and RL - teacher with their
    paired CIs, GRPO's mean frac_reward_zero_std and explore/beats_reference over the first quarter (n/a for
    AggreVaTe), and its RL model minus the first run's, paired by seed."""

    def load(run):
        run = Path(run)
        path = quickcheck_path(run, split)
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
        return quick, manifest.get("forked_from", {}).get("overrides", {}), grpo, rl_label(manifest.get("config", {}))

    def ci(d):
        return f"{d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]"

    loaded = [load(r) for r in runs]
    reference = {int(k): v for k, v in loaded[0][0]["returns"]["grpo"].items()}
    lines = [
        "| run | change | RL stage | RL | RL - SFT | RL - teacher | zero-std | beats ref. (1st quarter) "
        "| RL - first run's RL |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run, (quick, overrides, grpo, label) in zip(runs, loaded):
        returns = {int(k): v for k, v in quick["returns"]["grpo"].items()}
        change = ", ".join(f"{k}={v}" for k, v in overrides.items()) or "(base recipe)"
        versus = "reference" if run == runs[0] else ci(paired_difference(returns, reference))
        lines.append(
            f"| {Path(run).name} | {change} | {label} | {quick['policies']['grpo']['mean_return']:.3f} | "
            f"{ci(quick['paired']['grpo-sft'])} | {ci(quick['paired']['grpo-teacher'])} | "
            f"{_share(grpo.get('frac_reward_zero_std_mean'))} | "
            f"{_share(grpo.get('explore/beats_reference_first_quarter'))} | {versus} |"
        )
    return "\n".join(lines)


def _share(value) -> str:
    """A GRPO share for the table, or n/a where the RL stage has none (AggreVaTe draws no groups)."""
    return "n/a" if value is None else f"{value:.3f}"


def _greedy_returns(run: Path, policy: str, split: str) -> dict[int, float]:
    """{seed: return} of `policy`'s greedy evaluation episodes on `split` (evaluate/episodes.jsonl; ablation
    episodes, which carry an `ablation` key, are left out); where the evaluate stage did not play them, the run's
    `quickcheck` of that split (its per-seed returns), if any."""
    path = run / "evaluate" / "episodes.jsonl"
    quick = quickcheck_path(run, split)
    if not path.is_file() and not any(run.glob("quickcheck*.json")):
        raise FileNotFoundError(
            f"{path} is missing, and the run has no quickcheck either: the pair table reads the evaluated (or "
            "quickchecked) episodes of both runs"
        )
    returns = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line) if line.strip() else None
            if record and record["policy"] == policy and record["split"] == split and "ablation" not in record:
                returns[int(record["seed"])] = float(record["return"])
    if not returns and quick.is_file():
        played = read_json_record(quick, "the run's quickcheck").get("returns", {}).get(policy, {})
        returns = {int(seed): float(value) for seed, value in played.items()}
    return returns


def pair_table(runs: list, splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """Markdown: runs given in pairs (A, B) that share their corpus, SFT and seeds (B a fork of A, or A of B): per
    pair and split, the run seed, each GRPO's mean return, B - A paired by episode seed with its 95% CI, and each
    run's gate outcome checks (improved, beats the teacher) from its gate.json."""
    if len(runs) % 2:
        raise ValueError(f"--pairs takes runs two by two (A B A B ...); got {len(runs)}")

    def gate(run: Path) -> str:
        path = run / "gate.json"
        if not path.is_file():
            return "no gate.json"
        verdict = json.loads(path.read_text())
        said = {True: "yes", False: "no"}
        integrity = "ok" if verdict["integrity_passed"] else "FAIL"
        improved, beats = said[verdict["improved"]], said[verdict["beats_teacher"]]
        return f"improved {improved}, beats teacher {beats}, integrity {integrity}"

    lines = [
        "| seed | split | A | B | A's RL | B's RL | B - A (paired) | A gate | B gate |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for a, b in zip(runs[::2], runs[1::2]):
        a, b = Path(a), Path(b)
        seed = json.loads((a / "manifest.json").read_text())["config"]["seed"]
        for split in splits:
            ra, rb = _greedy_returns(a, "grpo", split), _greedy_returns(b, "grpo", split)
            if not ra or not rb:
                continue
            d = paired_difference(rb, ra)
            lines.append(
                f"| {seed} | {split} | {a.name} | {b.name} | {sum(ra.values()) / len(ra):.3f} | "
                f"{sum(rb.values()) / len(rb):.3f} | {d['mean']:+.3f} [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] | "
                f"{gate(a)} | {gate(b)} |"
            )
    return "\n".join(lines)


def imitation_points(runs: list, split: str = "holdout") -> list[dict]:
    """One point per run from its sft/check_<split>.json (`python -m lib sft-check`): environment, run name, the SFT
    stage's seconds, SFT - teacher with its paired CI, the distinct actions played against the teacher's, and the
    paired difference from the run it was checked against (`sft-check --vs`; None without one), e.g. the capacity
    check's improver-label SFT against the teacher-label SFT."""
    points = []
    for run in map(Path, runs):
        path = run / "sft" / f"check_{split}.json"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: run `python -m lib sft-check --run-dir {run} --split {split}` first")
        check = json.loads(path.read_text())
        if check.get("sft_seconds") is None:
            raise ValueError(f"{path}: the sft stage recorded no duration_s")
        d = check["sft-teacher"]
        learner = check.get("learner") or {"model": "tiny"}  # checks made before the field: the tiny model
        points.append(
            {
                "env": check["env"],
                "run": run.name,
                "learner": learner_label(learner),
                "sft_seconds": float(check["sft_seconds"]),
                "sft_minus_teacher": d["mean"],
                "ci95": d["ci95"],
                "actions": f"{check['distinct_actions']}/{check['teacher_distinct_actions']}",
                "vs": {"run": Path(check["vs"]["run"]).name, **check["vs"]["sft-vs"]} if check.get("vs") else None,
            }
        )
    return points


def learner_label(learner: dict) -> str:
    """A learner in a few words: its model, with the cheapening options it ran with (precision, cut, top adapters,
    a prompt without the candidate list)."""
    name = "SmolLM2" if learner["model"] == "smollm2-135m-instruct" else Path(str(learner["model"])).name
    extras = [learner.get("precision")] if learner.get("precision") not in (None, "fp32") else []
    if learner.get("keep_layers"):
        extras.append(f"first {learner['keep_layers']} layers")
    if learner.get("lora_top_layers"):
        extras.append(f"adapters top {learner['lora_top_layers']}")
    if learner.get("list_candidates") is False:
        extras.append("no candidate list")
    if learner.get("labels") == "improver":
        extras.append("improver labels")
    return name + (f" ({', '.join(extras)})" if extras else "")


def imitation_chart(runs: list, split: str = "holdout", bar: float = -0.03):
    """Imitation against its cost: SFT - teacher (paired 95% CI) against the SFT stage's CPU seconds, one panel per
    environment, each run a point named in the panel's legend with the distinct actions it played (the teacher's
    beside), the teacher (0) and the issue's bar (`bar` below the teacher) drawn."""
    import seaborn as sns
    from matplotlib.figure import Figure

    points = imitation_points(runs, split)
    envs = sorted({p["env"] for p in points})
    figure = Figure(figsize=(7.5, 3.6 * len(envs)), layout="constrained")
    axes = figure.subplots(len(envs), 1, squeeze=False)[:, 0]
    for ax, env in zip(axes, envs):
        mine = [p for p in points if p["env"] == env]
        markers = "osD^vP*Xh<>p"
        for i, (p, color) in enumerate(zip(mine, sns.color_palette("tab20", n_colors=len(mine)))):
            low, high = p["ci95"]
            y = p["sft_minus_teacher"]
            ax.errorbar(
                [p["sft_seconds"]], [y], yerr=[[y - low], [high - y]], fmt=markers[i % len(markers)], capsize=3,
                color=color, label=f"{p['run']}: {p['learner']} ({p['actions']} actions)",
            )  # fmt: skip
        ax.axhline(0.0, color="tab:orange", linewidth=1, label="teacher")
        ax.axhline(bar, color="grey", linestyle="--", linewidth=0.8, label=f"bar ({bar:+.2f})")
        ax.set(title=f"{env}: SFT - teacher ({split})", xlabel="SFT stage, CPU seconds", ylabel="return difference")
        ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return figure
