"""Seeded SENTINEL-trust scenarios: the job's subtasks, the hidden specialist behaviours and their reliabilities.

Used by `SentinelTrustEnv.reset` (generation) and `SentinelTrustEnv.success_probability` (the oracle's view).
Every number of the game lives here, once; DATA.md says where each comes from.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

DOMAINS = ("analysis", "testing", "synthesis", "planning", "execution")
BANDS = ("low", "mid", "high")
MID_FROM, HIGH_FROM = 0.40, 0.70  # stakes band edges: low < 0.40 <= mid < 0.70 <= high
SLOTS = ("S0", "S1", "S2", "S3", "S4")
# level -> (subtasks, step budget)
LEVELS = {1: (10, 20), 2: (15, 30), 3: (20, 45)}
STAKES_JITTER = 0.05

SOLVE_COST = 3
VERIFY_EXTRA = 1
SKIP_COST = 1
SOLVE_ACCURACY = {"analysis": 0.65, "testing": 0.70, "synthesis": 0.50, "planning": 0.60, "execution": 0.55}

# The five hidden behaviours. Their names never reach an observation, a prompt or a step's info.
BEHAVIOURS = ("accurate_slow", "overconfident_fast", "domain_bound", "adversarial", "degrading")
COST = {"accurate_slow": 2, "overconfident_fast": 1, "domain_bound": 1, "adversarial": 1, "degrading": 1}
ACCURATE_SLOW = 0.90
OVERCONFIDENT = 0.50
DOMAIN_STRONG, DOMAIN_WEAK = 0.95, 0.05
ADVERSARY_HONEST = 0.90
DEGRADE_START, DEGRADE_STEP, DEGRADE_FLOOR = 0.95, 0.20, 0.05


@dataclass(frozen=True)
class Variant:
    """What a split's scenarios are drawn from: the adversary's stakes threshold and the domain-bound
    specialist's strong domains. `holdout_novel` uses values train and holdout never show."""

    adversary_from: float
    strong_domains: tuple[str, ...]


STANDARD = Variant(adversary_from=0.70, strong_domains=("analysis", "testing"))
NOVEL = Variant(adversary_from=0.40, strong_domains=("synthesis", "planning"))


@dataclass(frozen=True)
class Scenario:
    level: int
    budget: int
    domains: tuple[str, ...]  # one per subtask, in job order
    stakes: tuple[float, ...]
    assignment: tuple[str, ...]  # hidden: the behaviour behind each public slot S0-S4
    variant: Variant


def band(stakes: float) -> int:
    """Index into BANDS.

    >>> [BANDS[band(s)] for s in (0.2, 0.4, 0.69, 0.7)]
    ['low', 'mid', 'mid', 'high']
    """
    return 2 if stakes >= HIGH_FROM else 1 if stakes >= MID_FROM else 0


def turned(behaviour: str, stakes: float, variant: Variant) -> bool:
    """Whether `behaviour` plants a wrong answer at these stakes (the adversary above its threshold)."""
    return behaviour == "adversarial" and stakes >= variant.adversary_from


def accuracy(behaviour: str, domain: str, stakes: float, calls_before: int, variant: Variant) -> float:
    """Probability that `behaviour` answers a subtask right, given how often it was called before (hidden)."""
    if behaviour == "accurate_slow":
        return ACCURATE_SLOW
    if behaviour == "overconfident_fast":
        return OVERCONFIDENT
    if behaviour == "domain_bound":
        return DOMAIN_STRONG if domain in variant.strong_domains else DOMAIN_WEAK
    if behaviour == "adversarial":
        return 0.0 if turned(behaviour, stakes, variant) else ADVERSARY_HONEST
    return max(DEGRADE_FLOOR, DEGRADE_START - DEGRADE_STEP * calls_before)


# level -> (high-stakes subtasks, of which critical, upper bound of the other subtasks' stakes)
STAKES_PROFILE = {1: ((1, 2), (0, 1), 0.45), 2: ((3, 4), (1, 2), 0.62), 3: ((6, 7), (2, 3), 0.62)}


def _stakes(rng: random.Random, level: int, n: int) -> list[float]:
    """The stakes of a level's subtasks before jitter, in random job order: a few high-stakes subtasks (>= 0.75),
    some of them critical (>= 0.88), the rest between 0.20 and the level's ceiling."""
    (high_lo, high_hi), (crit_lo, crit_hi), ceiling = STAKES_PROFILE[level]
    high = rng.randint(high_lo, high_hi)
    critical = rng.randint(crit_lo, min(crit_hi, high))
    values = (
        [rng.uniform(0.88, 0.95) for _ in range(critical)]
        + [rng.uniform(0.75, 0.84) for _ in range(high - critical)]
        + [rng.uniform(0.20, ceiling) for _ in range(n - high)]
    )
    rng.shuffle(values)
    return values


def generate(internal_seed: int, novel: bool) -> Scenario:
    """The scenario of one internal seed (see `split_seed`): level, subtasks and the hidden slot assignment."""
    rng = random.Random(internal_seed)
    level = rng.choice(tuple(LEVELS))
    n, budget = LEVELS[level]
    stakes = tuple(
        round(min(0.99, max(0.05, s + rng.uniform(-STAKES_JITTER, STAKES_JITTER))), 2) for s in _stakes(rng, level, n)
    )
    domains = tuple(rng.choice(DOMAINS) for _ in range(n))
    assignment = list(BEHAVIOURS)
    rng.shuffle(assignment)
    return Scenario(level, budget, domains, stakes, tuple(assignment), NOVEL if novel else STANDARD)
