"""GRPO's sampler in `grpo.mode: multi_turn`: whole episodes, the model acting at every turn, the episode's return
as the reward. A TRL `rollout_func`.

Each GRPO prompt is an episode start (a train seed; the prompt is its first observation). Its group is
`num_generations` episodes from that start, played in lockstep by the one episode runner (`lib.episodes.play`):
every turn the model scores the offered answers of every live episode in one batch (lib/candidates.py) and one is
drawn from its candidate policy at `grpo.temperature`. Episodes are played in this process; with `grpo.env_url`
they are played against that server over the wire (lib/serve/remote.py), the same runner and the same answers.

What TRL trains on. TRL's loss takes one (prompt, completion) per row, and the policy acts on one rendered state at
a time, so each played turn is a row: that turn's own prompt and the answer the policy gave there.
Every played turn is a row. Its reward is its episode's advantage against the
  start's group, A = R - mean(R) (divided by the group's std when `scale_rewards` is group, the batch's when batch),
  times the turn's weight mean_T / T (each episode counts once, as a uniform draw of one turn does in expectation;
  weighting every turn 1, REINFORCE's sum over the episode, was measured and retired: docs/RESULTS.md). A start owns
  `num_generations x turn_rows` rows (TRL's group): fewer turns are padded with rows masked out of the loss
  (`env_mask` 0, reward 0), more are subsampled uniformly with weight played/kept. TRL then gets the rows as
  finished advantages (`scale_rewards` none); with episode weights and no subsampling they sum to zero over the
  group, so TRL's own mean subtraction changes nothing. (Training one uniformly drawn turn per episode, the earlier
  recipe `grpo.train_turns: one`, trained 96 of 656 played turns in more CPU time; it was retired: docs/RESULTS.md.)

Logged every step (multi_turn/*): mean episode length, share cut off at `grpo.max_turns`, mean return, turns
played and trained; explore/candidate_entropy, the policy's entropy over the candidates at the trained turns.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from ..candidates import answer_ids, answers, choose, distribution, entropy, prompt_ids, score_answers
from ..distributed import is_main, rank_key
from ..episodes import CUT_OFF, Episode, Start, play


@dataclass(frozen=True)
class Turn:
    """One played turn: the messages the policy read, the answer it drew, and its entropy over the candidates."""

    messages: list[dict]
    answer: str
    entropy: float


@dataclass(frozen=True)
class Played:
    """One episode of a group, with its turns in order."""

    episode: Episode
    turns: list[Turn]


@dataclass(frozen=True)
class TrainRow:
    """One row TRL trains on: a played turn, its reward (the episode's advantage, weighted), whether the loss sees it
    (`trained` False: a padding row) and the index of its episode in the group's `Played` list."""

    turn: Turn
    reward: float
    trained: bool
    episode: int


def _key(messages) -> str:
    return json.dumps(messages, sort_keys=True)


def episode_starts(spec, seeds: list[int], split: str = "train") -> list[dict]:
    """The dataset of multi-turn GRPO: one row per seed, its prompt the first observation as the environment's one
    renderer draws it (a server sends the same messages: tests/test_serve.py)."""
    env = spec.make_env()
    return [{"prompt": env.render(env.reset(seed, split)), "seed": seed, "split": split} for seed in seeds]


def rows_per_start(grpo) -> int:
    """TRL's group size in multi_turn mode: the rows one episode start owns."""
    return grpo.num_generations * grpo.turn_rows


def environment_pool(spec, env_url: str | None = None):
    """(make_env, release) for the runner: environments made once and reused across steps (`release` hands every
    one made since back), in this process or, with `env_url`, sessions of that server."""
    idle: list = []
    used: list = []

    def make():
        if idle:
            env = idle.pop()
        elif env_url:
            from ..serve.remote import RemoteEnvironment

            env = RemoteEnvironment(env_url)
        else:
            env = spec.make_env()
        used.append(env)
        return env

    def release() -> None:
        idle.extend(used)
        used.clear()

    return make, release


def play_group(
    model, tokenizer, make_env, starts: list[dict], episodes_per_start: int, *, temperature, key, max_turns
) -> list[Played]:
    """Play `episodes_per_start` episodes from every start, in lockstep, sampling from the candidate policy.
    Returns every episode (start-major) with its turns."""
    turns: dict[int, list[Turn]] = {}

    def act(live) -> list[str]:
        offered = [answers(e.observation) for e in live]
        messages = [e.env.render(e.observation) for e in live]
        was_training = model.training
        model.eval()  # no layer checkpointed, so the prompt's cache serves every answer
        try:
            with torch.no_grad():
                scores = score_answers(model, tokenizer, messages, offered)
        finally:
            model.train(was_training)
        texts = []
        for entry, options, logprobs, shown in zip(live, offered, scores, messages):
            generator = torch.Generator().manual_seed(zlib.crc32(f"{key}/{entry.index}/{entry.steps}".encode()))
            probs = distribution(logprobs, temperature)
            answer = options[choose(probs, greedy=False, generator=generator)[0]]
            turns.setdefault(entry.index, []).append(Turn(shown, answer, entropy(probs)))
            texts.append(answer)
        return texts

    plan = [Start(r["seed"], r["split"]) for r in starts for _ in range(episodes_per_start)]
    episodes = play(make_env, plan, act, batch_size=len(plan), max_turns=max_turns)
    return [Played(episode, turns.get(index, [])) for index, episode in enumerate(episodes)]


def _advantages(returns: list[float], groups: int, scale: str) -> list[float]:
    """Each episode's return against its group's mean (groups are consecutive, equal-sized), scaled as TRL's
    `scale_rewards` would: by the group's std (group), the batch's (batch), or not (none)."""
    values = torch.tensor(returns, dtype=torch.double).view(groups, -1)
    centred = values - values.mean(dim=1, keepdim=True)
    if scale == "group":
        centred = centred / (values.std(dim=1, keepdim=True) + 1e-4)
    elif scale == "batch":
        centred = centred / (values.std() + 1e-4)
    return centred.flatten().tolist()


def turn_rows(played: list[Played], episodes_per_start: int, rows_per_episode: int, *, scale: str, generator):
    """The training rows of `played` (multi_turn mode): per start exactly `episodes_per_start x
    rows_per_episode` rows; see the module docstring for the rewards, the padding and the subsampling. Returns the
    rows and every episode's return."""
    returns = [p.episode.episode_return for p in played]  # a cut-off episode's is 0
    starts = len(played) // episodes_per_start
    advantages = _advantages(returns, starts, scale)
    width = episodes_per_start * rows_per_episode
    rows: list[TrainRow] = []
    for start in range(starts):
        members = range(start * episodes_per_start, (start + 1) * episodes_per_start)
        lengths = [len(played[i].turns) for i in members]
        mean_length = sum(lengths) / len(lengths)
        candidates = []
        for i, length in zip(members, lengths):
            share = mean_length / length if length else 0.0
            candidates += [TrainRow(turn, advantages[i] * share, True, i) for turn in played[i].turns]
        if len(candidates) > width:
            keep = torch.randperm(len(candidates), generator=generator)[:width].sort().values.tolist()
            scale_up = len(candidates) / width
            candidates = [replace(candidates[k], reward=candidates[k].reward * scale_up) for k in keep]
        pad = candidates[0] if candidates else None
        while len(candidates) < width:
            candidates.append(replace(pad, reward=0.0, trained=False))
        rows += candidates
    return rows, returns


def environment_metrics(spec, episodes, answers: list[str], blocklist: list[str]) -> dict[str, float]:
    """What the environment said of the played episodes, named as step mode's reward logs it (env/*), so the
    anti-hacking report reads the same rule hits in both modes: invalid answers and blocklisted ones per answer,
    exploits and each anti-cheat rule per episode, the mean of each terminal reward component."""
    count = max(1, len(episodes))
    blocked = [b.lower() for b in blocklist]
    metrics = {
        "env/invalid_rate": sum(e.invalid for e in episodes) / max(1, len(answers)),
        "env/blocklist_rate": sum(any(b in a.lower() for b in blocked) for a in answers) / max(1, len(answers)),
        "env/exploit_rate": sum(bool(e.exploit) for e in episodes) / count,
        **{
            f"env/anti_cheat/{rule}": sum(e.anti_cheat == rule for e in episodes) / count
            for rule in spec.anti_cheat_rules
        },
    }
    for name in sorted({name for e in episodes for name in e.components}):
        metrics[f"env/component/{name}"] = sum(e.components.get(name, 0.0) for e in episodes) / count
    return metrics


def multi_turn_rollout(spec, starts: list[dict], grpo, seed: int, env_url: str | None = None):
    """The `rollout_func` (see the module docstring)."""
    by_prompt = {_key(r["prompt"]): r for r in starts}
    group = rows_per_start(grpo)
    make_env, release = environment_pool(spec, env_url)

    def rollout(prompts, trainer):
        tokenizer, model = trainer.processing_class, trainer.model
        step = trainer.state.global_step
        chosen = [by_prompt[_key(p)] for p in prompts[::group]]  # each start repeated `group` times, in order
        key = f"{seed}/{step}{rank_key()}"  # each rank draws its own episodes; a resumed run draws the same
        try:
            played = play_group(
                model,
                tokenizer,
                make_env,
                chosen,
                grpo.num_generations,
                temperature=grpo.temperature,
                key=key,
                max_turns=grpo.max_turns,
            )
        finally:
            release()
        picker = torch.Generator().manual_seed(zlib.crc32(f"{key}/turns".encode()))
        rows, returns = turn_rows(
            played, grpo.num_generations, grpo.turn_rows, scale=grpo.scale_rewards, generator=picker
        )
        episodes = [p.episode for p in played]
        trained = [r for r in rows if r.trained]
        lengths = [len(p.turns) for p in played]
        metrics = {
            "multi_turn/episode_len": sum(lengths) / len(lengths),
            "multi_turn/cut_off": sum(e.end_reason == CUT_OFF for e in episodes) / len(played),
            "multi_turn/return_mean": sum(returns) / len(returns),
            "multi_turn/played_turns": sum(lengths),
            "multi_turn/trained_turns": len(trained),
            "explore/candidate_entropy": sum(r.turn.entropy for r in trained) / max(1, len(trained)),
            **environment_metrics(spec, episodes, [t.answer for p in played for t in p.turns], grpo.blocklist),
        }
        completions = [answer_ids(tokenizer, r.turn.answer) for r in rows]
        return {
            "prompt_ids": [prompt_ids(tokenizer, r.turn.messages) for r in rows],
            "completion_ids": completions,
            "logprobs": None,
            "env_mask": [[int(r.trained)] * len(c) for r, c in zip(rows, completions)],
            "row_reward": [float(r.reward) for r in rows],
            "row_trained": [r.trained for r in rows],
            "episode_return": [returns[r.episode] for r in rows],
            # every answer of each row's episode: what reproduces its return offline (tests/test_multiturn.py)
            "episode_answers": [[t.answer for t in played[r.episode].turns] for r in rows],
            "episode_seed": [played[r.episode].episode.seed for r in rows],
            "rollout_metrics": metrics,
        }

    return rollout


def make_episode_reward(samples_path: Path | None = None, sample_completions: int = 0):
    """The reward of `grpo.mode: multi_turn`: each row's reward as the rollout computed it from its episode's return
    (the same `episode_return` evaluation reads; see the module docstring). The first `sample_completions` trained
    rows of every step go to `samples_path` (grpo/samples.jsonl) with their episode's seed, return and length."""

    def episode_reward(
        completions, row_reward, episode_return, row_trained=None, episode_seed=None, episode_answers=None, **_
    ) -> list[float]:
        rewards = [float(r) for r in row_reward]
        if samples_path is not None and sample_completions and is_main():
            kept = [i for i in range(len(rewards)) if row_trained is None or row_trained[i]][:sample_completions]
            with Path(samples_path).open("a", encoding="utf-8") as handle:
                for index in kept:
                    completion = completions[index]
                    record = {
                        "completion": completion[-1]["content"] if isinstance(completion, list) else completion,
                        "reward": rewards[index],
                        "episode_return": float(episode_return[index]),
                        "seed": episode_seed[index] if episode_seed else None,
                        "episode_turns": len(episode_answers[index]) if episode_answers else None,
                    }
                    handle.write(json.dumps(record) + "\n")
        return rewards

    return episode_reward
