"""PolyGuard's scripted policies: the heuristic SFT teacher, the oracle ceiling, the evidence-reading expert and
the trivial policies. Every policy answers with the canonical action text, like a model would."""

from __future__ import annotations

from ..base import Policy, format_action
from ..policies import GENERIC_TRIVIAL, by_key, by_kind, first_of_kinds
from .env import PolyGuardEnv
from .scenario import detect_problems


class HeuristicPolicy(Policy):
    """The SFT teacher, deliberately imperfect: it gathers evidence on every drug (last listed first), then STOPS
    the later drug
    of each major interaction, duplicate or contraindication (never substitutes), ignores renal dosing and
    never orders monitoring."""

    name = "heuristic"

    def act(self, observation, env):
        gather = [c for c in observation.candidates if c.kind == "gather"]
        if gather:  # reviews the last unreviewed drug first: the last number the prompt shows
            order = {drug: i for i, (drug, _, _) in enumerate(observation.regimen)}
            return format_action(max(gather, key=lambda c: order[c.args[0]]).id)
        order = [drug for drug, _, _ in observation.regimen]
        for finding in observation.evidence:
            if (
                finding.kind == "interaction"
                and finding.detail in ("major", "contraindicated")
                or finding.kind == "duplicate"
            ):
                target = max(finding.drug, finding.other, key=order.index)
            elif finding.kind == "contraindication":
                target = finding.drug
            else:
                continue
            stop = by_key(observation, ("stop", target))
            if stop is not None:
                return format_action(stop.id)
        return format_action(by_kind(observation, "finish").id)


class OraclePolicy(Policy):
    """The ceiling: reads the hidden problem list and picks the best fix by simulating each option with
    the environment's own problem detector. A learned policy can reach the same choices from the evidence."""

    name = "oracle"
    PREFERENCE = {"reduce": 2, "substitute": 1, "stop": 0}

    def act(self, observation, env):
        key = self._next_key(env)
        if key[0] not in ("finish",) and key[1] not in env.gathered:
            key = ("gather", key[1])
        chosen = by_key(observation, key) or by_kind(observation, "finish")
        return format_action(chosen.id)

    def _next_key(self, env: PolyGuardEnv) -> tuple:
        current = env.current_problems()
        for problem in sorted(current, key=lambda p: (not p.is_major, p.kind, p.drugs)):
            best = max(self._fixes(env, problem, current), default=None)
            if best is not None and best[0]:
                return best[-1]
        kb = env.kb
        drugs = list(env.regimen)
        for i, a in enumerate(drugs):
            for b in drugs[i + 1 :]:
                found = kb.interaction(a, b)
                if (
                    found is not None
                    and found.severity == "moderate"
                    and a not in env.monitored
                    and b not in env.monitored
                ):
                    return ("monitor", a)
        return ("finish",)

    def _fixes(self, env: PolyGuardEnv, problem, current):
        treated = {env.kb.drugs[d].indication for d in env.regimen}
        for drug in problem.drugs:
            options = [("stop", drug)] + [("substitute", drug, alt) for alt in env.alternatives(drug)]
            if problem.kind == "renal" and problem.detail == "reduce":
                options.append(("reduce", drug))
            for key in options:
                regimen = dict(env.regimen)
                if key[0] == "stop":
                    del regimen[drug]
                elif key[0] == "reduce":
                    regimen[drug] = "reduced"
                else:
                    regimen = {
                        (key[2] if d == drug else d): ("standard" if d == drug else v) for d, v in regimen.items()
                    }
                after = detect_problems(env.kb, env.patient, regimen)
                keeps = treated <= {env.kb.drugs[d].indication for d in regimen}
                yield (problem not in after, -len(after - current), keeps, self.PREFERENCE[key[0]], key)


class EvidenceExpert(Policy):
    """Reads ONLY the observation (no hidden state): reduce when the renal evidence says so, substitute with
    an alternative the evidence screens as ok, stop a duplicate, monitor moderate interactions. It shows that
    the heuristic-to-oracle headroom is learnable from what the prompt shows."""

    name = "evidence_expert"

    def act(self, observation, env):
        gather = [c for c in observation.candidates if c.kind == "gather"]
        order = [drug for drug, _, _ in observation.regimen]
        if gather:
            return format_action(min(gather, key=lambda c: order.index(c.args[0])).id)
        safe = {}
        for f in observation.evidence:
            if f.kind == "alternative" and f.detail == "ok":
                safe.setdefault(f.drug, f.other)
        for key in self._fixes(observation, order, safe):
            chosen = by_key(observation, key)
            if chosen is not None:
                return format_action(chosen.id)
        return format_action(by_kind(observation, "finish").id)

    @staticmethod
    def _fixes(observation, order, safe):
        def replace(*drugs):
            for drug in drugs:
                if drug in safe:
                    return ("substitute", drug, safe[drug])
            return ("stop", max(drugs, key=order.index))

        evidence = observation.evidence
        for f in evidence:
            if f.kind == "interaction" and f.detail in ("major", "contraindicated"):
                yield replace(f.drug, f.other)
            elif f.kind == "contraindication" or (f.kind == "renal" and f.detail == "avoid"):
                yield replace(f.drug)
        for f in evidence:
            if f.kind == "renal" and f.detail == "reduce":
                yield ("reduce", f.drug)
            elif f.kind == "duplicate":
                yield ("stop", max(f.drug, f.other, key=order.index))
        for f in evidence:
            if (
                f.kind == "interaction"
                and f.detail == "moderate"
                and not {f.drug, f.other} & set(observation.monitored)
            ):
                yield ("monitor", f.drug)


AlwaysFinish = first_of_kinds("always_finish", (), "finish", "Finishes at once, changing nothing.")
StopEverything = first_of_kinds("stop_everything", ("stop", "gather"), "finish", "Stops every drug it can.")
MonitorEverything = first_of_kinds(
    "monitor_everything",
    ("monitor", "gather"),
    "finish",
    "'Flag everything': orders monitoring on every drug and changes nothing.",
)
ReviewEveryStep = first_of_kinds("review_every_step", ("review",), "finish", "Asks for a pharmacist review every step.")

# The environment's own policies (EnvSpec adds the generic ones: random, first_candidate, repeat_last).
POLICIES = (
    HeuristicPolicy,
    OraclePolicy,
    EvidenceExpert,
    AlwaysFinish,
    StopEverything,
    ReviewEveryStep,
    MonitorEverything,
)
# the generic trivial policies where PolyGuard's reports have always listed them
TRIVIAL = ("always_finish", "stop_everything", *GENERIC_TRIVIAL, "review_every_step", "monitor_everything")
# Each reported policy's role (EnvSpec.roles), in report order (EnvSpec adds random first, the generic trivial last).
ROLES = {"heuristic": "teacher", "oracle": "oracle", "evidence_expert": "baseline"} | dict.fromkeys(TRIVIAL, "trivial")
