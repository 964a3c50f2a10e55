"""Verifiable checkpoints: a checkpoint counts only once its sha256 manifest is written (last, atomically),
and `--resume-from` (lib/training) and the checkpoint sweep (lib/evaluation/sweep.py) refuse one whose files do not
match it. The grpo stage writes the manifest from the trainer's public `on_save` callback
(lib/training/harness.py: `CheckpointManifestCallback`), which transformers calls right after a checkpoint folder is
complete."""

from __future__ import annotations

import json
from pathlib import Path

from .io import atomic_write_json, sha256_file

MANIFEST = "checkpoint_manifest.json"


class CorruptCheckpointError(RuntimeError):
    """A checkpoint is incomplete or its files do not match its manifest."""


def write_checkpoint_manifest(folder: Path) -> None:
    folder = Path(folder)
    files = {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }
    atomic_write_json(folder / MANIFEST, {"files": files})


def verify_checkpoint(folder: Path) -> None:
    folder = Path(folder)
    if not folder.is_dir():
        raise CorruptCheckpointError(f"checkpoint {folder} does not exist")
    manifest = folder / MANIFEST
    if not manifest.exists():
        raise CorruptCheckpointError(
            f"checkpoint {folder} is incomplete: {MANIFEST} is missing (save was interrupted?)"
        )
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as error:
        raise CorruptCheckpointError(f"checkpoint {folder}: unreadable {MANIFEST} ({error})") from None
    for name, expected in files.items():
        path = folder / name
        if not path.exists():
            raise CorruptCheckpointError(f"checkpoint {folder}: file {name} is missing")
        if sha256_file(path) != expected:
            raise CorruptCheckpointError(f"checkpoint {folder}: file {name} is corrupted (sha256 mismatch)")
