"""`python -m lib <verb>`: the workbook's command line."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _baselines(args) -> int:
    from .baselines import format_table, run_baselines, write_report

    report = run_baselines(args.env, args.split, args.episodes, args.seed, args.policies)
    print(format_table(report))
    if args.out:
        write_report(report, args.out)
        print(f"wrote {args.out}")
    return 0


def _parse_overrides(pairs: list[str]) -> dict:
    import yaml

    overrides = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ValueError(f"override {pair!r} must look like key.path=value")
        key, value = pair.split("=", 1)
        overrides[key] = yaml.safe_load(value)
    return overrides


def _stage(args) -> int:
    from .config import load_config
    from .runs import Run, new_run_id

    config = load_config(args.profile, _parse_overrides(args.set))
    run_dir = args.run_dir or Path(config.output_root) / new_run_id(config.profile)
    run = Run(run_dir, config)
    if args.stage == "corpus":
        from .corpus import run_corpus

        record = run_corpus(config, run)
    elif args.stage == "sft":
        from .train import run_sft

        record = run_sft(config, run)
    else:
        from .train import run_grpo

        record = run_grpo(config, run, resume_from=args.resume_from)
    shown = {k: v for k, v in record["metrics"].items() if not isinstance(v, (list, dict))}
    print(f"stage {args.stage} {record['status']} in {record['duration_s']}s -> {run.dir}: {shown}")
    return 0


def _quickcheck(args) -> int:
    import json

    from .config import RunConfig
    from .evaluate import quick_check
    from .runs import Run

    manifest = json.loads((args.run_dir / "manifest.json").read_text())
    config = RunConfig.model_validate(manifest["config"])
    report = quick_check(config, Run(args.run_dir, config), args.episodes, args.split)
    for name, r in report["policies"].items():
        print(f"{name:<10} {r['mean_return']:.3f}  ci95 [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
    for name, d in report["paired"].items():
        print(f"{name:<15} {d['mean']:+.3f}  paired ci95 [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]")
    print(f"GRPO mean frac_reward_zero_std: {report['grpo_frac_reward_zero_std_mean']}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib", description="Agent RL workbook")
    verbs = parser.add_subparsers(dest="verb", required=True)
    b = verbs.add_parser("baselines", help="evaluate baseline and trivial policies")
    b.add_argument("--env", default="polyguard")
    b.add_argument("--split", default="holdout", choices=["train", "holdout", "holdout_novel"])
    b.add_argument("--episodes", type=int, default=500)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--policies", nargs="*", default=None)
    b.add_argument("--out", type=Path, default=None)
    b.set_defaults(func=_baselines)
    s = verbs.add_parser("stage", help="run one training stage headless (also under accelerate launch / torchrun)")
    s.add_argument("stage", choices=["corpus", "sft", "grpo"])
    s.add_argument("--profile", default="cpu-smoke")
    s.add_argument("--run-dir", type=Path, default=None)
    s.add_argument("--resume-from", default=None, help="grpo: a checkpoint folder to continue from")
    s.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, e.g. grpo.max_steps=5")
    s.set_defaults(func=_stage)
    q = verbs.add_parser("quickcheck", help="closed-loop SFT vs GRPO vs baselines on held-out episodes")
    q.add_argument("--run-dir", type=Path, required=True)
    q.add_argument("--episodes", type=int, default=200)
    q.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    q.set_defaults(func=_quickcheck)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
