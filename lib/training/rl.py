"""Stage `grpo`, the RL stage: on top of the SFT model, the algorithm `rl.algorithm` names, side by side:
GRPO (lib/training/grpo.py: TRL's GRPOTrainer, the environment's return as the reward) or AggreVaTe
(lib/training/aggrevate.py: the improver's labels at the policy's own states, fitted with TRL's SFTTrainer). Either
writes grpo/adapter and the grpo stage record (the folder and the record keep the name every committed run has),
so the evaluate stage, the gate and the report read them the same way. When `eval.ablations` lists `no_sft`, the
same algorithm also trains from the untrained model, into grpo_no_sft/ (the evaluate stage only loads it).

`python -m lib stage grpo --profile P --run-dir outputs/<id>` (or under `accelerate launch`); notebook 04_grpo calls
the same function.
"""

from __future__ import annotations

from ..config import RunConfig
from ..runs import Run
from .aggrevate import train_aggrevate
from .grpo import train_grpo
from .harness import ensure_logprob_kernel

NO_SFT = "no_sft"  # the eval.ablations entry that asks the RL stage for the algorithm run from the untrained model


def run_rl(config: RunConfig, run: Run, resume_from: str | None = None, extra_callbacks=()) -> dict:
    """The RL stage: `rl.algorithm` on top of the SFT model (grpo/), then, when `eval.ablations` lists `no_sft`, the
    same from the untrained model (grpo_no_sft/), which the evaluate stage compares with it. Returns the grpo
    record."""
    record = train_rl(config, run, resume_from, extra_callbacks)
    if NO_SFT in config.eval.ablations:
        train_rl_no_sft(config, run)
    return record


def train_rl_no_sft(config: RunConfig, run: Run) -> dict:
    """The RL stage's algorithm from the untrained model (the one the evaluate stage reports as `untrained`),
    recorded as stage grpo_no_sft: the no-SFT ablation's model."""
    from ..evaluation.closed_loop import model_artifacts

    untrained = model_artifacts(config, run)["untrained"]["model"]
    return train_rl(config, run, base_model=untrained, stage="grpo_no_sft")


def train_rl(
    config: RunConfig,
    run: Run,
    resume_from: str | None = None,
    extra_callbacks=(),
    *,
    base_model: str | None = None,
    stage: str = "grpo",
) -> dict:
    """`rl.algorithm` on top of the SFT model (or `base_model`), recorded as `stage`. Returns its record."""
    if config.rl.algorithm == "grpo":
        return train_grpo(config, run, resume_from, extra_callbacks, base_model=base_model, stage=stage)
    with run.lap(stage, "kernel check"):  # TRL's SFTTrainer needs the log-prob kernel on a CPU-only torch too
        ensure_logprob_kernel()
    base_model = base_model or run.read_stage("sft")["outputs"]["model"]
    return train_aggrevate(config, run, base_model=base_model, stage=stage)
