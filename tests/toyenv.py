"""ToyEnv: the smallest environment the workbook can train on, defined outside lib/ as a new contributor would
(`env: tests.toyenv`). Three steps; each shows a clue and four options; the right option at step t is
(clue + t) mod 4. The teacher strides two options per step (right only at the first); the oracle is always right.
Choosing the same option twice in a row is an exploit that ends the episode with nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass

from lib.envs.base import Candidate, Environment, Policy, format_action
from lib.envs.spec import EnvSpec

STEPS, OPTIONS = 3, 4
WEIGHTS = {"correct": 1.0, "anti_cheat": 1.0}


@dataclass(frozen=True)
class Observation:
    clue: int
    step: int
    candidates: tuple[Candidate, ...]


def render(observation):
    """The one prompt renderer (the environment's `renderer`): the chat messages a model sees."""
    listed = "\n".join(f'- "{c.id}"' for c in observation.candidates)
    return [
        {
            "role": "system",
            "content": 'Pick the right option. Answer with one JSON object: {"action": "<candidate>"}',
        },
        {"role": "user", "content": f"Clue: {observation.clue}\nStep: {observation.step}\nCandidates:\n{listed}"},
    ]


class ToyEnv(Environment):
    """Everything an environment implements on the contract; the base class runs `reset` and `step` (parsing,
    invalid answers, the end of the episode at the budget, the clamped return), `state` and `render`."""

    name = "toy"
    invalid_penalty = -0.1
    weights = WEIGHTS
    renderer = staticmethod(render)

    def _begin(self, internal_seed):
        self.clue = random.Random(internal_seed).randrange(OPTIONS)
        self.right, self.last = 0, None
        self.budget = STEPS

    def _observe(self):
        ids = [f"opt:{k}" for k in range(OPTIONS)]
        random.Random(self._internal * 7 + self._steps).shuffle(ids)
        return Observation(self.clue, self._steps, tuple(Candidate(i, "opt", (i[-1],), f"option {i[-1]}") for i in ids))

    def answer(self) -> str:
        """Hidden state: the right option now (the oracle reads it)."""
        return f"opt:{(self.clue + self._steps) % OPTIONS}"

    def _apply(self, candidate, info):
        """Count a right answer; choosing the option chosen just before is the exploit (it ends the episode)."""
        repeated = candidate.id == self.last
        self.right += candidate.id == f"opt:{(self.clue + self._steps - 1) % OPTIONS}"
        self.last = candidate.id
        return ("repeat" if repeated else None), None

    def _score(self, exploit):
        return {"correct": self.right / STEPS, "anti_cheat": -1.0 if exploit else 0.0}

    def _hidden(self):
        return {"clue": self.clue}


class StrideTwo(Policy):
    """The teacher: the clue, then two on at every step (right at the first step only, never repeating)."""

    name = "stride_two"

    def act(self, observation, env):
        return format_action(f"opt:{(observation.clue + 2 * observation.step) % OPTIONS}")


class Oracle(Policy):
    name = "oracle"

    def act(self, observation, env):
        return format_action(env.answer())


def repeat_previous(env, seed, split, history, observation):
    """Answer the option the previous step chose again (the exploit); only where there was a previous step."""
    if history and history[-1]:
        yield history, history[-1]


SPEC = EnvSpec(
    name="toy",
    make_env=ToyEnv,
    policies=(StrideTwo, Oracle),  # EnvSpec adds the generic ones: random, first_candidate, repeat_last
    roles={"stride_two": "teacher", "oracle": "oracle"},
    anti_cheat_rules=("repeat",),
    harmful_attacks={"repeat_previous": repeat_previous},
    vocabulary=lambda: "Pick the right option Clue Step Candidates opt",
)
