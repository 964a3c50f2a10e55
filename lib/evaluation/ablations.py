"""Measured ablations for the evaluate stage (`python -m lib stage evaluate`): greedy vs sampled decoding, the policy
over the candidates vs free text generation (the validity diagnostic), free text alone vs with a legality veto, and
GRPO without SFT. Each is paired by seed with its counterpart.

Evaluation trains nothing: the no-SFT model is trained by the grpo stage (grpo_no_sft/, when `eval.ablations` lists
`no_sft`); here it is only loaded. A run without it gets a `no_sft` row that says "not trained in this run"."""

from __future__ import annotations

import numpy as np
import torch

from ..inference import load_policy_model
from ..stats import paired_difference
from .closed_loop import episode_records, returns_by_seed, run_model_episodes, summarize

NO_SFT_STAGE = "grpo_no_sft"  # the grpo stage's record of GRPO from the untrained model
NOT_TRAINED = "not trained in this run"


def not_trained(policy: str, compared_with: str, why: str) -> dict:
    """The row of an ablation whose model this run does not have: labelled, with no measurement (null numbers; the
    report's table prints the status and the chart leaves the row out, naming it)."""
    return {
        "policy": f"{policy} ({NOT_TRAINED})",
        "compared_with": compared_with,
        "status": NOT_TRAINED,
        "why": why,
        "n": 0,
        "mean_return": None,
        "ci95": None,
        "invalid_rate": None,
    }


def run_ablations(config, run, loaded: dict, holdout_returns: dict, records: list[dict], resamples: int) -> dict:
    """Measured ablations on holdout seeds, each compared paired-by-seed with its counterpart:
    greedy vs sampled decoding (GRPO model); `free_text`, the GRPO model generating free text instead of choosing
    among the candidates (its `invalid_rate` is the validity diagnostic every evaluation reports); free text alone
    vs with a legality veto that re-asks up to k times; and GRPO trained from the untrained model (no SFT, trained
    by the grpo stage) vs SFT then GRPO."""
    seeds = range(min(config.eval.ablation_episodes, config.eval.episodes))
    results: dict[str, dict] = {}
    greedy = {s: holdout_returns["grpo"][s] for s in seeds} if "grpo" in holdout_returns else None

    def measure(name: str, policy_label: str, baseline_label: str, baseline: dict | None, **kwargs) -> None:
        episodes, actions = run_model_episodes(
            config, kwargs.pop("loaded", loaded["grpo"]), seeds, "holdout", desc=f"ablation/{name}", **kwargs
        )
        summary = summarize(episodes, actions, resamples)
        entry = {"policy": policy_label, "compared_with": baseline_label, **summary}
        if "veto_k" in kwargs:
            entry["veto_retries_per_action"] = float(np.mean([a["veto_retries"] for a in actions]))
        if baseline is not None:
            entry["paired_vs_compared"] = paired_difference(returns_by_seed(episodes), baseline, resamples=resamples)
        results[name] = entry
        records.extend(episode_records(policy_label, episodes, actions, ablation=name))

    for name in config.eval.ablations:
        if name == "sampled":
            torch.manual_seed(config.seed)
            measure("sampled", "grpo", "grpo greedy", greedy, greedy=False)
        elif name == "free_text":
            label = "grpo greedy over the candidates" if config.model.action_space == "candidates" else "grpo greedy"
            measure("free_text", "grpo", label, greedy, action_space="free")
        elif name == "veto":
            measure(
                "veto", "grpo", "grpo greedy free text (no veto)", None, action_space="free", veto_k=config.eval.veto_k
            )
        elif name == "no_sft":
            if not (run.dir / NO_SFT_STAGE / "stage.json").is_file():
                why = (
                    f"{NO_SFT_STAGE}/ is missing: the grpo stage trains it when eval.ablations lists no_sft "
                    f"(run `python -m lib stage grpo --run-dir {run.dir}` again); evaluation never trains"
                )
                print(f"ablation no_sft: {NOT_TRAINED}: {why}")
                results["no_sft"] = not_trained(NO_SFT_STAGE, "grpo (SFT then GRPO)", why)
                continue
            stage = run.read_stage(NO_SFT_STAGE)  # a failed record is an error, never skipped
            no_sft = load_policy_model(stage["outputs"]["base_model"], config.model, stage["outputs"]["adapter"])
            loaded[NO_SFT_STAGE] = no_sft
            measure("no_sft", NO_SFT_STAGE, "grpo (SFT then GRPO)", greedy, loaded=no_sft)
    return results
