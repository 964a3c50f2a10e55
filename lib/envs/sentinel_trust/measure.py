"""Measures SENTINEL-trust's baseline table and speed (the figures in README.md).

    OMP_NUM_THREADS=1 python -m lib.envs.sentinel_trust.measure --episodes 500
    OMP_NUM_THREADS=1 python -m lib.envs.sentinel_trust.measure --speed

Plays every reported policy on seeds 0..N-1 of `holdout` and `holdout_novel` and prints mean returns (with a
95% interval half-width); `--speed` times the teacher's episodes on one core. Pure Python, no model.
"""

from __future__ import annotations

import argparse
import statistics
import time

from ...episodes import run_episode
from .env import SentinelTrustEnv
from .policies import BASELINES, POLICIES, TRIVIAL


def returns(policy: str, split: str, episodes: int) -> list[float]:
    """Episode returns of `policy` on seeds 0..episodes-1 of `split`."""
    env, chosen = SentinelTrustEnv(), POLICIES[policy]()
    return [run_episode(env, chosen, seed, split).episode_return for seed in range(episodes)]


def table(episodes: int, splits=("holdout", "holdout_novel"), policies=(*BASELINES, *TRIVIAL)) -> str:
    """The README's markdown table: mean return ± 1.96 standard errors per policy and split."""
    rows = [f"| policy | {' | '.join(f'{s} (n={episodes})' for s in splits)} |", "|---|" + "---|" * len(splits)]
    for policy in policies:
        cells = []
        for split in splits:
            values = returns(policy, split, episodes)
            half = 1.96 * statistics.pstdev(values) / len(values) ** 0.5
            cells.append(f"{statistics.fmean(values):.3f} ± {half:.3f}")
        rows.append(f"| {policy} | {' | '.join(cells)} |")
    return "\n".join(rows)


def speed(episodes: int = 2000) -> str:
    """Teacher episodes played with the bare protocol (reset, act, step), timed on this one process."""
    env, teacher = SentinelTrustEnv(), POLICIES["heuristic"]()
    start, steps = time.perf_counter(), 0
    for seed in range(episodes):
        observation = env.reset(seed, "train")
        teacher.begin(seed)
        while True:
            result = env.step(teacher.act(observation, env))
            steps += 1
            if result.done:
                break
            observation = result.observation
    elapsed = time.perf_counter() - start
    return f"{steps} teacher steps ({episodes} train episodes) in {elapsed:.2f} s: {steps / elapsed:,.0f} steps/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--speed", action="store_true", help="time the teacher instead of printing the table")
    args = parser.parse_args()
    print(speed() if args.speed else table(args.episodes))


if __name__ == "__main__":
    main()
