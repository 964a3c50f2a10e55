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


def _config_for(args):
    """The run's own config when the run folder exists (later stages), else the named profile (default cpu-smoke)."""
    import json

    from .config import RunConfig, load_config

    manifest = Path(args.run_dir) / "manifest.json" if args.run_dir else None
    if args.profile is None and manifest is not None and manifest.exists():
        if args.set:
            raise ValueError("--set applies to a new run; this run's config is fixed in its manifest.json")
        return RunConfig.model_validate(json.loads(manifest.read_text())["config"])
    return load_config(args.profile or "cpu-smoke", _parse_overrides(args.set))


def run_stage(stage: str, config, run, resume_from=None) -> dict:
    """One stage by name: the CLI, the notebooks and the runner all come through here."""
    if stage == "corpus":
        from .corpus import run_corpus

        return run_corpus(config, run)
    if stage == "sft":
        from .train import run_sft

        return run_sft(config, run)
    if stage == "grpo":
        from .train import run_grpo

        return run_grpo(config, run, resume_from=resume_from)
    if stage == "evaluate":
        from .evaluate import run_evaluate

        return run_evaluate(config, run)
    if stage == "export":
        from .export import run_export

        return run_export(config, run)
    if stage == "postsave":
        from .postsave import run_postsave

        return run_postsave(config, run)
    raise ValueError(f"unknown stage {stage!r}; choose one of {list(STAGES)}")


STAGES = ("corpus", "sft", "grpo", "evaluate", "export", "postsave")


def _stage(args) -> int:
    from .runs import Run, new_run_id

    config = _config_for(args)
    run_dir = args.run_dir or Path(config.output_root) / new_run_id(config.profile)
    run = Run(run_dir, config)
    record = run_stage(args.stage, config, run, resume_from=args.resume_from)
    shown = {k: v for k, v in record["metrics"].items() if not isinstance(v, (list, dict))}
    print(f"stage {args.stage} {record['status']} in {record['duration_s']}s -> {run.dir}: {shown}")
    return 0


def _activate(args) -> int:
    from .postsave import activate

    record = activate(args.run_dir, args.artifact)
    print(f"active model: {record['artifact']} {record['path']} (sha256 {record['sha256'][:12]}) -> {Path(args.run_dir).parent / 'active_model.json'}")
    return 0


def _model_outputs(args) -> int:
    from .export import model_outputs_worker

    model_outputs_worker(args.run_dir, args.model_dir, args.prompts, args.out)
    return 0


def _postsave_worker(args) -> int:
    from .postsave import postsave_worker

    postsave_worker(args.run_dir, args.model_dir, args.episodes, args.out)
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
    s.add_argument("stage", choices=STAGES)
    s.add_argument("--profile", default=None, help="profile name or yaml path (default: the run's own config, else cpu-smoke)")
    s.add_argument("--run-dir", type=Path, default=None)
    s.add_argument("--resume-from", default=None, help="grpo: a checkpoint folder to continue from")
    s.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="config overrides, e.g. grpo.max_steps=5")
    s.set_defaults(func=_stage)
    q = verbs.add_parser("quickcheck", help="closed-loop SFT vs GRPO vs baselines on held-out episodes")
    q.add_argument("--run-dir", type=Path, required=True)
    q.add_argument("--episodes", type=int, default=200)
    q.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    q.set_defaults(func=_quickcheck)
    a = verbs.add_parser("activate", help="name the artifact of a run that later loads use (outputs/active_model.json)")
    a.add_argument("run_dir", type=Path)
    a.add_argument("--artifact", choices=["grpo", "merged", "sft"], default=None,
                   help="default: the first that exists of grpo, merged, sft")
    a.set_defaults(func=_activate)
    m = verbs.add_parser("_model-outputs", help="internal: fresh-process side of the export check")
    m.add_argument("--run-dir", type=Path, required=True)
    m.add_argument("--model-dir", type=Path, required=True)
    m.add_argument("--prompts", type=Path, required=True)
    m.add_argument("--out", type=Path, required=True)
    m.set_defaults(func=_model_outputs)
    w = verbs.add_parser("_postsave-worker", help="internal: fresh-process side of postsave")
    w.add_argument("--run-dir", type=Path, required=True)
    w.add_argument("--model-dir", type=Path, required=True)
    w.add_argument("--episodes", type=int, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.set_defaults(func=_postsave_worker)
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
