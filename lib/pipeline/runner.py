"""The orchestrator behind One_Run_Runner.ipynb and `python -m lib run`: executes the stage notebooks with
papermill, each in its own kernel, into outputs/<run_id>/<stage>/<stage>.ipynb, and stops at the first failure.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from .stages import STAGES, notebooks

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


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
    """The plan as a table: which notebook runs which stages, where its executed copy goes, and what it writes."""
    writes = {s.name: s.writes for s in STAGES}
    return pd.DataFrame(
        [
            {
                "stage": names[0],
                "stages": ", ".join(names),
                "notebook": f"notebooks/{notebook}",
                "executed copy": f"{output_root}/{run_id}/{names[0]}/{names[0]}.ipynb",
                "writes": "; ".join(writes[n] for n in names),
            }
            for notebook, names in notebooks(stages)
        ]
    )


def run_stages(
    run_id: str,
    profile: str,
    stages: list[str] | None = None,
    overrides: dict | None = None,
    output_root: str = "outputs",
    kernel_name: str | None = None,
) -> list[Path]:
    """Execute each stage notebook with papermill; returns the executed notebooks' paths."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    table = plan(run_id, profile, stages, output_root)
    parameters = {"RUN_ID": run_id, "PROFILE": profile, "OVERRIDES": dict(overrides or {})}
    for notebook in table["notebook"]:
        check_parameters(REPO / notebook, parameters)
    executed = []
    for stage, notebook in tqdm(list(zip(table["stage"], table["notebook"])), desc=f"run {run_id}", unit="notebook"):
        target = REPO / output_root / run_id / stage / f"{stage}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            papermill.execute_notebook(
                str(REPO / notebook),
                str(target),
                parameters=parameters,
                kernel_name=kernel_name,
                cwd=str(REPO),
                progress_bar=False,
            )
        except PapermillExecutionError as error:
            raise StageFailed(
                f"stage {stage!r} failed in cell {error.exec_count}: {error.ename}: {error.evalue}\n"
                f"executed notebook with the traceback: {target}"
            ) from None
        executed.append(target)
    return executed
