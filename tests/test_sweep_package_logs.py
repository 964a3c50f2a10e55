"""`python -m lib sweep`, `package`, `verify` and `logs`: on the committed reference runs (no weights) and on a tiny
trained run with GRPO checkpoints (slow), including their failure paths: a missing, a corrupt and no checkpoint, a
changed byte in an archive, a path-traversal member, a damaged run folder."""

import gzip
import io
import json
import shutil
import tarfile
from pathlib import Path

import pandas as pd
import pytest

from lib.__main__ import main
from lib.evaluation.sweep import SWEEP, NoCheckpointsError, expected_steps, sweep_checkpoints
from lib.export.package import UnsafeArchiveError, package_run, verify_archive
from lib.reporting.logs import RUN_ROW, logs_table
from tests import micro
from tests.committed import committed_runs

REPO = Path(__file__).resolve().parents[1]
RUNS = committed_runs()
SMOKE = REPO / "outputs" / "20261123-141137-cpu-smoke"


def _copy(run: Path, tmp_path: Path) -> Path:
    target = tmp_path / run.name
    shutil.copytree(run, target)
    return target


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _rewrite(archive: Path, change) -> None:
    """Rebuild a tar.gz with `change(name, data)` applied to every member: the new bytes, or None to drop it."""
    with tarfile.open(archive) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member, data in members:
            data = change(member.name, data) if data is not None else None
            if member.isfile() and data is None:
                continue
            member.size = len(data) if data is not None else 0
            tar.addfile(member, io.BytesIO(data) if data is not None else None)
    archive.write_bytes(buffer.getvalue())


# --- logs -----------------------------------------------------------------------------------------------------


def test_the_committed_runs_cover_every_built_in_environment():
    envs = {_json(run / "manifest.json")["config"]["env"] for run in RUNS}
    assert SMOKE in RUNS and envs == {"polyguard", "sentinel_trust", "sentinel_cluster", "json_tasks"}, envs


def test_logs_on_the_committed_runs_hold_what_their_stage_and_eval_files_hold(tmp_path, capsys):
    out = tmp_path / "table.csv"
    assert main(["logs", *map(str, RUNS), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("| run ") and "| (run) " in printed and f"wrote {out}" in printed
    table = pd.read_csv(out)
    assert table.equals(pd.read_csv(io.StringIO(logs_table(RUNS).to_csv(index=False))))
    for run in RUNS:
        rows = table[table["run"] == run.name].set_index("stage")
        manifest = _json(run / "manifest.json")
        assert list(rows.index) == [*manifest["stages"], RUN_ROW]
        for stage in manifest["stages"]:
            record = _json(run / stage / "stage.json")
            assert rows.loc[stage, "wall_s"] == record["duration_s"]
            peak = record.get("peak_rss_mb")  # recorded since 2026-12-05: the committed runs are older
            assert pd.isna(rows.loc[stage, "peak_rss_mb"]) if peak is None else rows.loc[stage, "peak_rss_mb"] == peak
            assert rows.loc[stage, "status"] == "ok"
        sft = _json(run / "sft" / "stage.json")["metrics"]
        grpo = _json(run / "grpo" / "stage.json")["metrics"]
        assert rows.loc["sft", "steps"] == sft["steps"] and rows.loc["sft", "final_loss"] == sft["loss_last"]
        assert rows.loc["grpo", "steps"] == grpo["steps"]
        for column, key in (("reward_mean", "reward_mean"), ("zero_std_share", "frac_reward_zero_std_mean")):
            # an AggreVaTe stage records None (it samples nothing): an empty cell in the table
            assert pd.isna(rows.loc["grpo", column]) if grpo[key] is None else rows.loc["grpo", column] == grpo[key]
        log = [json.loads(line) for line in (run / "grpo" / "train_log.jsonl").read_text().splitlines()]
        assert rows.loc["grpo", "final_loss"] == [r["loss"] for r in log if "loss" in r][-1]
        if grpo.get("mode") == "aggrevate":  # labels fitted, no reward sampled: no reward, no CI
            assert grpo["reward_mean"] is None and rows.loc["grpo", ["reward_ci95_lo", "reward_ci95_hi"]].isna().all()
        else:
            assert rows.loc["grpo", "reward_ci95_lo"] <= grpo["reward_mean"] <= rows.loc["grpo", "reward_ci95_hi"]
        report = _json(run / "evaluate" / "eval.json")
        holdout = report["splits"]["holdout"]["policies"]
        for column, policy in (
            ("eval_sft", "sft"),
            ("eval_grpo", "grpo"),
            ("eval_teacher", report["roles"]["teacher"]),
        ):
            assert rows.loc["evaluate", column] == holdout[policy]["mean_return"]
            assert rows.loc[RUN_ROW, column] == holdout[policy]["mean_return"]
        assert rows.loc[RUN_ROW, "wall_s"] == pytest.approx(sum(s["duration_s"] for s in manifest["stages"].values()))
        reward = rows.loc[RUN_ROW, "reward_mean"]
        assert pd.isna(reward) if grpo["reward_mean"] is None else reward == grpo["reward_mean"]
        assert pd.isna(rows.loc["corpus", "steps"]) and pd.isna(rows.loc["corpus", "final_loss"])


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        (lambda run: (run / "manifest.json").unlink(), "manifest.json: missing"),
        (lambda run: (run / "manifest.json").write_text('{"run_id": '), "manifest.json: not valid JSON"),
        (lambda run: (run / "grpo" / "stage.json").write_text(""), "grpo/stage.json: empty"),
        (
            lambda run: (run / "grpo" / "train_log.jsonl").write_text('{"step": 1}\n{"ste'),
            "train_log.jsonl:2: not valid",
        ),
        (lambda run: (run / "evaluate" / "eval.json").unlink(), "evaluate/eval.json: missing"),
    ],
    ids=["no-manifest", "truncated-manifest", "empty-stage", "bad-log-line", "no-eval"],
)
def test_logs_on_a_damaged_run_is_an_error_naming_the_file(tmp_path, capsys, damage, named):
    run = _copy(SMOKE, tmp_path)
    damage(run)
    assert main(["logs", str(run), "--out", str(tmp_path / "t.csv")]) == 2
    error = capsys.readouterr().err
    assert "DamagedRunError" in error and named in error, error
    assert not (tmp_path / "t.csv").exists()


# --- package and verify ---------------------------------------------------------------------------------------


def _plant_weights(run: Path) -> None:
    """A stand-in adapter and trainer checkpoint, as a run with weights has them."""
    (run / "grpo" / "adapter").mkdir()
    (run / "grpo" / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    (run / "grpo" / "adapter" / "adapter_config.json").write_text("{}")
    (run / "grpo" / "trainer" / "checkpoint-1").mkdir(parents=True)
    (run / "grpo" / "trainer" / "checkpoint-1" / "optimizer.pt").write_bytes(b"state")


def test_package_and_verify_round_trip_on_a_committed_run_without_weights(tmp_path, capsys):
    run = _copy(SMOKE, tmp_path)
    gate_before = (run / "gate.json").read_bytes()
    assert main(["package", "--run-dir", str(run)]) == 0
    archive = run.with_name(run.name + ".tar.gz")
    out = capsys.readouterr().out
    assert f"wrote {archive}" in out
    # a committed run is trimmed: package says up front that the gate on the copy cannot pass without these
    missing = ["corpus/grpo_prompts.jsonl", "corpus/sft.jsonl", "evaluate/episodes.jsonl"]
    assert f"warning: the run folder lacks what the gate re-reads ({', '.join(missing)})" in out
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        sums = tar.extractfile(f"{run.name}/SHA256SUMS").read().decode().splitlines()
    files = sorted(p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file())
    assert sorted(n.split("/", 1)[1] for n in names) == sorted([*files, "PACKAGE.json", "SHA256SUMS"])
    assert sorted(line.split("  ", 1)[1] for line in sums) == sorted([*files, "PACKAGE.json"])  # sha256sum format
    code = main(["verify", str(archive)])
    out = capsys.readouterr().out
    assert f"files: all {len(files) + 1} files match SHA256SUMS" in out
    # the committed run has no weights: the checks that re-hash them are labelled, not counted as failures
    assert "[n/a] grpo_artifact_ok (recorded: ok): not checkable here: grpo/adapter (weights)" in out
    assert "[n/a] postsave_from_saved_artifact (recorded: ok): not checkable here: export/merged" in out
    assert "not checkable without weights: grpo_artifact_ok, postsave_from_saved_artifact" in out
    # the outcome checks fail as in the full run's gate.json: files intact (exit 3, not 1)
    assert "[FAIL] improved (recorded: FAIL)" in out and "verdict: FAILED: files intact" in out
    assert code == 3
    assert (run / "gate.json").read_bytes() == gate_before  # verify never writes into the run
    kept = verify_archive(archive, into=tmp_path / "kept")
    assert (
        kept["unpacked"] == str(tmp_path / "kept" / run.name)
        and (tmp_path / "kept" / run.name / "SHA256SUMS").is_file()
    )
    with pytest.raises(ValueError, match="exists already"):
        verify_archive(archive, into=tmp_path / "kept")
    for name in missing:  # with them back in the folder, nothing is reported missing
        (run / name).write_text("{}\n")
    assert package_run(run, tmp_path / "whole.tar.gz")["missing_gate_inputs"] == []


def test_weights_are_left_out_unless_asked_for_and_named_when_a_check_needs_them(tmp_path):
    run = _copy(SMOKE, tmp_path)
    _plant_weights(run)
    record = package_run(run, tmp_path / "light.tar.gz")
    assert record["weights"] is False and record["left_out"] == ["grpo/adapter", "grpo/trainer"]
    with tarfile.open(tmp_path / "light.tar.gz") as tar:
        assert not [n for n in tar.getnames() if "/adapter/" in n or "/trainer/" in n]
    result = verify_archive(tmp_path / "light.tar.gz")
    by_name = {c["name"]: c for c in result["checks"]}
    assert result["files"].ok and result["weights_packaged"] is False
    assert by_name["grpo_artifact_ok"]["not_checkable"].startswith("not checkable here: grpo/adapter was left out")
    heavy = package_run(run, tmp_path / "heavy.tar.gz", weights=True)
    assert heavy["left_out"] == [] and heavy["files"] == record["files"] + 3
    with tarfile.open(tmp_path / "heavy.tar.gz") as tar:
        assert f"{run.name}/grpo/adapter/adapter_model.safetensors" in tar.getnames()
    result = verify_archive(tmp_path / "heavy.tar.gz")
    by_name = {c["name"]: c for c in result["checks"]}
    # the planted adapter is there now, so the check runs, and fails: its sha is not the one the run recorded
    assert by_name["grpo_artifact_ok"]["not_checkable"] is None and not by_name["grpo_artifact_ok"]["passed"]
    assert "grpo_artifact_ok" in result["gate_failed"]


def test_a_changed_byte_a_missing_and_an_extra_file_are_each_named(tmp_path, capsys):
    run = _copy(SMOKE, tmp_path)
    archive = Path(package_run(run, tmp_path / "run.tar.gz")["archive"])
    eval_json = f"{run.name}/evaluate/eval.json"

    def flip(name, data):
        return data[:100] + bytes([data[100] ^ 1]) + data[101:] if name == eval_json else data

    _rewrite(archive, flip)
    assert main(["verify", str(archive)]) == 1
    out = capsys.readouterr().out
    assert "files: DAMAGED" in out and "changed (sha256 differs): evaluate/eval.json" in out
    assert out.count("changed (sha256 differs)") == 1 and "verdict: FAILED: FILES DAMAGED" in out

    archive = Path(package_run(run, tmp_path / "run2.tar.gz")["archive"])
    _rewrite(archive, lambda name, data: None if name.endswith("grpo/samples.jsonl") else data)
    result = verify_archive(archive)
    assert result["files"].missing == ["grpo/samples.jsonl"] and not result["ok"]

    archive = Path(package_run(run, tmp_path / "run3.tar.gz")["archive"])
    extra = archive.with_name("run4.tar.gz")
    with tarfile.open(archive) as tar, tarfile.open(extra, "w:gz") as out_tar:
        for member in tar.getmembers():
            out_tar.addfile(member, tar.extractfile(member) if member.isfile() else None)
        planted = tarfile.TarInfo(f"{run.name}/evaluate/planted.json")
        planted.size = 2
        out_tar.addfile(planted, io.BytesIO(b"{}"))
    assert verify_archive(extra)["files"].extra == ["evaluate/planted.json"]


def _tar(path: Path, members: list[tarfile.TarInfo], data: bytes = b"x") -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for member in members:
            if member.isfile():
                member.size = len(data)
            tar.addfile(member, io.BytesIO(data) if member.isfile() else None)
    return path


def _member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    ("members", "named"),
    [
        ([_member("run/SHA256SUMS"), _member("run/../../escaped.txt")], "'run/../../escaped.txt' would be written"),
        ([_member("/tmp/absolute.txt")], "'/tmp/absolute.txt' would be written outside"),
        ([_member("run/link", tarfile.SYMTYPE, "/etc/passwd")], "'run/link' is a link or special file"),
        ([_member("run/hard", tarfile.LNKTYPE, "run/SHA256SUMS")], "'run/hard' is a link or special file"),
        ([_member("run/a"), _member("other/b")], "expected one top folder"),
        ([_member("run/a"), _member("run/a")], "'run/a' appears twice"),
    ],
    ids=["dotdot", "absolute", "symlink", "hardlink", "two-tops", "duplicate"],
)
def test_an_archive_that_could_write_outside_the_unpack_folder_is_refused(tmp_path, capsys, members, named):
    archive = _tar(tmp_path / "evil.tar.gz", members)
    with pytest.raises(UnsafeArchiveError, match=named.replace("(", r"\(").replace(")", r"\)")):
        verify_archive(archive, into=tmp_path / "unpacked")
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "unpacked").exists()
    assert main(["verify", str(archive)]) == 2 and "UnsafeArchiveError" in capsys.readouterr().err


def test_a_truncated_or_missing_archive_is_a_clear_error(tmp_path, capsys):
    run = _copy(SMOKE, tmp_path)
    archive = Path(package_run(run, tmp_path / "run.tar.gz")["archive"])
    archive.write_bytes(archive.read_bytes()[:-200])
    assert main(["verify", str(archive)]) == 2
    assert f"{archive}: not a readable tar.gz archive" in capsys.readouterr().err
    archive.write_bytes(gzip.compress(b"not a tar file"))
    assert main(["verify", str(archive)]) == 2
    assert main(["verify", str(tmp_path / "none.tar.gz")]) == 2
    assert "none.tar.gz: no such archive" in capsys.readouterr().err


# --- the sweep's checkpoint checks, on stand-in checkpoints -------------------------------------------------------


def _checkpoints(run: Path, steps) -> None:
    from lib.checkpoints import write_checkpoint_manifest

    for step in steps:
        folder = run / "grpo" / "trainer" / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(bytes(range(step, step + 32)))
        write_checkpoint_manifest(folder)


def test_expected_checkpoints_are_each_multiple_and_the_last_step():
    assert expected_steps(1, 2) == [1, 2] and expected_steps(3, 7) == [3, 6, 7] and expected_steps(0, 7) == []


def test_a_run_without_checkpoints_names_grpo_checkpoint_every(tmp_path):
    with pytest.raises(NoCheckpointsError, match=r"grpo\.checkpoint_every=0, so GRPO saved none"):
        sweep_checkpoints(0, tmp_path, 40)
    with pytest.raises(NoCheckpointsError, match=r"grpo\.checkpoint_every=10 but .*trainer holds no checkpoint-N"):
        sweep_checkpoints(10, tmp_path, 40)


def test_sweep_on_a_committed_run_says_it_has_no_checkpoints(tmp_path, capsys):
    run = _copy(SMOKE, tmp_path)
    assert main(["sweep", "--run-dir", str(run)]) == 2
    error = capsys.readouterr().err
    assert "NoCheckpointsError" in error and "grpo.checkpoint_every=0, so GRPO saved none" in error
    assert not (run / "sweep").exists()


def test_a_missing_or_corrupt_checkpoint_is_an_error_naming_it(tmp_path):
    from lib.checkpoints import CorruptCheckpointError

    _checkpoints(tmp_path, [2, 6])
    with pytest.raises(
        CorruptCheckpointError, match=r"checkpoint .*checkpoint-4 is missing: .* saves steps \[2, 4, 6\]"
    ):
        sweep_checkpoints(2, tmp_path, 6)
    _checkpoints(tmp_path, [4])
    assert list(sweep_checkpoints(2, tmp_path, 6)) == [2, 4, 6]
    weights = tmp_path / "grpo" / "trainer" / "checkpoint-4" / "adapter_model.safetensors"
    weights.write_bytes(b"x" + weights.read_bytes()[1:])
    with pytest.raises(CorruptCheckpointError, match=r"checkpoint-4: file adapter_model.safetensors is corrupted"):
        sweep_checkpoints(2, tmp_path, 6)


def _sweep_record(steps=(0, 1, 2)) -> dict:
    return {
        "run_id": "x",
        "env": "tests.toyenv",
        "split": "holdout",
        "seeds": [0, 1, 2, 3],
        "greedy": True,
        "checkpoint_every": 1,
        "grpo_steps": 2,
        "kept_step": steps[-1],
        "reference": {"role": "teacher", "policy": "stride_two", "mean_return": 0.33, "ci95": [0.2, 0.5]},
        "points": [
            {
                "step": s,
                "artifact": {"path": f"./grpo/trainer/checkpoint-{s}" if s else "./sft/model", "sha256": "ab" * 32},
                "kind": "grpo checkpoint" if s else "sft",
                "n": 4,
                "mean_return": 0.25 + 0.1 * s,
                "ci95": [0.1 + 0.1 * s, 0.4 + 0.1 * s],
                "invalid_rate": 0.0,
                "paired_vs_sft": {"mean": 0.1 * s, "ci95": [0.0, 0.2 * s], "n": 4},
                "returns": [0.25 + 0.1 * s] * 4,
            }
            for s in steps
        ],
    }


def test_the_report_shows_the_sweep_only_when_present(tmp_path):
    from lib.reporting import plots
    from lib.reporting.report import write_report

    run = _copy(SMOKE, tmp_path)
    verdict = _json(run / "gate.json")
    charts = plots.draw_all(run, names=["sweep"])
    assert charts[0].figure is None and charts[0].missing == [SWEEP]
    text = write_report(run, verdict, charts).read_text()
    assert "Checkpoint sweep" not in text and "sweep" not in text.split("## Charts")[1]
    (run / "sweep").mkdir()
    (run / SWEEP).write_text(json.dumps(_sweep_record()))
    charts = plots.draw_all(run, names=["sweep"])
    assert charts[0].path == run / "charts" / "sweep.png" and charts[0].path.read_bytes().startswith(b"\x89PNG")
    ax = charts[0].figure.axes[0]
    assert (
        ax.get_title().startswith("Checkpoint sweep: holdout, 4 episodes") and ax.get_xlabel() == "GRPO step (0 = SFT)"
    )
    text = write_report(run, verdict, charts).read_text()
    assert "## Checkpoint sweep" in text and "![sweep](charts/sweep.png)" in text
    assert "| ./grpo/trainer/checkpoint-2 |" in text and "+0.200 [+0.000, +0.400]" in text


# --- the sweep on a tiny trained run with checkpoints (slow) ----------------------------------------------------

MICRO = {
    **micro.MICRO,
    "env": "tests.toyenv",
    "corpus.grpo_rollout_policies": None,
    "corpus.sft_episodes": 20,
    "corpus.grpo_prompts": 8,
    "sft.logging_steps": 1,
    "grpo.logging_steps": 1,
    "grpo.checkpoint_every": 1,
    "eval.episodes": 8,
    "eval.bootstrap_resamples": 200,
}


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """corpus, SFT and two GRPO steps of the toy environment, a checkpoint after each step."""
    from lib.config import load_config
    from lib.pipeline.stages import run_stage
    from lib.runs import Run

    config = load_config("cpu-smoke", MICRO)
    run = Run(tmp_path_factory.mktemp("sweep") / "run", config)
    for stage in ("corpus", "sft", "grpo"):
        run_stage(stage, config, run)
    return run.dir


@pytest.mark.slow
def test_sweep_plays_sft_and_every_checkpoint_on_the_same_seeds(checkpointed, tmp_path, capsys):
    from lib.io import weights_sha256

    run = _copy(checkpointed, tmp_path)
    assert main(["sweep", "--run-dir", str(run), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "| ./grpo/trainer/checkpoint-2 |" in out and f"chart 'sweep' saved to {run / 'charts' / 'sweep.png'}" in out
    report = _json(run / SWEEP)
    assert [p["step"] for p in report["points"]] == [0, 1, 2] and report["seeds"] == [0, 1, 2, 3]
    assert report["split"] == "holdout" and report["reference"]["policy"] == "stride_two"
    for point in report["points"]:
        folder = run / point["artifact"]["path"]
        assert point["n"] == 4 and len(point["returns"]) == 4 and folder.is_dir()
        assert point["artifact"]["sha256"] == weights_sha256(folder)
        assert point["ci95"][0] <= point["mean_return"] <= point["ci95"][1]
    assert report["points"][0]["artifact"]["path"] == "./sft/model"
    assert report["points"][0]["paired_vs_sft"]["mean"] == 0.0
    assert (run / "charts" / "sweep.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.slow
def test_sweep_refuses_a_missing_or_corrupt_checkpoint_and_a_run_without_any(checkpointed, tmp_path, capsys):
    run = _copy(checkpointed, tmp_path)
    trainer = run / "grpo" / "trainer"
    weights = trainer / "checkpoint-2" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")
    assert main(["sweep", "--run-dir", str(run), "--episodes", "2"]) == 2
    error = capsys.readouterr().err
    assert "CorruptCheckpointError" in error and "checkpoint-2: file adapter_model.safetensors is corrupted" in error
    shutil.rmtree(trainer / "checkpoint-1")
    assert main(["sweep", "--run-dir", str(run), "--episodes", "2"]) == 2
    assert "checkpoint-1 is missing" in capsys.readouterr().err
    shutil.rmtree(trainer)
    assert main(["sweep", "--run-dir", str(run), "--episodes", "2"]) == 2
    error = capsys.readouterr().err
    assert "NoCheckpointsError" in error and "grpo.checkpoint_every=1 but" in error
    assert not (run / SWEEP).exists()
