"""The one stage list. `python -m lib stage <name>`, the stage notebooks (`run_stage`) and the runner
(`python -m lib run`, One_Run_Runner.ipynb) all read `STAGES`: its order, each stage's notebook and what it writes.

Each stage names its function by reference: a small loader below imports it with an ordinary `from ... import`,
so the import graph (`python -m lib imports`) sees every stage's edge, and only when the stage runs, so reading the
list (the CLI's argument parser, the runner's plan) stays light: no torch, no TRL.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _corpus() -> Callable:
    from ..training.corpus import run_corpus

    return run_corpus


def _baselines() -> Callable:
    from ..evaluation.baselines import run_baselines_stage

    return run_baselines_stage


def _sft() -> Callable:
    from ..training.sft import run_sft

    return run_sft


def _grpo() -> Callable:
    from ..training.rl import run_rl

    return run_rl


def _evaluate() -> Callable:
    from ..evaluation.evaluate import run_evaluate

    return run_evaluate


def _export() -> Callable:
    from ..export.merge import run_export

    return run_export


def _postsave() -> Callable:
    from ..export.postsave import run_postsave

    return run_postsave


def _report() -> Callable:
    from ..reporting.report import run_report

    return run_report


@dataclass(frozen=True)
class Stage:
    name: str
    notebook: str  # the stage notebook that runs it (export and postsave share one)
    writes: str
    load: Callable[[], Callable]  # returns the stage's function, called as function(config, run)

    @property
    def function(self) -> Callable:
        return self.load()


STAGES = (
    Stage("corpus", "01_build_corpus.ipynb", "corpus/sft.jsonl, corpus/grpo_prompts.jsonl", _corpus),
    Stage("baselines", "02_baselines.ipynb", "baselines/baselines.json", _baselines),
    Stage("sft", "03_sft.ipynb", "sft/model/", _sft),
    Stage("grpo", "04_grpo.ipynb", "grpo/adapter/ (and grpo_no_sft/adapter/ when eval.ablations has no_sft)", _grpo),
    Stage("evaluate", "05_evaluate.ipynb", "evaluate/eval.json, episodes.jsonl, anti_hacking_report.json", _evaluate),
    Stage("export", "06_export.ipynb", "export/merged/, export/export_manifest.json", _export),
    Stage("postsave", "06_export.ipynb", "postsave/postsave_inference.json", _postsave),
    Stage("report", "07_report.ipynb", "report.md, charts/, gate.json", _report),
)
STAGE_NAMES = tuple(s.name for s in STAGES)


def notebooks(names: list[str] | None = None) -> list[tuple[str, list[str]]]:
    """(notebook, the stages it runs) in order, for the given stages (default: all)."""
    chosen = names or list(STAGE_NAMES)
    unknown = [n for n in chosen if n not in STAGE_NAMES]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; choose from {list(STAGE_NAMES)}")
    out: dict[str, list[str]] = {}
    for stage in STAGES:
        if stage.name in chosen:
            out.setdefault(stage.notebook, []).append(stage.name)
    return list(out.items())


def run_stage(stage: str, config, run, resume_from=None) -> dict:
    """One stage by name: the CLI, the notebooks and the runner all come through here."""
    found = next((s for s in STAGES if s.name == stage), None)
    if found is None:
        raise ValueError(f"unknown stage {stage!r}; choose one of {list(STAGE_NAMES)}")
    if stage != "report":  # the report reads what the run wrote; every other stage would act on the config
        run.refuse_retired()
    call = found.function
    return call(config, run, resume_from=resume_from) if stage == "grpo" else call(config, run)
