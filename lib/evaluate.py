"""Closed-loop evaluation: a model acts at every step of held-out episodes, batched across episodes.

Used by the evaluate stage and `python -m lib stage evaluate`; every action records the artifact that produced it.
"""
from __future__ import annotations

import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .envs import make_env
from .models import load_model, weights_sha256
from .rollouts import Episode


def load_policy_model(model_dir: str | Path, model_config, adapter_dir: str | Path | None = None):
    """Load a saved model (optionally with a LoRA adapter merged in memory) and its provenance record."""
    model, tokenizer, _ = load_model(model_dir, model_config, trainable=False)
    source = {"path": str(model_dir), "sha256": weights_sha256(Path(model_dir))}
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
        source = {"path": str(adapter_dir), "sha256": weights_sha256(Path(adapter_dir)), "base": source}
    model.eval()
    return model, tokenizer, source


@torch.no_grad()
def generate_actions(model, tokenizer, message_batches, *, greedy: bool, max_new_tokens: int = 16) -> list[str]:
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in message_batches]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    output = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=not greedy,
                            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    new_tokens = output[:, encoded["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def run_model_episodes(model, tokenizer, source: dict, env_name: str, seeds, split: str, *, greedy: bool = True,
                       batch_size: int = 32, max_new_tokens: int = 16, desc: str = "episodes"):
    """Play every seed to the end with the model choosing every action. Returns (episodes, action_records)."""
    episodes, actions = [], []
    seeds = list(seeds)
    progress = tqdm(total=len(seeds), desc=desc)
    for start in range(0, len(seeds), batch_size):
        chunk = seeds[start:start + batch_size]
        envs = [make_env(env_name) for _ in chunk]
        observations = [env.reset(seed, split) for env, seed in zip(envs, chunk)]
        totals = {seed: {"invalid": 0, "steps": 0} for seed in chunk}
        active = list(range(len(chunk)))
        while active:
            began = time.perf_counter()
            texts = generate_actions(model, tokenizer, [envs[i].render(observations[i]) for i in active],
                                     greedy=greedy, max_new_tokens=max_new_tokens)
            latency = (time.perf_counter() - began) / len(active)
            still = []
            for i, text in zip(active, texts):
                seed = chunk[i]
                result = envs[i].step(text)
                invalid = "invalid" in result.info
                totals[seed]["invalid"] += invalid
                totals[seed]["steps"] += 1
                actions.append({"seed": seed, "split": split, "step": totals[seed]["steps"], "completion": text,
                                "valid": not invalid, "reward": result.reward, "model_source": source,
                                "latency_s": latency})
                if result.done:
                    episodes.append(Episode(seed, split, result.info["episode_return"], totals[seed]["steps"],
                                            totals[seed]["invalid"], result.info["end_reason"], result.components))
                    progress.update(1)
                else:
                    observations[i] = result.observation
                    still.append(i)
            active = still
    progress.close()
    return sorted(episodes, key=lambda e: e.seed), actions


def quick_check(config, run, episodes: int = 200, split: str = "holdout") -> dict:
    """Closed-loop check after training: SFT and GRPO models act at every step of `episodes` held-out
    episodes; compared paired-by-seed with random and the heuristic teacher. Writes quickcheck.json."""
    import numpy as np

    from .io import atomic_write_json
    from .policies import make_policy
    from .rollouts import run_episode
    from .stats import bootstrap_ci, paired_difference

    sft, grpo = run.read_stage("sft"), run.read_stage("grpo")
    seeds = range(episodes)
    returns: dict[str, dict[int, float]] = {}
    invalid: dict[str, float] = {}
    for name, (model_dir, adapter) in {"sft": (sft["outputs"]["model"], None),
                                       "grpo": (grpo["outputs"]["base_model"], grpo["outputs"]["adapter"])}.items():
        model, tokenizer, source = load_policy_model(model_dir, config.model, adapter)
        episodes_run, actions = run_model_episodes(model, tokenizer, source, config.env, seeds, split, desc=f"quickcheck/{name}")
        returns[name] = {e.seed: e.episode_return for e in episodes_run}
        invalid[name] = sum(not a["valid"] for a in actions) / len(actions)
    env = make_env(config.env)
    for name in ("random", "heuristic"):
        returns[name] = {s: run_episode(env, make_policy(name), s, split).episode_return for s in seeds}
    summary = {name: {"mean_return": float(np.mean(list(r.values()))), "ci95": list(bootstrap_ci(list(r.values())))}
               for name, r in returns.items()}
    for name, rate in invalid.items():
        summary[name]["invalid_rate"] = rate
    report = {"split": split, "episodes": episodes, "policies": summary,
              "paired": {"grpo-sft": paired_difference(returns["grpo"], returns["sft"]),
                         "sft-random": paired_difference(returns["sft"], returns["random"]),
                         "grpo-heuristic": paired_difference(returns["grpo"], returns["heuristic"])},
              "grpo_frac_reward_zero_std_mean": grpo["metrics"]["frac_reward_zero_std_mean"]}
    atomic_write_json(run.dir / "quickcheck.json", report)
    return report
