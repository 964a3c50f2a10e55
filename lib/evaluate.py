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
import torch
from tqdm.auto import tqdm

from .embedded import resolve_model_source
from .envs import make_env
from .envs.base import Invalid, parse_action
from .io import atomic_write_json, atomic_write_text
from .models import is_tiny, load_model, weights_sha256
from .policies import BASELINES, TRIVIAL, make_policy
from .rollouts import Episode
from .stats import bootstrap_ci, gap_closure, paired_difference

MODEL_POLICIES = ("untrained", "sft", "grpo")
PAIRS = (("grpo", "sft"), ("grpo", "heuristic"), ("sft", "heuristic"))


class ProvenanceError(RuntimeError):
    """An evaluated action has no model_source, or one that is not the artifact being evaluated (a fallback)."""


def artifact_folder(path_or_id: str | Path) -> Path:
    """The local folder holding a model's weights: the path itself, or the hub cache snapshot of a hub id."""
    path = Path(resolve_model_source(path_or_id))
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path_or_id), local_files_only=True))


def load_policy_model(model_dir: str | Path, model_config, adapter_dir: str | Path | None = None):
    """Load a saved model (optionally with a LoRA adapter merged in memory) and its provenance record."""
    model, tokenizer, _ = load_model(model_dir, model_config, trainable=False)
    source = {"path": str(model_dir), "sha256": weights_sha256(artifact_folder(model_dir))}
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
        source = {"path": str(adapter_dir), "sha256": weights_sha256(Path(adapter_dir)), "base": source}
    model.eval()
    return model, tokenizer, source


@torch.no_grad()
def generate_actions(model, tokenizer, message_batches, *, greedy: bool, max_new_tokens: int = 16,
                     temperature: float = 1.0) -> list[str]:
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in message_batches]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = {} if greedy else {"temperature": temperature, "top_k": 0, "top_p": 1.0}
    output = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=not greedy,
                            pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **sampling)
    new_tokens = output[:, encoded["input_ids"].shape[1]:]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def run_model_episodes(model, tokenizer, source: dict, env_name: str, seeds, split: str, *, greedy: bool = True,
                       batch_size: int = 256, max_new_tokens: int = 16, veto_k: int = 0, desc: str = "episodes"):
    """Play every seed to the end with the model choosing every action. Live episodes advance in lockstep: each
    round, one `generate` call answers every live episode's current state. Up to `batch_size` episodes are live
    at once; as one ends, the next seed starts in its place, so no episode waits for another to finish.

    With `veto_k` > 0 (the legality-veto ablation) an output the parser rejects is re-asked, sampled, up to
    `veto_k` times before it is submitted; the re-asks are counted in each action record. Returns
    (episodes, action_records); every action record carries `model_source`."""
    episodes, actions = [], []
    queue = list(seeds)[::-1]
    live: list[dict] = []  # {"seed", "env", "observation", "invalid", "steps"}
    progress = tqdm(total=len(queue), desc=desc)
    while queue or live:
        while queue and len(live) < batch_size:
            seed, env = queue.pop(), make_env(env_name)
            live.append({"seed": seed, "env": env, "observation": env.reset(seed, split), "invalid": 0, "steps": 0})
        began = time.perf_counter()
        texts = generate_actions(model, tokenizer, [e["env"].render(e["observation"]) for e in live],
                                 greedy=greedy, max_new_tokens=max_new_tokens)
        retries = [0] * len(live)
        for _ in range(veto_k):
            rejected = [j for j, e in enumerate(live) if isinstance(parse_action(texts[j], e["observation"].candidates), Invalid)]
            if not rejected:
                break
            again = generate_actions(model, tokenizer, [live[j]["env"].render(live[j]["observation"]) for j in rejected],
                                     greedy=False, max_new_tokens=max_new_tokens)
            for j, text in zip(rejected, again):
                texts[j], retries[j] = text, retries[j] + 1
        latency = (time.perf_counter() - began) / len(live)
        still = []
        for episode, text, retry in zip(live, texts, retries):
            result = episode["env"].step(text)
            invalid = "invalid" in result.info
            episode["invalid"] += invalid
            episode["steps"] += 1
            record = {"seed": episode["seed"], "split": split, "step": episode["steps"], "completion": text,
                      "valid": not invalid, "reward": result.reward, "model_source": source, "latency_s": latency}
            if veto_k:
                record["veto_retries"] = retry
            actions.append(record)
            if result.done:
                episodes.append(Episode(episode["seed"], split, result.info["episode_return"], episode["steps"],
                                        episode["invalid"], result.info["end_reason"], result.components))
                progress.update(1)
            else:
                episode["observation"] = result.observation
                still.append(episode)
        live = still
    progress.close()
    return sorted(episodes, key=lambda e: e.seed), actions


def run_policy_episodes(env_name: str, name: str, seeds, split: str):
    """A baseline or trivial policy, recorded exactly like a model: every action names its source."""
    env, policy = make_env(env_name), make_policy(name)
    source = {"policy": name}
    episodes, actions = [], []
    for seed in seeds:
        observation = env.reset(seed, split)
        policy.begin(seed)
        step, invalid = 0, 0
        while True:
            began = time.perf_counter()
            text = policy.act(observation, env)
            latency = time.perf_counter() - began
            result = env.step(text)
            step += 1
            invalid += "invalid" in result.info
            actions.append({"seed": seed, "split": split, "step": step, "completion": text, "valid": "invalid" not in result.info,
                            "reward": result.reward, "model_source": source, "latency_s": latency})
            if result.done:
                episodes.append(Episode(seed, split, result.info["episode_return"], step, invalid,
                                        result.info["end_reason"], result.components))
                break
            observation = result.observation
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


def _paired(returns: dict[str, dict[int, float]], resamples: int) -> dict:
    return {f"{a}-{b}": paired_difference(returns[a], returns[b], resamples=resamples)
            for a, b in PAIRS if a in returns and b in returns}


def run_evaluate(config, run, *, policies: list[str] | None = None) -> dict:
    """The evaluate stage. `policies` narrows the baseline list (tests); models are always evaluated."""
    from .runs import seed_everything

    started = time.time()
    seed_everything(config.seed, config.deterministic)
    out = run.stage_dir("evaluate")
    resamples = config.eval.bootstrap_resamples
    baseline_names = policies or [*BASELINES, *TRIVIAL]
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
            summaries[name] = {"kind": "baseline" if name in BASELINES else "trivial", **summarize(episodes, actions, resamples)}
            returns[split][name] = {e.seed: e.episode_return for e in episodes}
            records += _episode_records(name, episodes, actions)
        splits[split] = {"seeds": [seeds.start, seeds.stop], "policies": summaries, "paired": _paired(returns[split], resamples)}
        if {"grpo", "heuristic", "oracle"} <= set(returns[split]):
            r = returns[split]
            splits[split]["gap_closure"] = gap_closure(r["grpo"], r["heuristic"], r["oracle"], resamples=resamples)
    from .ablations import run_ablations

    ablations = run_ablations(config, run, loaded, returns.get("holdout", {}), records, resamples)
    sources = {name: entry[2] for name, entry in loaded.items()}
    check_provenance(records, sources)

    holdout = splits.get("holdout", {}).get("paired", {})
    grpo_sft = holdout.get("grpo-sft", {"ci95": [0, 0]})
    grpo_teacher = holdout.get("grpo-heuristic", {"ci95": [0, 0]})
    verdict = {"improved": grpo_sft["ci95"][0] > 0, "beats_teacher": grpo_teacher["ci95"][0] > 0,
               "rule": "improved: GRPO - SFT on holdout, paired-by-seed bootstrap 95% CI lower bound > 0; "
                       "beats_teacher: the same for GRPO - heuristic"}
    gaps = {name: splits["train"]["policies"][name]["mean_return"] - splits["holdout"]["policies"][name]["mean_return"]
            for name in MODEL_POLICIES if "train" in splits and "holdout" in splits}
    sft_stage, grpo_stage = run.read_stage("sft"), run.read_stage("grpo")
    report = {"env": config.env, "profile": config.profile, "decoding": "greedy",
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
    paired-by-seed with random, the heuristic teacher and the oracle (gap closure), next to GRPO's exploration
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
    for name in ("random", "heuristic", "oracle"):
        runs = run_policy_episodes(config.env, name, seeds, split)
        summary[name] = summarize(*runs)
        returns[name] = {e.seed: e.episode_return for e in runs[0]}
    grpo = run.read_stage("grpo")["metrics"]
    report = {"split": split, "episodes": episodes, "policies": summary,
              "paired": {"grpo-sft": paired_difference(returns["grpo"], returns["sft"]),
                         "sft-random": paired_difference(returns["sft"], returns["random"]),
                         "grpo-heuristic": paired_difference(returns["grpo"], returns["heuristic"])},
              "gap_closure": gap_closure(returns["grpo"], returns["heuristic"], returns["oracle"]),
              "grpo_frac_reward_zero_std_mean": grpo["frac_reward_zero_std_mean"],
              "grpo_explore": {k: v for k, v in grpo.items() if k.startswith("explore/")},
              "returns": {name: {str(seed): value for seed, value in r.items()} for name, r in returns.items()}}
    atomic_write_json(Path(run.dir) / ("quickcheck.json" if split == "holdout" else f"quickcheck_{split}.json"), report)
    return report
