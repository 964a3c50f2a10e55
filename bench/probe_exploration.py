"""Diagnostic: can GRPO find what beats the teacher? The chance that a policy samples the best action.

    python bench/probe_exploration.py RUN_DIR [--adapter ADAPTER_DIR] [--prompts FILE] [--margin 0.2]

At every GRPO prompt (default: the run's corpus/grpo_prompts.jsonl) where the best candidate's return beats the
reference policy's own choice by at least `--margin`, it scores every candidate with the environment (the
reference policy finishes the episode, as in GRPO's reward), and sums the policy's probability of the complete
answer '{"action": "<id>"}' over the best candidates. Printed by the best action's kind: the mean of that
probability, and the mean chance that at least one of `num_generations` samples (from the run's config) is a
best action. GRPO can only move probability towards an action it samples.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.corpus import read_jsonl  # noqa: E402
from lib.envs import make_env  # noqa: E402
from lib.evaluate import load_policy_model  # noqa: E402
from lib.policies import make_policy  # noqa: E402
from lib.rollouts import candidate_returns  # noqa: E402
from lib.runs import read_config  # noqa: E402


def answer_logprob(model, tokenizer, messages, answer: str) -> float:
    """log p(answer | prompt) under the chat template, summed over the answer's tokens."""
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    ids = prompt_ids + tokenizer(answer, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logprobs = model(torch.tensor([ids])).logits[0, :-1].float().log_softmax(-1)
    return sum(logprobs[i - 1, ids[i]].item() for i in range(len(prompt_ids), len(ids)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--prompts", type=Path, default=None)
    parser.add_argument("--margin", type=float, default=0.2)
    args = parser.parse_args(argv)
    config = read_config(args.run_dir)
    model, tokenizer, _ = load_policy_model(str(args.run_dir / "sft" / "model"), config.model, args.adapter)
    env = make_env(config.env)
    rows = [r for r in read_jsonl(args.prompts or args.run_dir / "corpus" / "grpo_prompts.jsonl")
            if r["best_return"] - r["reference_return"] >= args.margin]
    n = config.grpo.num_generations
    by_kind: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        observation = env.restore(r["seed"], r["split"], r["history"])
        returns = candidate_returns(env, r["seed"], r["split"], r["history"], observation,
                                    make_policy(config.grpo.reference_policy))
        best = [a for a, v in returns.items() if v == r["best_return"]]
        p = sum(math.exp(answer_logprob(model, tokenizer, r["prompt"], a)) for a in best)
        by_kind[json.loads(best[0])["action"].split(":")[0]].append(p)
    print(f"{len(rows)} prompts where the reference loses >= {args.margin}")
    for kind, ps in sorted(by_kind.items()):
        print(f"  best={kind:<10} {len(ps):4d} states  mean p(best) {sum(ps) / len(ps):.4f}  "
              f"p(a best action among {n} samples) {sum(1 - (1 - p) ** n for p in ps) / len(ps):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
