"""`python -m lib package --run-dir R` and `python -m lib verify ARCHIVE`: one tar.gz of a run with a `SHA256SUMS`
inside, and the check that every file in it is still the one packaged, followed by the gate on the unpacked copy.

The archive holds one folder, `<run_id>/`: every file of the run, `PACKAGE.json` (what was left out) and
`SHA256SUMS` (`sha256sum` format, every other file; `cd <run_id> && sha256sum -c SHA256SUMS` checks it too).
Weights are left out unless asked for: `*.safetensors`, `*.bin`, `*.pt`, `*.pth`, `*.gguf` anywhere, and the model,
adapter, merged-model and trainer-checkpoint folders of each stage. Without them the gate cannot re-hash the
adapter or the merged model; `verify` then labels those checks as not checkable here instead of counting them.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..io import atomic_write_bytes, stored_path
from ..runs import now, read_json_record

SUMS = "SHA256SUMS"
PACKAGE = "PACKAGE.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
WEIGHT_FOLDERS = ("model", "adapter", "adapter_best", "merged", "trainer")  # <run>/<stage>/<folder>/
SUM_LINE = re.compile(r"([0-9a-f]{64}) [ *](.+)")


def is_weights(relative: PurePosixPath) -> bool:
    """A weight file, or a file inside a stage's model/adapter/merged/trainer folder.

    >>> [is_weights(PurePosixPath(p)) for p in ("sft/model/tokenizer.json", "grpo/train_log.jsonl", "x/a.bin")]
    [True, False, True]
    """
    return relative.suffix in WEIGHT_SUFFIXES or (len(relative.parts) > 2 and relative.parts[1] in WEIGHT_FOLDERS)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _left_out(paths: list[PurePosixPath]) -> list[str]:
    """The excluded paths, named by their weight folder where there is one (`grpo/adapter`), else by file."""
    named = set()
    for path in paths:
        named.add("/".join(path.parts[:2]) if len(path.parts) > 2 and path.parts[1] in WEIGHT_FOLDERS else str(path))
    return sorted(named)


def missing_gate_inputs(run_dir: Path, manifest: dict) -> list[str]:
    """What the gate re-reads (`gate.reread_files`) that the run folder lacks: a package without it still verifies
    file by file, but the gate on its copy fails `manifest_valid` and `every_action_has_provenance`."""
    from ..gate import reread_files

    return [name for name in reread_files(run_dir, manifest) if stored_path(run_dir / name) is None]


def package_run(run_dir: Path | str, out: Path | str | None = None, weights: bool = False) -> dict:
    """Write `out` (default `<run_dir>.tar.gz` beside the run folder) atomically: the run's files (weights only with
    `weights=True`), PACKAGE.json and SHA256SUMS, under one folder named after the run. Returns PACKAGE.json's
    record with the archive's path and sha256."""
    run_dir = Path(run_dir)
    manifest = read_json_record(run_dir / "manifest.json", "the run's manifest")  # a run folder, not any folder
    out = Path(out) if out else run_dir.with_name(run_dir.name + ".tar.gz")
    files, excluded = {}, []
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = PurePosixPath(path.relative_to(run_dir).as_posix())
        if path.resolve() == out.resolve() or path.name.endswith(".tmp") or str(relative) in (SUMS, PACKAGE):
            continue  # the archive itself, an atomic write in progress, an older package's own files
        if not weights and is_weights(relative):
            excluded.append(relative)
            continue
        files[str(relative)] = path.read_bytes()
    record = {
        "run_id": run_dir.name,
        "created": now(),
        "weights": weights,
        "files": len(files) + 1,  # and PACKAGE.json; SHA256SUMS covers every file but itself
        "left_out": _left_out(excluded),
        "missing_gate_inputs": missing_gate_inputs(run_dir, manifest),
    }
    files[PACKAGE] = (json.dumps(record, indent=2) + "\n").encode()
    sums = "".join(f"{_sha256(data)}  {name}\n" for name, data in sorted(files.items()))
    files[SUMS] = sums.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{run_dir.name}/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    atomic_write_bytes(out, buffer.getvalue())
    return {**record, "archive": str(out), "sha256": _sha256(buffer.getvalue())}


class UnsafeArchiveError(ValueError):
    """An archive member that could write outside the folder it is unpacked into, or that is not a plain file."""


def _safe_members(tar: tarfile.TarFile, archive: Path) -> tuple[str, list[tarfile.TarInfo]]:
    """The archive's top folder and its file members; UnsafeArchiveError naming the first member that is absolute,
    climbs out with `..`, is a link or a device, sits outside the one top folder, or appears twice."""
    members, tops, seen = [], set(), set()
    for member in tar.getmembers():
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts or "\\" in member.name or not name.parts:
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} would be written outside the unpack folder")
        if not (member.isfile() or member.isdir()):
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} is a link or special file, refused")
        if member.name in seen:
            raise UnsafeArchiveError(f"{archive}: member {member.name!r} appears twice (a later copy would overwrite)")
        seen.add(member.name)
        tops.add(name.parts[0])
        if member.isfile():
            if len(name.parts) < 2:
                raise UnsafeArchiveError(f"{archive}: member {member.name!r} is not inside the run's folder")
            members.append(member)
    if len(tops) != 1:
        raise UnsafeArchiveError(f"{archive}: expected one top folder (the run), found {sorted(tops)}")
    return tops.pop(), members


def unpack(archive: Path | str, into: Path | str) -> Path:
    """Unpack a package's files into `into` (member by member, nothing but plain files under its one top folder);
    returns the unpacked run folder."""
    archive, into = Path(archive), Path(into)
    try:
        with tarfile.open(archive, mode="r:*") as tar:
            top, members = _safe_members(tar, archive)
            if (into / top).exists():
                raise ValueError(f"{into / top} exists already; verify unpacks into a new folder")
            for member in members:
                data = tar.extractfile(member).read()
                atomic_write_bytes(into / member.name, data)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        if isinstance(error, FileNotFoundError) and not archive.exists():
            raise FileNotFoundError(f"{archive}: no such archive") from None
        raise ValueError(f"{archive}: not a readable tar.gz archive, damaged or truncated ({error})") from None
    return into / top


def read_sums(run_dir: Path) -> dict[str, str]:
    """{relative path: sha256} from SHA256SUMS; a malformed line is a ValueError naming its line."""
    path = run_dir / SUMS
    if not path.is_file():
        raise ValueError(f"{path}: missing; not a package made by `python -m lib package`")
    sums = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = SUM_LINE.fullmatch(line)
        if not match:
            raise ValueError(f"{path}:{number}: not a sha256sum line: {line[:80]!r}")
        sums[match[2]] = match[1]
    return sums


@dataclass
class FileCheck:
    """SHA256SUMS against the unpacked files: which differ, which are listed but missing, which are not listed."""

    files: int
    changed: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.changed or self.missing or self.extra)


def check_files(run_dir: Path) -> FileCheck:
    from ..io import sha256_file

    sums = read_sums(run_dir)
    present = {p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file()} - {SUMS}
    result = FileCheck(files=len(sums))
    result.missing = sorted(set(sums) - present)
    result.extra = sorted(present - set(sums))
    result.changed = sorted(n for n in set(sums) & present if sha256_file(run_dir / n) != sums[n])
    return result


def _weights_note(check: dict, run_dir: Path, left_out: list[str]) -> str | None:
    """Why a failed gate check could not run on this copy, when it failed on weights the copy does not hold: left
    out by `package` (no --weights), or absent from the run folder that was packaged. None otherwise."""
    if check["passed"]:
        return None
    detail = check["detail"]
    for folder in left_out:
        if folder in detail:
            return f"not checkable here: {folder} was left out of the archive (package without --weights)"
    for folder in re.findall(r"[\w.-]+/(?:" + "|".join(WEIGHT_FOLDERS) + r")\b", detail):
        if not (run_dir / folder).exists():
            return f"not checkable here: {folder} (weights) was not in the packaged run folder"
    return None


def verify_archive(archive: Path | str, into: Path | str | None = None) -> dict:
    """Unpack `archive` (into a temporary folder, or `into`), re-check every file against SHA256SUMS, then run the
    gate on the unpacked run (without writing its gate.json). Checks that fail only because weights are not in the
    copy are labelled `not_checkable`, not counted as failures; the run's own gate.json (the full run's verdict)
    is shown beside each. `ok` is true when every file matches and every check that could run passed."""
    from ..gate import run_gate

    archive = Path(archive)
    with tempfile.TemporaryDirectory(prefix="verify-") as scratch:
        run_dir = unpack(archive, Path(into) if into else Path(scratch))
        files = check_files(run_dir)
        package = json.loads((run_dir / PACKAGE).read_text()) if (run_dir / PACKAGE).is_file() else {}
        recorded = {}
        if (run_dir / "gate.json").is_file():
            try:
                recorded = {c["name"]: c["passed"] for c in json.loads((run_dir / "gate.json").read_text())["checks"]}
            except (ValueError, KeyError, TypeError):
                recorded = {}
        verdict = run_gate(run_dir, write=False)
        checks = []
        for check in verdict["checks"]:
            note = _weights_note(check, run_dir, package.get("left_out", []))
            if not into:  # the temporary folder is gone once this returns: name paths by the run's folder
                check = {**check, "detail": check["detail"].replace(f"{run_dir.parent}/", "")}
            checks.append({**check, "not_checkable": note, "recorded": recorded.get(check["name"])})
    failed = [c["name"] for c in checks if not c["passed"] and not c["not_checkable"]]
    return {
        "archive": str(archive),
        "run_id": run_dir.name,
        "unpacked": str(run_dir) if into else None,
        "weights_packaged": package.get("weights"),
        "left_out": package.get("left_out", []),
        "files": files,
        "checks": checks,
        "gate_failed": failed,
        "not_checkable": [c["name"] for c in checks if c["not_checkable"]],
        "ok": files.ok and not failed,
    }


def format_verification(result: dict) -> str:
    files: FileCheck = result["files"]
    lines = [f"verify {result['archive']} (run {result['run_id']})"]
    if files.ok:
        lines.append(f"  files: all {files.files} files match SHA256SUMS")
    else:
        lines.append(f"  files: DAMAGED ({files.files} listed in SHA256SUMS)")
        lines += [f"    changed (sha256 differs): {name}" for name in files.changed]
        lines += [f"    missing (listed, not in the archive): {name}" for name in files.missing]
        lines += [f"    extra (in the archive, not listed): {name}" for name in files.extra]
    if result["weights_packaged"] is False:
        left = ", ".join(result["left_out"]) or "none were in the run folder"
        lines.append(f"  weights: not packaged (package without --weights): {left}")
    lines.append("  gate on the unpacked copy ('recorded': the verdict in the gate.json packaged with the run):")
    for c in result["checks"]:
        mark = "n/a" if c["not_checkable"] else "ok" if c["passed"] else "FAIL"
        was = {None: "", True: " (recorded: ok)", False: " (recorded: FAIL)"}[c["recorded"]]
        why = f"{c['not_checkable']}; " if c["not_checkable"] else ""
        lines.append(f"    [{mark}] {c['name']}{was}: {why}{c['detail']}")
    verdict = "files intact" if files.ok else "FILES DAMAGED"
    verdict += (
        f"; gate failed on the copy: {', '.join(result['gate_failed'])}"
        if result["gate_failed"]
        else "; every gate check that could run passed"
    )
    if result["not_checkable"]:
        verdict += f"; not checkable without weights: {', '.join(result['not_checkable'])}"
    lines.append(f"verdict: {'OK' if result['ok'] else 'FAILED'}: {verdict}")
    return "\n".join(lines)
