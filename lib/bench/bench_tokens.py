"""The tokens a run's RL policy computes to play held-out episodes: each state's prompt read whole after the call's
common prefix (today's default) against each episode keeping its key/value cache from one state to the next
(`model.episode_cache_mb`, lib/episode_cache.py). `python -m lib bench-tokens --run-dir RUN`.

Both arms play the same seeds with the same weights. The JSON gives the prompt tokens computed per played state in
each, their ratio at the top level (`tokens.played_tokens_ratio`), each arm's wall time and peak resident memory,
and how many episodes ended with the same return (the cache changes the scores by float rounding only, which can
flip a near tie)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..candidates import tally_tokens
from ..config import override_config
from ..io import atomic_write_json
from ..provenance import hardware, package_versions, peak_rss_mb, reset_peak_rss
from ..runs import Run, read_config


def _play(config, loaded, seeds, split: str, name: str) -> dict:
    from ..evaluation.closed_loop import run_model_episodes

    reset_peak_rss()
    began = time.perf_counter()
    with tally_tokens() as counts:
        episodes, actions = run_model_episodes(config, loaded, seeds, split, desc=name)
    seconds = time.perf_counter() - began
    return {
        "episode_cache_mb": config.model.episode_cache_mb,
        "seconds": round(seconds, 1),
        "peak_rss_mb": peak_rss_mb(),
        "states": counts["states"],
        "prompt_tokens": counts["prompt_tokens"],
        "computed_prompt_tokens": counts["computed_prompt_tokens"],
        "answer_tokens": counts["answer_tokens"],
        "computed_per_state": round(counts["computed_prompt_tokens"] / max(counts["states"], 1), 1),
        "mean_return": round(sum(e.episode_return for e in episodes) / len(episodes), 4),
        "_episodes": {e.seed: (e.episode_return, e.steps) for e in episodes},
        "_actions": [(a["seed"], a["step"], a["completion"]) for a in actions],
    }


def run_bench(run_dir: Path, episodes: int, split: str, budget_mb: int, out: Path | None) -> dict:
    from ..evaluation.closed_loop import model_artifacts, split_seeds
    from ..inference import load_policy_model

    config = read_config(run_dir)
    entry = model_artifacts(config, Run(run_dir, config))["grpo"]
    loaded = load_policy_model(entry["model"], config.model, entry["adapter"])
    seeds = split_seeds(config, split)[:episodes]
    arms = {}
    for name, budget in (("whole", 0), ("cached", budget_mb)):
        arm = override_config(config, {"model.episode_cache_mb": budget}, f"bench-tokens {name}")
        arms[name] = _play(arm, loaded, seeds, split, name)
    whole, cached = arms["whole"], arms["cached"]
    same_returns = sum(whole["_episodes"][s] == cached["_episodes"][s] for s in whole["_episodes"])
    report = {
        "tokens": {
            "played_tokens_ratio": round(whole["computed_per_state"] / cached["computed_per_state"], 2),
            "played_per_state": {"before": whole["computed_per_state"], "after": cached["computed_per_state"]},
        },
        "speedup": round(whole["seconds"] / cached["seconds"], 2),
        "episodes": len(seeds),
        "split": split,
        "same_episodes": same_returns,
        "same_actions": whole["_actions"] == cached["_actions"],
        "run": str(run_dir),
        "env": config.env,
        "arms": {name: {k: v for k, v in arm.items() if not k.startswith("_")} for name, arm in arms.items()},
        "hardware": hardware(),
        "packages": package_versions(),
    }
    print(json.dumps({k: report[k] for k in ("tokens", "speedup", "same_episodes", "same_actions")}, indent=2))
    if out:
        atomic_write_json(out, report)
    return report
