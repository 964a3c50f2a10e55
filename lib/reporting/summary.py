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


def _policy_rows(report: dict, splits: tuple[str, ...]) -> list[list[str]]:
    """[policy, kind, mean return [95% CI] per split] for every policy of the first split: models first, then the
    rest by their return there."""
    first = report["splits"][splits[0]]["policies"]
    order = sorted(first, key=lambda n: (first[n]["kind"] != "model", -first[n]["mean_return"]))
    rows = []
    for name in order:
        found = [report["splits"].get(split, {}).get("policies", {}).get(name) for split in splits]
        rows.append(
            [name, first[name]["kind"], *(f"{r['mean_return']:.3f} {_ci(r['ci95'])}" if r else "n/a" for r in found)]
        )
    return rows


def run_results(run_dir: Path | str, splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """One run: every policy's mean return [95% CI] per split (models first, then by holdout return), the
    holdout paired differences and the gate's verdicts."""
    run_dir = Path(run_dir)
    report = _eval(run_dir)
    gate = read_json_record(run_dir / "gate.json", "the run's gate verdict")
    n = next(iter(report["splits"][splits[0]]["policies"].values()))["n"]
    lines = [
        f"`{run_dir.name}`: {report['env']}, profile `{report['profile']}`, {n} episodes per split, greedy.",
        "",
        "| policy | kind | " + " | ".join(splits) + " |",
        "|" + " --- |" * (2 + len(splits)),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _policy_rows(report, splits)]
    paired = report["splits"][splits[0]]["paired"]
    lines += [
        "",
        f"Teacher: `{report['roles']['teacher']}`. Paired by seed on {splits[0]}: "
        + "; ".join(f"{k} {_signed(v)}" for k, v in paired.items())
        + ". Gate: integrity checks "
        f"{'passed' if gate['integrity_passed'] else 'FAILED'}, improved {report['improved']}, "
        f"beats the teacher {report['beats_teacher']}.",
    ]
    return "\n".join(lines)


def environment_table(run_dirs: list[Path | str], splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """Several runs, one per environment: one row per (environment, policy), mean return [95% CI] per split,
    models first, then baselines and trivial policies by their holdout return."""
    lines = ["| environment | policy | kind | " + " | ".join(splits) + " |", "|" + " --- |" * (3 + len(splits))]
    for run_dir in run_dirs:
        report = _eval(Path(run_dir))
        lines += [f"| {report['env']} | " + " | ".join(row) + " |" for row in _policy_rows(report, splits)]
    return "\n".join(lines)
