"""`python -m lib fingerprint`: one sha256 per environment of everything its scripted policies make it do, to prove
a refactor changed no behaviour. For every policy of the spec, `--episodes` seeds of each split: the episode
returns, every rendered prompt, and every step record (the answer, reward, done, components and info, minus the
info keys `--ignore` names, for a refactor that adds one). Run it before and after a change and compare.
"""

from __future__ import annotations

import hashlib
import json
import time

from tqdm.auto import tqdm

from ..envs import get_spec


def fingerprint(env_name: str, episodes: int, splits: tuple[str, ...], ignore: tuple[str, ...] = ()) -> dict:
    """{"returns", "prompts", "steps"} sha256 (first 16 hex digits), with the episode and step counts."""
    spec = get_spec(env_name)
    env = spec.make_env()
    digests = {part: hashlib.sha256() for part in ("returns", "prompts", "steps")}
    n_episodes = n_steps = 0
    started = time.perf_counter()
    jobs = [(name, split, seed) for name in sorted(spec.policies) for split in splits for seed in range(episodes)]
    for name, split, seed in tqdm(jobs, desc=f"fingerprint {env_name}", unit="episode", leave=False):
        policy = spec.make_policy(name)
        policy.begin(seed)
        observation = env.reset(seed, split)
        while True:
            digests["prompts"].update(json.dumps(env.render(observation)).encode())
            text = policy.act(observation, env)
            result = env.step(text)
            n_steps += 1
            info = {k: v for k, v in result.info.items() if k not in ignore}
            record = [text, result.reward, result.done, result.components, info]
            digests["steps"].update(json.dumps(record, sort_keys=True, default=str).encode())
            if result.done:
                digests["returns"].update(f"{name}|{split}|{seed}|{info['episode_return']!r}\n".encode())
                break
            observation = result.observation
        n_episodes += 1
    return {
        "env": env_name,
        "seeds_per_split": episodes,
        "episodes": n_episodes,
        "steps": n_steps,
        "splits": list(splits),
        "ignored_info_keys": list(ignore),
        "sha256": {part: digest.hexdigest()[:16] for part, digest in digests.items()},
        "seconds": round(time.perf_counter() - started, 1),
    }
