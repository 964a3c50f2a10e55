"""`EnvSpec`: the facts about one environment that the generic machinery needs, in one object.

Each environment package under `lib/envs/<name>/` exposes `SPEC = EnvSpec(...)`. The corpus, training,
evaluation, the anti-hacking suite, the charts, the report and the gate read the environment's policies and
their roles, its reward weights, anti-cheat rules and attacks from here and name no environment themselves.
How to train on it (whose rollouts GRPO states come from, which actions DART noise avoids) is recipe, and lives
in the profiles and the config, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import Environment, Policy
from .policies import GENERIC, GENERIC_TRIVIAL

# An attack of one kind, at a state: (env, seed, split, history, observation) -> every (history of the state it
# is played at, the completion text). The anti-hacking suite scores each against the worst legal action there.
Attack = Callable[[Environment, int, str, list[str], Any], Iterable[tuple[list[str], str]]]

ROLES = ("random", "teacher", "oracle", "baseline", "trivial")
SINGLE_ROLES = ("random", "teacher", "oracle")  # exactly one policy has each of these


@dataclass(frozen=True)
class EnvSpec:
    """One environment, as the machinery sees it.

    - `make_env()` builds a fresh environment (one per concurrent episode); its class's `weights` name every
      reward component with its weight.
    - `policies` maps every scripted policy's name to its class (given as the classes, each is under its
      `name`). The generic policies (`policies.GENERIC`: random, first_candidate, repeat_last) are added here: an
      environment names only its own.
    - `roles` maps each reported policy to its role, in report order: exactly one `teacher` (writes the SFT
      corpus; the default GRPO reference), one `oracle` (reads hidden state: the ceiling) and one `random` (the
      floor); other `baseline`s; and `trivial` policies (degenerate answers a trained policy must beat).
      Policies without a role (helpers) are not reported. The generic policies get theirs here: `random` first,
      first_candidate and repeat_last last as `trivial`, unless the environment's roles place them.
      `policies` then lists the policies in report order, helpers last.
    - `anti_cheat_rules`: every rule the environment enforces (the `anti_cheat` an ended episode's info names).
    - `harmful_attacks`: format-perfect but harmful answers by kind (see `Attack`); the malformed attacks are
      generic.
    - `vocabulary()`: every name an observation can show (drugs, slots, workers...), so the tiny model's
      tokenizer, trained on train-split prompts, still has words for what only holdout_novel shows.
    """

    name: str
    make_env: Callable[[], Environment]
    policies: Mapping[str, type[Policy]] | Iterable[type[Policy]]
    roles: Mapping[str, str]
    anti_cheat_rules: tuple[str, ...]
    harmful_attacks: Mapping[str, Attack]
    vocabulary: Callable[[], str]
    description: str = ""  # one line, for the OpenEnv manifest (lib/serve/manifest.py writes openenv.yaml from it)

    def __post_init__(self) -> None:
        roles = {"random": "random", **self.roles} | {
            name: "trivial" for name in GENERIC_TRIVIAL if name not in self.roles
        }
        own = self.policies if isinstance(self.policies, Mapping) else {p.name: p for p in self.policies}
        defined = {**GENERIC, **own}
        object.__setattr__(self, "roles", roles)
        object.__setattr__(self, "policies", {n: defined[n] for n in roles if n in defined} | defined)
        missing = sorted(set(self.roles) - set(self.policies))
        if missing:
            raise ValueError(f"environment {self.name!r} gives roles to policies it does not define: {missing}")
        wrong = sorted({role for role in self.roles.values() if role not in ROLES})
        if wrong:
            raise ValueError(f"environment {self.name!r}: unknown roles {wrong}; roles are {ROLES}")
        for role in SINGLE_ROLES:
            holders = [name for name, r in self.roles.items() if r == role]
            if len(holders) != 1:
                raise ValueError(f"environment {self.name!r} needs exactly one {role!r} policy, has {holders}")

    def _holding(self, *roles: str) -> tuple[str, ...]:
        return tuple(name for name, role in self.roles.items() if role in roles)

    @property
    def teacher(self) -> str:
        return self._holding("teacher")[0]

    @property
    def oracle(self) -> str:
        return self._holding("oracle")[0]

    @property
    def random(self) -> str:
        return self._holding("random")[0]

    @property
    def baselines(self) -> tuple[str, ...]:
        return self._holding("random", "teacher", "oracle", "baseline")

    @property
    def trivial(self) -> tuple[str, ...]:
        return self._holding("trivial")

    @property
    def reported_policies(self) -> tuple[str, ...]:
        """Every baseline, then every trivial policy: what evaluation and `baselines` report."""
        return (*self.baselines, *self.trivial)

    @property
    def harmful_kinds(self) -> tuple[str, ...]:
        return tuple(self.harmful_attacks)

    @property
    def reward_weights(self) -> Mapping[str, float]:
        return self.make_env().weights

    def make_policy(self, name: str) -> Policy:
        if name not in self.policies:
            raise ValueError(
                f"unknown policy {name!r} for environment {self.name!r}; available: {sorted(self.policies)}"
            )
        return self.policies[name]()

    def policy_kind(self, name: str) -> str:
        return "baseline" if name in self.baselines else "trivial" if name in self.trivial else "other"
