"""Run folders: outputs/<run_id>/ with manifest.json, run_log.jsonl and one folder per stage with stage.json.

Used by every stage; a stage reads only what an earlier stage wrote here.
"""

from __future__ import annotations

import json
import os
import random
import time
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .config import RunConfig
from .distributed import is_main, world_size
from .io import atomic_write_json
from .provenance import git_state, hardware, package_versions, peak_rss_mb, reset_peak_rss


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def new_run_id(profile: str) -> str:
    return f"{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{profile}"


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed python, numpy and torch; in deterministic mode also ask torch for deterministic kernels."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)


class DamagedRunError(ValueError):
    """A run folder's manifest.json or stage.json is missing, empty, truncated or inconsistent; names the file."""


# Set by `python -m lib run` (lib/pipeline/runner.py) for the stage kernels whose output it passes on to a terminal:
# their trainers then draw a text step bar too (lib/training/harness.py), since a terminal never sees a notebook's HTML.
TEXT_PROGRESS_ENV = "WORKBOOK_TEXT_PROGRESS"
RUN_RELATIVE = "./"  # a stage record's path inside its own run folder: "./sft/model" (hub ids never start so)


def to_run_relative(value, run_dir: Path):
    """Paths inside `run_dir` become "./<relative>", so a copied or moved run still points at its own files;
    anything else (hub ids, numbers, paths elsewhere) is kept. Applied to a stage record's inputs and outputs."""
    if isinstance(value, dict):
        return {k: to_run_relative(v, run_dir) for k, v in value.items()}
    if isinstance(value, (str, Path)) and not str(value).startswith(RUN_RELATIVE):
        try:
            return RUN_RELATIVE + Path(value).resolve().relative_to(Path(run_dir).resolve()).as_posix()
        except (ValueError, OSError):
            return str(value) if isinstance(value, Path) else value
    return value


def resolve_run_paths(value, run_dir: Path):
    """The inverse of `to_run_relative`: "./x" -> <run_dir>/x, wherever the run folder now is."""
    if isinstance(value, dict):
        return {k: resolve_run_paths(v, run_dir) for k, v in value.items()}
    if isinstance(value, str) and value.startswith(RUN_RELATIVE):
        return str(Path(run_dir) / value[len(RUN_RELATIVE) :])
    return value


def read_json_record(path: Path, what: str) -> dict:
    """A JSON object the workbook wrote, or DamagedRunError naming the file and what is wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise DamagedRunError(f"{path}: missing ({what})")
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        raise DamagedRunError(f"{path}: empty ({what})")
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise DamagedRunError(f"{path}: not valid JSON, truncated or damaged ({what}): {error}") from None
    if not isinstance(record, dict):
        raise DamagedRunError(f"{path}: expected a JSON object ({what})")
    return record


def read_stage_record(run_dir: Path | str, stage: str) -> dict:
    """<run>/<stage>/stage.json with its run-relative paths resolved against the run folder."""
    run_dir = Path(run_dir)
    return resolve_run_paths(read_json_record(run_dir / stage / "stage.json", f"the {stage} stage record"), run_dir)


class Run:
    """A run folder. Creating one writes manifest.json; stages record themselves with `stage_done`."""

    def __init__(self, run_dir: Path | str, config: RunConfig):
        self.dir = Path(run_dir)
        self.config = config
        self.laps: dict[str, dict[str, float]] = {}  # stage -> {part: seconds}, recorded by `stage_done`
        self.rss_scope: dict[str, str] = {}  # stage -> the scope of its peak_rss_mb (`begin`)
        self.lap_peaks: dict[str, dict[str, float]] = {}  # stage -> {part: peak RSS MiB while it ran} (`lap`)
        self.peak_seen: dict[str, float] = {}  # stage -> the highest peak read before a lap reset it
        self.dir.mkdir(parents=True, exist_ok=True)
        manifest = self.manifest() if (self.dir / "manifest.json").exists() else {}
        if not manifest and not is_main():
            raise FileNotFoundError(
                f"{self.dir} has no manifest.json: under accelerate/torchrun, run the corpus stage first (one process)"
            )
        if not manifest:
            manifest = {
                "run_id": self.dir.name,
                "config": config.model_dump(mode="json"),
                "git": git_state(),
                "packages": package_versions(),
                "hardware": hardware(),
                "started": now(),
                "ended": None,
                "corpus_hashes": {},
                "stages": {},
            }
            atomic_write_json(self.dir / "manifest.json", manifest)
        elif (
            manifest_config(manifest, self.dir / "manifest.json") != config
        ):  # a field added since, at its default, is the same config
            raise ValueError(f"{self.dir} was made with a different config; use a new --run-dir or the same profile")

    def manifest(self) -> dict:
        return read_json_record(self.dir / "manifest.json", "the run's manifest")

    def refuse_retired(self) -> None:
        """A RetiredSettingError when the run was made with a setting since retired at a value the code can no longer
        honour (`lib.config_history.RETIRED`): its files still read, replay and gate, but no stage is re-run on it."""
        from .config_history import RETIRED, retired_in

        if not (self.dir / "manifest.json").exists():
            return
        found = retired_in(self.manifest().get("config", {}))
        if found:
            raise RetiredSettingError(
                f"{self.dir} was made with settings since retired: "
                + "; ".join(f"{key}={value!r} ({RETIRED[key][1]})" for key, value in found.items())
                + ". Its files still load, replay and gate; a stage cannot be re-run on it: start a new run"
            )

    def update_manifest(self, **fields) -> None:
        if not is_main():  # rank 0 alone writes the run's files (lib/distributed.py)
            return
        manifest = self.manifest()
        manifest.update(fields)
        atomic_write_json(self.dir / "manifest.json", manifest)

    def stage_dir(self, stage: str) -> Path:
        path = self.dir / stage
        path.mkdir(parents=True, exist_ok=True)
        return path

    def log(self, event: str, **fields) -> None:
        if not is_main():
            return
        record = {"time": now(), "event": event, **fields}
        with (self.dir / "run_log.jsonl").open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")

    @contextmanager
    def lap(self, stage: str, part: str):
        """Time one part of a stage (added up when a part repeats) and, where the OS can reset the memory peak, the
        part's own peak resident memory (the highest when it repeats); `stage_done` records them as `laps_s` and
        `laps_peak_rss_mb` beside the stage's `duration_s` and `peak_rss_mb`, so a stage record says where its time
        and its memory went. Laps do not nest."""
        self.peak_seen[stage] = max(self.peak_seen.get(stage, 0.0), peak_rss_mb())  # the stage's peak so far
        scoped = reset_peak_rss() == "stage"
        began = time.perf_counter()
        try:
            yield
        finally:
            parts = self.laps.setdefault(stage, {})
            parts[part] = round(parts.get(part, 0.0) + time.perf_counter() - began, 2)
            peak = peak_rss_mb()
            self.peak_seen[stage] = max(self.peak_seen[stage], peak)
            if scoped:
                peaks = self.lap_peaks.setdefault(stage, {})
                peaks[part] = max(peaks.get(part, 0.0), peak)

    def begin(self, stage: str) -> float:
        """A stage starts: its clock (`stage_done`'s `started`) and its memory peak, reset where the OS allows
        (`peak_rss`)."""
        self.rss_scope[stage] = reset_peak_rss()
        return time.time()

    def read_stage(self, stage: str) -> dict:
        """The stage's record, its run-relative paths resolved against this run folder."""
        path = self.dir / stage / "stage.json"
        if not path.exists():
            raise FileNotFoundError(f"stage {stage!r} has not run in {self.dir} (missing {path})")
        record = read_stage_record(self.dir, stage)
        if record.get("status") != "ok":
            raise RuntimeError(f"stage {stage!r} in {self.dir} did not finish ok: {record.get('status')}")
        return record

    def stage_done(
        self,
        stage: str,
        *,
        started: float,
        params: dict,
        inputs: dict,
        outputs: dict,
        metrics: dict,
        status: str = "ok",
    ) -> dict:
        record = {
            "stage": stage,
            "status": status,
            "params": params,
            "inputs": to_run_relative(inputs, self.dir),
            "outputs": to_run_relative(outputs, self.dir),
            "metrics": metrics,
            "duration_s": round(time.time() - started, 2),
            "laps_s": self.laps.pop(stage, {}),
            # the stage process's peak resident memory in MiB: since `begin` where the OS could reset it ("stage"),
            # else over the process's life so far ("process": a stage run after others in one process)
            "peak_rss_mb": max(peak_rss_mb(), self.peak_seen.pop(stage, 0.0)),
            "peak_rss_scope": self.rss_scope.pop(stage, "process"),
            "laps_peak_rss_mb": self.lap_peaks.pop(stage, {}),
            "finished": now(),
        }
        if not is_main():
            return resolve_run_paths(record, self.dir)
        atomic_write_json(self.stage_dir(stage) / "stage.json", record)
        manifest = self.manifest()
        # world_size: the processes that ran the stage (more than 1 under accelerate launch / torchrun); git: the
        # commit the stage ran at, which differs from the run's when a stage is re-run or resumed later
        manifest["stages"][stage] = {
            "status": status,
            "duration_s": record["duration_s"],
            "world_size": world_size(),
            "git": git_state(),
        }
        manifest["ended"] = now()
        atomic_write_json(self.dir / "manifest.json", manifest)
        self.log("stage_done", stage=stage, status=status, duration_s=record["duration_s"])
        return resolve_run_paths(record, self.dir)  # on disk relative to the run folder; in memory usable paths


class RetiredSettingError(RuntimeError):
    """The run was made with a setting the code no longer has; it can be read, replayed and gated, not re-run."""


def manifest_config(manifest: dict, path: Path) -> RunConfig:
    """The RunConfig a manifest records, or DamagedRunError naming the manifest."""
    from pydantic import ValidationError

    if "config" not in manifest:
        raise DamagedRunError(f"{path}: no 'config' recorded (damaged manifest)")
    from .config import migrate_config

    recorded = migrate_config(manifest["config"])  # a record: its file keeps the layout it was made with
    try:
        return RunConfig.model_validate(recorded)
    except ValidationError as error:
        raise DamagedRunError(
            f"{path}: the recorded config does not validate: {error.errors()[0]['loc']}: {error.errors()[0]['msg']}"
        ) from None


def quickcheck_path(run_dir: Path | str, split: str) -> Path:
    """Where `python -m lib quickcheck` writes its report for `split`: quickcheck.json (holdout), else
    quickcheck_<split>.json."""
    return Path(run_dir) / ("quickcheck.json" if split == "holdout" else f"quickcheck_{split}.json")


def read_config(run_dir: Path | str) -> RunConfig:
    """The config a run was made with, from its manifest.json (a damaged manifest is a DamagedRunError naming it)."""
    path = Path(run_dir) / "manifest.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir} is not a run folder (missing {path})")
    return manifest_config(read_json_record(path, "the run's manifest"), path)


def _differing(recorded: dict, requested: dict, prefix: str = "") -> list[str]:
    """`key: recorded -> requested` for every dotted key where two config dumps differ."""
    out = []
    for key in sorted(set(recorded) | set(requested)):
        a, b = recorded.get(key), requested.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differing(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return out


def open_run(run_id: str = "", profile: str = "", overrides: dict | None = None, output_root: str = "outputs"):
    """What every stage notebook calls first. An existing run keeps the config in its manifest (another PROFILE,
    or OVERRIDES that change it, is an error naming both); a new run is made from PROFILE (default cpu-smoke).
    Returns (config, Run)."""
    from .config import ConfigError, load_config

    run_dir = Path(output_root) / run_id if run_id else None
    manifest = run_dir / "manifest.json" if run_dir else None
    if manifest is not None and manifest.exists():
        config = read_config(run_dir)
        if (profile and profile != config.profile) or overrides:
            requested = load_config(profile or config.profile, overrides or {})
            if requested != config:
                differ = _differing(config.model_dump(mode="json"), requested.model_dump(mode="json"))
                raise ConfigError(
                    f"run {run_id} was made with profile {config.profile!r} and other settings than "
                    f"PROFILE={profile!r} OVERRIDES={overrides!r} give: {'; '.join(differ)} (the run's, then the "
                    "requested; a profile edited since the run was made differs too). Leave PROFILE and OVERRIDES "
                    "empty to use the run's own config"
                )
        return config, Run(run_dir, config)
    config = load_config(profile or "cpu-smoke", overrides or {})
    return config, Run(run_dir or Path(output_root) / new_run_id(config.profile), config)
