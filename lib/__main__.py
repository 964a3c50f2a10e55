"""`python -m lib <verb>`: the workbook's command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _baselines(args) -> int:
    from .envs import UnknownEnvironmentError, builtin_names, get_spec
    from .evaluation.baselines import format_table, markdown_table, run_baselines, write_report

    if args.env is None:
        raise UnknownEnvironmentError(f"--env is required: one of {builtin_names()} or a dotted module path")
    spec = get_spec(args.env)
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
    from .config import load_config
    from .runs import read_config

    if args.profile is None and args.run_dir and (Path(args.run_dir) / "manifest.json").exists():
        if args.set:
            raise ValueError("--set applies to a new run; this run's config is fixed in its manifest.json")
        return read_config(args.run_dir)
    return load_config(args.profile or "cpu-smoke", _parse_overrides(args.set))


def _stage(args) -> int:
    from .distributed import is_main
    from .pipeline.stages import run_stage
    from .runs import Run, new_run_id

    config = _config_for(args)
    run_dir = args.run_dir or Path(config.output_root) / new_run_id(config.profile)
    run = Run(run_dir, config)
    record = run_stage(args.stage, config, run, resume_from=args.resume_from)
    if not is_main():  # under accelerate / torchrun rank 0 reports (and alone wrote the run's files)
        return 0
    if args.stage == "report":
        from .gate import format_verdict

        print(format_verdict(record["verdict"]))
        print(f"report: {record['report']}")
        return 0
    shown = {k: v for k, v in record["metrics"].items() if not isinstance(v, (list, dict))}
    print(f"stage {args.stage} {record['status']} in {record['duration_s']}s -> {run.dir}: {shown}")
    return 0


def _bench_train(args) -> int:
    from .bench.bench_train import bench_train

    bench_train(args.profile, args.repeats, args.out)
    return 0


def _bench_speed(args) -> int:
    """Today's path against this checkout's, with the bare-loop limits beside them (lib/bench/bench_speed.py)."""
    from .bench.bench_speed import run_bench

    run_bench(args.profile, args.baseline_ref, args.grpo_steps, args.eval_episodes, args.out, args.sft_steps)
    return 0


def _bench_serve(args) -> int:
    """Load benchmark of a fresh localhost server (lib/bench/bench_serve.py); non-zero on any error."""
    import json

    from .bench.bench_serve import bench_serve
    from .io import atomic_write_json

    result = bench_serve(args.env, clients=args.clients, seconds=args.seconds)
    print(json.dumps(result, indent=2))
    if args.out:
        atomic_write_json(args.out, result)
    return 0 if result["server_errors"] == 0 and result["crashed_sessions"] == 0 else 1


def _bench_gpu(args) -> int:
    """Where a profile's time goes on this machine's accelerator (lib/bench/bench_gpu.py); writes one JSON."""
    from .bench.bench_gpu import run_bench
    from .io import atomic_write_json

    report = run_bench(
        args.profile,
        _parse_overrides(args.set),
        sft_steps=args.sft_steps,
        grpo_steps=args.grpo_steps,
        eval_episodes=args.eval_episodes,
    )
    atomic_write_json(args.out, report)
    sft, grpo, evaluation = report["sft"], report["grpo"]["median_after_first"], report["evaluation"]
    print(
        f"{report['device'].get('gpu', 'cpu')} {report['backend']} {report['precision']}: "
        f"SFT {sft['tokens_per_s']:.0f} tok/s = {report['sft_stage_vs_bare_ratio']:.1%} of bare forward+backward "
        f"({report['bare_forward_backward']['tokens_per_s']:.0f} tok/s); GRPO {grpo['step_s']:.2f} s/step "
        f"(generation {grpo['generation_s']:.2f}, reward {grpo['reward_s']:.2f}, rest {grpo['rest_s']:.2f}); "
        f"evaluation {evaluation['episodes_per_s']:.1f} episodes/s -> {args.out}"
    )
    return 0


def _probe_explore(args) -> int:
    """Exploration on a fixed set of states (lib/bench/probe_explore.py, `probe`) for the run's SFT model or any
    model/adapter."""
    from .bench.probe_explore import probe
    from .io import atomic_write_json
    from .runs import Run, read_config

    config = read_config(args.run_dir)
    run = Run(args.run_dir, config)
    model = args.model or run.read_stage("sft")["outputs"]["model"]
    report = probe(config, run, model, args.adapter, args.states, args.margin)
    for part in ("all", "improvable"):
        r = report[part]
        if r["states"]:
            print(
                f"{part:<11} {r['states']:4d} states: P(some of {report['group_size']} samples beats the reference) "
                f"{r['beats_reference']:.3f}, E[best - reference] {r['best_minus_reference']:+.3f}, candidate entropy "
                f"{r['entropy']:.3f} nats, mass on candidates {r['mass']:.3f}, p(best) {r['p_best']:.3f}"
            )
    for kind, r in report["improvable_by_best_kind"].items():
        print(
            f"  best={kind:<10} {r['states']:4d} states: P(beats) {r['beats_reference']:.3f}, p(best) {r['p_best']:.4f}"
        )
    if args.out:
        atomic_write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


def _compare(args) -> int:
    """Forks of one base, each quickchecked on the same seeds: every variant's GRPO minus the first run's GRPO,
    paired by seed, as a markdown table (the ablation table)."""
    from .reporting.compare import compare_table, pair_table

    table = pair_table(args.runs) if args.pairs else compare_table(args.runs, args.split)
    print(table)
    if args.out:
        from .io import atomic_write_text

        atomic_write_text(args.out, table + "\n")
    return 0


def _fork(args) -> int:
    from .pipeline.fork import fork_run

    config, run = fork_run(args.base, args.run_dir, _parse_overrides(args.set))
    print(
        f"forked {args.base} -> {run.dir} (shares corpus, baselines, sft); "
        f"then: python -m lib stage grpo --run-dir {run.dir}"
    )
    return 0


def _gate(args) -> int:
    from .gate import format_verdict, require_run_folder, run_gate

    verdict = run_gate(require_run_folder(args.run_dir))
    print(format_verdict(verdict))
    return 0 if verdict["passed"] else 1


def _run(args) -> int:
    from .pipeline.runner import run_environments, run_profile

    overrides = _parse_overrides(args.set)
    if not args.envs:
        return 0 if run_profile(args.profile, args.run_id, args.stages, overrides) else 1
    if args.run_id:
        raise ValueError("--run-id names one run; with --envs each environment gets its own run id")
    return 0 if run_environments(args.profile, args.envs, args.stages, overrides) else 1


def _activate(args) -> int:
    from .export.postsave import activate

    record = activate(args.run_dir, args.artifact)
    print(
        f"active model: {record['artifact']} {record['path']} (sha256 {record['sha256'][:12]}) "
        f"-> {Path(args.run_dir).parent / 'active_model.json'}"
    )
    return 0


def _model_outputs(args) -> int:
    from .export.merge import model_outputs_worker

    model_outputs_worker(args.run_dir, args.model_dir, args.prompts, args.out)
    return 0


def _postsave_worker(args) -> int:
    from .export.postsave import postsave_worker

    postsave_worker(args.run_dir, args.model_dir, args.episodes, args.out)
    return 0


def _quickcheck(args) -> int:
    from .evaluation.evaluate import quick_check
    from .runs import Run, read_config

    config = read_config(args.run_dir)
    report = quick_check(config, Run(args.run_dir, config), args.episodes, args.split)
    for name, r in report["policies"].items():
        print(f"{name:<10} {r['mean_return']:.3f}  ci95 [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]")
    for name, d in report["paired"].items():
        print(f"{name:<15} {d['mean']:+.3f}  paired ci95 [{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}]")
    gap = report["gap_closure"]
    print(
        f"gap closure (GRPO - teacher) / (oracle - teacher): {gap['mean']:+.3f}  "
        f"ci95 [{gap['ci95'][0]:+.3f}, {gap['ci95'][1]:+.3f}]"
    )
    print(f"GRPO mean frac_reward_zero_std: {report['grpo_frac_reward_zero_std_mean']}")
    for key, value in report["grpo_explore"].items():
        print(f"GRPO {key}: {value:.4f}")
    return 0


def _summary(args) -> int:
    from .io import atomic_write_text
    from .reporting.summary import environment_table, run_results, seed_table

    if args.seeds:
        text = seed_table(args.runs)
    else:
        text = run_results(args.runs[0]) if len(args.runs) == 1 else environment_table(args.runs)
    print(text)
    if args.out:
        atomic_write_text(args.out, text + "\n")
    return 0


def _env_table(args) -> int:
    from .envs import get_spec
    from .evaluation.baselines import run_baselines
    from .reporting.env_tables import env_tables

    spec = get_spec(args.env)
    reports = {split: run_baselines(spec, split, args.episodes, args.seed, env=args.env) for split in args.split}
    print(env_tables(reports))
    return 0


def _fingerprint(args) -> int:
    import json

    from .bench.fingerprint import fingerprint
    from .envs import builtin_names
    from .io import atomic_write_json

    found = []
    for env in args.env or builtin_names():
        found.append(fingerprint(env, args.episodes, tuple(args.split), tuple(args.ignore)))
        print(json.dumps(found[-1]))
    if args.out:
        atomic_write_json(args.out, found)
    return 0


def _imports(args) -> int:
    from .imports import cycles, env_violations, floor_cycles, hidden_imports, report

    print(report())
    return 1 if env_violations() or cycles() or floor_cycles() or hidden_imports() else 0


def _add_set(parser, help="config overrides, e.g. grpo.max_steps=5; repeat --set or list several after one"):
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help=help)


def main(argv=None) -> int:
    from .envs import builtin_names
    from .pipeline.stages import STAGE_NAMES
    from .reporting.cli import add_run_tool_verbs
    from .serve.cli import add_serve_verbs

    parser = argparse.ArgumentParser(prog="python -m lib", description="Agent RL workbook")
    verbs = parser.add_subparsers(dest="verb", required=True)
    b = verbs.add_parser("baselines", help="evaluate baseline and trivial policies")
    b.add_argument("--env", default=None, help=f"one of {builtin_names()} or a dotted module path defining SPEC")
    b.add_argument("--split", nargs="+", default=["holdout"], choices=["train", "holdout", "holdout_novel"])
    b.add_argument("--markdown", action="store_true", help="also print one Markdown table over the splits")
    b.add_argument("--episodes", type=int, default=500)
    b.add_argument("--seed", type=int, default=0)
    b.add_argument("--policies", nargs="*", default=None)
    b.add_argument("--out", type=Path, default=None)
    b.set_defaults(func=_baselines)
    s = verbs.add_parser("stage", help="run one training stage headless (also under accelerate launch / torchrun)")
    s.add_argument("stage", choices=STAGE_NAMES)
    s.add_argument(
        "--profile", default=None, help="profile name or yaml path (default: the run's own config, else cpu-smoke)"
    )
    s.add_argument("--run-dir", type=Path, default=None)
    s.add_argument("--resume-from", default=None, help="grpo: a checkpoint folder to continue from")
    _add_set(s)
    s.set_defaults(func=_stage)
    q = verbs.add_parser("quickcheck", help="closed-loop SFT vs GRPO vs baselines on held-out episodes")
    q.add_argument("--run-dir", type=Path, required=True)
    q.add_argument("--episodes", type=int, default=200)
    q.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel", "train"])
    q.set_defaults(func=_quickcheck)
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
    _add_set(r)
    r.set_defaults(func=_run)
    f = verbs.add_parser(
        "fork",
        help="a new run sharing a run's corpus and SFT model, with other grpo/eval/export "
        "settings: one change at a time, paired",
    )
    f.add_argument("base", type=Path)
    f.add_argument("--run-dir", type=Path, required=True)
    _add_set(f, help="grpo.*, eval.*, export.*")
    f.set_defaults(func=_fork)
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
    p = verbs.add_parser(
        "probe-explore",
        help="exploration on a fixed set of states: can the policy sample what "
        "beats the teacher? (any model folder or adapter)",
    )
    p.add_argument("--run-dir", type=Path, required=True)
    p.add_argument("--model", default=None, help="model folder (default: the run's SFT model)")
    p.add_argument("--adapter", default=None, help="a LoRA adapter on top, e.g. outputs/<id>/grpo/adapter")
    p.add_argument("--states", type=int, default=64, help="the first N of the run's GRPO prompts")
    p.add_argument("--margin", type=float, default=0.05, help="improvable: some candidate beats the reference by this")
    p.add_argument("--out", type=Path, default=None)
    p.set_defaults(func=_probe_explore)
    g = verbs.add_parser(
        "bench-gpu",
        help="benchmark: SFT tokens/s vs bare forward+backward, GRPO step split, "
        "evaluation episodes/s, peak memory (one JSON)",
    )
    g.add_argument("--profile", default="gpu-smollm2")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--sft-steps", type=int, default=30)
    g.add_argument("--grpo-steps", type=int, default=6)
    g.add_argument("--eval-episodes", type=int, default=200)
    _add_set(g, help="config overrides")
    g.set_defaults(func=_bench_gpu)
    t = verbs.add_parser(
        "bench-train",
        help="benchmark: wall time of the corpus, sft and grpo stage commands, repeated; prints the median",
    )
    t.add_argument("--profile", default="cpu-smoke")
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_bench_train)
    t = verbs.add_parser(
        "bench-speed",
        help="benchmark: multi-turn GRPO turns/s, evaluation episodes/s and scoring tokens/s, SFT tokens/s of a "
        "baseline commit against this checkout, beside bare forward and forward+backward loops (one JSON)",
    )
    t.add_argument("--profile", default="cpu-smoke")
    t.add_argument("--baseline-ref", default="0868a4d", help="the commit whose path is 'today' (a git ref)")
    t.add_argument("--grpo-steps", type=int, default=4)
    t.add_argument("--sft-steps", type=int, default=None, help="stop SFT early (its rate only; default: the profile's)")
    t.add_argument("--eval-episodes", type=int, default=100)
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_bench_speed)
    b = verbs.add_parser("bench-serve", help="load benchmark: concurrent clients against a fresh localhost server")
    b.add_argument("--env", required=True, help=f"one of {builtin_names()} or a dotted module path defining SPEC")
    b.add_argument("--clients", type=int, default=32)
    b.add_argument("--seconds", type=float, default=20.0)
    b.add_argument("--out", type=Path, default=None)
    b.set_defaults(func=_bench_serve)
    g = verbs.add_parser("gate", help="re-check a finished run; exits non-zero listing every failed check")
    g.add_argument("run_dir", type=Path)
    g.set_defaults(func=_gate)
    a = verbs.add_parser("activate", help="name the artifact of a run that later loads use (outputs/active_model.json)")
    a.add_argument("run_dir", type=Path)
    a.add_argument(
        "--artifact",
        choices=["grpo", "merged", "sft"],
        default=None,
        help="default: the first that exists of grpo, merged, sft",
    )
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
    u = verbs.add_parser(
        "summary", help="Markdown results from finished runs: one run's table, or environment x policy"
    )
    u.add_argument("runs", nargs="+", type=Path)
    u.add_argument(
        "--seeds",
        action="store_true",
        help="one row per environment x seed x split: SFT, GRPO, teacher, improver, oracle, GRPO - teacher, gaps",
    )
    u.add_argument("--out", type=Path, default=None)
    u.set_defaults(func=_summary)
    e = verbs.add_parser("env-table", help="an environment README's generated baseline tables, in Markdown")
    e.add_argument("--env", required=True, help=f"one of {builtin_names()} or a dotted module path defining SPEC")
    e.add_argument("--split", nargs="+", default=["holdout"], choices=["train", "holdout", "holdout_novel"])
    e.add_argument("--episodes", type=int, default=500)
    e.add_argument("--seed", type=int, default=0)
    e.set_defaults(func=_env_table)
    f = verbs.add_parser(
        "fingerprint",
        help="sha256 of every environment's returns, prompts and steps under every scripted policy (before/after)",
    )
    f.add_argument("--env", nargs="+", default=None, help="default: every built-in environment")
    f.add_argument("--episodes", type=int, default=500, help="seeds per policy and split")
    f.add_argument(
        "--split", nargs="+", default=["holdout", "holdout_novel"], choices=["train", "holdout", "holdout_novel"]
    )
    f.add_argument("--ignore", nargs="+", default=[], metavar="INFO_KEY", help="info keys left out of the step hash")
    f.add_argument("--out", type=Path, default=None)
    f.set_defaults(func=_fingerprint)
    add_run_tool_verbs(verbs)
    i = verbs.add_parser(
        "imports",
        help="each generic module's workbook imports; fails on an environment import, a cycle (between modules or "
        "between floors) or an import hidden behind a string",
    )
    i.set_defaults(func=_imports)
    add_serve_verbs(verbs, env_help=f"one of {builtin_names()} or a dotted module path defining SPEC")
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
