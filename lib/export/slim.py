"""`python -m lib slim outputs/<id>`: make a finished run folder fit to commit, so that a reviewer's fresh clone can
re-check it with `python -m lib gate outputs/<id>`.

What it does, each step recorded in `<run>/slim.json`:
- removes the merged folders the gate can rebuild from the adapters the run keeps (lib/merging.py): `sft/model`
  when `sft/adapter` holds the adapter its record names (an SFT that trained every weight keeps its model), and
  `export/merged` when `grpo/adapter` does and the export stage recorded the merged model's outputs; and the
  trainers' scratch folders (`<stage>/trainer/`), which no record reads;
- gzips every JSON-lines or JSON file over 1 MB of a stage folder, never inside an adapter's (`read_records` and
  the gate read `name.gz` as `name`);
- replaces this machine's paths (the repository folder, the home folder) in the run's text files, which papermill and
  PEFT write into notebooks' metadata and adapter configs.
Nothing is removed that the gate cannot rebuild and check: an adapter whose sha is not the recorded one stops the
command before any change.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from ..io import atomic_write_bytes, atomic_write_json, stored_path, weights_sha256
from ..runs import now, read_json_record, read_stage_record

GZIP_OVER = 1 << 20
GZIP_SUFFIXES = (".jsonl", ".json")
TEXT_SUFFIXES = (".ipynb", ".json", ".jsonl", ".md", ".log", ".txt")
KEEP_PLAIN = ("manifest.json", "stage.json", "eval.json", "gate.json", "export_manifest.json")  # read as they are
REPO = Path(__file__).resolve().parents[2]


class SlimError(ValueError):
    """The run folder cannot be slimmed without losing what the gate needs."""


def _adapter_ok(adapter: Path, recorded: str | None, what: str) -> None:
    if not (adapter / "adapter_config.json").is_file():
        raise SlimError(f"{what}: no adapter at {adapter}, so the merged folder could not be rebuilt; nothing changed")
    if recorded is not None and weights_sha256(adapter) != recorded:
        raise SlimError(f"{what}: {adapter} is not the adapter its stage recorded (sha256 differs); nothing changed")


def removable_folders(run_dir: Path) -> list[Path]:
    """The merged folders of this run the gate can rebuild, after checking each one's adapter against its record."""
    folders = []
    if (run_dir / "sft" / "stage.json").is_file():
        sft = read_stage_record(run_dir, "sft")
        # a model whose SFT trained every weight (the tiny one) has no adapter to rebuild it from: it stays
        if (run_dir / "sft" / "model").is_dir() and "adapter" in sft["outputs"]:
            _adapter_ok(Path(sft["outputs"]["adapter"]), sft["metrics"].get("adapter_sha256"), "sft/model")
            folders.append(run_dir / "sft" / "model")
    if (run_dir / "export" / "merged").is_dir():
        grpo = read_stage_record(run_dir, "grpo")
        _adapter_ok(Path(grpo["outputs"]["adapter"]), grpo["metrics"].get("adapter_sha256"), "export/merged")
        if stored_path(run_dir / "export" / "merged_outputs.json") is None:
            raise SlimError("export/merged: export/merged_outputs.json (what a rebuild is checked by) is missing")
        folders.append(run_dir / "export" / "merged")
    return folders


def _scrub(path: Path, replacements: list[tuple[str, str]]) -> bool:
    text = path.read_text(encoding="utf-8")
    scrubbed = text
    for old, new in replacements:
        scrubbed = scrubbed.replace(old, new)
    if scrubbed == text:
        return False
    atomic_write_bytes(path, scrubbed.encode("utf-8"))
    return True


def slim_run(run_dir: Path | str) -> dict:
    """Slim a finished run folder in place (see the module's docstring); returns and writes what was done."""
    run_dir = Path(run_dir)
    if not (run_dir / "manifest.json").is_file():
        raise SlimError(f"{run_dir} is not a run folder (missing manifest.json)")
    removed = removable_folders(run_dir)  # every check before any change
    removed += sorted(p for p in run_dir.glob("*/trainer") if p.is_dir())
    for folder in removed:
        shutil.rmtree(folder)
    replacements = [(str(REPO) + "/", ""), (str(REPO), "."), (str(Path.home()), "~")]
    files = sorted(p for p in run_dir.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
    scrubbed = [p for p in files if _scrub(p, replacements)]
    gzipped = []
    for path in files:
        in_stage_folder = len(path.relative_to(run_dir).parts) == 2  # never inside an adapter or model folder
        if (
            in_stage_folder
            and path.suffix in GZIP_SUFFIXES
            and path.name not in KEEP_PLAIN
            and path.stat().st_size > GZIP_OVER
        ):
            atomic_write_bytes(path.with_name(path.name + ".gz"), gzip.compress(path.read_bytes(), mtime=0))
            path.unlink()
            gzipped.append(path)
    record = {
        "slimmed": now(),
        "removed": [p.relative_to(run_dir).as_posix() for p in removed],
        "gzipped": [p.relative_to(run_dir).as_posix() for p in gzipped],
        "paths_replaced_in": [p.relative_to(run_dir).as_posix() for p in scrubbed],
        "rebuilt_by": f"python -m lib gate {run_dir.name}: the gate rebuilds and checks each removed merged folder",
    }
    atomic_write_json(run_dir / "slim.json", _with_earlier(run_dir / "slim.json", record))
    return record


def _with_earlier(path: Path, record: dict) -> dict:
    """`record` with what earlier slims of the run did (a run slimmed again, after its report was remade, still
    says which files were gzipped or scrubbed the first time)."""
    earlier = read_json_record(path, "the run's slim record") if path.is_file() else {}
    merged = dict(record)
    for key in ("removed", "gzipped", "paths_replaced_in"):
        merged[key] = list(dict.fromkeys([*earlier.get(key, []), *record[key]]))
    return merged
