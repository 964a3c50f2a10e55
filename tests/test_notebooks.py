"""Notebook hygiene (clean sources, one parameters cell, no logic, identical bootstrap cells), the runner's
parameter check, and one slow end-to-end papermill run of One_Run_Runner.ipynb on cpu-smoke."""

import ast
import json
import shutil
import subprocess
import sys

import nbformat
import papermill
import pytest

from lib.pipeline.runner import NOTEBOOKS, REPO, StageFailed, UnknownParameterError, check_parameters, plan, run_stages
from lib.pipeline.stages import notebooks
from lib.reporting.plots import CHARTS

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


def test_bootstrap_cells_are_identical():
    bootstraps = {path.name: _load(path).cells[1].source for path in ALL}
    assert len(set(bootstraps.values())) == 1, bootstraps.keys()
    assert "requirements-gpu.txt" in next(iter(bootstraps.values()))


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


@pytest.mark.slow
def test_one_run_runner_end_to_end_on_cpu_smoke():
    """papermill runs One_Run_Runner.ipynb (which runs every stage notebook) on cpu-smoke; the gate's verdict file
    exists and every check that does not depend on the improvement outcome passes."""
    from lib.reporting.gate import OUTCOME_CHECKS, run_gate

    run_id = "pytest-e2e-cpu-smoke"
    run_dir = REPO / "outputs" / run_id
    shutil.rmtree(run_dir, ignore_errors=True)
    target = run_dir / "One_Run_Runner.ipynb"
    target.parent.mkdir(parents=True)
    papermill.execute_notebook(
        str(RUNNER),
        str(target),
        parameters={"PROFILE": "cpu-smoke", "RUN_ID": run_id},
        cwd=str(REPO),
        progress_bar=False,
    )
    verdict = json.loads((run_dir / "gate.json").read_text())
    integrity = [c for c in verdict["checks"] if c["name"] not in OUTCOME_CHECKS]
    assert integrity and all(c["passed"] for c in integrity), [c for c in integrity if not c["passed"]]
    assert (run_dir / "report.md").exists()
    for stage in STAGE_NOTEBOOKS:
        executed = _load(run_dir / stage / f"{stage}.ipynb")
        errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, (stage, errors)
    # every chart, the validation curve included (cpu-smoke records one)
    assert {p.stem for p in (run_dir / "charts").glob("*.png")} == set(CHARTS)
    planted = run_dir.with_name(run_id + "-planted")  # planting a fallback in a copy makes the gate fail
    shutil.rmtree(planted, ignore_errors=True)
    shutil.copytree(run_dir, planted)
    lines = (planted / "evaluate" / "episodes.jsonl").read_text().splitlines()
    record = next(i for i, line in enumerate(lines) if json.loads(line)["policy"] == "grpo")
    episode = json.loads(lines[record])
    episode["actions"][0]["model_source"] = {"policy": "heuristic"}
    lines[record] = json.dumps(episode)
    (planted / "evaluate" / "episodes.jsonl").write_text("\n".join(lines) + "\n")
    failed = [c["name"] for c in run_gate(planted, write=False)["checks"] if not c["passed"]]
    assert "every_action_has_provenance" in failed
    shutil.rmtree(planted)
