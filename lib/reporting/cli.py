"""The verbs of `python -m lib` that read finished runs and draw: `sweep` (every GRPO checkpoint played again by
lib/evaluation/sweep.py, then tabled and charted), `compare` (the ablation table), `summary` (Markdown results),
`env-table` (an environment README's baseline tables) and `logs` (summaries of runs as a table). Registered by
lib/__main__.py; heavy imports happen only when a verb runs."""

from __future__ import annotations

from pathlib import Path

from ..arguments import env_help


def _sweep(args) -> int:
    from ..evaluation.sweep import run_sweep
    from .plots import draw
    from .sweep import sweep_table

    run_sweep(args.run_dir, args.split, args.episodes)
    print(sweep_table(args.run_dir).to_markdown(index=False))
    print(draw(args.run_dir, "sweep").message)
    print(f"report.md shows it once the report runs again: python -m lib stage report --run-dir {args.run_dir}")
    return 0


def _compare(args) -> int:
    """Forks of one base, each quickchecked on the same seeds: every variant's GRPO minus the first run's GRPO,
    paired by seed, as a markdown table (the ablation table)."""
    from .compare import compare_table, pair_table

    table = pair_table(args.runs) if args.pairs else compare_table(args.runs, args.split)
    print(table)
    if args.out:
        from ..io import atomic_write_text

        atomic_write_text(args.out, table + "\n")
    return 0


def _summary(args) -> int:
    from ..io import atomic_write_text
    from .summary import environment_table, run_results, seed_table

    if args.seeds:
        text = seed_table(args.runs)
    else:
        text = run_results(args.runs[0]) if len(args.runs) == 1 else environment_table(args.runs)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


def _imitation_chart(args) -> int:
    from .compare import imitation_chart, imitation_points

    for p in imitation_points(args.runs, args.split):
        print(
            f"{p['env']:<18} {p['run']:<28} SFT {p['sft_seconds']:7.1f} s  SFT - teacher {p['sft_minus_teacher']:+.3f}"
            f" [{p['ci95'][0]:+.3f}, {p['ci95'][1]:+.3f}]  actions {p['actions']}"
            + (f"  - {v['run']} {v['mean']:+.3f} [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]" if (v := p["vs"]) else "")
        )
    import io

    from ..io import atomic_write_bytes

    imitation_chart(args.runs, args.split).savefig(buffer := io.BytesIO(), format="png", dpi=110)
    atomic_write_bytes(args.out, buffer.getvalue())
    print(f"wrote {args.out}")
    return 0


def _env_table(args) -> int:
    from ..envs import get_spec
    from ..evaluation.baselines import run_baselines
    from .env_tables import env_tables

    spec = get_spec(args.env)
    reports = {split: run_baselines(spec, split, args.episodes, args.seed, env=args.env) for split in args.split}
    print(env_tables(reports))
    return 0


def _logs(args) -> int:
    from .logs import logs_table, markdown, write_csv

    table = logs_table(args.runs)
    print(markdown(table))
    if args.out:
        write_csv(table, args.out)
        print(f"wrote {args.out}")
    return 0


def add_verbs(verbs) -> None:
    c = verbs.add_parser("compare", help="ablation table: forks' GRPO returns paired by seed against the first run's")
    c.add_argument("runs", nargs="+", type=Path, help="the reference run first, then its variants (forks of one base)")
    c.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel"])
    c.add_argument(
        "--pairs",
        action="store_true",
        help="the runs are pairs A B on the same corpus, SFT and seeds: B - A per seed and split, with both gates",
    )
    c.add_argument("--out", type=Path, default=None)
    c.set_defaults(func=_compare)
    u = verbs.add_parser(
        "summary", help="Markdown results from finished runs: one run's table, or environment x policy"
    )
    u.add_argument("runs", nargs="+", type=Path)
    u.add_argument(
        "--seeds",
        action="store_true",
        help="one row per environment x seed x split: the RL stage (RL (GRPO) and its mode, or RL (AggreVaTe)), "
        "SFT, RL, teacher, improver, oracle, RL - teacher, gaps (a split the evaluation did not play: from the run's "
        "quickcheck of it)",
    )
    u.add_argument("--out", type=Path, default=None)
    u.set_defaults(func=_summary)
    m = verbs.add_parser(
        "imitation-chart", help="SFT - teacher against the SFT stage's seconds, per environment (runs' sft-check files)"
    )
    m.add_argument("runs", nargs="+", type=Path, help="runs with sft/check_<split>.json (python -m lib sft-check)")
    m.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    m.add_argument("--out", type=Path, required=True, help="the PNG to write")
    m.set_defaults(func=_imitation_chart)
    e = verbs.add_parser("env-table", help="an environment README's generated baseline tables, in Markdown")
    e.add_argument("--env", required=True, help=env_help())
    e.add_argument("--split", nargs="+", default=["holdout"], choices=["train", "holdout", "holdout_novel"])
    e.add_argument("--episodes", type=int, default=500)
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=_env_table)
    w = verbs.add_parser(
        "sweep",
        help="every saved GRPO checkpoint (and SFT as step 0) played on the same seeds: sweep/sweep.json + chart",
    )
    w.add_argument("--run-dir", type=Path, required=True)
    w.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    w.add_argument("--episodes", type=int, default=50, help="the first N of the evaluation's seeds of --split")
    w.set_defaults(func=_sweep)
    o = verbs.add_parser("logs", help="per-stage and per-run summaries of runs as a Markdown table and a CSV")
    o.add_argument("runs", nargs="+", type=Path)
    o.add_argument("--out", type=Path, default=None, help="the CSV")
    o.set_defaults(func=_logs)
