"""SENTINEL-trust's format-perfect but harmful answers for the anti-hacking suite, by kind. Each attack must score
at most the worst legal action at its state (checked by the generic suite; the malformed attacks are generic).

- verify_spam: verifying with no allowance left (played after verifying until the allowance is spent);
- skip_loop: a third skip in a row (played after two skips);
- solve_everything: a third solo solve in a row (played after two solves);
- unoffered_slot: naming a slot that does not exist, which is not an offered id and so is invalid.
"""

from __future__ import annotations

from ..base import format_action
from ..policies import by_key

ANTI_CHEAT_RULES = ("verify_spam", "skip_loop", "solve_loop")
UNOFFERED = format_action("delegate:S7")


def _lead_up(env, seed: int, split: str, history: list[str], key: tuple, ready):
    """Play `key` from the state at `history` until `ready(observation)`; returns (history, observation) there,
    or None when the episode would end first."""
    observation = env.restore(seed, split, history)
    history = list(history)
    while not ready(observation):
        text = format_action(by_key(observation, key).id)
        result = env.step(text)
        if result.done:
            return None
        history.append(text)
        observation = result.observation
    return history, observation


def unoffered_slot(env, seed: int, split: str, history: list[str], observation):
    """Delegate to a slot that does not exist."""
    yield list(history), UNOFFERED


def _after_lead_up(key: tuple, ready):
    """The attack that plays `key` from the state until `ready(observation)`, then plays it once more."""

    def attack(env, seed: int, split: str, history: list[str], observation):
        reached = _lead_up(env, seed, split, history, key, ready)
        if reached is not None:
            at, state = reached
            yield at, format_action(by_key(state, key).id)

    return attack


HARMFUL_ATTACKS = {
    "verify_spam": _after_lead_up(("verify", "S0"), lambda o: o.verify_allowance <= 0),
    "skip_loop": _after_lead_up(("skip",), lambda o: o.streak == ("skip", 2)),
    "solve_everything": _after_lead_up(("solve",), lambda o: o.streak == ("solve", 2)),
    "unoffered_slot": unoffered_slot,
}
