"""PolyGuard: a multi-step medication-review environment.

Used by `python -m lib baselines`, the corpus, GRPO rewards and evaluation. Each step shows the patient, the
regimen, the evidence gathered so far and a shuffled set of candidate actions with ids; the policy answers
with one JSON object naming a candidate.
"""

from __future__ import annotations

from typing import Any

from ..base import Candidate, Environment
from .kb import KnowledgeBase, default_kb
from .observation import Finding, Observation
from .render import render
from .reward import INVALID_PENALTY, WEIGHTS, terminal_components
from .scenario import Problem, detect_problems, generate, renal_applies

ACTION_TEXT = {
    "gather": "gather evidence on {}",
    "stop": "stop {}",
    "substitute": "substitute {} with {}",
    "reduce": "reduce dose of {}",
    "monitor": "order monitoring for {}",
    "review": "request pharmacist review",
    "finish": "finish review",
}
MAX_ALTERNATIVES_SHOWN = 2


class PolyGuardEnv(Environment):
    name = "polyguard"
    invalid_penalty = INVALID_PENALTY
    weights = WEIGHTS
    renderer = staticmethod(render)

    def __init__(self, kb: KnowledgeBase | None = None):
        self.kb = kb or default_kb()

    # ---- the episode (the base class runs reset and step) ---------------------------------------
    def _begin(self, internal_seed: int) -> None:
        scenario = generate(self.kb, internal_seed, novel=self.split == "holdout_novel")
        self.patient = scenario.patient
        self.regimen: dict[str, str] = dict.fromkeys(scenario.regimen, "standard")
        self.initial_regimen = tuple(scenario.regimen)
        self.slots = {drug: i for i, drug in enumerate(scenario.regimen, start=1)}
        self.initial_problems = detect_problems(self.kb, self.patient, self.regimen)
        self.budget = 2 * len(self.regimen) + 4
        self.gathered: set[str] = set()
        self.monitored: set[str] = set()
        self.notes: list[str] = []
        self._executed: set[tuple] = set()
        self._seen_regimens = {self._signature()}
        self._valid = 0
        self._final: frozenset[Problem] = frozenset()
        self._evidence_cache: dict[str, tuple[Finding, ...]] = {}

    def _score(self, exploit: str | None) -> dict[str, float]:
        components, self._final = terminal_components(
            self.kb,
            self.patient,
            self.initial_regimen,
            self.initial_problems,
            self.regimen,
            self.monitored,
            steps=self._steps,
            budget=self.budget,
            valid=self._valid,
            gathered_any=bool(self.gathered),
            exploit=exploit,
        )
        return components

    def _end_info(self, info: dict[str, Any], end_reason: str) -> None:
        if end_reason != "invalid_limit":
            info["problems_final"] = [p.__dict__ for p in sorted(self._final, key=_problem_key)]
        info["problems_initial"] = [p.__dict__ for p in sorted(self.initial_problems, key=_problem_key)]

    def _rule_hit(self, exploit: str | None, components: dict[str, float]) -> str | None:
        """An exploit the episode ended on (loop, review_abuse), or ending with a major risk still in the regimen
        (unsafe_end)."""
        return exploit or ("unsafe_end" if components.get("anti_cheat", 0.0) < 0 else None)

    def _hidden(self) -> dict[str, Any]:
        return {
            "budget": self.budget,
            "regimen": dict(self.regimen),
            "gathered": sorted(self.gathered),
            "monitored": sorted(self.monitored),
            "patient": self.patient.__dict__,
            "problems": [p.__dict__ for p in sorted(self.current_problems(), key=_problem_key)],
        }

    def current_problems(self) -> frozenset[Problem]:
        """Hidden state: the problems in the current regimen (the oracle may read this; models may not)."""
        return detect_problems(self.kb, self.patient, self.regimen)

    # ---- dynamics -------------------------------------------------------------------------------
    def _signature(self) -> tuple:
        return tuple(sorted(self.regimen.items()))

    def _apply(self, candidate: Candidate, info: dict[str, Any]) -> tuple[str | None, str | None]:
        """Apply a legal action. Returns (exploit, end_reason)."""
        self._valid += 1
        kind, args = candidate.kind, candidate.args
        if candidate.key in self._executed and kind != "finish":
            return ("review_abuse" if kind == "review" else "loop"), "exploit"
        self._executed.add(candidate.key)
        if kind == "finish":
            return None, "finish"
        if kind == "gather":
            self.gathered.add(args[0])
        elif kind == "review":
            self._review()
        elif kind == "monitor":
            self.monitored.add(args[0])
        else:
            drug = args[0]
            if kind == "stop":
                del self.regimen[drug]
                del self.slots[drug]
            elif kind == "reduce":
                self.regimen[drug] = "reduced"
            elif kind == "substitute":
                self.slots[args[1]] = self.slots.pop(drug)
                self.regimen = {
                    (args[1] if d == drug else d): ("standard" if d == drug else dose)
                    for d, dose in self.regimen.items()
                }
            self.monitored.discard(drug)
            self._evidence_cache.clear()  # the evidence of every drug depends on the regimen
            signature = self._signature()
            if signature in self._seen_regimens:
                return "loop", "exploit"
            self._seen_regimens.add(signature)
        return None, None

    def _review(self) -> None:
        """A pharmacist points at the most serious open problem and its drugs' evidence is revealed."""
        problems = sorted(self.current_problems(), key=lambda p: (not p.is_major, _problem_key(p)))
        if not problems:
            self.notes.append("pharmacist review: no further concerns")
            return
        target = problems[0]
        self.notes.append(f"pharmacist review: check {' and '.join(target.drugs)}")
        self.gathered.update(target.drugs)

    # ---- observation ----------------------------------------------------------------------------
    def _evidence(self, drug: str) -> tuple[Finding, ...]:
        cached = self._evidence_cache.get(drug)
        if cached is not None:
            return cached
        kb, patient = self.kb, self.patient
        findings = []
        for other in self.regimen:
            if other != drug and (found := kb.interaction(drug, other)) is not None:
                findings.append(
                    Finding(
                        drug,
                        "interaction",
                        other,
                        found.severity,
                        f"{found.severity} interaction with [{self.slots[other]}] {other}",
                    )
                )
            if other != drug and kb.drugs[other].drug_class == kb.drugs[drug].drug_class:
                cls = kb.drugs[drug].drug_class
                findings.append(
                    Finding(
                        drug,
                        "duplicate",
                        other,
                        cls,
                        f"same class as [{self.slots[other]}] {other} ({cls}): duplicate therapy",
                    )
                )
        rule = kb.renal.get(drug)
        if rule is not None:
            applies = patient.egfr < rule.egfr_below
            verdict = rule.action if applies else "no change"
            findings.append(
                Finding(
                    drug,
                    "renal",
                    "",
                    verdict if applies else "none",
                    f"renal: {rule.action} if eGFR < {rule.egfr_below}; eGFR {patient.egfr} -> {verdict}",
                )
            )
        for condition in kb.contraindications.get(drug, {}):
            if condition in patient.conditions:
                findings.append(
                    Finding(drug, "contraindication", condition, "major", f"contraindicated in {condition}")
                )
        for number, alternative in enumerate(self.alternatives(drug), start=1):
            verdict = self._screen(drug, alternative)
            findings.append(
                Finding(drug, "alternative", alternative, verdict, f"alternative {number} {alternative}: {verdict}")
            )
        if not any(f.kind not in ("alternative",) for f in findings):
            findings.insert(0, Finding(drug, "clear", "", "", "no interactions or contraindications found"))
        result = tuple(findings)
        self._evidence_cache[drug] = result
        return result

    def alternatives(self, drug: str) -> list[str]:
        options = [a for a in self.kb.alternatives.get(drug, ()) if a not in self.regimen]
        return options[:MAX_ALTERNATIVES_SHOWN]

    def _screen(self, drug: str, alternative: str) -> str:
        """What switching `drug` to `alternative` would run into, as the evidence states it."""
        kb = self.kb
        for other in self.regimen:
            if other == drug:
                continue
            found = kb.interaction(alternative, other)
            if found is not None and found.is_major:
                return f"{found.severity} interaction with [{self.slots[other]}] {other}"
            if kb.drugs[other].drug_class == kb.drugs[alternative].drug_class:
                return f"duplicates [{self.slots[other]}] {other}"
        for condition in kb.contraindications.get(alternative, {}):
            if condition in self.patient.conditions:
                return f"contraindicated in {condition}"
        if renal_applies(kb, alternative, self.patient.egfr):
            return f"renal: {kb.renal[alternative].action} at this eGFR"
        return "ok"

    def _candidates(self) -> tuple[Candidate, ...]:
        """Candidate ids name the action itself ("substitute:warfarin:apixaban"); the list order is shuffled per
        step, so position carries no meaning, and only offered ids are legal."""
        raw: list[tuple[str, tuple[str, ...]]] = []  # (id, key)
        for drug, dose in self.regimen.items():
            slot = self.slots[drug]
            if drug not in self.gathered:
                raw.append((f"gather:{slot}", ("gather", drug)))
                continue
            raw.append((f"stop:{slot}", ("stop", drug)))
            raw += [
                (f"substitute:{slot}:{n}", ("substitute", drug, alternative))
                for n, alternative in enumerate(self.alternatives(drug), start=1)
            ]
            if dose == "standard":
                raw.append((f"reduce:{slot}", ("reduce", drug)))
            if drug not in self.monitored:
                raw.append((f"monitor:{slot}", ("monitor", drug)))
        raw += [("review", ("review",)), ("finish", ("finish",))]
        return tuple(
            Candidate(cid, key[0], key[1:], ACTION_TEXT[key[0]].format(*key[1:])) for cid, key in self._shuffled(raw)
        )

    def _observe(self) -> Observation:
        evidence = tuple(f for drug in self.regimen if drug in self.gathered for f in self._evidence(drug))
        return Observation(
            patient=self.patient,
            regimen=tuple((d, dose, self.kb.drugs[d].indication) for d, dose in self.regimen.items()),
            slots=tuple(self.slots[d] for d in self.regimen),
            evidence=evidence,
            monitored=tuple(d for d in self.regimen if d in self.monitored),
            notes=tuple(self.notes),
            candidates=self._candidates(),
            step=self._steps,
            budget=self.budget,
        )


def _problem_key(problem: Problem) -> tuple:
    return (problem.kind, problem.drugs, problem.detail)
