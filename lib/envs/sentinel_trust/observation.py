"""SENTINEL-trust's observation: what one step shows the orchestrator (the renderer turns it into the prompt)."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import Candidate


@dataclass(frozen=True)
class SlotEvidence:
    """What the orchestrator has seen of one slot: (right, calls) per stakes band and per domain, the last
    outcomes (True = right), how many wrong answers its checks caught, and the steps one call took (0 until
    called)."""

    slot: str
    steps_per_call: int
    bands: tuple[tuple[int, int], ...]
    domains: tuple[tuple[int, int], ...]
    recent: tuple[bool, ...]
    caught: int

    @property
    def calls(self) -> int:
        return sum(n for _, n in self.bands)

    @property
    def right(self) -> int:
        return sum(r for r, _ in self.bands)


@dataclass(frozen=True)
class Observation:
    level: int
    index: int  # the current subtask, 0-based
    subtasks: int
    domain: str
    stakes: float
    band: str
    upcoming: tuple[int, ...]  # subtasks after this one, per stakes band
    budget_left: int
    budget: int
    verify_allowance: int
    tally: tuple[int, int, int]  # subtasks ended right, wrong, skipped
    failed_here: tuple[str, ...]  # slots whose answer to this subtask a check caught wrong
    slots: tuple[SlotEvidence, ...]
    solo: tuple[int, int]  # (right, tries) of solving alone
    last: str  # what the previous step did
    streak: tuple[str, int]  # the kind of the last legal action and how many times in a row it was taken
    candidates: tuple[Candidate, ...]
    step: int
