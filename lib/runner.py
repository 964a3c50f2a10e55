"""The orchestrator behind One_Run_Runner.ipynb and `python -m lib run`: executes the stage notebooks with
papermill, each in its own kernel, into outputs/<run_id>/<stage>/<stage>.ipynb, and stops at the first failure.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
STAGE_NOTEBOOKS = {"corpus": "01_build_corpus.ipynb", "baselines": "02_baselines.ipynb", "sft": "03_sft.ipynb",
                   "grpo": "04_grpo.ipynb", "evaluate": "05_evaluate.ipynb", "export": "06_export.ipynb",
                   "report": "07_report.ipynb"}
WRITES = {"corpus": "corpus/sft.jsonl, corpus/grpo_prompts.jsonl", "baselines": "baselines/baselines.json",
          "sft": "sft/model/", "grpo": "grpo/adapter/", "evaluate": "evaluate/eval.json, episodes.jsonl, anti_hacking_report.json",
          "export": "export/merged/, postsave/postsave_inference.json", "report": "report.md, charts/, gate.json"}


class UnknownParameterError(ValueError):
    """A parameter the notebook does not declare (papermill itself would only warn)."""


class StageFailed(RuntimeError):
    """A stage notebook raised; the message names the executed notebook and the cell."""


def suggest_profile(requested: str) -> str:
    """On a CUDA machine the default cpu-smoke profile is probably not what was meant: say so."""
    import torch

    if torch.cuda.is_available() and requested.startswith("cpu"):
        return f"CUDA is available ({torch.cuda.get_device_name(0)}): consider PROFILE = 'gpu-smollm2'"
    return f"profile {requested!r}"


def check_parameters(notebook: Path, parameters: dict) -> None:
    import papermill

    declared = set(papermill.inspect_notebook(str(notebook)))
    unknown = sorted(set(parameters) - declared)
    if unknown:
        raise UnknownParameterError(f"{notebook.name} does not declare {unknown}; it takes {sorted(declared)}")


def plan(run_id: str, profile: str, stages: list[str] | None = None, output_root: str = "outputs") -> pd.DataFrame:
    """The plan as a table: which notebook runs, where its executed copy goes, and what it writes."""
    stages = stages or list(STAGE_NOTEBOOKS)
    unknown = [s for s in stages if s not in STAGE_NOTEBOOKS]
    if unknown:
        raise ValueError(f"unknown stages {unknown}; choose from {list(STAGE_NOTEBOOKS)}")
    return pd.DataFrame([{"stage": s, "notebook": f"notebooks/{STAGE_NOTEBOOKS[s]}",
                          "executed copy": f"{output_root}/{run_id}/{s}/{s}.ipynb", "writes": WRITES[s]} for s in stages])


def run_stages(run_id: str, profile: str, stages: list[str] | None = None, overrides: dict | None = None,
               output_root: str = "outputs", kernel_name: str | None = None) -> list[Path]:
    """Execute each stage notebook with papermill; returns the executed notebooks' paths."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    table = plan(run_id, profile, stages, output_root)
    parameters = {"RUN_ID": run_id, "PROFILE": profile, "OVERRIDES": dict(overrides or {})}
    for stage in table["stage"]:
        check_parameters(NOTEBOOKS / STAGE_NOTEBOOKS[stage], parameters)
    executed = []
    for stage in tqdm(list(table["stage"]), desc=f"run {run_id}", unit="stage"):
        target = REPO / output_root / run_id / stage / f"{stage}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            papermill.execute_notebook(str(NOTEBOOKS / STAGE_NOTEBOOKS[stage]), str(target), parameters=parameters,
                                       kernel_name=kernel_name, cwd=str(REPO), progress_bar=False)
        except PapermillExecutionError as error:
            raise StageFailed(f"stage {stage!r} failed in cell {error.exec_count}: {error.ename}: {error.evalue}\n"
                              f"executed notebook with the traceback: {target}") from None
        executed.append(target)
    return executed
