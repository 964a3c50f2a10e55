"""Closed-loop episodes of a model or a scripted policy, recorded action by action with the source that produced
each action; their summaries; the provenance check; and where each evaluated model lives in a run.

Used by the evaluate stage, its ablations, the anti-hacking report, quickcheck, post-save and the gate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..episodes import Episode, Improver, Start, play
from ..inference import model_actor
from ..models import is_tiny
from ..stats import bootstrap_ci
from .scripted import action_recorder


class ProvenanceError(RuntimeError):
    """An evaluated action has no model_source, or one that is not the artifact being evaluated (a fallback)."""


def run_model_episodes(
    config,
    loaded: tuple,
    seeds,
    split: str,
    *,
    desc: str,
    greedy: bool = True,
    veto_k: int = 0,
    batch_size: int | None = None,
    action_space: str | None = None,
    distributions: bool = False,
    kind_shift: dict[str, float] | None = None,
):
    """Play every seed of the run's environment (`config.spec`) to the end with the model in `loaded` ((model,
    tokenizer, source), as `inference.load_policy_model` returns it) choosing every action: `batch_size` (default
    `eval.batch_size`) episodes in lockstep, one generate call per round (see `episodes.play`), at most
    `grpo.max_completion_length` new tokens an answer, choosing among the candidates or generating free text as
    `model.action_space` (or `action_space`) says. With `veto_k` > 0 invalid free-text outputs are re-asked (the
    legality-veto ablation). Returns (episodes sorted by seed, action records); every action record carries
    `model_source`, and with `distributions` (candidates only) `p_answers`, the policy over the offered answers.
    `kind_shift` (candidates only) is the logit adjustment by kind of `inference.candidate_actor`."""
    model, tokenizer, source = loaded
    spec, max_new_tokens = config.spec, config.grpo.max_completion_length
    actions: list[dict] = []
    episodes = play(
        spec.make_env,
        [Start(seed, split) for seed in seeds],
        model_actor(
            model,
            tokenizer,
            action_space=action_space or config.model.action_space,
            greedy=greedy,
            max_new_tokens=max_new_tokens,
            veto_k=veto_k,
            distributions=distributions,
            episode_cache_mb=config.model.episode_cache_mb
            if (action_space or config.model.action_space) == "candidates"
            else 0,
            kind_shift=kind_shift,
        ),
        batch_size=batch_size or config.eval.batch_size,
        on_step=action_recorder(actions, source),
        desc=desc,
    )
    return sorted(episodes, key=lambda e: e.seed), actions


IMPROVER = Improver.name  # the generic policy-improvement reference every environment has (lib/episodes.py)


def returns_by_seed(episodes) -> dict[int, float]:
    """Each episode's return under its seed: what paired differences and gap closures take."""
    return {e.seed: e.episode_return for e in episodes}


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
    return {
        "n": len(episodes),
        "mean_return": float(np.mean(returns)),
        "ci95": list(bootstrap_ci(returns, resamples=resamples)),
        "components": {k: float(np.mean(v)) for k, v in sorted(components.items())},
        "invalid_rate": sum(not a["valid"] for a in actions) / len(actions),
        "mean_steps": float(np.mean([e.steps for e in episodes])),
        "latency_s_per_action": float(np.mean(latencies)),
        "end_reasons": dict(sorted(ends.items())),
    }


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


def episode_records(policy: str, episodes: list[Episode], actions: list[dict], **extra) -> list[dict]:
    by_seed: dict[int, list[dict]] = {}
    for action in actions:
        by_seed.setdefault(action["seed"], []).append(action)
    return [
        {
            "policy": policy,
            "split": e.split,
            "seed": e.seed,
            "return": e.episode_return,
            "steps": e.steps,
            "invalid": e.invalid,
            "end_reason": e.end_reason,
            "components": e.components,
            **extra,
            "actions": [{k: v for k, v in a.items() if k not in ("seed", "split")} for a in by_seed.get(e.seed, [])],
        }
        for e in episodes
    ]


def split_seeds(config, split: str) -> range:
    """Holdout splits: seeds 0..episodes-1 of their own seed block. Train: the first SFT corpus seeds (seen in
    training)."""
    if split == "train":
        return range(
            config.corpus.seed_offset,
            config.corpus.seed_offset + min(config.eval.train_episodes, config.corpus.sft_episodes),
        )
    return range(config.eval.episodes)


def model_artifacts(config, run) -> dict[str, dict]:
    """Where each evaluated model lives: {name: {"model": folder or hub id, "adapter": folder or None}}."""
    sft, grpo = run.read_stage("sft"), run.read_stage("grpo")
    untrained = sft["inputs"]["base"] if is_tiny(config.model) else config.model.name
    artifacts = {
        "untrained": {"model": untrained, "adapter": None},
        "sft": {"model": sft["outputs"]["model"], "adapter": None},
        "grpo": {"model": grpo["outputs"]["base_model"], "adapter": grpo["outputs"]["adapter"]},
    }
    for name, where in artifacts.items():
        for kind, path in where.items():
            _require_in_run(run, path, f"the {name} {kind}")
    return artifacts


def sft_model_dir(run) -> Path:
    """The run's saved SFT model folder, or a clear error when its weights are gone (removed, or a fork's)."""
    model_dir = Path(run.read_stage("sft")["outputs"]["model"])
    if not (model_dir / "config.json").is_file():
        raise FileNotFoundError(f"{model_dir}: the SFT model is not there (weights removed, or a fork of another run)")
    return model_dir


def _require_in_run(run, path, what: str) -> None:
    """A folder the run's records name inside the run must still be there: a clear error, not a hub lookup of a
    missing local path (a committed run keeps no weights; a fork keeps its parent's records)."""
    if path is None:
        return
    folder = Path(path)
    inside = Path(run.dir).resolve() in folder.resolve().parents
    if inside and not folder.is_dir():
        raise FileNotFoundError(
            f"{folder}: {what} is not there (weights are not committed with a run; rerun its stage to rebuild it)"
        )


def roles(spec) -> dict[str, str]:
    """Which policy plays each role the verdicts name: the environment's teacher, oracle and random policy, and the
    improver (the teacher's one-step policy improvement, lib/episodes.py)."""
    return {"teacher": spec.teacher, "oracle": spec.oracle, "random": spec.random, "improver": IMPROVER}
