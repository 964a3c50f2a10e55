"""PolyGuard's observation: what one step shows the policy (the renderer turns it into the prompt)."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import Candidate
from .scenario import Patient


@dataclass(frozen=True)
class Finding:
    drug: str
    kind: str  # interaction | renal | contraindication | duplicate | alternative | clear
    other: str  # the other drug, the condition, or ""
    detail: str  # severity, renal action, class, or screening verdict ("ok" or the problem)
    text: str


@dataclass(frozen=True)
class Observation:
    patient: Patient
    regimen: tuple[tuple[str, str, str], ...]  # (drug, dose, indication)
    slots: tuple[int, ...]  # the stable number shown for each regimen drug; action ids refer to it
    evidence: tuple[Finding, ...]
    monitored: tuple[str, ...]
    notes: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    step: int
    budget: int
