"""Atomic file writes: every file the workbook writes goes through here, so a crash never leaves half a file."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def read_json(path: Path | str):
    """Read a JSON file the workbook wrote (notebooks use this to show stage outputs)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def stored_path(path: Path | str) -> Path | None:
    """Where a run file is kept: `path` itself, or `path.gz` (a committed run keeps its large files gzipped), or None
    when neither exists."""
    path = Path(path)
    gzipped = path.with_name(path.name + ".gz")
    return path if path.is_file() else gzipped if gzipped.is_file() else None


def stored_bytes(path: Path | str) -> bytes:
    """A run file's bytes, read from `path` or decompressed from `path.gz` (`stored_path`)."""
    found = stored_path(path)
    if found is None:
        raise FileNotFoundError(f"{path}: missing (neither it nor {Path(path).name}.gz is there)")
    data = found.read_bytes()
    return gzip.decompress(data) if found.suffix == ".gz" else data


def read_records(path: Path | str, *, missing_ok: bool = True) -> list[dict]:
    """The workbook's one JSON-lines reader: a stage's files (corpus rows, episodes) and the logs it appends to
    (validation points, alarms); a file kept gzipped beside its name (`path.gz`) reads the same. A log that does not
    exist yet reads as []; with `missing_ok=False` (a file an earlier stage must have written) a missing file is a
    FileNotFoundError naming it. A damaged line is an error naming the file and the line."""
    path = Path(path)
    if stored_path(path) is None:
        if missing_ok:
            return []
        raise FileNotFoundError(f"{path}: missing (an earlier stage should have written it)")
    records = []
    for number, line in enumerate(stored_bytes(path).decode("utf-8").splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None
    return records


def append_record(path: Path | str, record: dict) -> None:
    """Append one record to a JSON-lines log, atomically: the whole file is rewritten through a temporary file."""
    lines = [json.dumps(r) for r in read_records(path)] + [json.dumps(record)]
    atomic_write_text(Path(path), "\n".join(lines) + "\n")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def weights_sha256(folder: Path) -> str:
    """One sha over every weight file in a saved model or adapter folder (sorted by name)."""
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin"))
    if not files:
        raise FileNotFoundError(f"no weight files (*.safetensors, *.bin) in {folder}")
    return files_sha256(files)


def files_sha256(files: list[Path]) -> str:
    """One sha over the files, in the order given: each one's name, then its own sha256."""
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()
