"""SENTINEL-trust's one prompt renderer: an observation becomes the chat messages a model sees.

SFT data, GRPO rollouts, evaluation and post-save inference all call `render`; `SentinelTrustEnv.render` is it.
The history is summarised into per-slot counts, so the prompt stays short (under 1,800 characters) at level 3.
"""

from __future__ import annotations

from ..base import candidate_lines
from .observation import Observation, SlotEvidence
from .scenario import BANDS, DOMAINS

SYSTEM_PROMPT = (
    "You run a job by handing its subtasks, one at a time, to specialists S0-S4 whose reliability differs and is "
    "not told: learn it from the evidence. delegate:Sx accepts the answer of Sx; verify:Sx also checks it (one "
    "more step) and, if wrong, keeps the subtask open; solve does it yourself (3 steps, error-prone); skip gives "
    "it up (1 step). A wrong answer costs more than a skipped one, the more so the higher the stakes. Verifying "
    "past your allowance, or 3 skips or 3 solves in a row, ends the job with nothing. "
    'Answer with one JSON object: {"action": "<candidate>"}'
)

# The fixed words of the user message below and of the environment's "Last:" notes, for the tokenizer's
# vocabulary (`vocabulary()` in __init__.py); a test checks that every word a prompt shows is covered.
TEMPLATE_WORDS = (
    "Job level subtask of stakes Still to come none Budget steps step left verify allowance Done so far right wrong "
    "skipped Last job started invalid answer one lost you solved answered caught by your check accepted out time "
    "In a row skip solve times Caught on this Evidence calls a call not called yet recent Solo Candidates "
    "Overall trust highest first Stakes now"
)


def _cells(names: tuple[str, ...], cells: tuple[tuple[int, int], ...]) -> str:
    return " ".join(f"{name} {right}/{calls}" for name, (right, calls) in zip(names, cells) if calls)


def slot_line(e: SlotEvidence) -> str:
    """One slot's evidence: right/calls by stakes band and by domain, the latest outcomes, checks that caught."""
    if not e.calls:
        return f"{e.slot}: not called yet"
    step_word = "step" if e.steps_per_call == 1 else "steps"
    recent = " ".join("right" if r else "wrong" for r in e.recent)
    caught = f"; caught {e.caught}" if e.caught else ""
    return (
        f"{e.slot}, {e.steps_per_call} {step_word} a call: {_cells(BANDS, e.bands)}; "
        f"{_cells(DOMAINS, e.domains)}; recent {recent}{caught}"
    )


def trust_ranking(observation: Observation) -> str:
    """Each slot's overall (right+1)/(calls+2) over every call, highest first (equal values in slot order), slots
    caught wrong on this subtask left out while any other remains. Derived from the evidence lines above; it
    ignores band, domain, recency and cost, which the evidence also shows."""
    usable = [e for e in observation.slots if e.slot not in observation.failed_here] or list(observation.slots)
    ranked = sorted(usable, key=lambda e: -(e.right + 1) / (e.calls + 2))  # stable: equal values keep slot order
    return " ".join(f"{e.slot} {(e.right + 1) / (e.calls + 2):.2f}" for e in ranked)


def render(observation: Observation, list_candidates: bool = True) -> list[dict[str, str]]:
    """The one prompt renderer: SFT data, GRPO rollouts, evaluation and post-save inference all call it."""
    o = observation
    right, wrong, skipped = o.tally
    upcoming = ", ".join(f"{name} {n}" for name, n in zip(BANDS, o.upcoming) if n) or "none"
    lines = [
        f"Job level {o.level}, subtask {o.index + 1} of {o.subtasks}: {o.domain}, stakes {o.stakes:.2f} ({o.band})",
        f"Still to come: {upcoming}",
        f"Budget: {o.budget_left} of {o.budget} steps left; verify allowance {o.verify_allowance}",
        f"Done so far: {right} right, {wrong} wrong, {skipped} skipped",
        f"Last: {o.last}",
    ]
    kind, times = o.streak
    if kind in ("skip", "solve"):
        lines.append(f"In a row: {kind} {times} times")
    if o.failed_here:
        lines.append(f"Caught wrong on this subtask: {' '.join(o.failed_here)}")
    lines.append("Evidence (right/calls):")
    lines += [slot_line(e) for e in o.slots]
    if o.solo[1]:
        lines.append(f"Solo: {o.solo[0]}/{o.solo[1]}")
    lines += candidate_lines(o.candidates, list_candidates)
    # said last, nearest the answer (as PolyGuard's open items), restating what the lines above show: this
    # subtask's stakes band and allowance, and each slot's overall record ranked
    lines.append(f"Stakes now: {o.band}; verify allowance {o.verify_allowance}")
    lines.append(f"Overall trust (right+1)/(calls+2), highest first: {trust_ranking(o)}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]
