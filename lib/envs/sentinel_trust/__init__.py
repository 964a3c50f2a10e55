"""SENTINEL-trust, the trust-orchestration environment (README.md here; DATA.md for where the numbers come from)."""

from ..spec import EnvSpec
from .attacks import ANTI_CHEAT_RULES, HARMFUL_ATTACKS
from .env import SentinelTrustEnv
from .policies import POLICIES, ROLES
from .render import SYSTEM_PROMPT, TEMPLATE_WORDS, render
from .scenario import BANDS, DOMAINS, SLOTS


def vocabulary() -> str:
    """Every word and name the prompts can show (the tiny tokenizer's extra text)."""
    ids = [c.id for c in SentinelTrustEnv().reset(0, "train").candidates]
    return "\n".join((SYSTEM_PROMPT, TEMPLATE_WORDS, " ".join((*DOMAINS, *BANDS, *SLOTS, *sorted(ids)))))


SPEC = EnvSpec(
    name="sentinel_trust",
    make_env=SentinelTrustEnv,
    policies=POLICIES,
    roles=ROLES,
    anti_cheat_rules=ANTI_CHEAT_RULES,
    harmful_attacks=HARMFUL_ATTACKS,
    vocabulary=vocabulary,
    description="An orchestrator hands subtasks to five specialists of hidden, unequal reliability (one turns on high "
    "stakes) and learns whom to trust and when to check",
)

__all__ = ["SPEC", "SentinelTrustEnv", "render"]
