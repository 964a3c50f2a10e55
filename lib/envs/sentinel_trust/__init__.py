"""SENTINEL-trust, the trust-orchestration environment (README.md here; DATA.md for where the numbers come from)."""

import dataclasses
from functools import partial

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


def make_spec(trust_marks: bool = False) -> EnvSpec:
    """The spec whose prompts mark each overall trust under the teacher's line with `low` when `trust_marks`
    (`env_args: {trust_marks: true}`; render.py); false, SPEC itself. The facts are the prompt's own: the mark
    restates a value the ranked trust line shows, rounded to two places."""
    if not isinstance(trust_marks, bool):
        raise ValueError(f"sentinel_trust: trust_marks must be true or false, got {trust_marks!r}")
    return dataclasses.replace(SPEC, make_env=partial(SentinelTrustEnv, True)) if trust_marks else SPEC


__all__ = ["SPEC", "SentinelTrustEnv", "make_spec", "render"]
