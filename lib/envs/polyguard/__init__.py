"""PolyGuard, the medication-safety review environment (README.md here; DATA.md for the knowledge base)."""

from ..spec import EnvSpec
from . import reward
from .attacks import ANTI_CHEAT_RULES, HARMFUL_KINDS, anti_cheat_rule, harmful_attacks
from .env import PolyGuardEnv, render
from .extras import drug_labels
from .kb import default_kb
from .policies import BASELINES, POLICIES, TRIVIAL


def vocabulary() -> str:
    """Every drug, condition and drug class the prompts can show (the tiny tokenizer's extra text)."""
    kb = default_kb()
    return " ".join(sorted(set(kb.drugs) | set(kb.conditions) | {d.drug_class for d in kb.drugs.values()}))


SPEC = EnvSpec(
    name="polyguard",
    description="medication review: gather evidence on a patient's drugs, then stop, substitute, reduce or monitor "
    "them to remove planted interactions, contraindications, duplicates and renal dosing errors",
    make_env=PolyGuardEnv,
    policies=POLICIES,
    baselines=BASELINES,
    trivial=TRIVIAL,
    teacher="heuristic",
    oracle="oracle",
    random="random",
    expert="evidence_expert",
    reward_weights=reward.WEIGHTS,
    reward_doc=reward.__doc__,
    anti_cheat_rules=ANTI_CHEAT_RULES,
    anti_cheat_rule=anti_cheat_rule,
    harmful_kinds=HARMFUL_KINDS,
    harmful_attacks=harmful_attacks,
    vocabulary=vocabulary,
    rollout_policies=("heuristic", "evidence_expert", "random"),
    noise_excluded_kinds=("finish", "review"),  # DART noise never ends an episode or spends the one review
    corpus_extras={"drug_labels": drug_labels},
)

__all__ = ["SPEC", "PolyGuardEnv", "render"]
