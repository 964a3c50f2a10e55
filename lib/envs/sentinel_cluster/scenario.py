"""Seeded SENTINEL-cluster scenarios: the cluster, the job stream, the hidden worker behaviours and GPU failures.

Used by `SentinelClusterEnv.reset` only; DATA.md documents every number drawn here. Everything random about an
episode is drawn here, once, from the internal seed, so the dynamics that follow are a pure function of the
actions.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# (jobs, GPUs, ticks): the three sizes of the public environment's cluster mode; the seed picks one uniformly.
SIZES = ((10, 8, 30), (20, 12, 60), (30, 16, 120))
N_WORKERS = 4
# Hidden worker behaviours. These names never reach an observation, a prompt, a candidate or a step's info.
BEHAVIOURS = ("reliable", "overreporter", "slow", "degrading", "adversarial")
LIARS = ("overreporter", "slow", "degrading")
GPU_MEMORY = (40, 80)  # GB; each GPU is 80 GB with probability P_80GB
P_80GB = 0.6


@dataclass(frozen=True)
class JobSpec:
    name: str
    priority: int  # 1-5, shown
    memory: int  # GB, shown
    work: int  # ticks at full speed, shown
    arrival: int  # tick the job enters the queue
    deadline: int  # the job must be truly finished by this tick


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory: int
    worker: int  # index of the worker (node agent) that runs this GPU's jobs and reports on them


@dataclass(frozen=True)
class Failure:
    gpu: int
    start: int
    duration: int


@dataclass(frozen=True)
class Scenario:
    size: int  # 0, 1, 2: index into SIZES
    horizon: int
    jobs: tuple[JobSpec, ...]
    gpus: tuple[GpuSpec, ...]
    behaviours: tuple[str, ...]  # hidden, one per worker
    failures: tuple[Failure, ...]
    degrade_onset: int  # a degrading worker stalls from its this-many-th tick of work on
    adversary_priority: int  # an adversarial worker lies about jobs of at least this priority
    novel: bool


def _behaviours(rng: random.Random, size: int, novel: bool) -> tuple[str, ...]:
    """Train/holdout: two reliable workers and two liars (an adversary replaces one liar at the largest size).
    holdout_novel: one reliable worker, an adversary at every size, and two liars."""
    if novel:
        mix = ["reliable", "adversarial", *rng.sample(LIARS, 2)]
    else:
        liars = rng.sample(LIARS, 2)
        if size == 2:
            liars[0] = "adversarial"
        mix = ["reliable", "reliable", *liars]
    rng.shuffle(mix)
    return tuple(mix)


def _jobs(rng: random.Random, n: int, horizon: int, novel: bool) -> tuple[JobSpec, ...]:
    """Jobs arrive over the first half of the episode (a third at tick 0) with hard deadlines.

    holdout_novel draws more high-priority, larger jobs with tighter deadlines."""
    priorities = (1, 2, 3, 4, 5)
    priority_weights = (1, 2, 2, 3, 4) if novel else (3, 3, 2, 2, 1)
    slack = (1.1, 1.7) if novel else (1.3, 2.4)
    jobs = []
    for i in range(n):
        arrival = 0 if i < max(3, n // 3) else rng.randint(1, horizon // 2)
        work = rng.randint(2, 12)
        memory = 5 * rng.randint(4 if novel else 2, 15)
        deadline = min(horizon, arrival + math.ceil(work * rng.uniform(*slack)) + rng.randint(1, 4))
        jobs.append(
            (arrival, JobSpec("", rng.choices(priorities, priority_weights)[0], memory, work, arrival, deadline))
        )
    jobs.sort(key=lambda item: item[0])  # numbered in arrival order
    return tuple(
        JobSpec(f"J{i}", s.priority, s.memory, s.work, s.arrival, s.deadline) for i, (_, s) in enumerate(jobs, start=1)
    )


def generate(internal_seed: int, novel: bool) -> Scenario:
    """The scenario of one internal seed (see `split_seed`); `novel` is the holdout_novel distribution.

    >>> generate(7, False) == generate(7, False)
    True
    """
    rng = random.Random(internal_seed * 7919 + 17)
    size = rng.randrange(len(SIZES))
    n_jobs, n_gpus, horizon = SIZES[size]
    per_worker = n_gpus // N_WORKERS
    gpus = tuple(GpuSpec(f"G{i + 1}", GPU_MEMORY[rng.random() < P_80GB], i // per_worker) for i in range(n_gpus))
    if not any(g.memory == GPU_MEMORY[1] for g in gpus):  # every job must fit somewhere
        gpus = (GpuSpec(gpus[0].name, GPU_MEMORY[1], 0), *gpus[1:])
    failures = tuple(
        Failure(rng.randrange(n_gpus), rng.randint(2, horizon - 5), rng.randint(3, 8)) for _ in range(size + 1)
    )
    return Scenario(
        size=size,
        horizon=horizon,
        jobs=_jobs(rng, n_jobs, horizon, novel),
        gpus=gpus,
        behaviours=_behaviours(rng, size, novel),
        failures=failures,
        degrade_onset=3 if novel else 6,
        adversary_priority=3 if novel else 4,
        novel=novel,
    )
