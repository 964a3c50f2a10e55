"""Notebook hygiene (clean sources, one parameters cell, no logic, identical bootstrap cells, cell ids), the
runner's parameter check, and one slow end-to-end papermill run of One_Run_Runner.ipynb on cpu-smoke from a bare VM
(a fresh venv, the runner alone in an empty folder, the workbook cloned from a git repo of the working tree)."""

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import nbformat
import papermill
import pytest
import yaml

from lib.pipeline.runner import (
    NOTEBOOKS,
    REPO,
    StageFailed,
    UnknownParameterError,
    check_parameters,
    kernel_options,
    plan,
    run_stages,
)
from lib.pipeline.stages import notebooks
from lib.reporting.plots import CHARTS, OPTIONAL_CHARTS

STAGE_NOTEBOOKS = {names[0]: notebook for notebook, names in notebooks()}

RUNNER = REPO / "One_Run_Runner.ipynb"
ALL = [RUNNER, *sorted(NOTEBOOKS.glob("*.ipynb"))]


def _load(path):
    return nbformat.read(str(path), as_version=4)


def test_every_stage_notebook_exists_and_is_named_lowercase_with_a_two_digit_prefix():
    names = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))
    assert names == sorted(STAGE_NOTEBOOKS.values())
    assert all(n[:2].isdigit() and n[2] == "_" and n == n.lower() for n in names)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_notebook_is_clean_and_shaped_like_the_style_guide(path):
    json.loads(path.read_text())  # valid JSON
    book = _load(path)
    nbformat.validate(book)
    cells = book.cells
    assert cells[0].cell_type == "markdown" and cells[0].source.startswith("# ")
    assert "**Reads:**" in cells[0].source and "**Writes:**" in cells[0].source
    assert cells[-1].cell_type == "markdown" and cells[-1].source.startswith("## What this shows")
    parameters = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    assert len(parameters) == 1 and parameters[0].cell_type == "code"
    for name, value in ((t.targets[0].id, t.value) for t in ast.parse(parameters[0].source).body):
        assert name.isupper() and isinstance(value, (ast.Constant, ast.List, ast.Dict)), (
            name
        )  # literals, no derived values
    for cell in cells:
        if cell.cell_type != "code":
            continue
        assert cell.outputs == [] and cell.execution_count is None, "committed with outputs"
        tree = ast.parse(cell.source)
        assert not [
            n
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
        ], f"logic belongs in lib/: {cell.source[:80]}"
    assert "colab" not in json.dumps(book.metadata).lower() and "widgets" not in book.metadata


def test_the_runner_bootstraps_and_every_stage_notebook_opens_with_one_short_cell():
    """The full bootstrap (find, unpack or clone, then install) lives once, in the runner; each stage notebook's first
    code cell, the same in all, only finds the installed workbook (or says to run the runner first): 10 lines or
    fewer."""
    assert "requirements-gpu.txt" in _load(RUNNER).cells[1].source
    firsts = {path.name: _load(path).cells[1].source for path in ALL if path != RUNNER}
    assert len(set(firsts.values())) == 1, firsts.keys()
    first = next(iter(firsts.values()))
    assert len(first.splitlines()) <= 10 and "One_Run_Runner.ipynb" in first
    assert "pip install" not in first and "subprocess" not in first


def test_every_stage_notebook_takes_the_runner_parameters():
    for name in STAGE_NOTEBOOKS.values():
        assert set(papermill.inspect_notebook(str(NOTEBOOKS / name))) == {"RUN_ID", "PROFILE", "OVERRIDES"}
    assert set(papermill.inspect_notebook(str(RUNNER))) == {"PROFILE", "RUN_ID", "STAGES", "OVERRIDES"}


def test_an_unknown_parameter_is_an_error_not_a_warning():
    with pytest.raises(UnknownParameterError, match=r"does not declare \['EPOCHS'\]"):
        check_parameters(NOTEBOOKS / "03_sft.ipynb", {"RUN_ID": "x", "EPOCHS": 3})
    with pytest.raises(UnknownParameterError, match="SEED"):
        check_parameters(RUNNER, {"PROFILE": "cpu-smoke", "SEED": 1})
    with pytest.raises(ValueError, match="unknown stages"):
        plan("x", "cpu-smoke", ["corpus", "train"])


def test_cli_run_rejects_an_unknown_override_before_running_anything():
    done = subprocess.run(
        [sys.executable, "-m", "lib", "run", "--run-id", "never", "--set", "grpo.max_stepz=3", "--stages", "corpus"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0 and "grpo.max_stepz: unknown key" in done.stderr
    assert not (REPO / "outputs" / "never").exists()


@pytest.mark.skipif(os.name != "posix", reason="Unix sockets")
def test_a_kernel_started_as_the_runner_starts_it_talks_over_ipc_and_its_output_comes_as_it_runs(tmp_path, capfd):
    """`python -m lib run` starts each kernel on Unix sockets, so ipykernel does not warn, once per kernel, that it
    "is running over TCP without encryption"; a stage's prints and progress bars (carriage returns kept) reach this
    process's stdout and stderr (papermill's stdout_file and stderr_file), not only the executed notebook."""
    options = kernel_options()
    manager = options["kernel_manager_class"]()
    assert manager.transport == "ipc" and Path(manager.ip).parent == Path(tempfile.gettempdir())
    book = nbformat.v4.new_notebook()
    book.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Python 3"}
    book.cells = [
        nbformat.v4.new_code_cell("import sys\nprint('stage line')\nprint('\\rbar 1/2\\rbar 2/2', file=sys.stderr)")
    ]
    nbformat.write(book, str(tmp_path / "tiny.ipynb"))
    papermill.execute_notebook(
        str(tmp_path / "tiny.ipynb"),
        str(tmp_path / "executed.ipynb"),
        progress_bar=False,
        stdout_file=sys.stdout,
        stderr_file=sys.stderr,
        **options,
    )
    out, err = capfd.readouterr()
    assert "stage line\n" in out and "\rbar 1/2\rbar 2/2" in err
    assert "without encryption" not in err and "WARNING" not in err, err


def test_a_trainer_in_a_stage_kernel_whose_output_reaches_a_terminal_draws_a_text_step_bar(monkeypatch, capsys):
    """In a notebook kernel the trainers draw their step bar as HTML, which `python -m lib run` cannot pass on to a
    terminal: there (TEXT_PROGRESS_ENV set by run_stages) they draw a text bar too, the last logged loss beside it,
    without printing the logs. A notebook opened by hand, or a stage run outside a notebook, gets nothing added."""
    from transformers import ProgressCallback, TrainerControl, TrainerState, trainer
    from transformers.utils.notebook import NotebookProgressCallback

    from lib.runs import TEXT_PROGRESS_ENV
    from lib.training.harness import TextProgress, progress_callbacks

    monkeypatch.setattr(trainer, "DEFAULT_PROGRESS_CALLBACK", NotebookProgressCallback)  # as in a kernel
    monkeypatch.delenv(TEXT_PROGRESS_ENV, raising=False)
    assert progress_callbacks() == []
    monkeypatch.setenv(TEXT_PROGRESS_ENV, "1")
    (bar,) = progress_callbacks()
    assert isinstance(bar, TextProgress)
    monkeypatch.setattr(trainer, "DEFAULT_PROGRESS_CALLBACK", ProgressCallback)  # outside a notebook: text already
    assert progress_callbacks() == []
    state, control = TrainerState(max_steps=4, is_world_process_zero=True), TrainerControl()
    bar.on_train_begin(None, state, control)
    bar.on_log(None, state, control, logs={"loss": 0.123456, "learning_rate": 1e-3})
    bar.on_step_end(None, state, control)
    bar.on_train_end(None, state, control)
    err = capsys.readouterr().err
    assert "loss=0.1235" in err and "learning_rate" not in err


@pytest.mark.slow
def test_a_failing_stage_stops_the_run_and_names_the_executed_notebook_and_cell():
    run_id = "pytest-failing-stage"
    shutil.rmtree(REPO / "outputs" / run_id, ignore_errors=True)
    with pytest.raises(
        StageFailed, match=r"stage 'sft' failed in cell \d+: FileNotFoundError: .*corpus.*\n.*sft/sft.ipynb"
    ):
        run_stages(run_id, "cpu-smoke", ["sft", "grpo"])  # no corpus: 03_sft must fail, 04_grpo must never start
    assert (REPO / "outputs" / run_id / "sft" / "sft.ipynb").exists()
    assert not (REPO / "outputs" / run_id / "grpo").exists()
    shutil.rmtree(REPO / "outputs" / run_id)


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_cell_has_a_unique_id_and_the_notebook_validates_without_warnings(path):
    """nbformat 4.5 cell ids, already in nbformat's normal form: reading, normalising or validating changes and
    warns about nothing (nbformat warns that missing ids will become an error)."""
    raw = json.loads(path.read_text())
    assert (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5)
    ids = [cell.get("id") for cell in raw["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), ids
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        changes, _ = nbformat.validator.normalize(raw)
        nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    assert changes == 0


def _bare_vm(root: Path) -> Path:
    """A fresh venv with only what a Colab VM brings (torch, installed as the Makefile does, and a Jupyter kernel),
    registered as the kernel `bare-vm` under root/jupyter. Returns its python."""
    subprocess.run([sys.executable, "-m", "venv", str(root / "vm")], check=True)
    python = root / "vm" / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "torch==2.13.0", "ipykernel"], check=True)
    spec = {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "language": "python"}
    (root / "jupyter" / "kernels" / "bare-vm").mkdir(parents=True)
    (root / "jupyter" / "kernels" / "bare-vm" / "kernel.json").write_text(json.dumps({**spec, "display_name": "VM"}))
    return python


def _working_tree_repo(root: Path) -> Path:
    """The current working tree (tracked and untracked files git does not ignore), committed into a fresh repo."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, text=True, check=True
    )
    source = root / "source"
    for name in filter(None, listed.stdout.split("\0")):
        if (REPO / name).is_file():  # a tracked file deleted in the working tree is left out
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the working tree"]):
        subprocess.run([*git, *command], cwd=source, check=True)
    return source


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


# cpu-smoke at a tenth of its size, passed as the runner's OVERRIDES parameter: every stage, chart and gate check
# runs, in minutes rather than the quarter hour of the whole profile (whose figures `make run` measures). The
# outcome checks are not asserted: they need the profile's sizes.
E2E_OVERRIDES = {
    "corpus.sft_episodes": 20,
    "corpus.grpo_prompts": 32,
    "sft.epochs": 1,
    "grpo.max_steps": 4,
    "rl.validate_every": 2,
    "rl.validation_episodes": 8,
    "eval.episodes": 24,
    "eval.train_episodes": 8,
    "eval.ablation_episodes": 8,
    "eval.improver_episodes": 8,
    "export.postsave_episodes": 8,
}


@pytest.mark.slow
def test_every_stage_notebook_runs_an_aggrevate_run_to_its_gate():
    """`rl.algorithm: aggrevate` (cpu-smollm2-polyguard's RL stage) through every stage notebook, two rounds, small: no
    notebook errs on what an AggreVaTe run has not (rewards, samples; the grpo notebook once did), its validation curve
    has a point per policy (the SFT's and each round's),
    the report says where the RL signal came from, and every integrity check of the gate passes."""
    from lib.gate import OUTCOME_CHECKS, run_gate

    run_id = "pytest-aggrevate"
    run_dir = REPO / "outputs" / run_id
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = {
        **E2E_OVERRIDES,
        "corpus.sft_episodes": 8,
        "sft.logging_steps": 1,
        "rl.algorithm": "aggrevate",
        "aggrevate.rounds": 2,
    }
    run_stages(run_id, "cpu-smoke", overrides={**overrides, "rl.validate_every": 1, "rl.keep": "last"})
    for stage in STAGE_NOTEBOOKS:
        executed = _load(run_dir / stage / f"{stage}.ipynb")
        errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, (stage, errors)
    grpo = _load(run_dir / "grpo" / "grpo.ipynb")
    printed = "".join(_text(c) for c in grpo.cells if c.cell_type == "code")
    assert "round 1: " in printed and "round 2: " in printed
    assert "AggreVaTe" in (run_dir / "report.md").read_text()
    curve = [json.loads(line) for line in (run_dir / "grpo" / "validation.jsonl").read_text().splitlines()]
    assert [p["round"] for p in curve] == [0, 1, 2] and (run_dir / "charts" / "validation_curve.png").is_file()
    verdict = run_gate(run_dir, write=False)
    integrity = [c for c in verdict["checks"] if c["name"] not in OUTCOME_CHECKS]
    assert integrity and all(c["passed"] for c in integrity), [c for c in integrity if not c["passed"]]
    shutil.rmtree(run_dir)


@pytest.mark.slow
def test_one_run_runner_from_a_bare_vm_end_to_end_on_cpu_smoke(tmp_path):
    """Colab, simulated: One_Run_Runner.ipynb alone in an empty folder, run by papermill in a kernel of a fresh venv
    holding only torch and ipykernel, with WORKBOOK_REPO set to a git repo of the current working tree. Its bootstrap
    clones and installs the workbook; the runner executes every stage notebook (in the same venv) on cpu-smoke, made
    small by `E2E_OVERRIDES`; the gate's verdict file exists and every check that does not depend on the improvement
    outcome passes."""
    from lib.gate import OUTCOME_CHECKS, run_gate

    python = _bare_vm(tmp_path)
    source = _working_tree_repo(tmp_path)
    content = tmp_path / "content"
    content.mkdir()
    shutil.copy2(RUNNER, content / RUNNER.name)
    run_id = "pytest-e2e-cpu-smoke"
    executed_runner = tmp_path / "executed" / RUNNER.name
    executed_runner.parent.mkdir()
    path = [p for p in os.environ["PATH"].split(os.pathsep) if not p.startswith(str(REPO))]  # no .venv/bin
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env |= {
        "WORKBOOK_REPO": source.as_uri(),
        "PATH": os.pathsep.join([str(python.parent), *path]),  # the VM's python is the one on PATH
        "JUPYTER_PATH": str(tmp_path / "jupyter"),
        "JUPYTER_DATA_DIR": str(tmp_path / "jupyter-data"),  # no user kernelspec named python3 takes over
    }
    log = tmp_path / "papermill.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "papermill", str(content / RUNNER.name), str(executed_runner), "--cwd",
             str(content), "-k", "bare-vm", "-p", "PROFILE", "cpu-smoke", "-p", "RUN_ID", run_id,
             "-y", yaml.safe_dump({"OVERRIDES": E2E_OVERRIDES}), "--log-output"],
            env=env, stdout=out, stderr=subprocess.STDOUT, timeout=3600,
        )  # fmt: skip
    assert done.returncode == 0, log.read_text()[-6000:]
    clone = content / "workbook"
    runner = _load(executed_runner)
    assert f"Workbook: cloning {source.as_uri()} into {clone}\n" in _text(runner.cells[1])
    assert f"Installing the workbook for {python} " in _text(runner.cells[1])
    imported = subprocess.run(  # installed editable: a new kernel imports the clone's lib from any folder
        [python, "-c", "import lib; print(lib.__file__)"], cwd=tmp_path, capture_output=True, text=True, env=env
    )
    assert imported.stdout.strip() == str(clone / "lib" / "__init__.py"), imported.stderr
    run_dir = clone / "outputs" / run_id
    verdict = json.loads((run_dir / "gate.json").read_text())
    integrity = [c for c in verdict["checks"] if c["name"] not in OUTCOME_CHECKS]
    assert integrity and all(c["passed"] for c in integrity), [c for c in integrity if not c["passed"]]
    assert (run_dir / "report.md").exists()
    for stage in STAGE_NOTEBOOKS:
        executed = _load(run_dir / stage / f"{stage}.ipynb")
        errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, (stage, errors)
        # each stage ran in its own kernel of the VM's python, with the workbook the runner installed
        assert f"Workbook: {clone} | Python: {python}\n" in _text(executed.cells[1]), stage
    # every chart, the validation curve included (cpu-smoke records one)
    assert {p.stem for p in (run_dir / "charts").glob("*.png")} == set(CHARTS) - set(OPTIONAL_CHARTS)
    planted = run_dir.with_name(run_id + "-planted")  # planting a fallback in a copy makes the gate fail
    shutil.copytree(run_dir, planted)
    lines = (planted / "evaluate" / "episodes.jsonl").read_text().splitlines()
    record = next(i for i, line in enumerate(lines) if json.loads(line)["policy"] == "grpo")
    episode = json.loads(lines[record])
    episode["actions"][0]["model_source"] = {"policy": "heuristic"}
    lines[record] = json.dumps(episode)
    (planted / "evaluate" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    failed = [c["name"] for c in run_gate(planted, write=False)["checks"] if not c["passed"]]
    assert "every_action_has_provenance" in failed
    shutil.rmtree(tmp_path / "vm")  # a passing run leaves no 2 GB venv behind; a failing one keeps it to look into
