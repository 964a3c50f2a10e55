"""Closed-loop episodes of the scripted policies (baselines, the teacher, the improver), recorded action by action
like a model's, and spread over the machine's cores.

A policy's episode depends on its seed alone (every built-in policy gives the same returns played in one call or in
chunks, in any order), so `run_policies` plays each policy's seeds in chunks across processes and puts them back in
seed order. The improver, which looks ahead from every state, took 47 s of the evaluate stage for `gpu-smollm2`
played in one process.
"""

from __future__ import annotations

import math

from ..envs import EnvSpec, get_spec
from ..episodes import Start, Step, play, policy_actor, scripted_policy
from ..parallel import cores, fork_map


def action_recorder(actions: list[dict], source: dict):
    """The per-step hook of evaluation: every action, with the source that produced it and its latency."""

    def on_step(step: Step) -> None:
        record = {
            "seed": step.live.seed,
            "split": step.live.start.split,
            "step": step.live.steps,
            "completion": step.text,
            "valid": "invalid" not in step.result.info,
            "reward": step.result.reward,
            "model_source": source,
            "latency_s": step.latency_s,
            **step.live.extra,
        }
        actions.append(record)

    return on_step


def run_policy_episodes(spec: EnvSpec, name: str, seeds, split: str):
    """A baseline, trivial or reference policy of environment `spec` (a run's `config.spec`), recorded exactly like
    a model: every action names its source."""
    env, actions = spec.make_env(), []
    episodes = play(
        lambda: env,
        [Start(seed, split) for seed in seeds],
        policy_actor(scripted_policy(spec, name), copies=False),
        on_step=action_recorder(actions, {"policy": name}),
    )
    return episodes, actions


def _play_chunk(env: str, env_args: dict | None, name: str, seeds: list[int], split: str):
    """A worker's share: one policy on some seeds (the spec is rebuilt in the worker, memoised there)."""
    return run_policy_episodes(get_spec(env, env_args), name, seeds, split)


def run_policies(
    env: str, env_args: dict | None, jobs: list[tuple[str, list[int]]], split: str, *, workers: int | None = None
) -> dict[str, tuple[list, list[dict]]]:
    """Each (policy, seeds) job of `jobs` played on `split`: {policy: (episodes in seed order, action records)}, the
    same as `run_policy_episodes` one job after another. With more than one worker (default: the cores this process
    may use) each job's seeds go out in chunks, about two per worker (a policy's cost is unknown here: the
    improver's episodes cost a hundred times a baseline's), to forked processes (lib/parallel.py)."""
    names = [name for name, _ in jobs]
    if len(set(names)) != len(names):
        raise ValueError(f"each policy once: {names} names one twice")
    workers = cores() if workers is None else workers
    chunks = []
    for name, seeds in jobs:
        seeds = list(seeds)
        size = max(1, math.ceil(len(seeds) / (2 * workers)))
        chunks += [(name, seeds[i : i + size]) for i in range(0, len(seeds), size)]
    if workers <= 1 or len(chunks) <= 1:
        spec = get_spec(env, env_args)
        return {name: run_policy_episodes(spec, name, seeds, split) for name, seeds in jobs}
    done = fork_map(
        _play_chunk,
        [(env, env_args, name, seeds, split) for name, seeds in chunks],
        workers,
        f"{split}/scripted policies",
    )
    found: dict[str, tuple[list, list[dict]]] = {name: ([], []) for name, _ in jobs}
    for index, (name, _) in enumerate(chunks):
        episodes, actions = done[index]
        found[name][0].extend(episodes)
        found[name][1].extend(actions)
    return found
