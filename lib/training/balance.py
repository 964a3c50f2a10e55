"""Rare decisions trained more often (`sft.kind_balance`): the SFT rows resampled by the kind of their answer.

A teacher's rare decisions can carry its rule (verify a subtask, stop waiting), and a tiny learner that fits the
frequent answers first may never fit them. Resampling, with replacement, as many rows as the corpus has, each with a
chance proportional to (rows whose answer is of its kind)^-balance, shows the rare kinds more often at the same
training cost: balance 0 leaves the mix as the teacher played it, 1 makes every kind equally frequent. A row's kind is
that of the offered candidate its answer names; the candidates are rebuilt by replaying the row's history
(`Environment.restore`), as the candidate loss does. An answer that names no offered candidate is of kind `other`.
"""

from __future__ import annotations

import random
from collections import Counter

from ..envs.base import format_action

OTHER = "other"


def answer_kinds(spec, rows: list[dict]) -> list[str]:
    """The kind of each row's answer among the candidates offered at its state."""
    env = spec.make_env()
    kinds = []
    for row in rows:
        observation = env.restore(row["seed"], row["split"], row["history"])
        by_answer = {format_action(c.id): c.kind for c in observation.candidates}
        kinds.append(by_answer.get(row["completion"][-1]["content"].strip(), OTHER))
    return kinds


def balanced(kinds: list[str], balance: float, rng: random.Random) -> list[int]:
    """Row indices: len(kinds) of them drawn with replacement, a row's weight (count of its kind)^-balance; every
    row once, in order, at 0.

    >>> balanced(["a", "a", "b"], 0.0, random.Random(0))
    [0, 1, 2]
    >>> drawn = balanced(["a"] * 90 + ["b"] * 10, 1.0, random.Random(0))
    >>> len(drawn), 30 < sum(i >= 90 for i in drawn) < 70
    (100, True)
    """
    if not balance or not kinds:
        return list(range(len(kinds)))
    counts = Counter(kinds)
    weights = [counts[k] ** -balance for k in kinds]
    return rng.choices(range(len(kinds)), weights=weights, k=len(kinds))


def kind_mix(kinds: list[str]) -> dict[str, float]:
    """Each kind's share of the rows, largest first, rounded for the stage record."""
    counts = Counter(kinds)
    return {k: round(n / len(kinds), 4) for k, n in counts.most_common()} if kinds else {}
