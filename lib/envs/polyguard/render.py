"""PolyGuard's one prompt renderer: an observation becomes the chat messages a model sees.

SFT data, GRPO rollouts, evaluation and post-save inference all call `render`; `PolyGuardEnv.render` is it.
"""

from __future__ import annotations

from ..base import candidate_lines
from .observation import Observation

SYSTEM_PROMPT = (
    "Review this regimen for medication safety. Gather evidence first; prefer a safe substitute to stopping a "
    "needed drug; reduce doses for kidney function; monitor moderate interactions; finish when no major risk "
    'remains. Answer with one JSON object: {"action": "<candidate>"}'
)


def render(observation: Observation, list_candidates: bool = True) -> list[dict[str, str]]:
    """The one prompt renderer: SFT data, GRPO rollouts, evaluation and post-save inference all call it."""
    p = observation.patient
    slot_of = {drug: slot for slot, (drug, _, _) in zip(observation.slots, observation.regimen)}
    lines = [
        f"Patient: age {p.age}, eGFR {p.egfr}, liver {p.liver}",
        f"Conditions: {', '.join(p.conditions)}",
        "Regimen:",
        *(
            f"{slot}. {drug} {dose} dose ({indication})"
            for slot, (drug, dose, indication) in zip(observation.slots, observation.regimen)
        ),
        "Evidence:",
        *(f"- [{slot_of[f.drug]}] {f.drug}: {f.text}" for f in observation.evidence),
    ]
    if not observation.evidence:
        lines.append("- none gathered yet")
    if observation.monitored:
        lines.append(f"Monitoring: {', '.join(observation.monitored)}")
    lines += [f"Note: {note}" for note in observation.notes]
    lines.append(f"Steps left: {observation.budget - observation.step}")
    lines += candidate_lines(observation.candidates, list_candidates)
    # Said last, nearest the answer, and derived from the above: the safe alternatives of the major risks, then the
    # risks the evidence states, most serious last, then the regimen numbers that still have no evidence. The
    # alternatives have their own line so that the open items end on a regimen number (the tiny model learns to
    # copy the last number far more reliably than one a few tokens back; docs/RESULTS.md).
    unreviewed = [
        str(slot)
        for slot, (drug, _, _) in zip(observation.slots, observation.regimen)
        if not any(f.drug == drug for f in observation.evidence)
    ]
    risks = open_risks(observation, slot_of)
    safe = [pair for _, pairs in risks for pair in pairs]
    items = [label for label, _ in risks] + ([f"to review {' '.join(unreviewed)}"] if unreviewed else [])
    lines.append(f"Safe alternatives: {' '.join(safe) or 'none'}")
    lines.append(f"Open items: {', '.join(items) or 'none'}")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n".join(lines)}]


def open_risks(observation: Observation, slot_of: dict[str, int]) -> list[tuple[str, tuple[str, ...]]]:
    """The open risks the evidence above states, one item per risk, naming regimen numbers, each with the safe
    alternatives of its drugs.

    Order: moderate interactions where neither drug is monitored, renal 'reduce' verdicts on drugs still at a
    standard dose, renal 'avoid' verdicts, then major interactions, duplicates and contraindications, the one
    the evidence lists first said last, nearest the answer. A major risk comes with the alternatives its drugs'
    evidence screens as ok (`("contraindicated 4", ("4:1",))`: the id `substitute:4:1` substitutes it), which the
    teacher never uses. Derived from the rendered observation only, like
    the numbers still to review: once every drug is reviewed, the items other than 'moderate' are exactly the
    problems in the regimen (a test checks this against the environment's hidden problem list)."""
    standard = {drug for drug, dose, _ in observation.regimen if dose == "standard"}
    monitored = set(observation.monitored)
    safe = safe_alternatives(observation, slot_of)

    def item(label: str, *drugs: str) -> tuple[str, tuple[str, ...]]:
        """A risk's label with the safe alternatives of `drugs` (none named: none)."""
        return label, tuple(number for drug in drugs for number in safe.get(drug, ()))

    ranked: dict[tuple[str, tuple[str, ...]], tuple[int, int]] = {}
    for index, f in enumerate(observation.evidence):
        if f.kind in ("interaction", "duplicate"):
            pair = "+".join(str(n) for n in sorted((slot_of[f.drug], slot_of[f.other])))
            if f.kind == "duplicate" or f.detail in ("major", "contraindicated"):
                label = f.detail if f.kind == "interaction" else "duplicate"
                drugs = sorted((f.drug, f.other), key=slot_of.get)
                ranked.setdefault(item(f"{label} {pair}", *drugs), (3, -index))
            elif f.detail == "moderate" and not {f.drug, f.other} & monitored:
                ranked.setdefault(item(f"moderate {pair}"), (0, index))
        elif f.kind == "contraindication":
            ranked.setdefault(item(f"contraindicated {slot_of[f.drug]}", f.drug), (3, -index))
        elif f.kind == "renal" and (f.detail == "avoid" or f.detail == "reduce" and f.drug in standard):
            named = (f.drug,) if f.detail == "avoid" else ()  # only an 'avoid' verdict names its alternatives
            ranked.setdefault(item(f"renal {f.detail} {slot_of[f.drug]}", *named), (2 if named else 1, index))
    return sorted(ranked, key=ranked.get)


def safe_alternatives(observation: Observation, slot_of: dict[str, int]) -> dict[str, list[str]]:
    """Per drug, the alternatives its evidence screens as 'ok', written `slot:number` as a substitute's id names
    them (the evidence numbers each drug's alternatives from 1, in the order it lists them)."""
    safe: dict[str, list[str]] = {}
    numbers: dict[str, int] = {}
    for f in observation.evidence:
        if f.kind == "alternative":
            numbers[f.drug] = numbers.get(f.drug, 0) + 1
            if f.detail == "ok":
                safe.setdefault(f.drug, []).append(f"{slot_of[f.drug]}:{numbers[f.drug]}")
    return safe
