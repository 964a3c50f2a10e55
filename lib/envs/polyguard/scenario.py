"""Seeded PolyGuard scenarios and the rule engine that finds their problems.

Used by `PolyGuardEnv.reset` (generation) and by the reward (the same `detect_problems` judges the final
regimen), so what counts as a problem is defined exactly once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .kb import KnowledgeBase

PROBLEM_KINDS = ("interaction", "renal", "duplicate", "contraindication")
# Kinds whose presence at the end of an episode is a "major risk" (anti-cheat on finish).
MAJOR_KINDS = frozenset({"interaction", "contraindication", "renal_avoid"})


@dataclass(frozen=True)
class Problem:
    kind: str  # interaction | renal | duplicate | contraindication
    drugs: tuple[str, ...]  # sorted
    detail: str  # severity, renal action, class or condition

    @property
    def is_major(self) -> bool:
        return self.kind in ("interaction", "contraindication") or (self.kind == "renal" and self.detail == "avoid")


@dataclass(frozen=True)
class Patient:
    age: int
    egfr: int
    liver: str
    conditions: tuple[str, ...]


@dataclass(frozen=True)
class Scenario:
    patient: Patient
    regimen: tuple[str, ...]  # drugs, display order
    planted: tuple[str, ...]  # kinds that were planted (the detector finds the actual problems)


def renal_applies(kb: KnowledgeBase, drug: str, egfr: int) -> bool:
    rule = kb.renal.get(drug)
    return rule is not None and egfr < rule.egfr_below


def detect_problems(kb: KnowledgeBase, patient: Patient, regimen: dict[str, str]) -> frozenset[Problem]:
    """Every problem present in `regimen` (drug -> "standard" | "reduced") for `patient`."""
    problems = set()
    drugs = list(regimen)
    for i, a in enumerate(drugs):
        rule = kb.renal.get(a)
        if rule is not None and patient.egfr < rule.egfr_below and (rule.action == "avoid" or regimen[a] == "standard"):
            problems.add(Problem("renal", (a,), rule.action))
        for condition, _ in kb.contraindications.get(a, {}).items():
            if condition in patient.conditions:
                problems.add(Problem("contraindication", (a,), condition))
        for b in drugs[i + 1 :]:
            pair = tuple(sorted((a, b)))
            found = kb.interaction(a, b)
            if found is not None and found.is_major:
                problems.add(Problem("interaction", pair, found.severity))
            if kb.drugs[a].drug_class == kb.drugs[b].drug_class:
                problems.add(Problem("duplicate", pair, kb.drugs[a].drug_class))
    return frozenset(problems)


_POOL_CACHE: dict[tuple[int, bool], tuple[KnowledgeBase, tuple]] = {}


def _pools(kb: KnowledgeBase, novel: bool):
    """Planting pools for a knowledge base, built once per (kb, split kind)."""
    key = (id(kb), novel)
    if key not in _POOL_CACHE:  # the entry holds kb itself, so its id cannot be reused while cached
        _POOL_CACHE[key] = (kb, _build_pools(kb, novel))
    return _POOL_CACHE[key][1]


def _build_pools(kb: KnowledgeBase, novel: bool):
    majors = [i for i in kb.interactions.values() if i.is_major and i.reserved == novel]
    by_class: dict[str, list[str]] = {}
    for drug in kb.drugs.values():
        by_class.setdefault(drug.drug_class, []).append(drug.name)
    duplicates = [sorted(v) for v in by_class.values() if len(v) >= 2]
    contraindications = [(d, c) for d, cs in kb.contraindications.items() for c in cs]
    return majors, sorted(kb.renal), duplicates, contraindications


def _allowed_pair(kb: KnowledgeBase, a: str, b: str, novel: bool) -> bool:
    """Train and holdout never contain a reserved pair; holdout_novel never contains a non-reserved major pair."""
    found = kb.interaction(a, b)
    if found is None:
        return True
    return (not found.reserved) if not novel else (found.reserved or not found.is_major)


def generate(kb: KnowledgeBase, internal_seed: int, novel: bool, max_tries: int = 200) -> Scenario:
    """Deterministic scenario for an internal seed. `novel` plants only reserved interactions."""
    rng = random.Random(internal_seed)
    majors, renal_drugs, duplicates, contraindications = _pools(kb, novel)
    treated = sorted(c for c, kind in kb.conditions.items() if kind == "treated")
    for _ in range(max_tries):
        n_planted = rng.choices((1, 2, 3), weights=(0.35, 0.40, 0.25))[0]
        kinds = rng.sample(PROBLEM_KINDS, n_planted)
        if novel and "interaction" not in kinds:
            kinds[0] = "interaction"  # the novel split exists to test unseen interactions
        regimen: list[str] = []
        extra_conditions: list[str] = []
        egfr = rng.randint(60, 105)
        for kind in kinds:
            if kind == "interaction":
                pick = rng.choice(majors)
                regimen += [pick.drug_a, pick.drug_b]
            elif kind == "renal":
                drug = rng.choice(renal_drugs)
                regimen.append(drug)
                threshold = kb.renal[drug].egfr_below
                egfr = rng.randint(max(8, threshold - 25), threshold - 1)
            elif kind == "duplicate":
                regimen += rng.sample(rng.choice(duplicates), 2)
            else:
                drug, condition = rng.choice(contraindications)
                regimen.append(drug)
                extra_conditions.append(condition)
        regimen = list(dict.fromkeys(regimen))
        conditions = list(dict.fromkeys([kb.drugs[d].indication for d in regimen] + extra_conditions))
        # A treated comorbidity that nothing treats yet gets a drug, so the regimen treats every condition.
        for condition in list(conditions):
            if kb.conditions[condition] == "treated" and not any(kb.drugs[d].indication == condition for d in regimen):
                regimen.append(rng.choice(kb.drugs_by_indication[condition]))
        if len(conditions) > 5:
            continue
        target = rng.randint(max(2, len(conditions)), 5)
        patient_draft = Patient(0, egfr, "normal", tuple(conditions))
        baseline_problems = detect_problems(kb, patient_draft, dict.fromkeys(regimen, "standard"))
        for _attempt in range(40):
            if len(conditions) >= target:
                break
            condition = rng.choice(treated)
            if condition in conditions:
                continue
            drug = rng.choice(kb.drugs_by_indication[condition])
            trial = Patient(0, egfr, "normal", tuple(conditions + [condition]))
            if detect_problems(kb, trial, dict.fromkeys(regimen + [drug], "standard")) - baseline_problems:
                continue  # filler drugs add no problems of their own
            conditions.append(condition)
            regimen.append(drug)
        if len(conditions) < 2:
            continue
        if not all(_allowed_pair(kb, a, b, novel) for i, a in enumerate(regimen) for b in regimen[i + 1 :]):
            continue
        patient = Patient(rng.randint(40, 92), egfr, rng.choice(("normal", "normal", "impaired")), tuple(conditions))
        if not detect_problems(kb, patient, dict.fromkeys(regimen, "standard")):
            continue
        rng.shuffle(regimen)
        return Scenario(patient, tuple(regimen), tuple(kinds))
    raise RuntimeError(f"could not generate a scenario for seed {internal_seed} in {max_tries} tries")
