"""The tokens two SFT trials computed, per trained row and per played state, read from their own records:
`python -m lib bench-trial-tokens --before RUN --after RUN [--split holdout] [--out F]`.

Each run's sft stage record gives the tokens its trainer computed (`train_tokens`) over the rows it trained
(`rows`; for a record from before that count, the corpus's rows), and its `sft-check` file on `split` gives the
prompt tokens its play computed per state (`play`, with the seconds) and the prompt tokens a state held, which is what
a pass without the episode cache computes (`read_per_state`). Both checks must have played the same seeds.
The JSON puts the ratios, before / after, at the top level: `tokens.trained_tokens_ratio`, and
`tokens.played_tokens_ratio`, the before run's prompt read whole at every state (play as it was before the episode
cache) over the after run's computed tokens; `tokens.played_tokens_ratio_cached_before` divides the before run's
computed tokens instead (the cache on both sides). Beside them each run's times and, where the after run was checked
`--vs` the before run, the paired difference of their returns.

With `--bare-steps N`, `tokens.sft_of_bare` is the after run's SFT tokens/s over its bare loop's (`bare_loop` of
lib/bench/bench_learner.py: the same model, precision, adapters and corpus rows, forward and backward by hand), the
loop timed now over N steps. Only on the machine the run trained on: a manifest naming another CPU is refused."""

from __future__ import annotations

import json
from pathlib import Path


def _trial(run_dir: Path, split: str) -> dict:
    """One run's SFT: tokens trained per row, tokens computed per played state, and the times."""
    from ..evaluation.evaluate import check_file
    from ..io import read_records

    stage_file, check = run_dir / "sft" / "stage.json", run_dir / "sft" / check_file(split, 0.0)
    for needed in (stage_file, check):
        if not needed.is_file():
            raise FileNotFoundError(f"{needed} is missing: run the sft stage, then sft-check --split {split}")
    stage, played = json.loads(stage_file.read_text()), json.loads(check.read_text())
    if "play" not in played:
        raise ValueError(f"{check} has no play record (tokens per state): check again with this version")
    metrics = stage["metrics"]
    rows = metrics.get("rows") or len(read_records(run_dir / stage["inputs"]["sft.jsonl"], missing_ok=False))
    return {
        "run": str(run_dir),
        "turns": played["learner"].get("turns", "state"),
        "batching": metrics.get("batching"),
        "rows": rows,
        "train_tokens": metrics["train_tokens"],
        "trained_per_row": round(metrics["train_tokens"] / rows, 1),
        "train_seconds": metrics.get("train_runtime_s"),
        "peak_rss_mb": stage.get("peak_rss_mb"),
        "episodes": played["episodes"],
        "played_per_state": played["play"]["computed_per_state"],
        "read_per_state": round(played["play"]["prompt_tokens"] / played["play"]["states"], 1),
        "play_seconds": played["play"]["seconds"],
        "sft-teacher": played["sft-teacher"],
        "_vs": played.get("vs"),
    }


def trial_tokens(before: Path, after: Path, split: str) -> dict:
    """The two trials side by side, with the ratios before / after (see the module docstring)."""
    was, now = _trial(Path(before), split), _trial(Path(after), split)
    if was["episodes"] != now["episodes"]:
        raise ValueError(f"the checks played {was['episodes']} and {now['episodes']} episodes: check both alike")
    vs = now.pop("_vs")
    was.pop("_vs")
    return {
        "tokens": {
            "trained_tokens_ratio": round(was["trained_per_row"] / now["trained_per_row"], 2),
            "played_tokens_ratio": round(was["read_per_state"] / now["played_per_state"], 2),
            "played_tokens_ratio_cached_before": round(was["played_per_state"] / now["played_per_state"], 2),
        },
        "split": split,
        "before": was,
        "after": now,
        "after-before": vs["sft-vs"] if vs and Path(vs["run"]).resolve() == Path(before).resolve() else None,
    }


# what must match between the run's recorded hardware and this machine for a tokens/s ratio to mean anything
SAME_MACHINE = ("cpu", "cpu_count", "cpu_bf16", "cuda")


def sft_of_bare(run_dir: Path, steps: int, here: dict | None = None) -> dict:
    """The run's SFT tokens/s over its bare loop's, the loop timed now (see the module docstring). `here` is this
    machine's hardware record (lib/provenance.py), given by tests."""
    from ..io import read_records
    from ..provenance import hardware
    from ..runs import read_config

    run_dir = Path(run_dir)
    recorded = json.loads((run_dir / "manifest.json").read_text()).get("hardware", {})
    here = here or hardware()
    other = {k: (recorded.get(k), here.get(k)) for k in SAME_MACHINE if recorded.get(k) != here.get(k)}
    if other:
        raise ValueError(f"{run_dir} trained on other hardware than this machine (recorded, here): {other}")
    stage = json.loads((run_dir / "sft" / "stage.json").read_text())
    rate = stage["metrics"].get("tokens_per_s")
    if not rate:
        raise ValueError(f"{run_dir}/sft/stage.json records no tokens_per_s: rerun its sft stage")
    from .bench_learner import bare_loop

    rows = read_records(run_dir / stage["inputs"]["sft.jsonl"], missing_ok=False)
    bare = bare_loop(read_config(run_dir), rows, steps)
    return {
        "cpu": here.get("cpu"),
        "sft_tokens_per_s": rate,
        "bare_loop": bare,
        "ratio": round(rate / bare["tokens_per_s"], 2),
    }


def _run(args) -> int:
    from ..io import atomic_write_json

    report = trial_tokens(args.before, args.after, args.split)
    if args.bare_steps:
        report["sft_of_bare"] = sft_of_bare(args.after, args.bare_steps)
        report["tokens"]["sft_of_bare"] = report["sft_of_bare"]["ratio"]
    print(json.dumps({k: report[k] for k in ("tokens", "after-before")}, indent=2))
    if args.out:
        atomic_write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


def add_parser(verbs) -> None:
    """The `bench-trial-tokens` verb (lib/bench/cli.py registers it)."""
    t = verbs.add_parser(
        "bench-trial-tokens",
        help="benchmark, from two runs' records: tokens their SFT trained per row and their sft-check computed per "
        "played state, and the ratios before / after",
    )
    t.add_argument("--before", type=Path, required=True, help="the baseline run (its sft stage and sft-check)")
    t.add_argument("--after", type=Path, required=True, help="the changed run, checked on the same seeds")
    t.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel"])
    t.add_argument(
        "--bare-steps",
        type=int,
        default=0,
        help="also time the after run's bare loop over this many steps, on the machine it trained on, and give its "
        "SFT tokens/s over the loop's (tokens.sft_of_bare)",
    )
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_run)
