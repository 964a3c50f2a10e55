"""The one stage list. `python -m lib stage <name>`, the stage notebooks (`run_stage`) and the runner
(`python -m lib run`, One_Run_Runner.ipynb) all read `STAGES`: its order, each stage's notebook and what it writes.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    notebook: str  # the stage notebook that runs it (export and postsave share one)
    writes: str
    function: str  # "module:function" under lib, called as function(config, run)


STAGES = (
    Stage(
        "corpus", "01_build_corpus.ipynb", "corpus/sft.jsonl, corpus/grpo_prompts.jsonl", "training.corpus:run_corpus"
    ),
    Stage("baselines", "02_baselines.ipynb", "baselines/baselines.json", "evaluation.baselines:run_baselines_stage"),
    Stage("sft", "03_sft.ipynb", "sft/model/", "training.train:run_sft"),
    Stage("grpo", "04_grpo.ipynb", "grpo/adapter/", "training.train:run_grpo"),
    Stage(
        "evaluate",
        "05_evaluate.ipynb",
        "evaluate/eval.json, episodes.jsonl, anti_hacking_report.json",
        "evaluation.evaluate:run_evaluate",
    ),
    Stage("export", "06_export.ipynb", "export/merged/, export/export_manifest.json", "pipeline.export:run_export"),
    Stage("postsave", "06_export.ipynb", "postsave/postsave_inference.json", "pipeline.postsave:run_postsave"),
    Stage("report", "07_report.ipynb", "report.md, charts/, gate.json", "reporting.report:run_report"),
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
    module, function = found.function.split(":")
    call = getattr(importlib.import_module(f"lib.{module}"), function)
    return call(config, run, resume_from=resume_from) if stage == "grpo" else call(config, run)
