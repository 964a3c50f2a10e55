"""The orchestrator behind One_Run_Runner.ipynb and `python -m lib run`: executes the stage notebooks with
papermill, each in its own kernel, into outputs/<run_id>/<stage>/<stage>.ipynb, and stops at the first failure.

Why `python -m lib run` has two papermill layers (`run_profile` executes One_Run_Runner.ipynb, whose cell calls
`run_stages`, which executes each stage notebook), and not one:
- the inner layer is the point of the design: each stage notebook runs in its own kernel (a fresh process per
  stage, as `python -m lib stage` gives, so one stage's memory and imports never leak into the next), and its
  executed copy is the stage's record;
- the outer layer makes the command line produce exactly what a notebook user gets: the executed
  outputs/<run_id>/One_Run_Runner.ipynb (plan, headline, gate table, charts, links to every executed stage
  notebook) is the run's front page, made by the same notebook cells whether the run started in Jupyter/Colab or
  from `make run`. Calling `run_stages` directly would skip that page or need a second copy of its cells in code.
The parameters cross each layer once and are checked before any kernel starts: `run_profile` loads the config
(a bad profile or override fails here) and checks the runner's declared parameters (PROFILE, RUN_ID, STAGES,
OVERRIDES); `run_stages` checks every stage notebook's (RUN_ID, PROFILE, OVERRIDES) before the first one runs.
A stage notebook reads the run's own config from its manifest after the first stage (`lib.runs.open_run`).
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


def run_profile(profile: str, run_id: str | None, stages, overrides: dict) -> Path | None:
    """`python -m lib run`: execute One_Run_Runner.ipynb with papermill (it runs every stage notebook), then print
    the gate's verdict. Returns the run folder, or None when a stage failed."""
    import sys

    import papermill

    from ..config import load_config
    from ..io import read_json
    from ..reporting.gate import format_verdict
    from ..runs import new_run_id

    load_config(profile, overrides)  # a bad profile or override fails here, before any kernel starts
    run_id = run_id or new_run_id(profile)
    plan(run_id, profile, stages)
    parameters = {"PROFILE": profile, "RUN_ID": run_id, "STAGES": stages or [], "OVERRIDES": overrides}
    runner = REPO / "One_Run_Runner.ipynb"
    check_parameters(runner, parameters)
    target = REPO / "outputs" / run_id / "One_Run_Runner.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"running {profile} as outputs/{run_id} (executed runner: {target})", flush=True)
    try:
        papermill.execute_notebook(
            str(runner), str(target), parameters=parameters, cwd=str(REPO), progress_bar=False, log_output=True
        )
    except papermill.PapermillExecutionError as error:
        print(
            f"error: {error.ename}: {error.evalue}\nopen {target} (cell {error.exec_count}) for the traceback",
            file=sys.stderr,
        )
        return None
    gate = target.parent / "gate.json"
    if gate.exists():
        print(format_verdict(read_json(gate)))
    print(f"report: {target.parent / 'report.md'}")
    return target.parent


def env_profile(profile: str, env: str) -> tuple[str, dict]:
    """The profile for one environment of a multi-environment run: `<profile>-<env>` when it exists, else
    `<profile>` with `env` overridden."""
    from ..config import available_profiles

    own = f"{profile}-{env}"
    return (own, {}) if own in available_profiles() else (profile, {"env": env})


def run_environments(profile: str, envs: list[str], stages, overrides: dict) -> Path | None:
    """`python -m lib run --envs ...`: one run per environment, then one environment x policy table
    (outputs/summary-<time>.md). Returns the table's path, or None when a run failed."""
    from ..io import atomic_write_text
    from ..reporting.summary import environment_table
    from ..runs import now

    done = []
    for env in envs:
        env_profile_name, env_override = env_profile(profile, env)
        run_dir = run_profile(env_profile_name, None, stages, {**env_override, **overrides})
        if run_dir is None:
            return None
        done.append(run_dir)
    table = environment_table(done)
    path = REPO / "outputs" / f"summary-{now().replace(':', '').replace('-', '')[:15]}.md"
    atomic_write_text(path, f"Runs: {', '.join(d.name for d in done)}\n\n{table}\n")
    print(table)
    print(f"summary: {path}")
    return path
