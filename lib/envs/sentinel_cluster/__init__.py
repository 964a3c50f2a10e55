"""SENTINEL-cluster, the GPU-cluster scheduling environment with unreliable workers (README.md here; DATA.md for
where its numbers come from). The registry finds `SPEC` here: `get_spec("sentinel_cluster")`."""

from ..spec import EnvSpec
from . import reward
from .attacks import ANTI_CHEAT_RULES, HARMFUL_KINDS, anti_cheat_rule, harmful_attacks
from .env import ACTION_TEXT, SentinelClusterEnv, render
from .policies import BASELINES, POLICIES, TRIVIAL
from .render import FLAG_TEXT, SYSTEM_PROMPT
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
    actions = " ".join(text.replace("{}", "").strip() for text in ACTION_TEXT.values())
    return " ".join([SYSTEM_PROMPT, PROMPT_WORDS, *FLAG_TEXT.values(), actions, *names])


SPEC = EnvSpec(
    name="sentinel_cluster",
    description="GPU-cluster scheduling with unreliable workers: allocate jobs to GPUs by priority and deadline, "
    "verify doubtful progress reports and done claims, move jobs off failed GPUs and distrusted workers",
    make_env=SentinelClusterEnv,
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
    noise_excluded_kinds=("preempt",),  # DART noise never preempts: right after an allocation that is churn
    corpus_extras={},
)

__all__ = ["SPEC", "SentinelClusterEnv", "render"]
