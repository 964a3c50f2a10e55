"""The lease plan (lib/bench/lease.py): a run started in one call, picked up by the next, its records copied out
without weights, and every way it can go wrong said plainly. The run itself is a stand-in script here (the real
one is `python -m lib run`, quoted on cpu-smoke in bench/README.md)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from lib.bench import lease, lease_wheels

FAKE_RUN = """
import json, pathlib, sys, time
run = pathlib.Path("outputs") / sys.argv[1]
(run / "sft" / "model").mkdir(parents=True, exist_ok=True)
(run / "sft" / "stage.json").write_text(json.dumps({"duration_s": 1.0}))
(run / "sft" / "model" / "model.safetensors").write_bytes(b"weights")
(run / "sft" / "adapter.bin").write_bytes(b"weights")
with open(run / "run_log.jsonl", "a") as log:
    log.write(json.dumps({"event": "stage_done", "stage": "corpus", "status": "ok"}) + "\\n")
    log.write(json.dumps({"event": "stage_done", "stage": "sft", "status": "failed"}) + "\\n")
    log.write('{"event": "stage_do')
print("fake run working", flush=True)
time.sleep(float(sys.argv[2]))
sys.exit(int(sys.argv[3]))
"""


def _args(tmp_path: Path, *, sleep: float, rc: int = 0, wait: float = 30.0, wheels=None, run_id="r1"):
    tree = tmp_path / "tree"
    tree.mkdir(exist_ok=True)
    (tree / "fake_run.py").write_text(FAKE_RUN)
    (tree / "outputs").mkdir(exist_ok=True)
    (tree / "outputs" / "stale.txt").write_text("not copied")
    return argparse.Namespace(
        home=str(tmp_path / "home"),
        out=str(tmp_path / "out"),
        run_id=run_id,
        profile="cpu-smoke",
        wait=wait,
        every=0.05,
        wheels=wheels,
        start=True,
        tree=str(tree),
        run_args=[],
        then_bench=False,
        command=[sys.executable, "fake_run.py", run_id, str(sleep), str(rc)],
    )


def _wait(home: Path, seconds: float) -> dict:
    """The run's state once it stops running, or after `seconds`."""
    deadline = time.monotonic() + seconds
    while lease.state(home)["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    return lease.state(home)


def _status(tmp_path: Path) -> dict:
    return json.loads((tmp_path / "out" / lease.STATUS).read_text())


def _records(tmp_path: Path) -> dict[str, bytes]:
    with tarfile.open(tmp_path / "out" / lease.RECORDS) as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def test_a_run_started_in_one_call_is_picked_up_by_the_next_and_its_weights_stay_behind(tmp_path):
    args = _args(tmp_path, sleep=3.0, wait=1.0)
    assert lease.lease(args) == 0
    first = _status(tmp_path)
    assert first["state"] == "running" and first["rc"] is None
    records = _records(tmp_path)
    assert json.loads(records["r1/sft/stage.json"]) == {"duration_s": 1.0}
    assert not any("model" in name or name.endswith(".bin") for name in records)  # weights never leave
    assert first["records"]["files"] == len(records) == 2 and first["records"]["left_out"] == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        lease.STATUS,
        lease.RECORDS,
        "run.log",
    ]  # $OUT brings back 8 files at most: a call writes 3
    assert first["stages_done"] == ["corpus"]  # the failed stage and the torn last line are not "done"
    assert not (tmp_path / "home" / "r1" / "repo" / "outputs" / "stale.txt").exists()

    args.wait, args.start = 30.0, False  # the next call only watches: it must not start a second run
    assert lease.lease(args) == 0
    second = _status(tmp_path)
    assert second["state"] == "finished" and second["rc"] == 0
    assert (tmp_path / "out" / "run.log").read_text().count("fake run working") == 1
    assert second["seconds"] >= 3.0


def test_a_call_without_start_on_a_machine_with_no_run_says_so_and_starts_nothing(tmp_path, capsys):
    args = _args(tmp_path, sleep=0.0)
    args.start = False
    with pytest.raises(RuntimeError, match="no run r1 on this machine"):
        lease.lease(args)
    assert "no run r1" in _status(tmp_path)["note"] and _status(tmp_path)["state"] == "not_started"
    assert not (tmp_path / "home" / "r1" / "repo").exists()


def test_records_over_the_limit_leave_out_the_largest_and_say_which(tmp_path):
    run = tmp_path / "run"
    (run / "evaluate").mkdir(parents=True)
    (run / "evaluate" / "episodes.jsonl").write_bytes(os.urandom(200_000))  # incompressible
    (run / "evaluate" / "eval.json").write_text("{}")
    out = tmp_path / "out"
    out.mkdir()
    summary = lease.bundle(run, out, tmp_path, limit=50_000)
    assert summary["left_out"] == ["evaluate/episodes.jsonl"] and summary["files"] == 1
    assert summary["bytes"] <= 50_000
    assert lease.bundle(run, out, tmp_path, limit=50_000) == summary  # nothing changed: the archive is not rewritten


def test_a_failed_run_returns_its_exit_code(tmp_path):
    args = _args(tmp_path, sleep=0.0, rc=3)
    assert lease.lease(args) == 3
    assert _status(tmp_path)["state"] == "failed" and _status(tmp_path)["rc"] == 3


def test_a_run_that_died_without_an_exit_code_is_reported_not_restarted(tmp_path):
    args = _args(tmp_path, sleep=0.0)
    home = tmp_path / "home" / "r1"
    home.mkdir(parents=True)
    dead = __import__("subprocess").Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (home / "pid").write_text(str(dead.pid))
    with pytest.raises(RuntimeError, match="died without an exit code"):
        lease.lease(args)
    assert not (home / "repo").exists()
    assert _status(tmp_path)["state"] == "lost" and "died without an exit code" in _status(tmp_path)["note"]


def test_main_says_what_is_wrong_in_one_line(tmp_path, capsys):
    assert (
        lease.main(
            [
                "run",
                "--profile",
                "cpu-smoke",
                "--wheels",
                str(tmp_path / "nowhere"),
                "--home",
                str(tmp_path / "home"),
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    assert "is not a folder" in capsys.readouterr().err


def _sums(**files: bytes) -> str:
    return "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in files.items())


def test_a_split_wheel_is_joined_once_all_its_parts_have_come(tmp_path):
    wheel = bytes(range(256)) * 100
    sums = _sums(**{"big-1.0-py3-none-any.whl": wheel, "small-1.0-py3-none-any.whl": b"small"})
    call1, call2, store = tmp_path / "call-1", tmp_path / "call-2", tmp_path / "store"
    for folder in (call1, call2):
        folder.mkdir()
        (folder / "SHA256SUMS").write_text(sums)
    (call1 / "big-1.0-py3-none-any.whl.part-00").write_bytes(wheel[:10_000])
    (call1 / "small-1.0-py3-none-any.whl").write_bytes(b"small")
    (call2 / "big-1.0-py3-none-any.whl.part-01").write_bytes(wheel[10_000:])

    whole, missing = lease_wheels.gather_wheels(call1, store)
    assert [w.name for w in whole] == ["small-1.0-py3-none-any.whl"]
    assert missing == ["big-1.0-py3-none-any.whl"]
    whole, missing = lease_wheels.gather_wheels(call2, store)
    assert missing == [] and sorted(w.name for w in whole) == ["big-1.0-py3-none-any.whl", "small-1.0-py3-none-any.whl"]
    assert (store / "big-1.0-py3-none-any.whl").read_bytes() == wheel


def test_a_damaged_wheel_is_missing_not_installed(tmp_path):
    carried = tmp_path / "call-1"
    carried.mkdir()
    (carried / "SHA256SUMS").write_text(_sums(**{"a-1.0-py3-none-any.whl": b"good"}))
    (carried / "a-1.0-py3-none-any.whl").write_bytes(b"bad!")
    assert lease_wheels.gather_wheels(carried, tmp_path / "store") == ([], ["a-1.0-py3-none-any.whl"])


def test_waiting_for_wheels_starts_nothing(tmp_path):
    carried = tmp_path / "call-1"
    carried.mkdir()
    (carried / "SHA256SUMS").write_text(_sums(**{"a-1.0-py3-none-any.whl": b"good"}))
    args = _args(tmp_path, sleep=0.0, wheels=str(carried))
    assert lease.lease(args) == 0
    status = _status(tmp_path)
    assert status["state"] == "not_started" and "a-1.0-py3-none-any.whl" in status["note"]


def test_bad_sums_and_no_sums_are_errors(tmp_path):
    with pytest.raises(ValueError, match="line 1"):
        lease_wheels.read_sums("not a sum line\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="SHA256SUMS"):
        lease_wheels.gather_wheels(empty, tmp_path / "store")


def test_a_broken_wheel_fails_the_install_loudly(tmp_path):
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    with pytest.raises(RuntimeError, match="pip install of the carried wheels failed"):
        lease_wheels.install_wheels([broken], tmp_path)
    assert not (tmp_path / ".installed").exists()


def test_files_are_binned_under_one_calls_limit():
    calls = lease_wheels.bin_files([("a", 40), ("b", 30), ("c", 20), ("d", 10)], limit=50)
    assert sorted(sorted(c) for c in calls) == [["a", "d"], ["b", "c"]]
    with pytest.raises(ValueError, match="split it first"):
        lease_wheels.bin_files([("huge", 51)], limit=50)


def test_the_device_list_and_the_closure_name_what_to_carry():
    device = lease_wheels.device_versions(Path(__file__).parents[1] / "bench" / "device_pip_list_h100.txt")
    assert device["accelerate"] == "1.15.0" and "trl" not in device
    closure = lease_wheels.requirement_closure(["pydantic"])
    assert {"pydantic", "pydantic-core", "typing-extensions"} <= set(closure)
    with pytest.raises(RuntimeError, match="not installed here"):
        lease_wheels.requirement_closure(["surely-not-a-distribution-xyz"])


def test_stop_ends_a_running_run(tmp_path):
    args = _args(tmp_path, sleep=60.0, wait=0.2)
    lease.lease(args)
    home = tmp_path / "home" / "r1"
    assert lease.stop(home)
    assert _wait(home, 10)["state"] != "running"


def _toy_wheel(folder: Path) -> Path:
    """A real, minimal wheel (one module), so pip itself installs it offline."""
    import base64
    import zipfile

    files = {
        "leasetoy.py": b"ANSWER = 42\n",
        "leasetoy-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: leasetoy\nVersion: 1.0\n",
        "leasetoy-1.0.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = (
        "".join(
            f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},"
            f"{len(data)}\n"
            for name, data in files.items()
        )
        + "leasetoy-1.0.dist-info/RECORD,,\n"
    )
    wheel = folder / "leasetoy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
        archive.writestr("leasetoy-1.0.dist-info/RECORD", record)
    return wheel


def test_carried_wheels_are_installed_once_and_the_run_imports_them(tmp_path):
    carried = tmp_path / "call-1"
    carried.mkdir()
    wheel = _toy_wheel(carried)
    (carried / "SHA256SUMS").write_text(_sums(**{wheel.name: wheel.read_bytes()}))
    args = _args(tmp_path, sleep=0.0, wheels=str(carried))
    args.command = [sys.executable, "-c", "import leasetoy; print('imported', leasetoy.ANSWER)"]
    assert lease.lease(args) == 0
    assert _status(tmp_path)["state"] == "finished"
    assert "imported 42" in (tmp_path / "out" / "run.log").read_text()
    site = tmp_path / "home" / "wheels" / "site"
    assert (site / "leasetoy.py").exists()
    (site / "leasetoy.py").unlink()  # a second call does not install again: the marker remembers the set
    assert (
        lease_wheels.install_wheels([tmp_path / "home" / "wheels" / wheel.name], tmp_path / "home" / "wheels") == site
    )
    assert not (site / "leasetoy.py").exists()


def test_with_carried_wheels_the_workbook_is_installed_too_and_its_copy_comes_first(tmp_path):
    """The device reaches no index, and the runner notebook installs the workbook unless its distribution is there
    (an H200 run failed on that, 2026-11-28): the call installs the tree beside the wheels, and the run imports
    the package from its copy of the tree, whose folder the stage notebooks take as the workbook's."""
    carried = tmp_path / "call-1"
    carried.mkdir()
    wheel = _toy_wheel(carried)
    (carried / "SHA256SUMS").write_text(_sums(**{wheel.name: wheel.read_bytes()}))
    args = _args(tmp_path, sleep=0.0, wheels=str(carried))
    tree = Path(args.tree)
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "leasetree"\nversion = "1.2.3"\n[tool.setuptools]\npackages = ["leasetreepkg"]\n'
    )
    (tree / "leasetreepkg").mkdir()
    (tree / "leasetreepkg" / "__init__.py").write_text("")
    args.command = [
        sys.executable,
        "-c",
        "import importlib.metadata, leasetreepkg; print('version', importlib.metadata.version('leasetree'), "
        "'from', leasetreepkg.__file__)",
    ]
    previous = os.getcwd()
    os.chdir(tmp_path)  # the command runs from the copy; this keeps the test's own folder off the path
    try:
        assert lease.lease(args) == 0
    finally:
        os.chdir(previous)
    log = (tmp_path / "out" / "run.log").read_text()
    assert "version 1.2.3" in log
    assert f"from {tmp_path / 'home' / 'r1' / 'repo' / 'leasetreepkg'}" in log
    assert (tmp_path / "home" / "wheels" / "site" / "leasetree-1.2.3.dist-info").is_dir()


def test_a_record_rewritten_while_it_is_copied_never_breaks_the_copy(tmp_path):
    """The run rewrites its records while a call archives them (an H200 call broke on a log that shrank between
    tarfile's look at its size and its read): every archive is whole and readable."""
    run = tmp_path / "run"
    run.mkdir()
    log = run / "train_log.jsonl"
    log.write_bytes(b"x" * 4_000_000)
    out = tmp_path / "out"
    out.mkdir()
    stop = threading.Event()

    def rewrite():  # the log grows to 4 MB, is truncated, grows again: its size moves under the reader
        while not stop.is_set():
            with log.open("wb") as handle:
                for _ in range(40):
                    handle.write(b"y" * 100_000)

    writer = threading.Thread(target=rewrite)
    writer.start()
    try:
        for attempt in range(40):
            notes = tmp_path / f"notes{attempt}"
            notes.mkdir()
            summary = lease.bundle(run, out, notes)
            with tarfile.open(out / lease.RECORDS) as archive:
                member = archive.getmember("run/train_log.jsonl")
                assert len(archive.extractfile(member).read()) == member.size
            assert summary["files"] == 1
    finally:
        stop.set()
        writer.join()


@pytest.mark.parametrize(("first", "then", "rc"), [(3, 0, 3), (0, 5, 5), (3, 5, 3), (0, 0, 0)])
def test_what_runs_after_the_run_runs_whatever_the_run_returned_and_the_first_failure_is_the_exit_code(
    tmp_path, first, then, rc
):
    tree, home = tmp_path / "tree", tmp_path / "home"
    tree.mkdir()
    after = [sys.executable, "-c", f"open('after.txt', 'w').write('ran'); raise SystemExit({then})"]
    lease.start(home, tree, [sys.executable, "-c", f"raise SystemExit({first})"], after=after)
    assert _wait(home, 30)["rc"] == rc and (home / "repo" / "after.txt").read_text() == "ran"


def test_then_bench_writes_the_benchmark_into_the_run_folder(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(lease, "start", lambda home, tree, command, site, after: seen.update(after=after) or 1)
    monkeypatch.setattr(lease, "state", lambda home: {"state": "not_started", "rc": None})
    args = _args(tmp_path, sleep=0.0, wait=0.0)
    args.run_args = ["--stages", "corpus", "sft", "--set", "seed=1", "grpo.num_generations=8", "--no-gate"]
    for folder in ("home/r1", "out"):
        (tmp_path / folder).mkdir(parents=True)
    lease._lease(args, tmp_path / "home" / "r1", tmp_path / "out")
    assert seen["after"] is None  # no benchmark unless asked
    args.then_bench = True
    lease._lease(args, tmp_path / "home" / "r1", tmp_path / "out")
    after = seen["after"]
    assert after[1:6] == ["-m", "lib", "bench-gpu", "--profile", "cpu-smoke"]
    # the same config as the run: its --set part, nothing else of its arguments
    assert after[6:] == ["--out", f"outputs/r1/{lease.BENCH}", "--set", "seed=1", "grpo.num_generations=8"]
