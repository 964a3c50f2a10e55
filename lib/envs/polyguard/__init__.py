"""PolyGuard, the medication-safety review environment (README.md here; DATA.md for the knowledge base)."""

from ..spec import EnvSpec
from .attacks import ANTI_CHEAT_RULES, HARMFUL_ATTACKS
from .env import PolyGuardEnv, render
from .kb import default_kb
from .policies import POLICIES, ROLES


def vocabulary() -> str:
    """Every drug, condition and drug class the prompts can show (the tiny tokenizer's extra text)."""
    kb = default_kb()
    return " ".join(sorted(set(kb.drugs) | set(kb.conditions) | {d.drug_class for d in kb.drugs.values()}))


SPEC = EnvSpec(
    name="polyguard",
    make_env=PolyGuardEnv,
    policies=POLICIES,
    roles=ROLES,
    anti_cheat_rules=ANTI_CHEAT_RULES,
    harmful_attacks=HARMFUL_ATTACKS,
    vocabulary=vocabulary,
    description="Medication review of a seeded patient over a knowledge base of real drugs (research data, not "
    "clinical advice); answers are JSON naming an offered candidate",
)

__all__ = ["SPEC", "PolyGuardEnv", "render"]
