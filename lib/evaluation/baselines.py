"""`python -m lib baselines`: every baseline and trivial policy over N episodes, with bootstrap CIs and the
environment's speed in steps per second (measured on the teacher's rollouts in one process)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..envs import EnvSpec
from ..episodes import Improver, run_episode, scripted_policy
from ..io import atomic_write_text
from ..stats import bootstrap_ci


def evaluate_policy(env, policy, seeds, split: str) -> dict:
    episodes = [run_episode(env, policy, s, split) for s in seeds]
    returns = [e.episode_return for e in episodes]
    steps = sum(e.steps for e in episodes)
    lo, hi = bootstrap_ci(returns)
    return {
        "mean_return": float(np.mean(returns)),
        "ci95": [lo, hi],
        "mean_steps": steps / len(episodes),
        "invalid_rate": sum(e.invalid for e in episodes) / steps,
        "rule_ended": sum(e.exploit is not None for e in episodes) / len(episodes),
        "returns": {str(e.seed): e.episode_return for e in episodes},
    }


def steps_per_second(env, policy, seeds, split: str) -> float:
    start, steps = time.perf_counter(), 0
    for seed in seeds:
        steps += run_episode(env, policy, seed, split).steps
    return steps / (time.perf_counter() - start)


def run_baselines(
    spec: EnvSpec, split: str, episodes: int, seed: int, policies=None, *, env: str | None = None
) -> dict:
    """Every policy in `policies` (default: the reported ones; `improver` names the teacher's one-step
    improvement, a reference, and `improver:<policy>` the same lookahead finished by another policy) of environment
    `spec` on `episodes` seeds from `seed` of `split`. The report names the environment `env` (the registry name, a
    run's `config.env`; default `spec.name`)."""
    if episodes < 1:
        raise ValueError("episodes must be >= 1")
    env_name, env = env or spec.name, spec.make_env()
    seeds = range(seed, seed + episodes)
    names = list(policies or spec.reported_policies)
    results = {
        name: {
            "kind": "reference" if name.partition(":")[0] == Improver.name else spec.policy_kind(name),
            **evaluate_policy(env, scripted_policy(spec, name), seeds, split),
        }
        for name in tqdm(names, desc=f"baselines/{split}")
    }
    return {
        "env": env_name,
        "split": split,
        "episodes": episodes,
        "seed": seed,
        "teacher": spec.teacher,
        "policies": results,
        "env_steps_per_second": steps_per_second(env, spec.make_policy(spec.teacher), seeds, split),
    }


def format_table(report: dict) -> str:
    rows = sorted(report["policies"].items(), key=lambda kv: -kv[1]["mean_return"])
    lines = [
        f"{report['env']} / {report['split']} / {report['episodes']} episodes",
        f"{'policy':<20}{'mean_return':>12}{'ci95':>18}{'steps':>8}{'invalid':>9}",
    ]
    for name, r in rows:
        ci = "[{:.3f}, {:.3f}]".format(*r["ci95"])
        lines.append(f"{name:<20}{r['mean_return']:>12.3f}{ci:>18}{r['mean_steps']:>8.2f}{r['invalid_rate']:>9.3f}")
    lines.append(f"env steps/second ({report['teacher']} rollouts): {report['env_steps_per_second']:,.0f}")
    return "\n".join(lines)


def write_report(report: dict, out: Path) -> None:
    atomic_write_text(Path(out), json.dumps(report, indent=2))


def run_baselines_stage(config, run) -> dict:
    """Stage `baselines`: every baseline and trivial policy on holdout and holdout_novel, before any training.
    Writes baselines/baselines.json ({split: report}); notebook 02_baselines shows it."""
    from ..io import atomic_write_json

    started = run.begin("baselines")
    reports = {
        split: run_baselines(config.spec, split, config.eval.episodes, 0, env=config.env)
        for split in ("holdout", "holdout_novel")
    }
    path = run.stage_dir("baselines") / "baselines.json"
    atomic_write_json(path, reports)
    return run.stage_done(
        "baselines",
        started=started,
        params={"episodes": config.eval.episodes},
        inputs={"env": config.env},
        outputs={"baselines.json": str(path)},
        metrics={
            f"{split}/{name}": r["mean_return"] for split, rep in reports.items() for name, r in rep["policies"].items()
        },
    )


def baselines_table(path: Path | str):
    """baselines.json as one table: split, policy, mean return, CI, steps, invalid rate (best first per split)."""
    import pandas as pd

    reports = json.loads(Path(path).read_text())
    rows = [
        {
            "split": split,
            "policy": name,
            "mean return": round(r["mean_return"], 3),
            "95% CI": "[{:.3f}, {:.3f}]".format(*r["ci95"]),
            "steps": round(r["mean_steps"], 2),
            "invalid rate": round(r["invalid_rate"], 3),
        }
        for split, report in reports.items()
        for name, r in report["policies"].items()
    ]
    return pd.DataFrame(rows).sort_values(["split", "mean return"], ascending=[True, False]).reset_index(drop=True)


def baselines_summary(path: Path | str, spec: EnvSpec, split: str = "holdout") -> str:
    """One line per split: the oracle, the teacher, random and the best trivial policy, by their roles in `spec`
    (the run's `config.spec`)."""
    report = json.loads(Path(path).read_text())[split]
    p = report["policies"]
    trivial = {n: r["mean_return"] for n, r in p.items() if r.get("kind") == "trivial"}
    best = max(trivial, key=trivial.get) if trivial else None
    return (
        f"{split}: oracle ({spec.oracle}) {p[spec.oracle]['mean_return']:.3f}, teacher ({spec.teacher}) "
        f"{p[spec.teacher]['mean_return']:.3f}, random {p[spec.random]['mean_return']:.3f}"
        + (f", best trivial ({best}) {trivial[best]:.3f}" if best else "")
    )


def markdown_table(reports: dict[str, dict]) -> str:
    """{split: report} as one Markdown table: each policy's mean return [95% CI] and the share of its episodes an
    anti-cheat rule ended, per split, best on the first split first."""
    splits = list(reports)
    first = reports[splits[0]]["policies"]
    header = (
        "| policy | kind | " + " | ".join(f"{s} (n={reports[s]['episodes']}) | ended by a rule" for s in splits) + " |"
    )
    lines = [header, "|" + " --- |" * (2 + 2 * len(splits))]
    for name in sorted(first, key=lambda n: -first[n]["mean_return"]):
        cells = []
        for split in splits:
            r = reports[split]["policies"][name]
            cells += [f"{r['mean_return']:.3f} [{r['ci95'][0]:.3f}, {r['ci95'][1]:.3f}]", f"{r['rule_ended']:.0%}"]
        lines.append(f"| {name} | {first[name]['kind']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
