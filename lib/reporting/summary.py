"""`python -m lib summary RUN [RUN ...]`: Markdown tables generated from finished runs' files, never typed by hand.

For one run: its holdout results (models and baselines with 95% CIs), the paired differences and the gate's
verdict. For several runs (one per environment, e.g. from `python -m lib run --envs ...`): one table,
environment x policy, with CIs. The README's results tables are this command's output, and a test checks
that they still are.
"""

from __future__ import annotations

from pathlib import Path

from ..config import rl_label
from ..io import read_records
from ..runs import quickcheck_path, read_json_record
from .figures import rl_mode, run_label


def _ci(values) -> str:
    return "[{:.3f}, {:.3f}]".format(*values)


def _signed(d: dict) -> str:
    return "{:+.3f} [{:+.3f}, {:+.3f}]".format(d["mean"], *d["ci95"])


def _eval(run_dir: Path) -> dict:
    return read_json_record(Path(run_dir) / "evaluate" / "eval.json", "the run's evaluation")


def _shown(name: str, rl: str) -> str:
    """A policy's name in a table: the RL stage's model as what ran ("RL (AggreVaTe)", its data key `grpo`), SFT's
    as "SFT", every other policy by its own name."""
    return {"grpo": f"{rl} `grpo`", "sft": "SFT `sft`"}.get(name, f"`{name}`")


def _paired_name(key: str, rl: str) -> str:
    """eval.json's paired key ("grpo-sft") as the table names it ("RL (AggreVaTe) - SFT")."""
    names = {"grpo": rl, "sft": "SFT", "teacher": "teacher", "oracle": "oracle", "untrained": "untrained"}
    return " - ".join(names.get(part, part) for part in key.split("-", 1))


def _config(run_dir: Path) -> dict:
    return read_json_record(run_dir / "manifest.json", "the run's manifest")["config"]


def _policy_rows(report: dict, splits: tuple[str, ...], rl: str) -> list[list[str]]:
    """[policy, kind, mean return [95% CI] per split] for every policy of the first split: models first, then the
    rest by their return there."""
    first = report["splits"][splits[0]]["policies"]
    order = sorted(first, key=lambda n: (first[n]["kind"] != "model", -first[n]["mean_return"]))
    episodes = max(r["n"] for r in first.values())
    rows = []
    for name in order:
        found = [report["splits"].get(split, {}).get("policies", {}).get(name) for split in splits]
        kind = first[name]["kind"] + (f" ({first[name]['n']} episodes)" if first[name]["n"] != episodes else "")
        rows.append(
            [_shown(name, rl), kind, *(f"{r['mean_return']:.3f} {_ci(r['ci95'])}" if r else "n/a" for r in found)]
        )
    return rows


def _gaps(split: dict) -> str:
    named = (("gap_closure", "oracle"), ("gap_closure_improver", "improver"))
    return "; ".join(
        f"gap closure toward the {who} {_signed(split[key])}" for key, who in named if "mean" in split.get(key, {})
    )


def run_results(run_dir: Path | str, splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """One run: every policy's mean return [95% CI] per split (models first, then by holdout return), the
    holdout paired differences and the gate's verdicts."""
    run_dir = Path(run_dir)
    report = _eval(run_dir)
    gate = read_json_record(run_dir / "gate.json", "the run's gate verdict")
    config = _config(run_dir)
    rl = rl_label(config)
    n = max(p["n"] for p in report["splits"][splits[0]]["policies"].values())  # a row played on fewer says so itself
    lines = [
        f"`{run_dir.name}`: {report['env']}, profile `{report['profile']}`, learner `{config['model']['name']}`, "
        f"SFT then {rl}, {n} episodes per split, greedy.",
        "",
        "| policy | kind | " + " | ".join(splits) + " |",
        "|" + " --- |" * (2 + len(splits)),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _policy_rows(report, splits, rl)]
    paired = report["splits"][splits[0]]["paired"]
    gaps = _gaps(report["splits"][splits[0]])
    lines += [
        "",
        f"Teacher: `{report['roles']['teacher']}`. Paired by seed on {splits[0]}: "
        + "; ".join(f"{_paired_name(k, rl)} {_signed(v)}" for k, v in paired.items())
        + (f"; {gaps}" if gaps else "")
        + ". Gate: integrity checks "
        f"{'passed' if gate['integrity_passed'] else 'FAILED'}, improved {report['improved']}, "
        f"beats the teacher {report['beats_teacher']}"
        + (f", beats every baseline {report['beats_every_baseline']}" if "beats_every_baseline" in report else "")
        + ".",
    ]
    return "\n".join(lines)


def environment_table(run_dirs: list[Path | str], splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """Several runs, one per environment: one row per (environment, policy), mean return [95% CI] per split,
    models first, then baselines and trivial policies by their holdout return."""
    lines = ["| environment | policy | kind | " + " | ".join(splits) + " |", "|" + " --- |" * (3 + len(splits))]
    for run_dir in map(Path, run_dirs):
        report, rl = _eval(run_dir), rl_label(_config(run_dir))
        lines += [f"| {report['env']} | " + " | ".join(row) + " |" for row in _policy_rows(report, splits, rl)]
    return "\n".join(lines)


SEED_COLUMNS = (
    "environment",
    "seed",
    "RL stage",
    "split",
    "SFT",
    "RL",
    "teacher",
    "improver",
    "oracle",
    "RL - teacher",
    "gap closure (oracle)",
    "gap closure (improver)",
    "no spread",
    "p_reference (start)",
    "validation last - best",
)


def _run_bars(run_dir: Path) -> list[str]:
    """The run's exploration and stability readings: the share of GRPO groups without reward spread averaged over
    the run (an AggreVaTe stage: of its labelled states where every candidate ties); the policy's probability of the
    teacher's answer at the RL stage's start (GRPO's first logged `explore/p_reference`; an AggreVaTe stage's
    `p_reference_start`, at the SFT policy's own states); and its last validation point minus its best
    (grpo/validation.jsonl); n/a where the run has none."""
    path = run_dir / "grpo" / "stage.json"
    metrics = read_json_record(path, "the RL stage's record").get("metrics", {}) if path.is_file() else {}
    spread = metrics.get("frac_reward_zero_std_mean")
    spread = metrics.get("frac_states_zero_spread") if spread is None else spread
    start = metrics.get("p_reference_start")
    if start is None:  # GRPO's train log (an AggreVaTe stage's has no explore/* entries)
        logged = read_records(run_dir / "grpo" / "train_log.jsonl")
        start = next((r["explore/p_reference"] for r in logged if r.get("explore/p_reference") is not None), None)
    points = sorted(read_records(run_dir / "grpo" / "validation.jsonl"), key=lambda p: p["step"])
    last_minus_best = f"{points[-1]['mean_return'] - max(p['mean_return'] for p in points):+.3f}" if points else "n/a"
    return ["n/a" if spread is None else f"{spread:.3f}", "n/a" if start is None else f"{start:.3f}", last_minus_best]


def _seed_row(report: dict, entry: dict, seed: int, mode: str, split: str, bars: list[str]) -> list[str]:
    role = report["roles"]
    policies = entry["policies"]
    means = [
        f"{policies[name]['mean_return']:.3f}" if name in policies else "n/a"
        for name in ("sft", "grpo", role["teacher"], role.get("improver", "improver"), role["oracle"])
    ]
    gaps = [
        _signed(entry[key]) if "mean" in entry.get(key, {}) else "n/a"
        for key in ("gap_closure", "gap_closure_improver")
    ]
    return [report["env"], str(seed), mode, split, *means, _signed(entry["paired"]["grpo-teacher"]), *gaps, *bars]


def _split_entries(run_dir: Path, report: dict, splits: tuple[str, ...]) -> list[tuple[str, dict]]:
    """(label, entry) per split: the evaluate stage's, else a `python -m lib quickcheck --split` of the same run's
    models (quickcheck_<split>.json, labelled as such), else none."""
    found = []
    for split in splits:
        if split in report["splits"]:
            found.append((split, report["splits"][split]))
            continue
        quick = quickcheck_path(run_dir, split)
        if quick.is_file():
            found.append((f"{split} (quickcheck)", read_json_record(quick, "the run's quickcheck")))
    return found


def _stage_name(run_dir: Path) -> str:
    """The run's RL stage for the seed table: "RL (AggreVaTe)", or "RL (GRPO)" with its grpo.mode."""
    mode = rl_mode(run_dir)
    return run_label(run_dir) + ("" if mode == "aggrevate" else f" {mode}")


def seed_table(run_dirs: list[Path | str], splits: tuple[str, ...] = ("holdout", "holdout_novel")) -> str:
    """Runs of several environments and seeds: one row per (environment, seed, split) with the RL stage (its
    algorithm, and GRPO's `grpo.mode`), SFT, RL (the RL stage's model), the teacher, the improver and the oracle
    (mean returns), RL - teacher paired by seed with its 95% CI, and the gap closure toward the oracle and toward
    the improver; then the run's exploration and stability readings (`_run_bars`). A split the evaluate stage did not
    play is read from the run's quickcheck of it, if any."""
    lines = ["| " + " | ".join(SEED_COLUMNS) + " |", "|" + " --- |" * len(SEED_COLUMNS)]
    for run_dir in map(Path, run_dirs):
        report = _eval(run_dir)
        config = _config(run_dir)
        mode, bars = _stage_name(run_dir), _run_bars(run_dir)
        lines += [
            "| " + " | ".join(_seed_row(report, entry, config["seed"], mode, label, bars)) + " |"
            for label, entry in _split_entries(run_dir, report, splits)
        ]
    return "\n".join(lines)
