"""Stages by name: `python -m lib stage <name>`, the stage notebooks and the runner all come through here."""
from __future__ import annotations

STAGES = ("corpus", "baselines", "sft", "grpo", "evaluate", "export", "postsave")


def run_stage(stage: str, config, run, resume_from=None) -> dict:
    """One stage by name: the CLI, the notebooks and the runner all come through here."""
    if stage == "corpus":
        from .corpus import run_corpus

        return run_corpus(config, run)
    if stage == "baselines":
        from .baselines import run_baselines_stage

        return run_baselines_stage(config, run)
    if stage == "sft":
        from .train import run_sft

        return run_sft(config, run)
    if stage == "grpo":
        from .train import run_grpo

        return run_grpo(config, run, resume_from=resume_from)
    if stage == "evaluate":
        from .evaluate import run_evaluate

        return run_evaluate(config, run)
    if stage == "export":
        from .export import run_export

        return run_export(config, run)
    if stage == "postsave":
        from .postsave import run_postsave

        return run_postsave(config, run)
    raise ValueError(f"unknown stage {stage!r}; choose one of {list(STAGES)}")
