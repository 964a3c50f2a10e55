"""`python -m lib logs RUN [RUN ...] --out table.csv`: one row per (run, stage) and one per run, from the runs' own
files, as a Markdown table (printed) and a CSV.

Every value is read, not recomputed, where a file records it: steps, wall time (`duration_s`), peak resident
memory (`peak_rss_mb`; the run row: the largest stage's), SFT's final loss
(`loss_last`), GRPO's mean reward and zero-std share from stage.json, the holdout means from eval.json. Two are
derived from a log: GRPO's final loss (the last per-step `loss` in grpo/train_log.jsonl) and the 95% CI of its
mean reward (bootstrap over the per-step mean rewards of that log). The run row has the run's total wall time
(the stages' sum) with its GRPO and evaluation numbers, the row to compare runs by.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..reward import reward_key
from ..runs import DamagedRunError, read_json_record, read_stage_record

COLUMNS = (
    "run",
    "env",
    "stage",
    "status",
    "steps",
    "wall_s",
    "peak_rss_mb",
    "final_loss",
    "reward_mean",
    "reward_ci95_lo",
    "reward_ci95_hi",
    "zero_std_share",
    "eval_sft",
    "eval_grpo",
    "eval_teacher",
)
RUN_ROW = "(run)"  # the stage column of a run's own row


def _jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL log; DamagedRunError naming the file (and line) when it is missing or damaged."""
    if not path.is_file():
        raise DamagedRunError(f"{path}: missing (the stage's training log)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise DamagedRunError(f"{path}:{number}: not valid JSON, truncated or damaged: {error}") from None
        if not isinstance(row, dict):
            raise DamagedRunError(f"{path}:{number}: expected a JSON object")
        rows.append(row)
    return rows


def _grpo_log(run_dir: Path, stage: str, mode: str | None) -> dict:
    """The RL stage's final per-step loss and, for GRPO, the bootstrap CI of its per-step mean reward, from its
    train_log.jsonl. AggreVaTe (`mode` aggrevate) fits labels and samples no reward: its CI is empty."""
    from ..stats import bootstrap_ci

    log = run_dir / stage / "train_log.jsonl"
    rows = _jsonl(log)
    losses = [r["loss"] for r in rows if "loss" in r]
    if mode == "aggrevate":
        return {"final_loss": losses[-1] if losses else None, "reward_ci95_lo": None, "reward_ci95_hi": None}
    key = reward_key(rows)  # what the samples returned (multi-turn's and soft_target's logs say it apart)
    rewards = [r[key] for r in rows if "reward" in r and key in r]
    if not rewards:
        raise DamagedRunError(f"{log}: no per-step 'reward' line")
    lo, hi = bootstrap_ci(rewards)
    return {"final_loss": losses[-1] if losses else None, "reward_ci95_lo": lo, "reward_ci95_hi": hi}


def _eval_means(run_dir: Path) -> dict:
    report = read_json_record(run_dir / "evaluate" / "eval.json", "the run's evaluation")
    try:
        policies = report["splits"]["holdout"]["policies"]
        teacher = report["roles"]["teacher"]
        return {
            "eval_sft": policies["sft"]["mean_return"],
            "eval_grpo": policies["grpo"]["mean_return"],
            "eval_teacher": policies[teacher]["mean_return"],
        }
    except (KeyError, TypeError) as error:
        raise DamagedRunError(f"{run_dir / 'evaluate' / 'eval.json'}: lacks the holdout means ({error!r})") from None


def run_rows(run_dir: Path | str) -> list[dict]:
    """One row per stage the manifest records, in its order, then the run's row."""
    run_dir = Path(run_dir)
    manifest = read_json_record(run_dir / "manifest.json", "the run's manifest")
    stages = manifest.get("stages")
    if not isinstance(stages, dict):
        raise DamagedRunError(f"{run_dir / 'manifest.json'}: no 'stages' recorded (damaged manifest)")
    env = (manifest.get("config") or {}).get("env")
    base = {"run": manifest.get("run_id", run_dir.name), "env": env}
    rows, evaluated = [], None
    for stage in stages:
        record = read_stage_record(run_dir, stage)
        metrics = record.get("metrics") or {}
        row = {**base, "stage": stage, "status": record.get("status"), "wall_s": record.get("duration_s")}
        row["peak_rss_mb"] = record.get("peak_rss_mb")  # runs made before it was recorded have none
        if record.get("status") == "ok":
            if stage == "sft":
                row.update(steps=metrics.get("steps"), final_loss=metrics.get("loss_last"))
            elif stage.startswith("grpo"):
                row.update(
                    steps=metrics.get("steps"),
                    reward_mean=metrics.get("reward_mean"),
                    zero_std_share=metrics.get("frac_reward_zero_std_mean"),
                    **_grpo_log(run_dir, stage, metrics.get("mode")),
                )
            elif stage == "evaluate":
                evaluated = _eval_means(run_dir)
                row.update(evaluated)
        rows.append(row)
    statuses = {r["status"] for r in rows}
    grpo = next((r for r in rows if r["stage"] == "grpo"), {})
    keep = ("steps", "final_loss", "reward_mean", "reward_ci95_lo", "reward_ci95_hi", "zero_std_share")
    rows.append(
        {
            **base,
            "stage": RUN_ROW,
            "status": "ok" if statuses == {"ok"} else "not ok: " + ", ".join(sorted(map(str, statuses - {"ok"}))),
            "wall_s": round(sum(r["wall_s"] or 0 for r in rows), 2),
            "peak_rss_mb": max((r["peak_rss_mb"] for r in rows if r["peak_rss_mb"] is not None), default=None),
            **{k: grpo.get(k) for k in keep},
            **(evaluated or {}),
        }
    )
    return rows


def logs_table(runs):
    """Every run's rows in one DataFrame, columns in COLUMNS order."""
    import pandas as pd

    table = pd.DataFrame([row for run in runs for row in run_rows(run)], columns=list(COLUMNS))
    table["steps"] = table["steps"].astype("Int64")
    return table


def markdown(table) -> str:
    """The table in Markdown, 4 significant digits, blank where a stage has no such value."""
    shown = table.astype(object).where(table.notna(), None)
    return shown.to_markdown(index=False, floatfmt=".4g", missingval="")


def write_csv(table, path: Path | str) -> None:
    from ..io import atomic_write_text

    atomic_write_text(Path(path), table.to_csv(index=False))
