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
  The one exception: a run of chosen stages after which the page cannot be made (its headline reads the evaluate
  stage's eval.json, its gate table the report stage's gate.json, and neither is there nor among the chosen stages)
  runs `run_stages` directly and ends with a line saying what the gate still needs (`partial_run_outcome`).
The parameters cross each layer once and are checked before any kernel starts: `run_profile` loads the config
(a bad profile or override fails here) and checks the runner's declared parameters (PROFILE, RUN_ID, STAGES,
OVERRIDES); `run_stages` checks every stage notebook's (RUN_ID, PROFILE, OVERRIDES) before the first one runs.
A stage notebook reads the run's own config from its manifest after the first stage (`lib.runs.open_run`).

What the terminal shows: each stage's own output (its prints and progress bars) as it runs. The inner layer writes
each stage kernel's stdout and stderr to the runner's own (`echo`), and the outer layer writes the runner kernel's
to the terminal, so a 25-minute SFT stage shows its bars (its trainer's step bar drawn as text too, not only as
the notebook's HTML: TEXT_PROGRESS_ENV, lib/training/harness.py); in Jupyter they appear under the runner's cell. Every
kernel papermill starts here talks over Unix sockets (`kernel_options`), so ipykernel has no cause for its "running
over TCP without encryption" warning, once per kernel.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pandas as pd

from .stages import STAGE_NAMES, STAGES, notebooks

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"


class UnknownParameterError(ValueError):
    """A parameter the notebook does not declare (papermill itself would only warn)."""


class StageFailed(RuntimeError):
    """A stage notebook raised; the message names the executed notebook and the cell."""


# What the front page (One_Run_Runner.ipynb) reads after the stages, by the stage that writes it: its headline cell
# reads eval.json, its gate cell gate.json.
FRONT_PAGE_READS = {"evaluate": "evaluate/eval.json", "report": "gate.json"}
# The stages whose files the gate re-reads (lib/gate.py's checks); the report stage then runs it.
GATE_READS = ("corpus", "sft", "grpo", "evaluate", "export", "postsave")


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


@functools.cache
def _ipc_kernel_manager() -> type:
    """jupyter_client's kernel manager, its kernels on Unix sockets (IPC) under the temporary folder instead of TCP
    ports on localhost: no port is opened, and ipykernel, which warns about plain TCP, has nothing to warn about."""
    from jupyter_client import AsyncKernelManager
    from traitlets import default

    class IPCKernelManager(AsyncKernelManager):
        @default("transport")
        def _transport_default(self) -> str:
            return "ipc"

        def _ip_default(self) -> str:  # the sockets' path prefix; jupyter_client removes the sockets at shutdown
            if self.transport != "ipc":
                return super()._ip_default()
            return os.path.join(tempfile.gettempdir(), f"workbook-kernel-{uuid.uuid4().hex[:12]}")

    return IPCKernelManager


def kernel_options() -> dict:
    """papermill's keyword arguments for the kernels it starts: IPC where Unix sockets exist, else its default."""
    return {"kernel_manager_class": _ipc_kernel_manager()} if os.name == "posix" else {}


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """os.environ with `values` set inside the block (a kernel started there inherits them), as it was after."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_stages(
    run_id: str,
    profile: str,
    stages: list[str] | None = None,
    overrides: dict | None = None,
    output_root: str = "outputs",
    kernel_name: str | None = None,
    echo: bool = True,
) -> list[Path]:
    """Execute each stage notebook with papermill; returns the executed notebooks' paths. Each stage starts with a
    line naming it; with `echo` its kernel's stdout and stderr (prints, progress bars, the trainers' step bars as
    text: TEXT_PROGRESS_ENV) go to this process's as they come, besides the executed notebook."""
    import papermill
    from papermill.exceptions import PapermillExecutionError

    from ..runs import TEXT_PROGRESS_ENV

    table = plan(run_id, profile, stages, output_root)
    parameters = {"RUN_ID": run_id, "PROFILE": profile, "OVERRIDES": dict(overrides or {})}
    for notebook in table["notebook"]:
        check_parameters(REPO / notebook, parameters)
    streams = {"stdout_file": sys.stdout, "stderr_file": sys.stderr} if echo else {}
    executed = []
    rows = list(zip(table["stage"], table["notebook"]))
    for number, (stage, notebook) in enumerate(rows, start=1):
        target = REPO / output_root / run_id / stage / f"{stage}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"[{number}/{len(rows)}] {stage}: {notebook} -> {_shown(target)}", flush=True)
        start = time.monotonic()
        try:
            with _environment({TEXT_PROGRESS_ENV: "1"} if echo else {}):
                papermill.execute_notebook(
                    str(REPO / notebook),
                    str(target),
                    parameters=parameters,
                    kernel_name=kernel_name,
                    cwd=str(REPO),
                    progress_bar=False,
                    **streams,
                    **kernel_options(),
                )
        except PapermillExecutionError as error:
            raise StageFailed(
                f"stage {stage!r} failed in cell {error.exec_count}: {error.ename}: {error.evalue}\n"
                f"executed notebook with the traceback: {target}"
            ) from None
        sys.stderr.flush()
        print(f"[{number}/{len(rows)}] {stage} done in {time.monotonic() - start:.0f} s", flush=True)
        executed.append(target)
    return executed


def front_page_gaps(run_dir: Path, stages) -> list[str]:
    """The stages whose file the front page reads that are neither among the chosen stages (default: all) nor
    done already in this run folder: empty when One_Run_Runner.ipynb can run to its end after the stages."""
    chosen = list(stages or STAGE_NAMES)
    return [stage for stage, path in FRONT_PAGE_READS.items() if stage not in chosen and not (run_dir / path).is_file()]


def _stage_status(run_dir: Path, stage: str) -> str | None:
    from ..runs import DamagedRunError, read_json_record

    try:
        return read_json_record(run_dir / stage / "stage.json", f"the {stage} stage record").get("status")
    except DamagedRunError:
        return None


def _shown(path: Path) -> Path:
    """A path as the user would type it: relative to the working folder when under it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        return path


def partial_run_outcome(run_dir: Path, profile: str, stages: list[str]) -> tuple[bool, str]:
    """After a run of chosen stages that leaves no gate (`front_page_gaps` not empty): whether the chosen stages
    passed, and the line to print: what failed, or what the gate still needs and the command that finishes the run.
    A chosen evaluate stage without its eval.json is a failure, not something left for later."""
    status = {s: _stage_status(run_dir, s) for s in STAGE_NAMES}
    shown = _shown(run_dir)
    failed = ", ".join(f"{s} ({status[s] or 'no stage.json'})" for s in stages if status[s] != "ok")
    if failed:
        return False, f"error: chosen stages did not finish ok in {shown}: {failed}"
    if "evaluate" in stages and not (run_dir / FRONT_PAGE_READS["evaluate"]).is_file():
        return False, f"error: the evaluate stage ran but {shown / FRONT_PAGE_READS['evaluate']} is missing"
    left = [s for s in STAGE_NAMES if status[s] != "ok"]
    needs = [s for s in GATE_READS if s in left]
    if needs:
        why = f"the gate needs the {', '.join(needs)} stage{'s' if len(needs) > 1 else ''}, not run in this folder yet"
    else:
        why = "the report stage runs the gate"
    finish = f"python -m lib run --profile {profile} --run-id {run_dir.name} --stages {' '.join(left or ['report'])}"
    return True, (
        f"stages {', '.join(stages)} done in {shown}. No gate: {why}.\n"
        f"to finish and gate this run: {finish}\n"
        f"(or after `python -m lib stage <stage> --run-dir {shown}` for each: python -m lib gate {shown})"
    )


def run_profile(profile: str, run_id: str | None, stages, overrides: dict) -> Path | None:
    """`python -m lib run`: execute One_Run_Runner.ipynb with papermill (it runs every stage notebook), then print
    the gate's verdict. Chosen stages that leave the front page without its inputs run without it and end with what
    the gate still needs (`partial_run_outcome`). Returns the run folder, or None when a stage failed."""
    import papermill

    from ..config import load_config
    from ..gate import format_verdict
    from ..io import read_json
    from ..runs import new_run_id

    load_config(profile, overrides)  # a bad profile or override fails here, before any kernel starts
    run_id = run_id or new_run_id(profile)
    plan(run_id, profile, stages)
    parameters = {"PROFILE": profile, "RUN_ID": run_id, "STAGES": stages or [], "OVERRIDES": overrides}
    runner = REPO / "One_Run_Runner.ipynb"
    check_parameters(runner, parameters)
    run_dir = Path("outputs") / run_id
    if stages and front_page_gaps(REPO / run_dir, stages):
        print(f"running {profile} as {run_dir}: stages {', '.join(stages)}", flush=True)
        try:
            run_stages(run_id, profile, stages, overrides)
        except StageFailed as error:
            print(f"error: {error}", file=sys.stderr)
            return None
        ok, message = partial_run_outcome(REPO / run_dir, profile, list(stages))
        print(message, file=sys.stdout if ok else sys.stderr)
        return REPO / run_dir if ok else None
    target = REPO / "outputs" / run_id / "One_Run_Runner.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"running {profile} as outputs/{run_id} (executed runner: {target})", flush=True)
    try:
        # the runner kernel's output (each stage's, passed on by run_stages) goes to the terminal as it comes;
        # coalescing keeps only a progress bar's last state in the executed runner
        papermill.execute_notebook(
            str(runner),
            str(target),
            parameters=parameters,
            cwd=str(REPO),
            progress_bar=False,
            stdout_file=sys.stdout,
            stderr_file=sys.stderr,
            coalesce_streams=True,
            **kernel_options(),
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


def run_environments(profile: str, envs: list[str], stages, overrides: dict) -> list[Path] | None:
    """`python -m lib run --envs ...`: one run per environment, then one environment x policy table
    (outputs/summary-<time>.md) when every run has its evaluation. Returns the run folders, or None when a run
    failed."""
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
    if not all((d / FRONT_PAGE_READS["evaluate"]).is_file() for d in done):
        print("no environment x policy table: it needs each run's evaluate stage")
        return done
    table = environment_table(done)
    path = REPO / "outputs" / f"summary-{now().replace(':', '').replace('-', '')[:15]}.md"
    atomic_write_text(path, f"Runs: {', '.join(d.name for d in done)}\n\n{table}\n")
    print(table)
    print(f"summary: {path}")
    return done
