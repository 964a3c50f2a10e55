"""GRPO's sampler in `grpo.mode: multi_turn`: whole episodes played against the served environment (OpenEnv,
lib/serve), the model acting at every turn, the episode's return as the reward. A TRL `rollout_func`.

Each GRPO prompt is an episode start (a train seed; the prompt is its first observation). Its group is
`num_generations` episodes from that start, played at once through `WorkbookClient` sessions: every turn the model
scores the offered answers (lib/candidates.py) and one is drawn from its candidate policy at `grpo.temperature`;
the server applies it, renders the next prompt and, at the end, reports the return.

What TRL trains on. TRL's loss takes one (prompt, completion) per sample, and the policy acts on one rendered
state at a time, never on the conversation so far, so an episode cannot be packed into one sequence without
training on contexts the policy never saw. Each episode therefore contributes one of its turns, drawn uniformly:
the row is that turn's own prompt and the answer the policy gave there, and its reward is the whole episode's
return. The group's advantages compare whole episodes from the same start, so the update is the REINFORCE
gradient of the episode return (with the group mean as baseline), estimated from one turn per episode, on states
the current policy itself reached.

Logged every step (multi_turn/*): mean episode length, share of episodes cut off at `grpo.max_turns`, and the
policy's entropy over the candidates at the trained turns.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import torch

from ..candidates import answer_ids, choose, distribution, entropy, prompt_ids, score_answers
from ..distributed import is_main, rank_key
from ..envs import make_env
from ..serve.client import play_served


def _key(messages) -> str:
    return json.dumps(messages, sort_keys=True)


def episode_starts(env_name: str, seeds: list[int], split: str = "train") -> list[dict]:
    """The dataset of multi-turn GRPO: one row per seed, its prompt the first observation as the environment's one
    renderer draws it (the server sends the same messages: tests/test_serve.py)."""
    env = make_env(env_name)
    return [{"prompt": env.render(env.reset(seed, split)), "seed": seed, "split": split} for seed in seeds]


def multi_turn_rollout(target: dict, rows: list[dict], group_size: int, temperature: float, seed: int, max_turns: int):
    """The `rollout_func` (see the module docstring); it plays against the server at `target["url"]`, known once
    training starts."""
    by_prompt = {_key(r["prompt"]): r for r in rows}

    def rollout(prompts, trainer):
        tokenizer, model = trainer.processing_class, trainer.model
        step = trainer.state.global_step
        starts = [by_prompt[_key(p)] for p in prompts]  # each start repeated group_size times, in order
        draws = {"turn": 0}
        entropies: dict[int, float] = {}  # id of an observation -> the policy's entropy over its candidates

        def act(observations) -> list[str]:
            offered = [[c["answer"] for c in o.candidates] for o in observations]
            was_training = model.training
            model.eval()  # no layer checkpointed, so the prompt's cache serves every answer
            try:
                with torch.no_grad():
                    scores = score_answers(model, tokenizer, [o.messages for o in observations], offered)
            finally:
                model.train(was_training)
            answers = []
            for index, (options, logprobs) in enumerate(zip(offered, scores)):
                key = f"{seed}/{step}/{draws['turn']}/{index}{rank_key()}"  # each rank draws its own episodes
                generator = torch.Generator().manual_seed(zlib.crc32(key.encode()))
                probs = distribution(logprobs, temperature)
                answers.append(options[choose(probs, greedy=False, generator=generator)[0]])
                entropies[id(observations[index])] = entropy(probs)
            draws["turn"] += 1
            return answers

        episodes = play_served(target["url"], [(r["seed"], r["split"]) for r in starts], act, max_turns=max_turns)
        picker = torch.Generator().manual_seed(zlib.crc32(f"{seed}/{step}/turns{rank_key()}".encode()))
        row_prompts, row_answers, returns, trained_entropy = [], [], [], []
        for episode in episodes:
            turn = episode["turns"][int(torch.randint(len(episode["turns"]), (1,), generator=picker))]
            row_prompts.append(turn["observation"].messages)
            row_answers.append(turn["answer"])
            trained_entropy.append(entropies[id(turn["observation"])])
            returns.append(float(episode["episode_return"]) if episode["done"] else 0.0)
        lengths = [len(e["turns"]) for e in episodes]
        metrics = {
            "multi_turn/episode_len": sum(lengths) / len(lengths),
            "multi_turn/cut_off": sum(not e["done"] for e in episodes) / len(episodes),
            "multi_turn/return_mean": sum(returns) / len(returns),
            "explore/candidate_entropy": sum(trained_entropy) / len(trained_entropy),
        }
        return {
            "prompt_ids": [prompt_ids(tokenizer, p) for p in row_prompts],
            "completion_ids": [answer_ids(tokenizer, a) for a in row_answers],
            "logprobs": None,
            "episode_return": returns,
            # every answer of each episode: what reproduces the return offline (tests/test_multiturn.py)
            "episode_answers": [[t["answer"] for t in e["turns"]] for e in episodes],
            "episode_seed": [e["seed"] for e in episodes],
            "rollout_metrics": metrics,
        }

    return rollout


def make_episode_reward(samples_path: Path | None = None, sample_completions: int = 0):
    """The reward of `grpo.mode: multi_turn`: the return of the episode each sampled turn belongs to, as the served
    environment reported it (the same `episode_return` evaluation reads). The first `sample_completions` of every
    step go to `samples_path` (grpo/samples.jsonl) with their episode's seed and length, as in step mode."""

    def episode_reward(completions, episode_return, episode_seed=None, episode_answers=None, **_) -> list[float]:
        rewards = [float(r) for r in episode_return]
        if samples_path is not None and sample_completions and is_main():
            with Path(samples_path).open("a", encoding="utf-8") as handle:
                for index, (completion, reward) in enumerate(list(zip(completions, rewards))[:sample_completions]):
                    handle.write(
                        json.dumps(
                            {
                                "completion": completion[-1]["content"] if isinstance(completion, list) else completion,
                                "reward": reward,
                                "seed": episode_seed[index] if episode_seed else None,
                                "episode_turns": len(episode_answers[index]) if episode_answers else None,
                            }
                        )
                        + "\n"
                    )
        return rewards

    return episode_reward
