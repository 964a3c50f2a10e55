"""The benchmark and probe verbs of `python -m lib`: `bench-gpu`, `bench-train`, `bench-speed`, `bench-learner`,
`bench-tokens`, `bench-serve`, `probe-explore`, `agreement` (the SFT model at the teacher's own states, per kind of
action) and `fingerprint`; code that measures the workbook, never part of a run's stages.
Registered by lib/__main__.py; heavy imports happen only when a verb runs."""

from __future__ import annotations

from pathlib import Path

from ..arguments import add_env_args, add_set, env_help, parse_overrides
from .trial_tokens import add_parser as _add_bench_trial_tokens


def _bench_train(args) -> int:
    from .bench_train import bench_train

    bench_train(args.profile, args.repeats, args.out)
    return 0


def _bench_speed(args) -> int:
    """Today's path against this checkout's, with the bare-loop limits beside them (lib/bench/bench_speed.py)."""
    from .bench_speed import run_bench

    run_bench(args.profile, args.baseline_ref, args.grpo_steps, args.eval_episodes, args.out, args.sft_steps)
    return 0


def _bench_learner(args) -> int:
    """The pretrained learner on this CPU: today's path, the profile's learner and its bare loop
    (lib/bench/bench_learner.py); writes one JSON."""
    from .bench_learner import run_bench

    run_bench(args.profile, args.sft_steps, args.states, args.episodes, args.out)
    return 0


def _bench_tokens(args) -> int:
    """The tokens a run's RL policy computes to play, with and without each episode's cache (bench_tokens.py)."""
    from .bench_tokens import run_bench

    run_bench(args.run_dir, args.episodes, args.split, args.budget_mb, args.out)
    return 0


def _bench_serve(args) -> int:
    """Load benchmark of a fresh localhost server (lib/bench/bench_serve.py); non-zero on any error."""
    import json

    from ..io import atomic_write_json
    from .bench_serve import bench_serve

    result = bench_serve(args.env, clients=args.clients, seconds=args.seconds)
    print(json.dumps(result, indent=2))
    if args.out:
        atomic_write_json(args.out, result)
    return 0 if result["server_errors"] == 0 and result["crashed_sessions"] == 0 else 1


def _bench_gpu(args) -> int:
    """Where a profile's time goes on this machine's accelerator (lib/bench/bench_gpu.py); writes one JSON. With
    --modes, once per model.use_unsloth mode, each in a fresh process (lib/bench/gpu_modes.py)."""
    if args.modes:
        return _bench_gpu_modes(args)
    from ..io import atomic_write_json
    from .bench_gpu import run_bench, summary_line

    report = run_bench(
        args.profile,
        parse_overrides(args.set),
        sft_steps=args.sft_steps,
        grpo_steps=args.grpo_steps,
        eval_episodes=args.eval_episodes,
        random_model=args.random_model,
    )
    atomic_write_json(args.out, report)
    print(f"{summary_line(report)} -> {args.out}")
    return 0


def _bench_gpu_modes(args) -> int:
    from ..io import atomic_write_json
    from .bench_gpu import summary_line
    from .gpu_modes import run_modes

    argv = ["--profile", args.profile, "--sft-steps", str(args.sft_steps), "--grpo-steps", str(args.grpo_steps)]
    argv += ["--eval-episodes", str(args.eval_episodes)]
    argv += ["--random-model", args.random_model] if args.random_model else []
    result = run_modes(args.modes, [*argv, "--set", *args.set], args.log)
    atomic_write_json(args.out, result)
    for mode, record in result["modes"].items():
        if "skipped" in record:
            print(f"{mode}: skipped: {record['skipped']}")
        elif record["rc"] == 0:
            print(f"{mode}: {summary_line(record['report'])}")
        else:
            print(f"{mode}: FAILED (exit {record['rc']}):\n" + "\n".join(record["error_tail"][-30:]))
    print(f"wrote {args.out}")
    return 1 if any(record.get("rc", 0) != 0 for record in result["modes"].values()) else 0


def _agreement(args) -> int:
    from ..evaluation.closed_loop import sft_model_dir
    from ..inference import load_policy_model
    from ..io import atomic_write_json
    from ..runs import Run, read_config, read_stage_record
    from ..stats import kind_log_weights
    from ..training.imitation import agreement, logit_adjusted

    taus = _taus(args.logit_adjust) if args.logit_adjust else None
    if taus is not None:
        weights = kind_log_weights(read_stage_record(args.run_dir, "sft").get("metrics", {}).get("kind_mix"))
    config = read_config(args.run_dir)
    loaded = load_policy_model(sft_model_dir(Run(args.run_dir, config)), config.model)
    if taus is not None:
        report = {"run": Path(args.run_dir).name, **logit_adjusted(config, loaded, args.episodes, weights, taus)}
        print("log(trained share / corpus share): " + ", ".join(f"{k} {w:+.3f}" for k, w in weights.items()))
        for tau, t in report["by_tau"].items():
            kinds = ", ".join(f"{k} {v['agreement']:.3f} ({v['states']})" for k, v in t["by_kind"].items())
            print(f"  tau {tau:<5} agreement {t['agreement']:.4f}  {kinds}")
        out = Path(args.run_dir) / "sft" / "logit_adjust.json"
        atomic_write_json(out, report)
        print(f"wrote {out}")
        return 0
    report = {"run": Path(args.run_dir).name, **agreement(config, loaded, args.episodes)}
    print(
        f"SFT chose the teacher's action at {report['agreement']:.3f} of the teacher's {report['teacher_states']} "
        f"states ({args.episodes} validation episodes)"
    )
    for kind, k in report["by_kind"].items():
        print(
            f"  {kind:<14} {k['states']:5d} states  agreement {k['agreement']:.3f}  p(teacher's) {k['p_teacher']:.3f}"
        )
    print(
        "  confusions (teacher's kind -> the model's): "
        + ", ".join(f"{c} {n}" for c, n in report["confusions"].items())
    )
    atomic_write_json(Path(args.run_dir) / "sft" / "agreement.json", report)
    print(f"wrote {Path(args.run_dir) / 'sft' / 'agreement.json'}")
    return 0


def _taus(text: str) -> list[float]:
    """--logit-adjust's comma-separated list of numbers in [0, 1].

    >>> _taus("0, 0.5,1")
    [0.0, 0.5, 1.0]
    """
    try:
        taus = [float(t) for t in text.split(",")]
    except ValueError:
        raise SystemExit(f"--logit-adjust: {text!r} is not a comma-separated list of numbers, e.g. 0,0.5,1") from None
    bad = [t for t in taus if not 0.0 <= t <= 1.0]
    if bad:
        raise SystemExit(f"--logit-adjust: {bad} outside [0, 1] (0 = the model as trained, 1 = the resampling undone)")
    return taus


def _probe_explore(args) -> int:
    """Exploration on a fixed set of states (lib/bench/probe_explore.py, `probe`) for the run's SFT model or any
    model/adapter."""
    from ..io import atomic_write_json
    from ..runs import Run, read_config
    from .probe_explore import probe

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
                f"{r['entropy']:.3f} nats, mass on candidates {r['mass']:.3f}, p(best) {r['p_best']:.3f}, "
                f"p(reference's answer) {r['p_reference']:.3f}"
            )
    for kind, r in report["improvable_by_best_kind"].items():
        print(
            f"  best={kind:<10} {r['states']:4d} states: P(beats) {r['beats_reference']:.3f}, p(best) {r['p_best']:.4f}"
        )
    if args.out:
        atomic_write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


def _fingerprint(args) -> int:
    import json

    from ..envs import builtin_names
    from ..io import atomic_write_json
    from .fingerprint import fingerprint

    found = []
    for env in args.env or builtin_names():
        found.append(fingerprint(env, args.episodes, tuple(args.split), tuple(args.ignore)))
        print(json.dumps(found[-1]))
    if args.out:
        atomic_write_json(args.out, found)
    return 0


def _add_bench_gpu(verbs) -> None:
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
    g.add_argument(
        "--random-model",
        choices=["qwen2.5-0.5b", "small"],
        default=None,
        help="train a random-weight model of this shape, built here without the hub, instead of the profile's "
        "(small: only to check the plumbing on a CPU)",
    )
    g.add_argument(
        "--modes",
        nargs="+",
        choices=["auto", "never"],
        default=None,
        help="run once per model.use_unsloth mode, each in a fresh process, with the device's peak used memory; "
        "auto is skipped when Unsloth does not import",
    )
    g.add_argument("--log", type=Path, default=None, help="with --modes: every mode's console output, in one file")
    add_set(g, help="config overrides")
    g.set_defaults(func=_bench_gpu)


def _add_bench_tokens(verbs) -> None:
    t = verbs.add_parser(
        "bench-tokens",
        help="benchmark: prompt tokens a run's RL policy computes per played state, each state read whole against "
        "each episode keeping its key/value cache across its states (one JSON)",
    )
    t.add_argument("--run-dir", type=Path, required=True)
    t.add_argument("--episodes", type=int, default=50, help="held-out episodes each arm plays")
    t.add_argument("--split", default="holdout", choices=["holdout", "holdout_novel"])
    t.add_argument("--budget-mb", type=int, default=1024, help="the cached arm's model.episode_cache_mb")
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_bench_tokens)


def _bench_prompt_tokens(args) -> int:
    from transformers import AutoTokenizer

    from ..embedded import resolve_model_source
    from ..envs import get_spec
    from ..io import atomic_write_json
    from .prompt_tokens import prompt_token_report

    env_args = parse_overrides(args.env_arg) or None
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_source(args.model))
    report = {
        "env": args.env,
        "env_args": env_args or {},
        "model": args.model,
        **prompt_token_report(get_spec(args.env, env_args), tokenizer, range(args.episodes), args.split),
    }
    print(
        f"{args.env} {env_args or ''}: {report['states_per_episode']} states an episode, "
        f"{report['tokens_per_state']} tokens a state, {report['new_tokens_per_state']} new against the previous "
        f"state's prompt ({report['ratio']}x), {report['conversation_tokens_per_state']} as one conversation of "
        f"what changed ({report['conversation_ratio']}x); the shared run ends at: "
        + ", ".join(f"{line!r} {n}" for line, n in report["shared_run_ends_at"].items())
    )
    if args.out:
        atomic_write_json(args.out, report)
        print(f"wrote {args.out}")
    return 0


def _add_bench_prompt_tokens(verbs) -> None:
    t = verbs.add_parser(
        "bench-prompt-tokens",
        help="benchmark, tokenizer only: the prompt tokens per state of the teacher's episodes that a cache of the "
        "previous state's prompt would leave to compute, and the line where the shared run ends",
    )
    t.add_argument("--env", required=True)
    add_env_args(t)
    t.add_argument("--episodes", type=int, default=8, help="the teacher's episodes, seeds 0..N-1")
    t.add_argument("--split", default="holdout", choices=["train", "holdout", "holdout_novel"])
    t.add_argument("--model", default="smollm2-135m-instruct", help="whose tokenizer (embedded name, folder or hub id)")
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_bench_prompt_tokens)


def _add_agreement(verbs) -> None:
    a = verbs.add_parser(
        "agreement",
        help="a run's SFT model at the teacher's own states: its top candidate against the teacher's, per action kind",
    )
    a.add_argument("--run-dir", type=Path, required=True)
    a.add_argument("--episodes", type=int, default=30, help="validation episodes the teacher plays")
    a.add_argument(
        "--logit-adjust",
        default=None,
        metavar="TAUS",
        help="for an SFT trained with sft.kind_balance: agreement with tau * log(trained share / corpus share) of its "
        "kind subtracted from each candidate's score, for each comma-separated tau in [0, 1], the states scored once "
        "(sft/logit_adjust.json)",
    )
    a.set_defaults(func=_agreement)


def add_verbs(verbs) -> None:
    _add_agreement(verbs)
    _add_bench_trial_tokens(verbs)
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
    _add_bench_gpu(verbs)
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
    t = verbs.add_parser(
        "bench-learner",
        help="benchmark: the pretrained learner on this CPU; SFT tokens/s, scoring states/s and evaluation episodes/s "
        "of today's path (full SmolLM2, fp32) against the profile's learner, beside its bare loop (one JSON)",
    )
    t.add_argument(
        "--profile", required=True, help="the learner to measure against today's path (a cpu-smollm2-* profile)"
    )
    t.add_argument("--sft-steps", type=int, default=6, help="optimizer steps of each SFT (its rate only)")
    t.add_argument("--states", type=int, default=48, help="corpus states each learner scores")
    t.add_argument("--episodes", type=int, default=16, help="greedy holdout episodes each learner plays")
    t.add_argument("--out", type=Path, default=None)
    t.set_defaults(func=_bench_learner)
    _add_bench_tokens(verbs)
    _add_bench_prompt_tokens(verbs)
    b = verbs.add_parser("bench-serve", help="load benchmark: concurrent clients against a fresh localhost server")
    b.add_argument("--env", required=True, help=env_help())
    b.add_argument("--clients", type=int, default=32)
    b.add_argument("--seconds", type=float, default=20.0)
    b.add_argument("--out", type=Path, default=None)
    b.set_defaults(func=_bench_serve)
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
