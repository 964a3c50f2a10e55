"""The verbs of `python -m lib` that run stages: `stage` (one stage, headless), `run` (the whole workbook) and `fork`
(a new run sharing a run's corpus and SFT model). Registered by lib/__main__.py; heavy imports happen only when a
verb runs."""

from __future__ import annotations

from pathlib import Path

from ..arguments import add_set, parse_overrides


def _config_for(args):
    """The run's own config when the run folder exists (later stages), else the named profile (default cpu-smoke)."""
    from ..config import load_config
    from ..runs import read_config

    if args.profile is None and args.run_dir and (Path(args.run_dir) / "manifest.json").exists():
        if args.set:
            raise ValueError("--set applies to a new run; this run's config is fixed in its manifest.json")
        return read_config(args.run_dir)
    return load_config(args.profile or "cpu-smoke", parse_overrides(args.set))


def _stage(args) -> int:
    from ..distributed import is_main
    from ..runs import Run, new_run_id
    from .stages import run_stage

    config = _config_for(args)
    run_dir = args.run_dir or Path(config.output_root) / new_run_id(config.profile)
    run = Run(run_dir, config)
    record = run_stage(args.stage, config, run, resume_from=args.resume_from)
    if not is_main():  # under accelerate / torchrun rank 0 reports (and alone wrote the run's files)
        return 0
    if args.stage == "report":
        from ..gate import format_verdict

        print(format_verdict(record["verdict"]))
        print(f"report: {record['report']}")
        return 0
    shown = {k: v for k, v in record["metrics"].items() if not isinstance(v, (list, dict))}
    print(f"stage {args.stage} {record['status']} in {record['duration_s']}s -> {run.dir}: {shown}")
    return 0


def _run(args) -> int:
    from .runner import run_environments, run_profile

    overrides = parse_overrides(args.set)
    if not args.envs:
        return 0 if run_profile(args.profile, args.run_id, args.stages, overrides) else 1
    if args.run_id:
        raise ValueError("--run-id names one run; with --envs each environment gets its own run id")
    return 0 if run_environments(args.profile, args.envs, args.stages, overrides) else 1


def _fork(args) -> int:
    from .fork import fork_run

    config, run = fork_run(args.base, args.run_dir, parse_overrides(args.set))
    print(
        f"forked {args.base} -> {run.dir} (shares corpus, baselines, sft); "
        f"then: python -m lib stage grpo --run-dir {run.dir}"
    )
    return 0


def add_verbs(verbs) -> None:
    from .stages import STAGE_NAMES

    s = verbs.add_parser("stage", help="run one training stage headless (also under accelerate launch / torchrun)")
    s.add_argument("stage", choices=STAGE_NAMES)
    s.add_argument(
        "--profile", default=None, help="profile name or yaml path (default: the run's own config, else cpu-smoke)"
    )
    s.add_argument("--run-dir", type=Path, default=None)
    s.add_argument("--resume-from", default=None, help="grpo: a checkpoint folder to continue from")
    add_set(s)
    s.set_defaults(func=_stage)
    r = verbs.add_parser(
        "run", help="run the whole workbook (One_Run_Runner.ipynb and every stage notebook) for a profile"
    )
    r.add_argument("--profile", default="cpu-smoke")
    r.add_argument("--run-id", default=None)
    r.add_argument("--stages", nargs="*", default=None, help="default: all")
    r.add_argument(
        "--envs",
        nargs="+",
        default=None,
        help="run each environment (profile <profile>-<env> if it exists) and "
        "write one environment x policy summary table",
    )
    add_set(r)
    r.set_defaults(func=_run)
    f = verbs.add_parser(
        "fork",
        help="a new run sharing a run's corpus and SFT model, with other rl/grpo/aggrevate/eval/export "
        "settings: one change at a time, paired",
    )
    f.add_argument("base", type=Path)
    f.add_argument("--run-dir", type=Path, required=True)
    add_set(f, help="rl.*, grpo.*, aggrevate.*, eval.*, export.*")
    f.set_defaults(func=_fork)
