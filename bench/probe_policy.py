"""Diagnostic: how a trained tiny policy answers at the teacher's own holdout states.

    python bench/probe_policy.py MODEL_DIR [--adapter ADAPTER_DIR] [--episodes 40]

Prints two things the README quotes:
1. Greedy agreement with the heuristic teacher, by the teacher's action kind (gather / stop / finish), at
   every state of the teacher's holdout episodes (seeds 0..episodes-1).
2. At the states where the teacher finishes with a renal `avoid` verdict still open (the headroom: such an
   episode ends at 0), the model's log-probabilities of the first action-kind token after '{"action": "'.
   GRPO can only learn to fix these states if it samples something other than `finish` there.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

import torch

from lib.config import ModelConfig
from lib.envs.polyguard.env import PolyGuardEnv
from lib.envs.polyguard.policies import HeuristicPolicy
from lib.episodes import run_episode
from lib.inference import generate_actions, load_policy_model

KINDS = ("finish", "stop", "substitute", "reduce", "monitor", "gather", "review")


def teacher_states(episodes: int):
    """(rendered prompt, teacher's action) at every state of the teacher's holdout episodes."""
    env, teacher = PolyGuardEnv(), HeuristicPolicy()
    for seed in range(episodes):
        for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions:
            yield env.render(t["observation"]), t["action"]


def kind_logprobs(model, tokenizer, messages) -> dict[str, float]:
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + '{"action": "'
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logprobs = model(ids).logits[0, -1].log_softmax(-1)
    result = {}
    for kind in KINDS:
        first = tokenizer(kind, add_special_tokens=False)["input_ids"][0]  # the kind's first token
        result[kind] = round(logprobs[first].item(), 2)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--episodes", type=int, default=40)
    args = parser.parse_args(argv)
    model, tokenizer, _ = load_policy_model(args.model_dir, ModelConfig(name="tiny"), args.adapter)
    states = list(teacher_states(args.episodes))
    answers: list[str] = []
    for start in range(0, len(states), 16):
        answers += generate_actions(model, tokenizer, [m for m, _ in states[start : start + 16]], greedy=True)
    right, total = Counter(), Counter()
    for (_, action), answer in zip(states, answers):
        kind = json.loads(action)["action"].split(":")[0]
        total[kind] += 1
        right[kind] += answer.strip() == action
    print("greedy agreement with the teacher:", ", ".join(f"{k} {right[k]}/{total[k]}" for k in sorted(total)))
    headroom = [
        m
        for m, action in states
        if action.endswith('"finish"}') and "renal avoid" in m[1]["content"].splitlines()[-1].split(", ")[-1]
    ]
    print(f"{len(headroom)} states where the teacher finishes with a renal avoid open (last line ends with it)")
    for messages in headroom[:5]:
        print(" ", messages[1]["content"].splitlines()[-1], kind_logprobs(model, tokenizer, messages))
    if headroom:
        mean = {
            k: round(sum(kind_logprobs(model, tokenizer, m)[k] for m in headroom) / len(headroom), 2) for k in KINDS
        }
        print("mean log p(first kind token) over those states:", mean)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
