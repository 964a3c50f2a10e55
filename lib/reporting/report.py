"""`outputs/<run_id>/report.md`: the headline claim generated from eval.json, the tables, the charts and the
gate's verdict. Written by notebook 07_report (and `python -m lib run`); every number comes from the run's files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from ..config import migrate_config, rl_label
from ..io import atomic_write_text
from ..runs import read_json_record
from .figures import not_evaluated, shown
from .sweep import SWEEP, read_sweep, sweep_table


def _ci(values) -> str:
    return "[{:.3f}, {:.3f}]".format(*values)


def _paired_text(d: dict) -> str:
    return f"{d['mean']:+.3f} {_signed_ci(d['ci95'])}"


def _signed_ci(values) -> str:
    return "[{:+.3f}, {:+.3f}]".format(*values)


def headline(report: dict, label: str) -> str:
    """The claim sentence, from eval.json's holdout split, the RL stage's model named by `label` ("RL (GRPO)",
    `lib.config.rl_label`). Says "not improved" unless the paired CI supports it."""
    split = report["splits"]["holdout"]
    p, paired = split["policies"], split["paired"]
    grpo_sft, grpo_teacher = paired["grpo-sft"], paired["grpo-teacher"]
    teacher = report["roles"]["teacher"]
    return (
        f"On {p['grpo']['n']} held-out {report['env']} episodes, {label} returned {p['grpo']['mean_return']:.3f} "
        f"{_ci(p['grpo']['ci95'])}, SFT {p['sft']['mean_return']:.3f} {_ci(p['sft']['ci95'])} and the teacher "
        f"({teacher}) {p[teacher]['mean_return']:.3f} {_ci(p[teacher]['ci95'])}. "
        f"{label} - SFT = {grpo_sft['mean']:+.3f} {_signed_ci(grpo_sft['ci95'])} paired by seed: "
        f"**{'improved' if report['improved'] else 'not improved'}**. "
        f"{label} - teacher = {grpo_teacher['mean']:+.3f} {_signed_ci(grpo_teacher['ci95'])}: "
        f"**{'beats the teacher' if report['beats_teacher'] else 'does not beat the teacher'}**."
        + (
            f" Gap closure ({label} - teacher) / (oracle - teacher) = {split['gap_closure']['mean']:+.3f} "
            f"{_signed_ci(split['gap_closure']['ci95'])}."
            if "mean" in split.get("gap_closure", {})
            else ""
        )
        + (
            f" Toward the improver (the teacher's one-step policy improvement, a simulator reference): "
            f"{split['gap_closure_improver']['mean']:+.3f} {_signed_ci(split['gap_closure_improver']['ci95'])}."
            if "mean" in split.get("gap_closure_improver", {})
            else ""
        )
        + baselines_sentence(report, label)
    )


def baselines_sentence(report: dict, label: str) -> str:
    """Which scripted policies the RL policy beats on each held-out split (paired CI above zero) and which it does
    not, the oracle aside; empty for a run from before eval.json listed them."""
    if "baselines" not in report:
        return ""
    parts = []
    for split, v in report["baselines"].items():
        beats = ", ".join(f"`{n}`" for n in v["beats"]) or "none"
        not_beaten = ", ".join(f"`{n}`" for n in v["does_not_beat"]) or "none"
        parts.append(f"on {split} it beats {beats}; it does not beat {not_beaten}")
    verdict = "beats every baseline" if report["beats_every_baseline"] else "does not beat every baseline"
    return f" Against the scripted policies, paired by seed: {'; '.join(parts)}: {label} **{verdict}**."


def policy_table(report: dict, split: str, label: str | None = None) -> pd.DataFrame:
    """One row per policy on `split`, the RL stage's model named `label`; a split the run did not evaluate is a
    one-line table saying so."""
    if reason := not_evaluated(report, split):
        return pd.DataFrame([{"policy": reason}])
    rows = [
        {
            "policy": shown(name, label),
            "kind": r["kind"],
            "mean return": round(r["mean_return"], 3),
            "95% CI": _ci(r["ci95"]),
            "invalid rate": round(r["invalid_rate"], 3),
            "steps": round(r["mean_steps"], 2),
            "latency ms/action": round(1000 * r["latency_s_per_action"], 2),
        }
        for name, r in report["splits"][split]["policies"].items()
    ]
    return pd.DataFrame(rows).sort_values("mean return", ascending=False).reset_index(drop=True)


def paired_table(report: dict, label: str | None = None) -> pd.DataFrame:
    """Every paired-by-seed difference per split, the RL stage's model named `label`."""
    return pd.DataFrame(
        [
            {
                "split": split,
                "difference": shown(name, label),
                "mean": round(d["mean"], 3),
                "paired 95% CI": _signed_ci(d["ci95"]),
                "seeds": d["n"],
            }
            for split, s in report["splits"].items()
            for name, d in s["paired"].items()
        ]
    )


def ablation_table(report: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "ablation": name,
                "policy": a["policy"],
                "mean return": round(a["mean_return"], 3) if a["mean_return"] is not None else a["status"],
                "95% CI": _ci(a["ci95"]) if a["ci95"] is not None else "n/a",
                "compared with": a["compared_with"],
                "paired difference": _paired_text(a["paired_vs_compared"]) if "paired_vs_compared" in a else "n/a",
                "invalid rate": round(a["invalid_rate"], 3) if a["invalid_rate"] is not None else "n/a",
            }
            for name, a in report.get("ablations", {}).items()
        ]
    )


def attack_table(anti: dict) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "attack": name,
                "kind": a.get("kind"),
                "states": a["states"],
                "mean score": round(a.get("mean_score", float("nan")), 3),
                "mean worst legal": round(a.get("mean_worst_legal", float("nan")), 3),
                "passed": a["passed"],
            }
            for name, a in anti["attacks"].items()
        ]
    )


def headline_table(run_dir: Path) -> pd.DataFrame:
    """Holdout mean return with CI for the models and the baselines: the runner's summary table."""
    report = json.loads((Path(run_dir) / "evaluate" / "eval.json").read_text())
    return policy_table(report, "holdout")


def _rl_signal_lines(manifest: dict) -> list[str]:
    """Where the RL stage's signal came from, when it is not the policy's own samples (rl.algorithm aggrevate)."""
    config = migrate_config(manifest["config"])
    if config["rl"]["algorithm"] != "aggrevate":
        return []
    rounds = config.get("aggrevate", {}).get("rounds", 1)
    again = (
        f" {rounds} rounds: each later round's policy (the SFT model with the previous round's adapter) played "
        "fresh episodes, was labelled the same way, and trained that adapter further."
        if rounds > 1
        else ""
    )
    return [
        f"The RL stage is {'AggreVaTe' if rounds > 1 else 'one AggreVaTe round'}, not GRPO: the SFT policy played "
        "its own train episodes and the improver (the teacher's one-step lookahead through the simulator) labelled "
        f"every state it reached; the RL (AggreVaTe) rows below (eval.json's `grpo`) are that adapter, and their gain "
        f"over the teacher is the improver's signal.{again}",
        "",
    ]


def _alarm_lines(run_dir: Path) -> list[str]:
    """GRPO's collapse alarms (lib/training/alarms.py, in the grpo stage record), said before anything else."""
    path = run_dir / "grpo" / "stage.json"
    metrics = read_json_record(path, "the grpo stage record").get("metrics", {}) if path.is_file() else {}
    alarms = metrics.get("alarms") or []
    if not alarms:
        return []
    stopped = " It stopped early at the first alarm (`rl.stop_on_alarm`)." if metrics.get("stopped_early") else ""
    return [
        f"**GRPO raised {len(alarms)} collapse alarm{'s' if len(alarms) > 1 else ''}** (the run kept step "
        f"{metrics.get('kept_step')}).{stopped}",
        "",
        *(f"- {alarm}" for alarm in alarms),
        "",
    ]


def _imitation_lines(run_dir: Path) -> list[str]:
    """The SFT stage's imitation check (lib/training/imitation.py), said first when SFT collapsed onto one action."""
    from ..training.imitation import describe

    path = run_dir / "sft" / "stage.json"
    metrics = read_json_record(path, "the sft stage record").get("metrics", {}) if path.is_file() else {}
    check = metrics.get("imitation")
    if not check or not check.get("collapsed"):
        return []
    return [f"**{describe(check)}.** GRPO starts from this policy.", ""]


def _head_lines(run_dir: Path, manifest: dict, report: dict, verdict: dict) -> list[str]:
    """The title, the claim, the gate's verdict, the backends and where the RL signal came from, then the warnings
    (SFT collapsed, collapse alarms) and the gate's checks."""
    label = rl_label(manifest["config"])
    config = migrate_config(manifest["config"])
    stage = (
        label if config["rl"]["algorithm"] != "grpo" else f"{label}, grpo.mode `{config['grpo'].get('mode', 'step')}`"
    )
    return [
        f"# Run {manifest['run_id']} (profile `{manifest['config']['profile']}`)",
        "",
        headline(report, label),
        "",
        f"Gate: **{'passed' if verdict['passed'] else 'failed'}** "
        f"(integrity checks {'passed' if verdict['integrity_passed'] else 'FAILED'}). "
        f"Backends: SFT `{report['backends']['sft']}`, {label} `{report['backends']['grpo']}`; RL stage: {stage}. "
        f"Git {manifest['git']['sha']}{' (dirty)' if manifest['git']['dirty'] else ''}.",
        "",
        *_rl_signal_lines(manifest),
        *_imitation_lines(run_dir),
        *_alarm_lines(run_dir),
        "## Gate checks",
        "",
        pd.DataFrame(verdict["checks"]).to_markdown(index=False),
        "",
    ]


def _result_lines(report: dict, label: str) -> list[str]:
    """Every split's closed-loop returns, the paired differences and the ablations."""
    parts = []
    for split in report["splits"]:
        table = policy_table(report, split, label).to_markdown(index=False)
        parts += [f"## Closed-loop returns: {split}", "", table, ""]
    parts += ["## Paired-by-seed differences", "", paired_table(report, label).to_markdown(index=False), ""]
    if report.get("ablations"):
        parts += ["## Ablations (holdout)", "", ablation_table(report).to_markdown(index=False), ""]
    return parts


def _check_lines(anti: dict, postsave: dict, stages: pd.DataFrame) -> list[str]:
    """The anti-hacking report, the post-save inference check and the stage timings."""
    return [
        "## Anti-hacking",
        "",
        attack_table(anti).to_markdown(index=False),
        "",
        "Train - holdout gap: " + ", ".join(f"{k} {v:+.3f}" for k, v in anti["train_holdout_gap"].items()) + ".",
        "",
        "Training completions hitting each anti-cheat rule (mean per GRPO step): "
        + ", ".join(
            f"{k} {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in anti["training_rule_hits"].items()
        )
        + ".",
        "",
        "## Post-save inference",
        "",
        f"{postsave['episodes']} holdout episodes from `{postsave['model_source']['path']}` (sha256 "
        f"{postsave['model_source']['sha256'][:12]}): validity {postsave['validity_rate']:.3f}, mean return "
        f"{postsave['mean_return']:.3f}, latency per action p50 {1000 * postsave['latency_s_p50']:.1f} ms, "
        f"p95 {1000 * postsave['latency_s_p95']:.1f} ms (episodes played {postsave.get('batch_size', 1)} at a time).",
        "",
        "## Stage timings",
        "",
        stages.to_markdown(index=False),
        "",
    ]


def _sweep_lines(run_dir: Path) -> list[str]:
    """The checkpoint sweep, when `python -m lib sweep` wrote one (after training, when checkpoints were saved)."""
    if not (run_dir / SWEEP).is_file():
        return []
    sweep = read_sweep(run_dir)
    return [
        "## Checkpoint sweep",
        "",
        f"SFT (step 0) and every GRPO checkpoint played greedily on the same {len(sweep['seeds'])} "
        f"{sweep['split']} seeds ({sweep['reference']['role']} {sweep['reference']['policy']}: "
        f"{sweep['reference']['mean_return']:.3f} {_ci(sweep['reference']['ci95'])}; the run kept step "
        f"{sweep['kept_step']}).",
        "",
        sweep_table(run_dir).to_markdown(index=False),
        "",
    ]


def _chart_lines(charts) -> list[str]:
    from .plots import OPTIONAL_CHARTS

    parts = ["## Charts", ""]
    for chart in charts:
        if chart.path:
            parts.append(f"![{chart.name}](charts/{chart.name}.png)")
        elif chart.name not in OPTIONAL_CHARTS:  # an optional chart's absence is not news
            parts.append(f"- {chart.message}")
    return parts


def write_report(run_dir: Path | str, verdict: dict, charts) -> Path:
    """Write report.md from eval.json, the anti-hacking report, post-save results, the charts and the gate verdict;
    the RL stage's model is named by the algorithm that ran (`lib.config.rl_label`)."""
    run_dir = Path(run_dir)
    manifest = read_json_record(run_dir / "manifest.json", "the run's manifest")
    report = json.loads((run_dir / "evaluate" / "eval.json").read_text())
    anti = json.loads((run_dir / "evaluate" / "anti_hacking_report.json").read_text())
    postsave = json.loads((run_dir / "postsave" / "postsave_inference.json").read_text())
    stages = pd.DataFrame([{"stage": k, **v} for k, v in manifest["stages"].items()])
    parts = [
        *_head_lines(run_dir, manifest, report, verdict),
        *_result_lines(report, rl_label(manifest["config"])),
        *_check_lines(anti, postsave, stages),
        *_sweep_lines(run_dir),
        *_chart_lines(charts),
    ]
    path = run_dir / "report.md"
    atomic_write_text(path, "\n".join(parts) + "\n")
    return path


def run_report(config, run) -> dict:
    """Stage `report`: the gate's verdict (gate.json), every chart (charts/) and report.md, from the run's files."""
    from ..gate import run_gate
    from . import plots

    verdict = run_gate(run.dir)
    charts = plots.draw_all(run.dir)
    path = write_report(run.dir, verdict, charts)
    return {"verdict": verdict, "charts": charts, "report": path}
