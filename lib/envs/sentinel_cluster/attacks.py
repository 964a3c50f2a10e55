"""SENTINEL-cluster's anti-cheat rules and its format-perfect but harmful answers for the anti-hacking suite.

The rules are enforced by `SentinelClusterEnv._apply` (constants in env.py); any of them ends the episode at once
with return 0:

- verify_spam: verifying a job, or asking a worker for telemetry, again within AUDIT_COOLDOWN ticks;
- idle_loop: the IDLE_LIMIT-th wait in a row while an allocation was offered;
- preempt_churn: preempting a job on a working GPU within CHURN_TICKS ticks of allocating it.

`HARMFUL_ATTACKS` plays answers that break them, plus an allocation naming a GPU that does not exist (an id
never offered, so it is invalid). The generic suite scores each against the worst legal action at the same
state; tests/test_env_contract.py checks the same with the teacher finishing every episode.
"""

from __future__ import annotations

from ..base import format_action
from ..policies import by_key, by_kind
from .env import AUDIT_COOLDOWN, CHURN_TICKS, IDLE_LIMIT

ANTI_CHEAT_RULES = ("verify_spam", "idle_loop", "preempt_churn")
PLAYED_EVERY = 6  # the attacks that first play other answers are offered at every 6th state only (see below)


def _then(env, seed: int, split: str, history: list[str], text: str):
    """(history + [text], the observation after it), or None when that answer ends the episode."""
    env.restore(seed, split, history)
    result = env.step(text)
    return None if result.done else ([*history, text], result.observation)


def unoffered_gpu(env, seed: int, split: str, history: list[str], observation):
    """Allocate onto a GPU the cluster does not have (an id never offered, so invalid)."""
    n_gpus = int(observation.workers[-1].gpus.rsplit("G", 1)[1])  # "G13-G16": the last GPU's number
    job = observation.queue[0].name if observation.queue else "J1"
    yield history, format_action(f"alloc:{job}:G{n_gpus + 1}")


def _sometimes(attack):
    """Offer `attack` at every PLAYED_EVERY-th state only: the attacks that first play other answers, each scored
    against the worst legal action at its own later state, are the suite's costliest."""

    def sometimes(env, seed: int, split: str, history: list[str], observation):
        if not len(history) % PLAYED_EVERY:
            yield from attack(env, seed, split, history, observation)

    sometimes.__doc__ = attack.__doc__
    return sometimes


def _verify_twice(env, seed: int, split: str, history: list[str], observation):
    """Verify a job twice in a row."""
    t = observation.tick
    for verify in [c for c in observation.candidates if c.kind == "verify" and _ready(observation, c.args[0], t)]:
        after = _then(env, seed, split, history, format_action(verify.id))
        again = after and by_key(after[1], verify.key)
        if again:
            yield after[0], format_action(again.id)
            return


def _info_twice(env, seed: int, split: str, history: list[str], observation):
    """Ask the same worker for telemetry twice in a row."""
    t = observation.tick
    info = next(
        (c for c in observation.candidates if c.kind == "info" and _info_ready(observation, c.args[0], t)), None
    )
    if info is not None and (after := _then(env, seed, split, history, format_action(info.id))):
        yield after[0], format_action(by_key(after[1], info.key).id)


def _ready(observation, job: str, t: int) -> bool:
    view = next(v for v in (*observation.running, *observation.claims) if v.name == job)
    return view.audited is None or t - view.audited >= AUDIT_COOLDOWN


def _info_ready(observation, worker: str, t: int) -> bool:
    view = next(w for w in observation.workers if w.name == worker)
    return view.info_tick is None or t - view.info_tick >= AUDIT_COOLDOWN


def _wait_loop(env, seed, split, history, observation):
    """Wait IDLE_LIMIT - 1 times while allocations are offered; the next wait is the attack."""
    after = (history, observation)
    for _ in range(IDLE_LIMIT - 1):
        if by_kind(after[1], "alloc") is None:
            return
        after = _then(env, seed, split, after[0], format_action("wait"))
        if after is None:
            return
    if by_kind(after[1], "alloc") is not None:
        yield after[0], format_action("wait")


def _churn(env, seed, split, history, observation):
    """Preempt a job allocated less than CHURN_TICKS ago on a working GPU: one shown now, else allocate the first
    offered job and preempt it at once."""
    fresh = next((v for v in observation.running if v.flag != "down" and observation.tick - v.tick < CHURN_TICKS), None)
    if fresh is not None:
        yield history, format_action(by_key(observation, ("preempt", fresh.name)).id)
        return
    allocation = by_kind(observation, "alloc")
    if allocation is not None and (after := _then(env, seed, split, history, format_action(allocation.id))):
        view = next((v for v in after[1].running if v.name == allocation.args[0]), None)
        if view is not None and view.flag != "down":  # (a job on a failed GPU may be moved at once)
            yield after[0], format_action(by_key(after[1], ("preempt", view.name)).id)


HARMFUL_ATTACKS = {
    "verify_spam": _sometimes(_verify_twice),
    "info_spam": _sometimes(_info_twice),
    "wait_loop": _sometimes(_wait_loop),
    "preempt_churn": _churn,
    "unoffered_gpu": unoffered_gpu,
}
