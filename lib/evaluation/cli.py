"""The verbs of `python -m lib` that play policies and measure them: `baselines` (the scripted and trivial policies),
`quickcheck` (a run's SFT and GRPO models against them, closed loop) and `sft-check` (the SFT model alone
against its teacher, before any GRPO). Registered by lib/__main__.py; heavy imports
happen only when a verb runs."""

from __future__ import annotations

from pathlib import Path

from ..arguments import add_env_args, env_help


def _baselines(args) -> int:
    from ..envs import UnknownEnvironmentError, builtin_names, get_spec
    from .baselines import format_table, markdown_table, run_baselines, write_report

    if args.env is None:
        raise UnknownEnvironmentError(f"--env is required: one of {builtin_names()} or a dotted module path")
    from ..arguments import parse_overrides

    spec = get_spec(args.env, parse_overrides(args.env_arg) or None)
    reports = {
        split: run_baselines(spec, split, args.episodes, args.seed, args.policies, env=args.env) for split in args.split
    }
    for report in reports.values():
        print(format_table(report))
    if args.markdown:
        print(markdown_table(reports))
    if args.out:
        write_report(reports[args.split[0]] if len(reports) == 1 else reports, args.out)
        print(f"wrote {args.out}")
    return 0


def _quickcheck(args) -> int:
    from ..config import rl_label
    from ..runs import Run, read_config
    from .evaluate import quick_check

    config = read_config(args.run_dir)
    report = quick_check(config, Run(args.run_dir, config), args.episodes, args.split, tuple(args.models))
    for name, r in report["policies"].items():
        print(f"{name:<10} {r['mean_return']:.3f}  ci95 [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
    for name, d in report["paired"].items():
        print(f"{name:<15} {d['mean']:+.3f}  paired ci95 [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]")
    gap = report["gap_closure"]
    print(f"the RL stage's model (grpo): {rl_label(config)}")
    print(
        f"gap closure ({rl_label(config)} - teacher) / (oracle - teacher): {gap['mean']:+.3f}  "
        f"ci95 [{gap['ci95'][0]:+.3f}, {gap['ci95'][1]:+.3f}]"
    )
    print(f"GRPO mean frac_reward_zero_std: {report['grpo_frac_reward_zero_std_mean']}")
    for key, value in report["grpo_explore"].items():
        print(f"GRPO {key}: {value:.4f}")
    return 0


def _sft_check(args) -> int:
    from ..runs import Run, read_config
    from .evaluate import check_file, sft_check

    config = read_config(args.run_dir)
    report = sft_check(config, Run(args.run_dir, config), args.episodes, args.split, args.vs, args.logit_adjust)
    teacher, d = report["teacher"], report["sft-teacher"]
    for name, r in report["policies"].items():
        print(f"{name:<16} {r['mean_return']:.3f}  ci95 [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
    print(
        f"SFT - {teacher}: {d['mean']:+.3f}  paired ci95 [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] on {d['n']} seeds"
    )
    g = report["gap_closure"]
    if "error" in g:
        print(f"gap closure toward {report['oracle']}: none ({g['error']})")
    else:
        print(
            f"gap closure toward {report['oracle']}: {g['mean']:+.3f}  ci95 [{g['ci95'][0]:+.3f}, {g['ci95'][1]:+.3f}]"
        )
    print(
        f"SFT played {report['distinct_actions']} distinct actions (the teacher {report['teacher_distinct_actions']});"
        f" most played: {', '.join(f'{a} {n}' for a, n in report['top_actions'][:3])}"
    )
    if "vs" in report:
        v = report["vs"]["sft-vs"]
        print(
            f"SFT - the SFT of {args.vs}: {v['mean']:+.3f}  paired ci95 [{v['ci95'][0]:+.3f}, {v['ci95'][1]:+.3f}]"
            f" on {v['n']} seeds"
        )
    if report["logit_adjust"]:
        print(f"played with the logit adjustment {report['logit_adjust']}")
    wrote = Path(args.run_dir) / "sft" / check_file(args.split, args.logit_adjust)
    print(f"SFT stage: {report['sft_seconds']} s; wrote {wrote}")
    return 0


def add_verbs(verbs) -> None:
    b = verbs.add_parser("baselines", help="evaluate baseline and trivial policies")
    b.add_argument("--env", default=None, help=env_help())
    add_env_args(b)
    b.add_argument("--split", nargs="+", default=["holdout"], choices=["train", "holdout", "holdout_novel"])
    b.add_argument("--markdown", action="store_true", help="also print one Markdown table over the splits")
    b.add_argument("--episodes", type=int, default=500)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--policies", nargs="*", default=None)
    b.add_argument("--out", type=Path, default=None)
    b.set_defaults(func=_baselines)
    q = verbs.add_parser("quickcheck", help="closed-loop SFT vs GRPO vs baselines on held-out episodes")
    q.add_argument("--run-dir", type=Path, required=True)
    q.add_argument("--episodes", type=int, default=200)
    q.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    q.add_argument(
        "--models",
        nargs="+",
        default=["sft", "grpo"],
        choices=["sft", "grpo"],
        help="the run's models to play (grpo alone: a fork whose SFT its base already checked)",
    )
    q.set_defaults(func=_quickcheck)
    s = verbs.add_parser("sft-check", help="a run's SFT model alone against its teacher, closed loop, paired by seed")
    s.add_argument("--run-dir", type=Path, required=True)
    s.add_argument("--episodes", type=int, default=200)
    s.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    s.add_argument("--vs", type=Path, default=None, help="another run checked the same way: pair the two SFTs by seed")
    s.add_argument(
        "--logit-adjust",
        type=float,
        default=0.0,
        metavar="TAU",
        help="an SFT trained with sft.kind_balance, played with TAU * log(trained share / corpus share) of each "
        "candidate's kind taken off its score (writes sft/check_<split>_la<TAU>.json)",
    )
    s.set_defaults(func=_sft_check)
