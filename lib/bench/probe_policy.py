"""Diagnostic: how a trained tiny policy answers at the teacher's own holdout states (free text, greedy).

    python -m lib.bench.probe_policy MODEL_DIR --env ENV [--adapter ADAPTER_DIR] [--episodes 40]
        [--kinds K1,K2,...] [--headroom-action ID --headroom-text TEXT]

Prints two things:
1. Greedy agreement with the environment's teacher, by the kind of the teacher's action (the offered candidate's
   kind), at every state of the teacher's holdout episodes (seeds 0..episodes-1).
2. With `--headroom-action` and `--headroom-text`: at the states where the teacher plays the candidate ID while the
   last item (", "-separated) of the observation's last line contains TEXT, the model's log-probabilities of the
   first token of each action kind (`--kinds`, default every kind offered) after '{"action": "'. GRPO can only learn
   to fix such states if it samples something other than the teacher's action there.

The environment comes from the registry (`--env`, any name `get_spec` accepts); bench/README.md gives the command
with the arguments of the figures it quotes.
"""

from __future__ import annotations

import argparse
from collections import Counter

import torch

from ..config import ModelConfig
from ..envs import get_spec
from ..envs.base import format_action
from ..episodes import run_episode
from ..inference import generate_actions, load_policy_model


def teacher_states(env_name: str, episodes: int) -> list[tuple[list[dict], str, str]]:
    """(rendered prompt, teacher's action text, its kind) at every state of the teacher's holdout episodes."""
    spec = get_spec(env_name)
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    states = []
    for seed in range(episodes):
        for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions:
            kinds = {format_action(c.id): c.kind for c in t["observation"].candidates}
            states.append((env.render(t["observation"]), t["action"], kinds[t["action"]]))
    return states


def offered_kinds(env_name: str, episodes: int) -> list[str]:
    """Every candidate kind offered at the teacher's holdout states, sorted."""
    spec = get_spec(env_name)
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    found = set()
    for seed in range(episodes):
        for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions:
            found.update(c.kind for c in t["observation"].candidates)
    return sorted(found)


def kind_logprobs(model, tokenizer, messages, kinds) -> dict[str, float]:
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + '{"action": "'
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logprobs = model(ids).logits[0, -1].log_softmax(-1)
    result = {}
    for kind in kinds:
        first = tokenizer(kind, add_special_tokens=False)["input_ids"][0]  # the kind's first token
        result[kind] = round(logprobs[first].item(), 2)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir")
    parser.add_argument("--env", required=True, help="an environment name or dotted module path (get_spec)")
    parser.add_argument("--adapter", default=None)
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--kinds", default=None, help="comma-separated action kinds (default: every kind offered)")
    parser.add_argument("--headroom-action", default=None, help="candidate id the teacher plays at a headroom state")
    parser.add_argument("--headroom-text", default=None, help="text in the last item of the observation's last line")
    args = parser.parse_args(argv)
    model, tokenizer, _ = load_policy_model(args.model_dir, ModelConfig(name="tiny"), args.adapter)
    states = teacher_states(args.env, args.episodes)
    answers: list[str] = []
    for start in range(0, len(states), 16):
        answers += generate_actions(model, tokenizer, [m for m, _, _ in states[start : start + 16]], greedy=True)
    right, total = Counter(), Counter()
    for (_, action, kind), answer in zip(states, answers):
        total[kind] += 1
        right[kind] += answer.strip() == action
    print("greedy agreement with the teacher:", ", ".join(f"{k} {right[k]}/{total[k]}" for k in sorted(total)))
    if args.headroom_action is None or args.headroom_text is None:
        return 0
    kinds = args.kinds.split(",") if args.kinds else offered_kinds(args.env, args.episodes)
    headroom = [
        m
        for m, action, _ in states
        if action == format_action(args.headroom_action)
        and args.headroom_text in m[-1]["content"].splitlines()[-1].split(", ")[-1]
    ]
    print(
        f"{len(headroom)} states where the teacher plays {args.headroom_action!r} with {args.headroom_text!r} "
        "open (the last line ends with it)"
    )
    for messages in headroom[:5]:
        print(" ", messages[-1]["content"].splitlines()[-1], kind_logprobs(model, tokenizer, messages, kinds))
    if headroom:
        each = [kind_logprobs(model, tokenizer, m, kinds) for m in headroom]
        mean = {k: round(sum(e[k] for e in each) / len(each), 2) for k in kinds}
        print("mean log p(first kind token) over those states:", mean)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
