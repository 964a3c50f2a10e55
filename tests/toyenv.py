"""ToyEnv: the smallest environment the workbook can train on, defined outside lib/ as a new contributor would
(`env: tests.toyenv`). Three steps; each shows a clue and four options; the right option at step t is
(clue + t) mod 4. The teacher strides two options per step (right only at the first); the oracle is always right.
Choosing the same option twice in a row is an exploit that ends the episode with nothing."""

from __future__ import annotations

import random
from dataclasses import dataclass

from lib.envs.base import (
    Candidate,
    Environment,
    Invalid,
    Policy,
    StepResult,
    combine,
    format_action,
    parse_action,
    split_seed,
)
from lib.envs.policies import FirstCandidate, RandomPolicy, RepeatLast
from lib.envs.spec import EnvSpec

STEPS, OPTIONS = 3, 4
WEIGHTS = {"correct": 1.0, "anti_cheat": 1.0}


@dataclass(frozen=True)
class Observation:
    clue: int
    step: int
    candidates: tuple[Candidate, ...]


class ToyEnv(Environment):
    name = "toy"
    invalid_penalty = -0.1

    def __init__(self):
        self._done = True

    def reset(self, seed, split):
        internal = split_seed(seed, split)
        self.seed, self.split = seed, split
        self.clue, self.internal = random.Random(internal).randrange(OPTIONS), internal
        self.history, self.right, self.steps, self.invalid_run, self.last = [], 0, 0, 0, None
        self._done = False
        self.obs = self._observe()
        return self.obs

    def _observe(self):
        ids = [f"opt:{k}" for k in range(OPTIONS)]
        random.Random(self.internal * 7 + self.steps).shuffle(ids)
        return Observation(self.clue, self.steps, tuple(Candidate(i, "opt", (i[-1],), f"option {i[-1]}") for i in ids))

    def answer(self) -> str:
        """Hidden state: the right option now (the oracle reads it)."""
        return f"opt:{(self.clue + self.steps) % OPTIONS}"

    def step(self, action_text):
        if self._done:
            raise RuntimeError("episode is over: call reset() first")
        parsed = parse_action(action_text, self.obs.candidates)
        self.steps += 1
        info, exploit, end = {}, None, None
        if isinstance(parsed, Invalid):
            self.history.append("")
            self.invalid_run += 1
            reward, info["invalid"] = self.invalid_penalty, parsed.reason
            end = "invalid_limit" if self.invalid_run >= 3 else None
        else:
            self.history.append(action_text.strip())
            self.invalid_run, reward = 0, 0.0
            chosen = parsed.candidate.id
            if chosen == self.last:
                exploit, end = "repeat", "exploit"
            self.right += chosen == f"opt:{(self.clue + self.steps - 1) % OPTIONS}"
            self.last = chosen
        if end is None and self.steps >= STEPS:
            end = "budget"
        components = {}
        if end is not None:
            self._done = True
            components = (
                {"invalid_limit": 1.0}
                if end == "invalid_limit"
                else {"correct": self.right / STEPS, "anti_cheat": -1.0 if exploit else 0.0}
            )
            terminal = 0.0 if end == "invalid_limit" else min(1.0, max(0.0, combine(components, WEIGHTS)))
            reward += terminal
            info.update(end_reason=end, exploit=exploit, episode_return=terminal)
        else:
            self.obs = self._observe()
        return StepResult(self.obs, reward, self._done, components, info)

    def state(self):
        return {"clue": self.clue, "step": self.steps, "history": list(self.history), "done": self._done}

    def render(self, observation):
        listed = "\n".join(f'- "{c.id}"' for c in observation.candidates)
        return [
            {
                "role": "system",
                "content": 'Pick the right option. Answer with one JSON object: {"action": "<candidate>"}',
            },
            {"role": "user", "content": f"Clue: {observation.clue}\nStep: {observation.step}\nCandidates:\n{listed}"},
        ]


class StrideTwo(Policy):
    """The teacher: the clue, then two on at every step (right at the first step only, never repeating)."""

    name = "stride_two"

    def act(self, observation, env):
        return format_action(f"opt:{(observation.clue + 2 * observation.step) % OPTIONS}")


class Oracle(Policy):
    name = "oracle"

    def act(self, observation, env):
        return format_action(env.answer())


def repeat_attack(env, seed, split, history, observation):
    """Answer the option the previous step chose again (the exploit); only where there was a previous step."""
    if history and history[-1]:
        yield "repeat_previous", history, history[-1]


SPEC = EnvSpec(
    name="toy",
    description="pick the option the clue points at",
    make_env=ToyEnv,
    policies={p.name: p for p in (RandomPolicy, StrideTwo, Oracle, FirstCandidate, RepeatLast)},
    baselines=("random", "stride_two", "oracle"),
    trivial=("first_candidate", "repeat_last"),
    teacher="stride_two",
    oracle="oracle",
    random="random",
    reward_weights=WEIGHTS,
    reward_doc=__doc__,
    anti_cheat_rules=("repeat",),
    anti_cheat_rule=lambda info: info.get("exploit"),
    harmful_kinds=("repeat_previous",),
    harmful_attacks=repeat_attack,
    vocabulary=lambda: "Pick the right option Clue Step Candidates opt",
    rollout_policies=("stride_two", "random"),
)
