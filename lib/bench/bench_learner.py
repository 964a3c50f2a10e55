"""`python -m lib bench-learner`: a benchmark, not a test. The pretrained learner on this CPU: today's path (the
full SmolLM2 in fp32, adapters on every layer, every prompt read whole) against a profile's chosen learner, and the
chosen learner's bare PyTorch loop, in one run, on the same corpus rows and holdout seeds.

For each of the two learners it runs what a user runs:
- SFT: the sft stage for `--sft-steps` optimizer steps (TRL's SFTTrainer, the profile's batches), into a run folder
  of its own; tokens/s is the stage's own count of the tokens trained on over its runtime. Both learners train on
  the same rows (one corpus, rendered again for today's path when the profile's prompt leaves out the candidate
  list, `env_args.list_candidates: false`), so the SFT speedup is the ratio of their runtimes: tokens/s counted in
  today's tokens, and equal to the ratio of tokens/s when both read the same prompts;
- scoring: the saved SFT model scores every offered candidate at `--states` corpus states (`lib.candidates`,
  the policy's own pass): states/s;
- evaluation: the saved SFT model plays `--episodes` greedy holdout episodes (the evaluate stage's
  `run_model_episodes`): episodes/s and actions/s. The evaluation speedup is taken per action: a few SFT steps leave
  two policies that end their episodes after different numbers of turns, and episodes/s would count that too.
Beside them, the bare loop: the chosen learner (same weights, precision, adapters and batches) trained by a plain
loop of forward, the answer tokens' loss through the output layer, backward and an AdamW step. Its tokens/s is the
limit the SFT stage is compared with (`sft_of_bare`). The JSON's top level holds the ratios: `speedup.sft` and
`speedup.evaluate` (chosen over today's) and `sft_of_bare`. Run it alone: two torch jobs on two cores slow each
other several times.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch

from ..config import load_config, override_config
from ..io import atomic_write_json, read_records
from ..provenance import hardware, package_versions
from ..runs import Run

# today's path: the full pretrained model in fp32 with adapters on every layer, every prompt read whole
TODAY = {"model.precision": "fp32", "model.lora.top_layers": None}


def _answer_loss_rows(tokenizer, rows: list[dict]) -> list[tuple[list[int], int]]:
    """Per SFT row: its prompt-and-answer token ids (TRL's chat rendering), and where the answer starts."""
    encoded = []
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
        whole = tokenizer.apply_chat_template(row["prompt"] + row["completion"], tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        encoded.append((tokenizer(whole, add_special_tokens=False)["input_ids"], len(prompt_ids)))
    return encoded


def bare_loop(config, rows: list[dict], steps: int, warmup: int = 1) -> dict:
    """The chosen learner trained by hand: the SFT stage's model, precision and adapters, its batch size and rows
    in corpus order, padded to the longest of each batch; forward, the answer tokens' cross-entropy through the
    output layer only, backward, AdamW. Returns tokens/s over the steps after `warmup` (non-padding tokens, as the
    stage counts them)."""
    from peft import get_peft_model

    from ..embedded import resolve_model_source
    from ..models import load_model, lora_config

    model, tokenizer, _ = load_model(resolve_model_source(config.model.name), config.model)
    model = get_peft_model(model, lora_config(config.model, model)).train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.sft.learning_rate)
    encoded = _answer_loss_rows(tokenizer, rows)
    size = config.sft.batch_size
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    backbone, head = model.get_decoder(), model.get_output_embeddings()
    tokens, elapsed = 0, 0.0
    for step in range(warmup + steps):
        chunk = encoded[step * size : (step + 1) * size]
        if len(chunk) < size:
            raise ValueError(f"the bare loop needs {(warmup + steps) * size} SFT rows; the corpus has {len(rows)}")
        width = max(len(ids) for ids, _ in chunk)
        ids = torch.full((size, width), pad)
        mask = torch.zeros((size, width), dtype=torch.long)
        labels = torch.full((size, width), -100)
        for i, (row, start) in enumerate(chunk):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            labels[i, start : len(row)] = torch.tensor(row[start:])
        began = time.perf_counter()
        hidden = backbone(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
        targets = labels[:, 1:]
        picked = targets != -100
        loss = torch.nn.functional.cross_entropy(head(hidden[picked]).float(), targets[picked])
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= warmup:
            elapsed += time.perf_counter() - began
            tokens += int(mask.sum())
    return {"steps": steps, "tokens": tokens, "seconds": round(elapsed, 3), "tokens_per_s": round(tokens / elapsed, 1)}


def _states(config, rows: list[dict], count: int) -> tuple[list, list]:
    """The first `count` corpus states, as the policy reads them: their messages and offered answers."""
    from ..candidates import answers

    env = config.spec.make_env()
    messages, offered = [], []
    for row in rows[:count]:
        observation = env.restore(row["seed"], row["split"], row["history"])
        messages.append(env.render(observation))
        offered.append(answers(observation))
    return messages, offered


def measure_learner(
    config, corpus_dir: Path, work: Path, name: str, sft_steps: int, states: int, episodes: int, share_prefix: bool
):
    """One learner through the sft stage, scoring and evaluation (see the module docstring); without `share_prefix`,
    scoring and evaluation read every prompt whole (`lib.candidates.whole_prompts`), as today's path did."""
    from ..candidates import score_answers, whole_prompts
    from ..evaluation.closed_loop import run_model_episodes
    from ..inference import load_policy_model
    from ..training.sft import run_sft

    config = override_config(
        config, {"sft.max_steps": sft_steps, "sft.check_episodes": 0, "sft.logging_steps": 1}, f"the {name} learner"
    )
    run = Run(work / name, config)
    shutil.copytree(corpus_dir, run.stage_dir("corpus"), dirs_exist_ok=True)  # its record's paths are run-relative
    sft = run_sft(config, run)
    loaded = load_policy_model(sft["outputs"]["model"], config.model)
    rows = read_records(run.read_stage("corpus")["outputs"]["sft.jsonl"], missing_ok=False)
    messages, offered = _states(config, rows, states)
    with contextlib.nullcontext() if share_prefix else whole_prompts():
        began = time.perf_counter()
        score_answers(loaded[0], loaded[1], messages, offered)
        scoring_s = time.perf_counter() - began
        began = time.perf_counter()
        played, actions = run_model_episodes(config, loaded, range(episodes), "holdout", desc=f"bench/{name}")
        evaluation_s = time.perf_counter() - began
    return {
        "model": {
            "name": config.model.name,
            "precision": sft["metrics"].get("precision"),
            "lora_top_layers": config.model.lora.top_layers,
            "share_prefix": share_prefix,
            "list_candidates": config.env_args.get("list_candidates", True),
        },
        "sft": {
            "steps": sft["metrics"]["steps"],
            "tokens": sft["metrics"]["train_tokens"],
            "seconds": sft["metrics"]["train_runtime_s"],
            "tokens_per_s": sft["metrics"]["tokens_per_s"],
            "loss_first": sft["metrics"]["loss_first"],
            "loss_last": sft["metrics"]["loss_last"],
        },
        "scoring": {"states": states, "seconds": round(scoring_s, 3), "states_per_s": round(states / scoring_s, 3)},
        "evaluation": {
            "episodes": episodes,
            "seconds": round(evaluation_s, 3),
            "episodes_per_s": round(episodes / evaluation_s, 4),
            "actions": len(actions),
            "actions_per_s": round(len(actions) / evaluation_s, 3),
            "mean_return": round(sum(e.episode_return for e in played) / len(played), 4),
        },
    }


def run_bench(profile: str, sft_steps: int, states: int, episodes: int, out: Path | None) -> dict:
    from ..training.corpus import run_corpus

    chosen = load_config(profile)
    # today's prompt lists the candidates; every other environment argument is the profile's
    today = override_config(chosen, {**TODAY, "env_args.list_candidates": True}, "today's path")
    with tempfile.TemporaryDirectory(prefix="bench-learner-") as folder:
        work = Path(folder)
        corpora = {}
        for name, config in (("chosen", chosen), ("today", today)):
            if name == "today" and today.spec is chosen.spec:  # the same prompts: one corpus serves both
                corpora[name] = corpora["chosen"]
                continue
            corpus_run = Run(work / f"corpus-{name}", config)
            run_corpus(config, corpus_run)
            corpora[name] = corpus_run.stage_dir("corpus")
        rows = read_records(corpora["chosen"] / "sft.jsonl", missing_ok=False)
        same = [(r["seed"], r["history"]) for r in read_records(corpora["today"] / "sft.jsonl", missing_ok=False)]
        if same != [(r["seed"], r["history"]) for r in rows]:
            raise RuntimeError("today's corpus and the chosen learner's hold different states; the bench pairs them")
        arms = {
            "today": measure_learner(today, corpora["today"], work, "today", sft_steps, states, episodes, False),
            "chosen": measure_learner(chosen, corpora["chosen"], work, "chosen", sft_steps, states, episodes, True),
        }
        bare = bare_loop(chosen, rows, sft_steps)
    report = {
        "speedup": {
            # the same rows and steps: the ratio of runtimes (of tokens/s when both read the same prompts)
            "sft": round(arms["today"]["sft"]["seconds"] / arms["chosen"]["sft"]["seconds"], 2),
            # per action played: two briefly trained policies play episodes of different lengths, so episodes/s
            # would also measure how soon each policy ends its episodes (both are in `arms`)
            "evaluate": round(
                arms["chosen"]["evaluation"]["actions_per_s"] / arms["today"]["evaluation"]["actions_per_s"], 2
            ),
            "scoring": round(arms["chosen"]["scoring"]["states_per_s"] / arms["today"]["scoring"]["states_per_s"], 2),
        },
        "sft_of_bare": round(arms["chosen"]["sft"]["tokens_per_s"] / bare["tokens_per_s"], 3),
        "profile": profile,
        "env": chosen.env,
        "today": {**TODAY, "share_prefix": False, "list_candidates": True},
        "arms": arms,
        "bare_loop": bare,
        "hardware": hardware(),
        "packages": package_versions(),
    }
    print(json.dumps({k: report[k] for k in ("speedup", "sft_of_bare", "profile")}, indent=2))
    if out:
        atomic_write_json(out, report)
    return report
