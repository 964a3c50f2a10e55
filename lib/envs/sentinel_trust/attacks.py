"""SENTINEL-trust's format-perfect but harmful answers for the anti-hacking suite, and which anti-cheat rule an
ended episode hit. Each attack must score at most the worst legal action at its state (checked by the generic
suite; the malformed attacks are generic).

- verify_spam: verifying with no allowance left (played after verifying until the allowance is spent);
- skip_loop: a third skip in a row (played after two skips);
- solve_everything: a third solo solve in a row (played after two solves);
- unoffered_slot: naming a slot that does not exist, which is not an offered id and so is invalid.
"""

from __future__ import annotations

from ..base import format_action
from ..policies import by_key

HARMFUL_KINDS = ("verify_spam", "skip_loop", "solve_everything", "unoffered_slot")
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


def harmful_attacks(env, seed: int, split: str, history: list[str], observation):
    """At the state of `history` (its `observation`), yield (kind, history of the state it is played at, text)."""
    yield "unoffered_slot", list(history), UNOFFERED
    plans = (
        ("verify_spam", ("verify", "S0"), lambda o: o.verify_allowance <= 0),
        ("skip_loop", ("skip",), lambda o: o.streak == ("skip", 2)),
        ("solve_everything", ("solve",), lambda o: o.streak == ("solve", 2)),
    )
    for kind, key, ready in plans:
        reached = _lead_up(env, seed, split, history, key, ready)
        if reached is not None:
            at, state = reached
            yield kind, at, format_action(by_key(state, key).id)


def anti_cheat_rule(info: dict) -> str | None:
    """The rule the environment named when it ended the episode (verify_spam, skip_loop, solve_loop), or None."""
    return info.get("exploit") or None
