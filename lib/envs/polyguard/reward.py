"""PolyGuard's reward: named components and their weights, defined once.

The environment calls `terminal_components` when an episode ends; training (GRPO step mode) and evaluation
both read the environment's return, so there is no second implementation of the score.
"""

from __future__ import annotations

from .kb import KnowledgeBase
from .scenario import Patient, Problem, detect_problems, renal_applies

# The one place the weights live. Positive weights sum to 1, so a perfect episode returns 1.0.
WEIGHTS = {
    "legality": 0.05,  # share of actions that were valid
    "safety": 0.45,  # planted problems resolved (stopping a needed drug earns half), minus new harm
    "treatment": 0.20,  # conditions treated at the start that are still treated at the end
    "dosing": 0.10,  # final doses right for the patient's kidney function
    "efficiency": 0.10,  # safety achieved per step of the budget
    "process": 0.10,  # moderate interactions left in the regimen are monitored
    "anti_cheat": 1.0,  # penalty: finishing with a major risk, loops, review abuse
}
# A cheat costs the whole positive weight, so the clamped terminal reward of any cheating episode is 0: no
# format-perfect but harmful ending (finish with a major risk, a loop, a second review) can outscore a legal one.
INVALID_PENALTY = -0.1  # step reward of any invalid action; every legal episode return is >= 0
ANTI_CHEAT_PENALTY = 1.0
STOP_CREDIT = 0.5  # a problem "fixed" by leaving a condition untreated is only half fixed


def treated_conditions(kb: KnowledgeBase, regimen) -> set[str]:
    return {kb.drugs[d].indication for d in regimen}


def safety_score(kb: KnowledgeBase, initial: frozenset[Problem], final: frozenset[Problem], final_regimen) -> float:
    """Credit per initial problem gone from the final regimen; each new problem costs one full credit.

    >>> safety_score(None, frozenset(), frozenset(), {})
    1.0
    """
    if not initial:
        return 1.0 - min(1.0, len(final))
    treated = treated_conditions(kb, final_regimen) if final_regimen else set()
    credit = 0.0
    for problem in initial - final:
        removed = [d for d in problem.drugs if d not in final_regimen]
        still_treated = all(kb.drugs[d].indication in treated for d in removed)
        credit += 1.0 if still_treated else STOP_CREDIT
    credit -= len(final - initial)
    return max(0.0, credit / len(initial))


def dosing_score(kb: KnowledgeBase, patient: Patient, regimen: dict[str, str]) -> float:
    """Share of final drugs at the right dose: reduced exactly when a renal 'reduce' rule applies, and no
    drug left whose renal rule says avoid."""
    if not regimen:
        return 0.0
    right = 0
    for drug, dose in regimen.items():
        applies = renal_applies(kb, drug, patient.egfr)
        if applies and kb.renal[drug].action == "avoid":
            continue
        right += (dose == "reduced") == applies
    return right / len(regimen)


def process_score(kb: KnowledgeBase, regimen: dict[str, str], monitored: set[str], gathered_any: bool) -> float:
    """Share of moderate interactions in the final regimen that are monitored; no evidence gathered, no credit."""
    if not gathered_any or not regimen:
        return 0.0
    drugs = list(regimen)
    moderate = [
        (a, b)
        for i, a in enumerate(drugs)
        for b in drugs[i + 1 :]
        if (found := kb.interaction(a, b)) is not None and found.severity == "moderate"
    ]
    if not moderate:
        return 1.0
    return sum(a in monitored or b in monitored for a, b in moderate) / len(moderate)


def terminal_components(
    kb: KnowledgeBase,
    patient: Patient,
    initial_regimen,
    initial_problems: frozenset[Problem],
    regimen: dict[str, str],
    monitored: set[str],
    *,
    steps: int,
    budget: int,
    valid: int,
    gathered_any: bool,
    exploit: str | None,
) -> tuple[dict[str, float], frozenset[Problem]]:
    final = detect_problems(kb, patient, regimen)
    safety = safety_score(kb, initial_problems, final, regimen)
    before = treated_conditions(kb, initial_regimen)
    treatment = len(before & treated_conditions(kb, regimen)) / len(before)
    major_left = any(p.is_major for p in final)
    cheat = exploit is not None or major_left
    components = {
        "legality": valid / steps if steps else 0.0,
        "safety": safety,
        "treatment": treatment,
        "dosing": dosing_score(kb, patient, regimen),
        "efficiency": safety * max(0.0, 1.0 - steps / budget),
        "process": process_score(kb, regimen, monitored, gathered_any),
        "anti_cheat": -ANTI_CHEAT_PENALTY if cheat else 0.0,
    }
    return components, final
