"""The command line's failure paths for `run` and `gate`: `python -m lib gate` on a folder that is missing or not a
run folder is bad input (exit 2, saying which), not a list of failed checks; `python -m lib run --stages ...` that
leaves out the evaluate stage ends cleanly with what the gate still needs, and a chosen stage that did not deliver
is still a failure."""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lib import gate
from lib.__main__ import main
from lib.config import load_config
from lib.pipeline import runner
from lib.pipeline.runner import StageFailed, front_page_gaps, partial_run_outcome, run_environments
from lib.runs import Run
from tests.committed import committed_runs
from tests.test_corpus import MICRO

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "outputs" / "cmp-mt-s1"
# what a committed run is trimmed of (corpus files, episodes, weights): the only checks its copy fails
TRIMMED = {"manifest_valid", "grpo_artifact_ok", "postsave_from_saved_artifact", "every_action_has_provenance"}


def _run_with(run_dir: Path, stages: dict[str, str]) -> Run:
    """A run folder (manifest.json) whose given stages recorded the given status, and nothing else."""
    run = Run(run_dir, load_config("cpu-smoke"))
    for stage, status in stages.items():
        run.stage_done(stage, started=time.time(), params={}, inputs={}, outputs={}, metrics={}, status=status)
    return run


# --- gate -----------------------------------------------------------------------------------------------------


def test_gate_on_a_missing_folder_says_so_and_exits_2_without_making_it(tmp_path, capsys):
    missing = tmp_path / "no-such-run"
    assert main(["gate", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert f"error: FileNotFoundError: {missing} does not exist" in err and out == ""
    assert not missing.exists()  # the gate used to write gate.json into it, making the folder


def test_gate_on_a_folder_without_a_manifest_says_it_is_not_a_run_folder_and_exits_2(tmp_path, capsys):
    assert main(["gate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path} is not a run folder (missing {tmp_path / 'manifest.json'})" in err
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    assert main(["gate", str(tmp_path / "file")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_gate_subprocess_on_a_missing_folder_exits_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "lib", "gate", str(tmp_path / "nope")], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2 and "does not exist" in done.stderr and "[FAIL]" not in done.stdout


def test_a_committed_run_still_gates(tmp_path, capsys, monkeypatch):
    """A copy of a committed run passes the input check and is gated: every check it can pass holds (exit 0 with
    only those checks); with all checks, only what its trimming removed fails (exit 1, never 2)."""
    assert COMMITTED in committed_runs()
    run = shutil.copytree(COMMITTED, tmp_path / COMMITTED.name)
    assert main(["gate", str(run)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"gate FAILED: {run}")
    failed = {c["name"] for c in json.loads((run / "gate.json").read_text())["checks"] if not c["passed"]}
    assert failed == TRIMMED, failed
    monkeypatch.setattr(gate, "CHECKS", {k: v for k, v in gate.CHECKS.items() if k not in TRIMMED})
    assert main(["gate", str(run)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"gate PASSED: {run}") and "[ok] improved" in out and "[FAIL]" not in out


# --- run with chosen stages -----------------------------------------------------------------------------------


def test_front_page_gaps_name_the_stages_whose_files_the_runner_page_reads(tmp_path):
    assert front_page_gaps(tmp_path, None) == [] and front_page_gaps(tmp_path, []) == []  # all stages
    assert front_page_gaps(tmp_path, ["corpus", "baselines"]) == ["evaluate", "report"]
    assert front_page_gaps(tmp_path, ["grpo", "evaluate", "export", "postsave", "report"]) == []
    assert front_page_gaps(tmp_path, ["sft", "grpo", "evaluate"]) == ["report"]
    (tmp_path / "evaluate").mkdir()
    (tmp_path / "evaluate" / "eval.json").write_text("{}")
    assert front_page_gaps(tmp_path, ["export", "postsave", "report"]) == []  # evaluated earlier in this run


def test_chosen_stages_without_evaluate_end_ok_saying_what_the_gate_needs(tmp_path):
    run = _run_with(tmp_path / "partial", {"corpus": "ok", "baselines": "ok"})
    ok, message = partial_run_outcome(run.dir, "cpu-smoke-json_tasks", ["corpus", "baselines"])
    assert ok, message
    assert "stages corpus, baselines done in" in message
    assert "No gate: the gate needs the sft, grpo, evaluate, export, postsave stages" in message
    assert (
        "python -m lib run --profile cpu-smoke-json_tasks --run-id partial --stages sft grpo evaluate export "
        "postsave report" in message
    )
    assert f"python -m lib gate {run.dir}" in message


def test_a_chosen_stage_that_did_not_deliver_is_a_failure(tmp_path):
    run = _run_with(tmp_path / "evaluated", {"corpus": "ok", "sft": "ok", "grpo": "ok", "evaluate": "ok"})
    ok, message = partial_run_outcome(run.dir, "cpu-smoke", ["evaluate"])
    assert not ok and "the evaluate stage ran but" in message and "evaluate/eval.json is missing" in message
    ok, message = partial_run_outcome(run.dir, "cpu-smoke", ["baselines"])
    assert not ok and "baselines (no stage.json)" in message
    run = _run_with(tmp_path / "nan", {"corpus": "ok", "sft": "failed: non-finite loss"})
    ok, message = partial_run_outcome(run.dir, "cpu-smoke", ["corpus", "sft"])
    assert not ok and "sft (failed: non-finite loss)" in message


def test_once_evaluated_only_the_report_stage_is_left_to_run_the_gate(tmp_path):
    done = dict.fromkeys(("corpus", "baselines", "sft", "grpo", "evaluate", "export", "postsave"), "ok")
    run = _run_with(tmp_path / "almost", done)
    (run.dir / "evaluate" / "eval.json").write_text("{}")
    ok, message = partial_run_outcome(run.dir, "cpu-smoke", ["export", "postsave"])
    assert ok and "No gate: the report stage runs the gate" in message and "--stages report" in message


@pytest.fixture
def cli_run_id():
    """A run id under the repository's outputs/ (where `python -m lib run` writes), removed afterwards."""
    run_id = "pytest-cli-partial-run"
    shutil.rmtree(REPO / "outputs" / run_id, ignore_errors=True)
    yield run_id
    shutil.rmtree(REPO / "outputs" / run_id, ignore_errors=True)


def _fake_stages(deliver: bool = True, fail: bool = False):
    """Stands in for run_stages (no kernels): records each chosen stage ok, or raises as a failing notebook does."""

    def run_stages(run_id, profile, stages=None, overrides=None, output_root="outputs", kernel_name=None):
        if fail:
            raise StageFailed(f"stage {stages[0]!r} failed in cell 3: ValueError: boom\nexecuted notebook: x.ipynb")
        _run_with(REPO / output_root / run_id, dict.fromkeys(stages if deliver else [], "ok"))
        return []

    return run_stages


def test_cli_run_of_chosen_stages_ends_cleanly_without_the_runner_page(cli_run_id, capsys, monkeypatch):
    monkeypatch.setattr(runner, "run_stages", _fake_stages())
    assert main(["run", "--run-id", cli_run_id, "--stages", "corpus", "baselines"]) == 0
    out, err = capsys.readouterr()
    assert "No gate: the gate needs the sft, grpo, evaluate, export, postsave stages" in out, out
    assert "FileNotFoundError" not in out + err
    assert not (REPO / "outputs" / cli_run_id / "One_Run_Runner.ipynb").exists()


def test_cli_run_of_chosen_stages_fails_when_a_stage_fails_or_evaluate_writes_nothing(cli_run_id, capsys, monkeypatch):
    monkeypatch.setattr(runner, "run_stages", _fake_stages(fail=True))
    assert main(["run", "--run-id", cli_run_id, "--stages", "corpus"]) == 1
    assert "error: stage 'corpus' failed in cell 3" in capsys.readouterr().err
    monkeypatch.setattr(runner, "run_stages", _fake_stages())
    assert main(["run", "--run-id", cli_run_id, "--stages", "corpus", "sft", "grpo", "evaluate"]) == 1
    assert "the evaluate stage ran but" in capsys.readouterr().err


def test_run_environments_of_chosen_stages_skips_the_table(tmp_path, capsys, monkeypatch):
    made = []

    def run_profile(profile, run_id, stages, overrides):
        made.append(_run_with(tmp_path / profile, {"corpus": "ok"}).dir)
        return made[-1]

    monkeypatch.setattr(runner, "run_profile", run_profile)
    before = set((REPO / "outputs").glob("summary-*.md"))
    assert run_environments("cpu-smoke", ["polyguard", "json_tasks"], ["corpus"], {}) == made
    assert "no environment x policy table: it needs each run's evaluate stage" in capsys.readouterr().out
    assert set((REPO / "outputs").glob("summary-*.md")) == before


@pytest.mark.slow
def test_cli_run_of_the_corpus_stage_alone_for_real(cli_run_id):
    """One real stage notebook (a tiny corpus) through `python -m lib run --stages corpus`."""
    overrides = [f"{k}={v}" for k, v in MICRO.items()]
    done = subprocess.run(
        [sys.executable, "-m", "lib", "run", "--run-id", cli_run_id, "--stages", "corpus", "--set", *overrides],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"stages corpus done in outputs/{cli_run_id}. No gate: the gate needs the sft" in done.stdout
    assert f"--run-id {cli_run_id} --stages baselines sft grpo evaluate export postsave report" in done.stdout
    run = REPO / "outputs" / cli_run_id
    assert json.loads((run / "corpus" / "stage.json").read_text())["status"] == "ok"
    assert (run / "corpus" / "corpus.ipynb").exists() and not (run / "One_Run_Runner.ipynb").exists()
