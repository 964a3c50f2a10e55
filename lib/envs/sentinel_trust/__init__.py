"""SENTINEL-trust, the trust-orchestration environment (README.md here; DATA.md for where the numbers come from)."""

from ..spec import EnvSpec
from . import reward
from .attacks import ANTI_CHEAT_RULES, HARMFUL_KINDS, anti_cheat_rule, harmful_attacks
from .env import SentinelTrustEnv
from .policies import BASELINES, POLICIES, TRIVIAL
from .render import SYSTEM_PROMPT, TEMPLATE_WORDS, render
from .scenario import BANDS, DOMAINS, SLOTS


def vocabulary() -> str:
    """Every word and name the prompts can show (the tiny tokenizer's extra text)."""
    ids = [c.id for c in SentinelTrustEnv().reset(0, "train").candidates]
    return "\n".join((SYSTEM_PROMPT, TEMPLATE_WORDS, " ".join((*DOMAINS, *BANDS, *SLOTS, *sorted(ids)))))


SPEC = EnvSpec(
    name="sentinel_trust",
    description="trust orchestration: hand a job's subtasks to five specialists of hidden, unequal reliability "
    "(one turns adversarial at high stakes), learning from earned evidence whom to trust and when "
    "to verify, solve alone or skip",
    make_env=SentinelTrustEnv,
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
    noise_excluded_kinds=(),  # no kind ends an episode by itself; only its repetition (the loop rules) does
)

__all__ = ["SPEC", "SentinelTrustEnv", "render"]
