"""`EnvSpec`: everything the generic machinery needs to know about one environment, in one object.

Each environment package under `lib/envs/<name>/` exposes `SPEC = EnvSpec(...)`. The corpus, training,
evaluation, the anti-hacking suite, the charts, the report and the gate read the environment's policies,
reward weights, anti-cheat rules and attacks from here and name no environment themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import Environment, Policy

# (attack kind, history of the state it is played at, the completion text) -> scored against the worst legal
# action at that same state by the anti-hacking suite.
HarmfulAttack = tuple[str, list[str], str]


@dataclass(frozen=True)
class EnvSpec:
    """One environment, as the machinery sees it.

    - `make_env()` builds a fresh environment (one per concurrent episode).
    - `policies` maps every scripted policy's name to its class. `baselines` and `trivial` list which of them
      evaluation and `python -m lib baselines` report, and in which group. `teacher` writes the SFT corpus and
      is the default GRPO reference; `oracle` reads hidden state (the ceiling); `random` is the floor.
    - `reward_weights` names every reward component with its weight; `reward_doc` says how the return is
      computed. `anti_cheat_rule(info)` names the rule an ended episode hit (or None), one of
      `anti_cheat_rules`.
    - `harmful_attacks(env, seed, split, history, observation)` yields format-perfect but harmful answers at a
      state (kinds listed in `harmful_kinds`); the malformed attacks are generic.
    - `noise_excluded_kinds`: candidate kinds DART noise in the SFT corpus never executes (episode enders).
    - `rollout_policies`: whose rollouts GRPO prompt states are drawn from by default.
    - `vocabulary()`: text the tiny model's tokenizer is trained on besides the corpus (every name the
      environment can show).
    - `corpus_extras`: optional extra SFT text by name, `fn(config) -> (rows, status)`; a config turns one
      on with `corpus.extras: [name]`.
    """

    name: str
    description: str
    make_env: Callable[[], Environment]
    policies: Mapping[str, type[Policy]]
    baselines: tuple[str, ...]
    trivial: tuple[str, ...]
    teacher: str
    oracle: str
    random: str
    reward_weights: Mapping[str, float]
    reward_doc: str
    anti_cheat_rules: tuple[str, ...]
    anti_cheat_rule: Callable[[dict], str | None]
    harmful_kinds: tuple[str, ...]
    harmful_attacks: Callable[[Environment, int, str, list[str], Any], Iterable[HarmfulAttack]]
    vocabulary: Callable[[], str]
    rollout_policies: tuple[str, ...]
    noise_excluded_kinds: tuple[str, ...] = ()
    expert: str | None = None
    corpus_extras: Mapping[str, Callable[[Any], tuple[list[dict], str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        named = {self.teacher, self.oracle, self.random, *self.baselines, *self.trivial, *self.rollout_policies}
        if self.expert:
            named.add(self.expert)
        missing = sorted(named - set(self.policies))
        if missing:
            raise ValueError(f"environment {self.name!r} names policies it does not define: {missing}")
        if set(self.baselines) & set(self.trivial):
            raise ValueError(f"environment {self.name!r}: a policy cannot be both baseline and trivial")

    def make_policy(self, name: str) -> Policy:
        if name not in self.policies:
            raise ValueError(
                f"unknown policy {name!r} for environment {self.name!r}; available: {sorted(self.policies)}"
            )
        return self.policies[name]()

    @property
    def reported_policies(self) -> tuple[str, ...]:
        """Every baseline, then every trivial policy: what evaluation and `baselines` report."""
        return (*self.baselines, *self.trivial)

    def policy_kind(self, name: str) -> str:
        return "baseline" if name in self.baselines else "trivial" if name in self.trivial else "other"
