"""SENTINEL-trust: an orchestrator hands the subtasks of a job to five specialists of unequal, hidden reliability.

Used by `python -m lib baselines`, the corpus, GRPO rewards and evaluation (through `SPEC`). Each step shows the
current subtask (domain, stakes), the budget, the evidence the orchestrator has earned from its own past calls
and a shuffled set of candidate actions with ids; the policy answers with one JSON object naming a candidate.
"""

from __future__ import annotations

import random
from typing import Any

from ..base import Candidate, Environment
from .observation import Observation, SlotEvidence
from .render import render
from .reward import INVALID_PENALTY, WEIGHTS, terminal_components
from .scenario import (
    BANDS,
    COST,
    DOMAINS,
    SKIP_COST,
    SLOTS,
    SOLVE_ACCURACY,
    SOLVE_COST,
    VERIFY_EXTRA,
    accuracy,
    band,
    generate,
    turned,
)

INVALID_COST = 1  # an invalid answer burns one step of the budget
VERIFY_FREE = 2  # verifications allowed beyond one per two decisions
LOOP_LENGTH = 3  # this many skips (or solo solves) in a row is a loop
RECENT = 3  # outcomes per slot shown, most recent last

_DOMAIN_INDEX = {d: i for i, d in enumerate(DOMAINS)}
_CANDIDATES = (
    *(Candidate(f"delegate:{s}", "delegate", (s,), f"hand the subtask to {s} and accept its answer") for s in SLOTS),
    *(Candidate(f"verify:{s}", "verify", (s,), f"hand the subtask to {s} and check its answer") for s in SLOTS),
    Candidate("solve", "solve", (), "solve the subtask yourself"),
    Candidate("skip", "skip", (), "give the subtask up"),
)


class SentinelTrustEnv(Environment):
    name = "sentinel_trust"
    invalid_penalty = INVALID_PENALTY
    weights = WEIGHTS
    renderer = staticmethod(render)
    stochastic = True  # whether a specialist (or the orchestrator) answers right is a draw

    # ---- the episode (the base class runs reset and step) ---------------------------------------
    def _begin(self, internal_seed: int) -> None:
        self.scenario = generate(internal_seed, novel=self.split == "holdout_novel")
        self._rng = random.Random(internal_seed * 7919 + 17)  # outcome draws, replayed identically by restore
        self.budget = self.scenario.budget
        self.budget_left = self.budget
        self.index = 0
        self.outcomes: list[str | None] = [None] * len(self.scenario.stakes)
        self.calls = [0] * len(SLOTS)  # hidden use count per slot (a degrading slot depends on it)
        self._bands = [[[0, 0] for _ in BANDS] for _ in SLOTS]
        self._domains = [[[0, 0] for _ in DOMAINS] for _ in SLOTS]
        self._recent: list[tuple[bool, ...]] = [() for _ in SLOTS]
        self._caught = [0] * len(SLOTS)
        self._evidence: list[SlotEvidence | None] = [None] * len(SLOTS)
        self._solo = [0, 0]
        self._failed_here: list[str] = []
        self._kinds: list[str] = []  # kinds of the legal actions taken
        self._verifies = 0
        self.planted_caught = self.planted_accepted = 0
        self._last = "job started"

    def redraw_future(self, draw: int) -> None:
        self._rng = random.Random(f"{self._internal}/{self._steps}/{draw}")

    def _on_invalid(self) -> None:
        self.budget_left -= INVALID_COST
        self._last = "invalid answer, one step lost"

    def _apply(self, candidate: Candidate, info: dict[str, Any]) -> tuple[str | None, str | None]:
        exploit = self._rule_broken(candidate)
        info["outcome"] = "refused" if exploit else self._carry_out(candidate)
        return exploit, None

    def _after_step(self) -> str | None:
        if self.index >= len(self.outcomes):
            return "complete"
        return "budget" if self.budget_left <= 0 else None

    def _score(self, exploit: str | None) -> dict[str, float]:
        return terminal_components(
            self.scenario.stakes,
            self.outcomes,
            planted_caught=self.planted_caught,
            planted_accepted=self.planted_accepted,
            budget_left=self.budget_left,
            budget=self.budget,
            exploit=exploit,
        )

    def _end_info(self, info: dict[str, Any], end_reason: str) -> None:
        info["tally"] = {o: self.outcomes.count(o) for o in ("right", "wrong", "skipped")} | {
            "unfinished": self.outcomes.count(None)
        }

    def _hidden(self) -> dict[str, Any]:
        """HIDDEN state: which behaviour sits behind each slot, every subtask's outcome."""
        return {
            "level": self.scenario.level,
            "budget": self.budget,
            "budget_left": self.budget_left,
            "index": self.index,
            "assignment": dict(zip(SLOTS, self.scenario.assignment)),
            "adversary_from": self.scenario.variant.adversary_from,
            "outcomes": list(self.outcomes),
            "calls": list(self.calls),
        }

    # ---- hidden state (the oracle may read it; models may not) ---------------------------------------
    def success_probability(self, slot: int) -> float:
        """Hidden: the chance that `slot` answers the current subtask right."""
        s = self.scenario
        return accuracy(s.assignment[slot], s.domains[self.index], s.stakes[self.index], self.calls[slot], s.variant)

    def slot_cost(self, slot: int) -> int:
        """Hidden until the slot is first called: the steps one call to `slot` takes."""
        return COST[self.scenario.assignment[slot]]

    # ---- dynamics -------------------------------------------------------------------------------
    def _rule_broken(self, candidate: Candidate) -> str | None:
        """The anti-cheat rule this legal action breaks, if any (the action is then not carried out)."""
        kind = candidate.kind
        if kind == "verify" and self._verify_allowance() <= 0:
            return "verify_spam"
        if kind in ("skip", "solve") and self._kinds[-(LOOP_LENGTH - 1) :] == [kind] * (LOOP_LENGTH - 1):
            return f"{kind}_loop"
        return None

    def _verify_allowance(self) -> int:
        return VERIFY_FREE + len(self._kinds) // 2 - self._verifies

    def _carry_out(self, candidate: Candidate) -> str:
        """Carry out a legal action; returns its outcome word (right, wrong, caught, skipped, out_of_time)."""
        kind = candidate.kind
        self._kinds.append(kind)
        s = self.scenario
        i, domain, stakes = self.index, s.domains[self.index], s.stakes[self.index]
        if kind == "skip":
            self.budget_left -= SKIP_COST
            self._finish("skipped")
            self._last = f"subtask {i + 1} skipped"
            return "skipped"
        if kind == "solve":
            if SOLVE_COST > self.budget_left:
                return self._out_of_time()
            self.budget_left -= SOLVE_COST
            right = self._rng.random() < SOLVE_ACCURACY[domain]
            self._solo[0] += right
            self._solo[1] += 1
            self._finish("right" if right else "wrong")
            self._last = f"you solved subtask {i + 1} ({domain}): {'right' if right else 'wrong'}"
            return "right" if right else "wrong"
        slot = SLOTS.index(candidate.args[0])
        cost = self.slot_cost(slot) + (VERIFY_EXTRA if kind == "verify" else 0)
        if cost > self.budget_left:
            return self._out_of_time()
        self.budget_left -= cost
        if kind == "verify":
            self._verifies += 1
        planted = turned(s.assignment[slot], stakes, s.variant)
        right = self._rng.random() < self.success_probability(slot)
        self._record(slot, domain, stakes, right, caught=kind == "verify" and not right)
        name = SLOTS[slot]
        if right:
            self._finish("right")
            self._last = f"{name} answered subtask {i + 1} ({domain}): right"
            return "right"
        if kind == "verify":
            self.planted_caught += planted
            self._failed_here.append(name)
            self._last = f"{name} answered subtask {i + 1} ({domain}): wrong, caught by your check"
            return "caught"
        self.planted_accepted += planted
        self._finish("wrong")
        self._last = f"{name} answered subtask {i + 1} ({domain}): wrong, accepted"
        return "wrong"

    def _out_of_time(self) -> str:
        self.budget_left = 0
        self._last = "out of time"
        return "out_of_time"

    def _finish(self, outcome: str) -> None:
        self.outcomes[self.index] = outcome
        self.index += 1
        self._failed_here = []

    def _record(self, slot: int, domain: str, stakes: float, right: bool, caught: bool) -> None:
        self.calls[slot] += 1
        cell = self._bands[slot][band(stakes)]
        cell[0] += right
        cell[1] += 1
        cell = self._domains[slot][_DOMAIN_INDEX[domain]]
        cell[0] += right
        cell[1] += 1
        self._recent[slot] = (*self._recent[slot], right)[-RECENT:]
        self._caught[slot] += caught
        self._evidence[slot] = None

    # ---- observation ----------------------------------------------------------------------------
    def _slot_evidence(self, slot: int) -> SlotEvidence:
        cached = self._evidence[slot]
        if cached is None:
            cached = SlotEvidence(
                SLOTS[slot],
                self.slot_cost(slot) if self.calls[slot] else 0,
                tuple(map(tuple, self._bands[slot])),
                tuple(map(tuple, self._domains[slot])),
                self._recent[slot],
                self._caught[slot],
            )
            self._evidence[slot] = cached
        return cached

    def _candidates(self) -> tuple[Candidate, ...]:
        """Every action is offered every step; ids name the action ("verify:S2") and the list order is shuffled
        per step, so position carries no meaning, and only offered ids are legal."""
        return self._shuffled(list(_CANDIDATES))

    def _observe(self) -> Observation:
        s, i = self.scenario, self.index
        upcoming = [0, 0, 0]
        for stakes in s.stakes[i + 1 :]:
            upcoming[band(stakes)] += 1
        return Observation(
            level=s.level,
            index=i,
            subtasks=len(s.stakes),
            domain=s.domains[i],
            stakes=s.stakes[i],
            band=BANDS[band(s.stakes[i])],
            upcoming=tuple(upcoming),
            budget_left=self.budget_left,
            budget=self.budget,
            verify_allowance=self._verify_allowance(),
            tally=(self.outcomes.count("right"), self.outcomes.count("wrong"), self.outcomes.count("skipped")),
            failed_here=tuple(self._failed_here),
            slots=tuple(self._slot_evidence(k) for k in range(len(SLOTS))),
            solo=(self._solo[0], self._solo[1]),
            last=self._last,
            streak=self._streak(),
            candidates=self._candidates(),
            step=self._steps,
        )

    def _streak(self) -> tuple[str, int]:
        if not self._kinds:
            return ("", 0)
        kind, n = self._kinds[-1], 0
        while n < len(self._kinds) and self._kinds[-1 - n] == kind:
            n += 1
        return (kind, n)
