"""The config's history: the settings retired (`RETIRED`) and moved (`MOVED`) since runs were first made, and the
one translation of a recorded config into today's layout (`migrate_config`).

Used by every command that reads a run's recorded config (`python -m lib gate`, `summary`, `fork`, `stage ...` on
an existing run, the report: through `lib.runs.manifest_config`) and by `lib.config.load_config`, which refuses a new
config naming a retired or moved key (`retired_lines`, `moved_lines`). `lib.config` re-exports these names.
"""

from __future__ import annotations

import json
from typing import Any

# Settings removed from the config: dotted key -> (the value that meant what the code does now, where the evidence
# is). A new config naming one is a ConfigError pointing there. A run made before the removal still reads, replays
# and gates: its manifest is a record, so `lib.runs.manifest_config` drops these keys (the file keeps them), and a
# stage is re-run on such a run only if each one holds its neutral value (`retired_in`).
RESULTS_LEVERS = "docs/RESULTS.md, the lever index at its head"
RETIRED: dict[str, tuple[Any, str]] = {
    "corpus.extras": ([], "removed in b2c7137: nothing consumed the extras"),
    "corpus.extras_cache_dir": ("outputs/.extras_cache", "removed with corpus.extras"),
    "corpus.hf_instruction_dataset": (None, f"SFT never read those rows ({RESULTS_LEVERS})"),
    "corpus.hf_instruction_rows": (200, f"SFT never read those rows ({RESULTS_LEVERS})"),
    "corpus.sft_label": (
        "teacher",
        "cloning the noisy teacher's executed actions left the SFT unable to copy the drug number (0.017): "
        "docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing beats the teacher yet'",
    ),
    "sft.candidate_loss": (
        0.0,
        "on SENTINEL trust it gained what sft.prompt_loss gains (+0.003 [-0.004, +0.008] over it) at 1.9-3.1x the SFT "
        "time: docs/RESULTS.md, '2026-11-26 (night)'; retired for grpo.anchor",
    ),
    "model.tiny.split_digits": (
        False,
        "digit tokens lost 0.01 on two seeds: docs/RESULTS.md, '2026-11-26 (evening): an imitation check in the SFT "
        "stage; digit tokens on SENTINEL trust'",
    ),
    "grpo.top_k": (
        0,
        "temperature 3 with top_k 2 gave +0.003 [0.000, +0.008]: docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but "
        "nothing beats the teacher yet'",
    ),
    "grpo.target_kl": (
        0.1,
        "soft_target's bound at 0.5 lost -0.034 [-0.057, -0.011] against 0.1 and fell from step 20: docs/RESULTS.md, "
        "'Soft targets bounded by a KL'; the bound is lib/training/rollout.py's TARGET_KL",
    ),
    "grpo.max_grad_norm": (
        1.0,
        "clipping at 0.2 kept the same checkpoints on both seeds: docs/RESULTS.md, '(...) gradient clipping "
        "does not hold the fall'",
    ),
    "grpo.epsilon_high": (
        None,
        "clip-higher never binds at one iteration per batch (identical to its base arm): docs/RESULTS.md, 'Levers, "
        "one at a time on the same SFT weights and seeds'",
    ),
    "grpo.entropy_coef": (
        0.0,
        "a token-entropy bonus moved nothing (identical to its base arm): docs/RESULTS.md, 'Levers, one at a time "
        "on the same SFT weights and seeds'",
    ),
    "grpo.use_adaptive_entropy": (False, "retired with grpo.entropy_coef"),
    "grpo.entropy_target": (0.2, "retired with grpo.entropy_coef"),
    "corpus.grpo_improvable_margin": (
        0.05,
        "a margin of 0.2 gave GRPO 0.538, as 0.05 did: docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing "
        "beats the teacher yet'",
    ),
    "grpo.continuation": (
        "reference",
        "the policy finishing its own episodes did worse than the teacher finishing them (-0.133 against -0.107 "
        "GRPO - SFT): docs/RESULTS.md, 'GRPO beats SFT on cpu-full, but nothing beats the teacher yet'",
    ),
    "grpo.shared_prompt_pass": (
        True,
        "an exact rewrite of TRL's loss pass, not a lever (4.2x a step on a CPU, the same log-probabilities): it "
        "runs on a CPU, not on a GPU (slower there) nor with grpo.gradient_checkpointing true. docs/RESULTS.md, "
        "'2026-11-28 (midday)'",
    ),
    "model.keep_layers": (
        None,
        "SmolLM2 cut to 10 or 16 layers started SFT at an answer loss of 30 against 2.07 whole, and no subset of its "
        "layers did better than 11.7: docs/RESULTS.md, '2026-11-27 (before midnight)'",
    ),
    "grpo.train_turns": (
        "all",
        "training one drawn turn per episode trained 96 of 656 played turns in 241 CPU s where every turn trained 650 "
        "of 659 in 154 s: docs/RESULTS.md, '2026-11-26: learning per CPU-minute'; retired for sft.group_by_length",
    ),
    "aggrevate.labeller": (
        "improver",
        "the lookahead finished by evidence_expert labelled a learner worse than the teacher's lookahead did: "
        "-0.131 [-0.210, -0.054] (holdout), -0.081 [-0.156, -0.010] (novel), SmolLM2 seed 0, 17 exploit ends "
        "of 100 against 3; docs/RESULTS.md, '2026-12-07 (evening)'. `baselines --policies improver:<policy>` still "
        "plays such a labeller",
    ),
    "grpo.improver_margin": (
        0.0,
        "now the improver's own FUTURE_MARGIN, 0.01 where outcomes are drawn (trust seed 0: validation 0.708 against "
        "0.539 without): docs/RESULTS.md, '2026-11-29 (evening)'",
    ),
    "grpo.turn_weight": (
        "episode",
        "a tie with the default (+0.000 paired): docs/RESULTS.md, 'Weighting the turns: episode (mean_T / T) "
        "against turn (1), paired, seed 0'",
    ),
    "grpo.beta": (
        0.0,
        "0.04 on 5 seeds: every curve ends within 0.05 of its best, but seed 3 -0.036 [-0.056, -0.018]; the rest "
        "within noise: docs/RESULTS.md, '2026-11-26 (evening): KL to the SFT policy steadies multi-turn GRPO, and "
        "takes its one win away'",
    ),
    "grpo.anchor": (
        "sft",
        "`best` - `sft`: -0.000 [-0.002, +0.001] (tiny model, seed 0, multi-turn, beta 0.04); what the KL term "
        "held the policy to, retired with grpo.beta: docs/RESULTS.md, '2026-11-27 (before midnight)'",
    ),
}


def _lookup(data: dict, dotted: str):
    node = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


_ABSENT = object()


def retired_in(data: dict) -> dict[str, Any]:
    """The retired settings a config mapping (a manifest's `config`) names with other than their neutral value:
    what that run did and the code no longer can."""
    found = {}
    for dotted, (neutral, _) in RETIRED.items():
        value = _lookup(data, dotted)
        if value is not _ABSENT and value != neutral:
            found[dotted] = value
    return found


def drop_retired(data: dict) -> dict:
    """A copy of a config mapping without its retired keys (a manifest read as a record)."""
    data = json.loads(json.dumps(data))
    for dotted in RETIRED:
        parent, leaf = dotted.rsplit(".", 1)
        node = _lookup(data, parent)
        if isinstance(node, dict):
            node.pop(leaf, None)
    return data


# The RL stage's settings that lived in the grpo section until rl.algorithm was introduced (`grpo.mode: aggrevate`
# named the algorithm then): old key -> its key now. A run made before still reads, replays and gates
# (`migrate_config`); a new config naming an old key is a ConfigError naming the new one.
MOVED: dict[str, str] = {
    "grpo.validate_every": "rl.validate_every",
    "grpo.validation_episodes": "rl.validation_episodes",
    "grpo.keep": "rl.keep",
    "grpo.alarm_drop": "rl.alarm_drop",
    "grpo.stop_on_alarm": "rl.stop_on_alarm",
    "grpo.rounds": "aggrevate.rounds",
}


def migrate_config(data: dict) -> dict:
    """A recorded config mapping (a manifest's `config`, or a stage record's params as {section: params}) in today's
    layout, as a copy: the RL stage's settings moved out of the grpo section (`MOVED`; `grpo.mode: aggrevate` becomes
    `rl.algorithm: aggrevate`, any other grpo.mode `rl.algorithm: grpo`), and the retired settings dropped
    (`drop_retired`; the file keeps them). Every reader of a recorded config goes through it; a mapping already in
    today's layout only loses its retired keys."""
    data = drop_retired(data)
    grpo = data.get("grpo")
    if not isinstance(grpo, dict) or "rl" in data:
        return data
    for old, new in MOVED.items():
        leaf, (section, key) = old.split(".")[1], new.split(".")
        if leaf in grpo:
            data.setdefault(section, {})[key] = grpo.pop(leaf)
    rl = data.setdefault("rl", {})
    rl["algorithm"] = "aggrevate" if grpo.get("mode") == "aggrevate" else "grpo"
    if grpo.get("mode") == "aggrevate":
        del grpo["mode"]
    return data


def retired_lines(data: dict) -> list[str]:
    """A new config mapping's retired keys, one error line each with its evidence (empty when it names none)."""
    return [
        f"  {dotted}: retired, measured not to help ({reason})"
        for dotted, (_, reason) in RETIRED.items()
        if _lookup(data, dotted) is not _ABSENT
    ]


def moved_lines(data: dict) -> list[str]:
    """A new config mapping's settings named in the grpo section where they no longer live, one error line each
    naming the new key (old runs' records are migrated instead: `migrate_config`)."""
    lines = [
        f"  {old}: moved to {new} (the settings every RL algorithm shares live in rl, AggreVaTe's own in aggrevate)"
        for old, new in MOVED.items()
        if _lookup(data, old) is not _ABSENT
    ]
    if _lookup(data, "grpo.mode") == "aggrevate":
        lines.append(
            "  grpo.mode: aggrevate is not a GRPO mode any more: AggreVaTe is an RL algorithm of its own; set "
            "rl.algorithm=aggrevate (its rounds: aggrevate.rounds)"
        )
    return lines
