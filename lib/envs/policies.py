"""Policies any candidate-set environment can use as they are: random, first candidate, repeat-last, and
"first offered candidate of these kinds" trivial policies. Environments add their teacher, oracle and
expert in their own package; `EnvSpec` adds the generic ones (`GENERIC`) to every environment itself."""

from __future__ import annotations

import random

from .base import Candidate, Policy, format_action


def by_key(observation, key: tuple) -> Candidate | None:
    return next((c for c in observation.candidates if c.key == key), None)


def by_kind(observation, kind: str) -> Candidate | None:
    return next((c for c in observation.candidates if c.kind == kind), None)


class RandomPolicy(Policy):
    """Uniform over the offered candidates, seeded by the episode's seed."""

    name = "random"

    def begin(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, observation, env):
        return format_action(self.rng.choice(observation.candidates).id)


class FirstCandidate(Policy):
    """Always the first candidate listed (the list is shuffled, so this is position bias)."""

    name = "first_candidate"

    def act(self, observation, env):
        return format_action(observation.candidates[0].id)


class RepeatLast(Policy):
    """Repeats its previous action (the same candidate if still offered, else the same text)."""

    name = "repeat_last"

    def begin(self, seed: int) -> None:
        self.last: tuple[tuple, str] | None = None

    def act(self, observation, env):
        if self.last is None:
            chosen = observation.candidates[0]
        else:
            chosen = by_key(observation, self.last[0])
            if chosen is None:
                return self.last[1]
        self.last = (chosen.key, format_action(chosen.id))
        return self.last[1]


# Every environment's generic policies, which EnvSpec adds with their roles: random (the floor) and two trivial ones.
GENERIC = {p.name: p for p in (RandomPolicy, FirstCandidate, RepeatLast)}
GENERIC_TRIVIAL = ("first_candidate", "repeat_last")  # listed after an environment's own trivial policies


def first_of_kinds(name: str, kinds: tuple[str, ...], fallback: str, doc: str = "") -> type[Policy]:
    """A trivial policy: the first offered candidate of the first kind in `kinds` that is offered, else the
    first candidate of kind `fallback` (else the first candidate)."""

    def act(self, observation, env):
        for kind in (*kinds, fallback):
            candidate = by_kind(observation, kind)
            if candidate is not None:
                return format_action(candidate.id)
        return format_action(observation.candidates[0].id)

    return type(
        name,
        (Policy,),
        {"name": name, "kinds": kinds, "act": act, "__doc__": doc or f"first offered of {kinds}, else {fallback}"},
    )
