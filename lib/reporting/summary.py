"""`python -m lib summary RUN [RUN ...]`: Markdown tables generated from finished runs' files, never typed by hand.

For one run: its holdout results (models and baselines with 95% CIs), the paired differences and the gate's
verdict. For several runs (one per environment, e.g. from `python -m lib run --envs ...`): one table,
environment x policy, with CIs. The README's results tables are this command's output, and a test checks
that they still are.
"""

from __future__ import annotations

from pathlib import Path

from ..runs import read_json_record


def _ci(values) -> str:
    return "[{:.3f}, {:.3f}]".format(*values)


def _signed(d: dict) -> str:
    return "{:+.3f} [{:+.3f}, {:+.3f}]".format(d["mean"], *d["ci95"])


def _eval(run_dir: Path) -> dict:
    return read_json_record(Path(run_dir) / "evaluate" / "eval.json", "the run's evaluation")


def run_results(run_dir: Path | str, split: str = "holdout") -> str:
    """One run: every policy's mean return with its CI on `split`, the paired differences and the verdicts."""
    run_dir = Path(run_dir)
    report = _eval(run_dir)
    data = report["splits"][split]
    gate = read_json_record(run_dir / "gate.json", "the run's gate verdict")
    rows = sorted(data["policies"].items(), key=lambda kv: -kv[1]["mean_return"])
    lines = [
        f"`{run_dir.name}` ({report['env']}, profile `{report['profile']}`), {split}, "
        f"{rows[0][1]['n']} episodes, greedy:",
        "",
        "| policy | kind | mean return [95% CI] | invalid rate |",
        "| --- | --- | --- | --- |",
    ]
    lines += [
        f"| {name} | {r['kind']} | {r['mean_return']:.3f} {_ci(r['ci95'])} | {r['invalid_rate']:.3f} |"
        for name, r in rows
    ]
    paired = data["paired"]
    lines += [
        "",
        "Paired by seed: " + "; ".join(f"{k} {_signed(v)}" for k, v in paired.items()) + ". "
        f"Teacher: `{report['roles']['teacher']}`. Gate: integrity checks "
        f"{'passed' if gate['integrity_passed'] else 'FAILED'}; improved: {report['improved']}; "
        f"beats the teacher: {report['beats_teacher']}.",
    ]
    return "\n".join(lines)


def environment_table(run_dirs: list[Path | str], splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """Several runs, one per environment: one row per (environment, policy), mean return [95% CI] per split,
    models first, then baselines and trivial policies by their holdout return."""
    lines = ["| environment | policy | kind | " + " | ".join(splits) + " |", "|" + " --- |" * (3 + len(splits))]
    for run_dir in run_dirs:
        report = _eval(Path(run_dir))
        first = report["splits"][splits[0]]["policies"]
        order = sorted(first, key=lambda n: (first[n]["kind"] != "model", -first[n]["mean_return"]))
        for name in order:
            cells = [
                (lambda r: f"{r['mean_return']:.3f} {_ci(r['ci95'])}" if r else "n/a")(
                    report["splits"].get(split, {}).get("policies", {}).get(name)
                )
                for split in splits
            ]
            lines.append(f"| {report['env']} | {name} | {first[name]['kind']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
