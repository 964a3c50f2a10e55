"""Stage `evaluate`: closed-loop evaluation of the untrained, SFT and GRPO models and every baseline and trivial
policy on holdout, holdout_novel and a train sample, the model acting at every step.

`python -m lib stage evaluate --run-dir outputs/<id>`; notebook 05_evaluate calls `run_evaluate`. Writes
`evaluate/eval.json` (summaries, paired-by-seed differences, ablations, the `improved` verdict) and
`evaluate/episodes.jsonl` (every episode with every action and the `model_source` that produced it).
Provenance is checked before anything is written: a model action without a source, or from any source other
than the artifact under evaluation (a planted fallback), fails the stage.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from ..envs import get_spec
from ..episodes import Episode, Start, Step, play, policy_actor
from ..inference import load_policy_model, model_actor
from ..io import atomic_write_json, atomic_write_text
from ..models import is_tiny
from ..stats import bootstrap_ci, gap_closure, paired_difference

MODEL_POLICIES = ("untrained", "sft", "grpo")


class ProvenanceError(RuntimeError):
    """An evaluated action has no model_source, or one that is not the artifact being evaluated (a fallback)."""


def _recorder(actions: list[dict], source: dict):
    """The per-step hook of evaluation: every action, with the source that produced it and its latency."""

    def on_step(step: Step) -> None:
        record = {"seed": step.live.seed, "split": step.live.start.split, "step": step.live.steps,
                  "completion": step.text, "valid": "invalid" not in step.result.info, "reward": step.result.reward,
                  "model_source": source, "latency_s": step.latency_s, **step.live.extra}
        actions.append(record)
    return on_step


def run_model_episodes(model, tokenizer, source: dict, env_name: str, seeds, split: str, *, greedy: bool = True,
                       batch_size: int = 256, max_new_tokens: int = 16, veto_k: int = 0, desc: str = "episodes"):
    """Play every seed to the end with the model choosing every action, `batch_size` episodes in lockstep (one
    generate call per round; see `episodes.play`). With `veto_k` > 0 invalid outputs are re-asked (the
    legality-veto ablation). Returns (episodes sorted by seed, action records); every action record carries
    `model_source`."""
    actions: list[dict] = []
    episodes = play(lambda: get_spec(env_name).make_env(), [Start(seed, split) for seed in seeds],
                    model_actor(model, tokenizer, greedy=greedy, max_new_tokens=max_new_tokens, veto_k=veto_k),
                    batch_size=batch_size, on_step=_recorder(actions, source), desc=desc)
    return sorted(episodes, key=lambda e: e.seed), actions


def run_policy_episodes(env_name: str, name: str, seeds, split: str):
    """A baseline or trivial policy, recorded exactly like a model: every action names its source."""
    spec = get_spec(env_name)
    env, actions = spec.make_env(), []
    episodes = play(lambda: env, [Start(seed, split) for seed in seeds], policy_actor(spec.make_policy(name), copies=False),
                    on_step=_recorder(actions, {"policy": name}))
    return episodes, actions


def summarize(episodes: list[Episode], actions: list[dict], resamples: int = 2000) -> dict:
    returns = [e.episode_return for e in episodes]
    components: dict[str, list[float]] = {}
    for e in episodes:
        for name, value in e.components.items():
            components.setdefault(name, []).append(value)
    ends: dict[str, int] = {}
    for e in episodes:
        ends[e.end_reason] = ends.get(e.end_reason, 0) + 1
    latencies = [a["latency_s"] for a in actions]
    return {"n": len(episodes), "mean_return": float(np.mean(returns)), "ci95": list(bootstrap_ci(returns, resamples=resamples)),
            "components": {k: float(np.mean(v)) for k, v in sorted(components.items())},
            "invalid_rate": sum(not a["valid"] for a in actions) / len(actions), "mean_steps": float(np.mean([e.steps for e in episodes])),
            "latency_s_per_action": float(np.mean(latencies)), "end_reasons": dict(sorted(ends.items()))}


def check_provenance(records: list[dict], artifacts: dict[str, dict]) -> None:
    """Fail loudly unless every action of every episode record names the source that was evaluated:
    model policies their artifact's path and sha256, baselines their own name. Used before eval.json is
    written and again by the gate on episodes.jsonl."""
    problems = []
    for record in records:
        policy = record.get("policy")
        expected = artifacts.get(policy, {"policy": policy})
        for action in record.get("actions", []):
            source = action.get("model_source")
            where = f"{policy}/{record.get('split')}/seed {record.get('seed')}/step {action.get('step')}"
            if not source:
                problems.append(f"{where}: action has no model_source")
            elif action.get("fallback") or source != expected:
                problems.append(f"{where}: action came from {source}, not the evaluated {expected} (fallback)")
            if len(problems) >= 20:
                break
        if not record.get("actions"):
            problems.append(f"{policy}/{record.get('split')}/seed {record.get('seed')}: episode has no action records")
    if problems:
        raise ProvenanceError(f"{len(problems)}+ provenance failures, e.g.:\n  " + "\n  ".join(problems[:20]))


def _episode_records(policy: str, episodes: list[Episode], actions: list[dict], **extra) -> list[dict]:
    by_seed: dict[int, list[dict]] = {}
    for action in actions:
        by_seed.setdefault(action["seed"], []).append(action)
    return [{"policy": policy, "split": e.split, "seed": e.seed, "return": e.episode_return, "steps": e.steps,
             "invalid": e.invalid, "end_reason": e.end_reason, "components": e.components, **extra,
             "actions": [{k: v for k, v in a.items() if k not in ("seed", "split")} for a in by_seed.get(e.seed, [])]}
            for e in episodes]


def split_seeds(config, split: str) -> range:
    """Holdout splits: seeds 0..episodes-1 of their own seed block. Train: the first SFT corpus seeds (seen in training)."""
    if split == "train":
        return range(config.corpus.seed_offset, config.corpus.seed_offset + min(config.eval.train_episodes, config.corpus.sft_episodes))
    return range(config.eval.episodes)


def model_artifacts(config, run) -> dict[str, dict]:
    """Where each evaluated model lives: {name: {"model": folder or hub id, "adapter": folder or None}}."""
    sft, grpo = run.read_stage("sft"), run.read_stage("grpo")
    untrained = sft["inputs"]["base"] if is_tiny(config.model) else config.model.name
    return {"untrained": {"model": untrained, "adapter": None},
            "sft": {"model": sft["outputs"]["model"], "adapter": None},
            "grpo": {"model": grpo["outputs"]["base_model"], "adapter": grpo["outputs"]["adapter"]}}


def roles(spec) -> dict[str, str]:
    """Which policy plays each role the verdicts name: the environment's teacher, oracle and random policy."""
    return {"teacher": spec.teacher, "oracle": spec.oracle, "random": spec.random}


def _paired(returns: dict[str, dict[int, float]], role: dict[str, str], resamples: int) -> dict:
    """GRPO - SFT, GRPO - teacher and SFT - teacher, paired by seed; keys name roles ("grpo-teacher")."""
    named = {**returns, **{r: returns[name] for r, name in role.items() if name in returns}}
    return {f"{a}-{b}": paired_difference(named[a], named[b], resamples=resamples)
            for a, b in (("grpo", "sft"), ("grpo", "teacher"), ("sft", "teacher")) if a in named and b in named}


def run_evaluate(config, run, *, policies: list[str] | None = None) -> dict:
    """The evaluate stage. `policies` narrows the baseline list (tests); models are always evaluated."""
    from ..runs import seed_everything

    started = time.time()
    seed_everything(config.seed, config.deterministic)
    out = run.stage_dir("evaluate")
    resamples = config.eval.bootstrap_resamples
    spec = get_spec(config.env)
    role = roles(spec)
    baseline_names = policies or list(spec.reported_policies)
    records: list[dict] = []
    splits: dict[str, dict] = {}
    sources: dict[str, dict] = {}
    returns: dict[str, dict[str, dict[int, float]]] = {split: {} for split in config.eval.splits}
    loaded = {}
    for name, where in model_artifacts(config, run).items():
        loaded[name] = load_policy_model(where["model"], config.model, where["adapter"])
        sources[name] = loaded[name][2]
    for split in config.eval.splits:
        seeds = split_seeds(config, split)
        summaries = {}
        for name, (model, tokenizer, source) in loaded.items():
            episodes, actions = run_model_episodes(model, tokenizer, source, config.env, seeds, split,
                                                   batch_size=config.eval.batch_size,
                                                   max_new_tokens=config.grpo.max_completion_length, desc=f"evaluate/{split}/{name}")
            summaries[name] = {"kind": "model", **summarize(episodes, actions, resamples)}
            returns[split][name] = {e.seed: e.episode_return for e in episodes}
            records += _episode_records(name, episodes, actions)
        for name in tqdm(baseline_names, desc=f"evaluate/{split}/baselines"):
            episodes, actions = run_policy_episodes(config.env, name, seeds, split)
            summaries[name] = {"kind": spec.policy_kind(name), **summarize(episodes, actions, resamples)}
            returns[split][name] = {e.seed: e.episode_return for e in episodes}
            records += _episode_records(name, episodes, actions)
        splits[split] = {"seeds": [seeds.start, seeds.stop], "policies": summaries,
                         "paired": _paired(returns[split], role, resamples)}
        if {"grpo", role["teacher"], role["oracle"]} <= set(returns[split]):
            r = returns[split]
            splits[split]["gap_closure"] = gap_closure(r["grpo"], r[role["teacher"]], r[role["oracle"]], resamples=resamples)
    from .ablations import run_ablations

    ablations = run_ablations(config, run, loaded, returns.get("holdout", {}), records, resamples)
    sources = {name: entry[2] for name, entry in loaded.items()}
    check_provenance(records, sources)

    holdout = splits.get("holdout", {}).get("paired", {})
    grpo_sft = holdout.get("grpo-sft", {"ci95": [0, 0]})
    grpo_teacher = holdout.get("grpo-teacher", {"ci95": [0, 0]})
    verdict = {"improved": grpo_sft["ci95"][0] > 0, "beats_teacher": grpo_teacher["ci95"][0] > 0,
               "rule": "improved: GRPO - SFT on holdout, paired-by-seed bootstrap 95% CI lower bound > 0; "
                       f"beats_teacher: the same for GRPO - teacher ({role['teacher']})"}
    gaps = {name: splits["train"]["policies"][name]["mean_return"] - splits["holdout"]["policies"][name]["mean_return"]
            for name in MODEL_POLICIES if "train" in splits and "holdout" in splits}
    sft_stage, grpo_stage = run.read_stage("sft"), run.read_stage("grpo")
    report = {"env": config.env, "profile": config.profile, "decoding": "greedy", "roles": role,
              "backends": {"sft": sft_stage["metrics"]["backend"], "grpo": grpo_stage["metrics"]["backend"]},
              "artifacts": sources, "splits": splits, "ablations": ablations, "train_holdout_gap": gaps, **verdict}
    episodes_path = out / "episodes.jsonl"
    atomic_write_text(episodes_path, "".join(json.dumps(r) + "\n" for r in records))
    atomic_write_json(out / "eval.json", report)
    from .antihack import build_report

    anti = build_report(config, run, report)
    atomic_write_json(out / "anti_hacking_report.json", anti)
    holdout_policies = splits.get("holdout", {}).get("policies", {})
    return run.stage_done("evaluate", started=started, params=config.eval.model_dump(),
                          inputs={"sft": sources["sft"]["path"], "grpo": sources["grpo"]["path"]},
                          outputs={"eval.json": str(out / "eval.json"), "episodes.jsonl": str(episodes_path),
                                   "anti_hacking_report.json": str(out / "anti_hacking_report.json")},
                          metrics={"improved": verdict["improved"], "beats_teacher": verdict["beats_teacher"],
                                   "all_attacks_passed": anti["all_attacks_passed"],
                                   **{f"holdout/{k}": v["mean_return"] for k, v in holdout_policies.items()},
                                   "episode_records": len(records)})


def quick_check(config, run, episodes: int = 200, split: str = "holdout") -> dict:
    """Closed-loop check after training: SFT and GRPO act at every step of `episodes` episodes, compared
    paired-by-seed with the environment's random, teacher and oracle policies (gap closure), next to GRPO's exploration
    record. Writes quickcheck.json (holdout) or quickcheck_<split>.json."""
    seeds = range(episodes)
    artifacts = model_artifacts(config, run)
    returns: dict[str, dict[int, float]] = {}
    summary = {}
    for name in ("sft", "grpo"):
        model, tokenizer, source = load_policy_model(artifacts[name]["model"], config.model, artifacts[name]["adapter"])
        runs = run_model_episodes(model, tokenizer, source, config.env, seeds, split, batch_size=config.eval.batch_size,
                                  max_new_tokens=config.grpo.max_completion_length, desc=f"quickcheck/{name}")
        summary[name] = summarize(*runs)
        returns[name] = {e.seed: e.episode_return for e in runs[0]}
    role = roles(get_spec(config.env))
    for name in role.values():
        runs = run_policy_episodes(config.env, name, seeds, split)
        summary[name] = summarize(*runs)
        returns[name] = {e.seed: e.episode_return for e in runs[0]}
    grpo = run.read_stage("grpo")["metrics"]
    teacher = returns[role["teacher"]]
    report = {"split": split, "episodes": episodes, "roles": role, "policies": summary,
              "paired": {"grpo-sft": paired_difference(returns["grpo"], returns["sft"]),
                         "sft-random": paired_difference(returns["sft"], returns[role["random"]]),
                         "grpo-teacher": paired_difference(returns["grpo"], teacher)},
              "gap_closure": gap_closure(returns["grpo"], teacher, returns[role["oracle"]]),
              "grpo_frac_reward_zero_std_mean": grpo["frac_reward_zero_std_mean"],
              "grpo_explore": {k: v for k, v in grpo.items() if k.startswith("explore/")},
              "returns": {name: {str(seed): value for seed, value in r.items()} for name, r in returns.items()}}
    atomic_write_json(Path(run.dir) / ("quickcheck.json" if split == "holdout" else f"quickcheck_{split}.json"), report)
    return report
