"""SENTINEL-cluster, the GPU-cluster scheduling environment with unreliable workers (README.md here; DATA.md for
where its numbers come from). The registry finds `SPEC` here: `get_spec("sentinel_cluster")`."""

import dataclasses
from functools import partial

from ..spec import EnvSpec
from .attacks import ANTI_CHEAT_RULES, HARMFUL_ATTACKS
from .env import ACTION_TEXT, WAIT_TEXT, WAITS, SentinelClusterEnv, render
from .policies import POLICIES, ROLES
from .render import FLAG_TEXT, SYSTEM_PROMPT, SYSTEM_PROMPT_UNTIL_CHANGE
from .scenario import N_WORKERS, SIZES

# Every fixed word the renderer writes besides the system prompt and the action texts.
PROMPT_WORDS = (
    "Tick of Jobs none yet confirmed claimed timed out running queued too late Workers free down "
    "checks ok false info no data Queue most urgent GB ticks left due Running on since reported expected "
    "verified LOCKED Unverified done by at Candidates alloc preempt verify info wait Waited in a row with allocations "
    "offered ends the episode"
)


def vocabulary() -> str:
    """Every word the prompts can show: the system prompt, the renderer's fixed words, the action texts, every
    job, GPU and worker name, the priorities and the tick labels (the tiny tokenizer's extra text)."""
    n_jobs = max(size[0] for size in SIZES)
    n_gpus = max(size[1] for size in SIZES)
    names = (
        [f"J{i}" for i in range(1, n_jobs + 1)]
        + [f"G{i}" for i in range(1, n_gpus + 1)]
        + [f"W{i}" for i in range(1, N_WORKERS + 1)]
        + [f"p{i}" for i in range(1, 6)]
        + [f"t{i}" for i in range(max(size[2] for size in SIZES) + 1)]
    )
    actions = " ".join(text.replace("{}", "").strip() for text in (*ACTION_TEXT.values(), *WAIT_TEXT.values()))
    return " ".join([SYSTEM_PROMPT, SYSTEM_PROMPT_UNTIL_CHANGE, PROMPT_WORDS, *FLAG_TEXT.values(), actions, *names])


SPEC = EnvSpec(
    name="sentinel_cluster",
    make_env=SentinelClusterEnv,
    policies=POLICIES,
    roles=ROLES,
    anti_cheat_rules=ANTI_CHEAT_RULES,
    harmful_attacks=HARMFUL_ATTACKS,
    vocabulary=vocabulary,
    description="A scheduler runs a GPU cluster of jobs with priorities and deadlines while some of the workers that "
    "report progress lie",
)


def make_spec(waits: str = "one_tick") -> EnvSpec:
    """The spec whose environments wait as `waits` says (env.py: WAITS): `one_tick`, SPEC itself; `until_change`,
    a wait lets the clock run on until the observation changes (`env_args: {waits: until_change}`)."""
    if waits not in WAITS:
        raise ValueError(f"sentinel_cluster: waits must be one of {list(WAITS)}, got {waits!r}")
    if waits == "one_tick":
        return SPEC
    return dataclasses.replace(SPEC, make_env=partial(SentinelClusterEnv, waits))


__all__ = ["SPEC", "SentinelClusterEnv", "make_spec", "render"]
