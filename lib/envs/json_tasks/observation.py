"""json_tasks' observation: what one step shows the policy (the renderer turns it into the prompt)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..base import Candidate


@dataclass(frozen=True)
class Observation:
    instruction: str
    prompt: str
    schema: dict[str, Any]
    obj: tuple[tuple[str, Any], ...]  # the object built so far: schema fields in schema order, then others
    looked_up: tuple[tuple[str, Any], ...]  # what the records tool returned, in the order asked
    step: int
    budget: int
    last: str
    candidates: tuple[Candidate, ...]
