"""The figures in this package's README: every policy's mean return on held-out seeds, steps per second and
prompt lengths. Run `OMP_NUM_THREADS=1 python -m lib.envs.sentinel_cluster.measure [--episodes 500]`; the
tests check the same bars on fewer episodes."""

from __future__ import annotations

import argparse
import statistics
import time

from ...episodes import run_episode
from .env import SentinelClusterEnv
from .policies import POLICIES
from .scenario import SIZES


def mean_returns(names, split: str, episodes: int) -> dict[str, tuple[float, float, float]]:
    """Per policy over seeds 0..episodes-1 of `split`: (mean return, 95% CI half-width, share of episodes
    ended by an anti-cheat rule)."""
    env = SentinelClusterEnv()
    table = {}
    for name in names:
        played = [run_episode(env, POLICIES[name](), seed, split) for seed in range(episodes)]
        returns = [e.episode_return for e in played]
        half = 1.96 * statistics.stdev(returns) / len(returns) ** 0.5
        table[name] = (statistics.fmean(returns), half, sum(e.end_reason == "exploit" for e in played) / episodes)
    return table


def steps_per_second(policy: str = "heuristic", episodes: int = 300) -> float:
    """Environment steps per second on this core with `policy` choosing (reset, step and the policy's act)."""
    env, chosen = SentinelClusterEnv(), POLICIES[policy]()
    steps, began = 0, time.perf_counter()
    for seed in range(episodes):
        observation = env.reset(seed, "train")
        chosen.begin(seed)
        while not env.done:
            observation = env.step(chosen.act(observation, env)).observation
            steps += 1
    return steps / (time.perf_counter() - began)


def prompt_lengths(episodes: int = 100) -> dict[int, tuple[float, int]]:
    """(mean, max) characters of the rendered prompt (system + user) per cluster size, over the teacher's,
    expert's and random policy's held-out episodes."""
    env = SentinelClusterEnv()
    lengths: dict[int, list[int]] = {}
    for name in ("heuristic", "evidence_expert", "random"):
        for split in ("holdout", "holdout_novel"):
            for seed in range(episodes):
                episode = run_episode(env, POLICIES[name](), seed, split, keep_transitions=True)
                for t in episode.transitions:
                    length = sum(len(m["content"]) for m in env.render(t["observation"]))
                    lengths.setdefault(env.scenario.size, []).append(length)
    return {size: (statistics.fmean(v), max(v)) for size, v in sorted(lengths.items())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--episodes", type=int, default=500)
    args = parser.parse_args()
    splits = ("holdout", "holdout_novel")
    table = {split: mean_returns(POLICIES, split, args.episodes) for split in splits}
    n = args.episodes
    print(f"| policy | holdout (n={n}) | ended by a rule | holdout_novel (n={n}) | ended by a rule |")
    print("|---|---|---|---|---|")
    for name in POLICIES:
        cells = [
            f"{mean:.3f} ± {half:.3f} | {cheats:.0%}" for mean, half, cheats in (table[split][name] for split in splits)
        ]
        print(f"| {name} | {' | '.join(cells)} |")
    print(f"\nsteps/s with the teacher (one core): {steps_per_second():,.0f}")
    for size, (mean, longest) in prompt_lengths().items():
        jobs, gpus, ticks = SIZES[size]
        print(f"prompt chars, {jobs} jobs / {gpus} GPUs / {ticks} ticks: mean {mean:.0f}, max {longest}")


if __name__ == "__main__":
    main()
