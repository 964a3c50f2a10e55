"""Stage `postsave`: in a fresh process, load only the exported artifact and play held-out episodes with it.
Also `python -m lib activate`, which names the run's artifact that later loads should use.

`python -m lib stage postsave --run-dir outputs/<id>`; notebook 06_export runs it after export.
Writes `postsave/postsave_inference.json`. Fails if the weights the fresh process loaded are not the ones the
export manifest fingerprinted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from ..io import atomic_write_json
from ..models import weights_sha256
from ..runs import read_stage_record

ARTIFACT_ORDER = ("grpo", "merged", "sft")  # what `activate` picks when no artifact is named


class PostsaveError(RuntimeError):
    """Post-save inference did not run on the exported artifact, or the artifact changed since export."""


def postsave_worker(run_dir: Path, model_dir: Path, episodes: int, out: Path) -> None:
    """`python -m lib _postsave-worker`: the fresh process. Fingerprints the files, loads them, plays episodes."""
    from ..evaluation.closed_loop import run_model_episodes
    from ..inference import load_policy_model
    from ..runs import read_config

    began = time.perf_counter()
    config = read_config(run_dir)
    sha_before_load = weights_sha256(model_dir)
    model, tokenizer, source = load_policy_model(model_dir, config.model)
    loaded = time.perf_counter()
    # the episodes in lockstep, as evaluation plays them: one generate call per round for every live episode (one
    # episode at a time was 130 calls and half of this stage's 33 s on an H200)
    batch = min(episodes, config.eval.batch_size)
    episodes_run, actions = run_model_episodes(
        config, (model, tokenizer, source), range(episodes), "holdout", desc="postsave", batch_size=batch
    )
    latencies = [a["latency_s"] for a in actions]
    atomic_write_json(
        out,
        {
            "model_source": source,
            "sha_before_load": sha_before_load,
            "split": "holdout",
            "episodes": episodes,
            "batch_size": batch,
            "latency": "per action: a generate call's time divided by the episodes it advanced",
            "laps_s": {
                "load": round(loaded - began, 2),
                "play": round(time.perf_counter() - loaded, 2),
            },
            "validity_rate": sum(a["valid"] for a in actions) / len(actions),
            "mean_return": float(np.mean([e.episode_return for e in episodes_run])),
            "latency_s_p50": float(np.percentile(latencies, 50)),
            "latency_s_p95": float(np.percentile(latencies, 95)),
            "actions": len(actions),
            "actions_with_source": sum(bool(a.get("model_source")) for a in actions),
            "returns": {str(e.seed): e.episode_return for e in episodes_run},
        },
    )


def run_postsave(config, run) -> dict:
    started = run.begin("postsave")
    export = run.read_stage("export")
    manifest = json.loads(Path(export["outputs"]["export_manifest.json"]).read_text())
    model_dir = Path(export["outputs"]["merged"])
    out = run.stage_dir("postsave") / "postsave_inference.json"
    command = [
        sys.executable,
        "-m",
        "lib",
        "_postsave-worker",
        "--run-dir",
        str(run.dir),
        "--model-dir",
        str(model_dir),
        "--episodes",
        str(config.export.postsave_episodes),
        "--out",
        str(out),
    ]
    with run.lap("postsave", "fresh process"):
        done = subprocess.run(command, capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    if done.returncode != 0:
        raise PostsaveError(f"post-save inference failed in its fresh process:\n{done.stderr[-2000:]}")
    result = json.loads(out.read_text())
    expected = manifest["weights_sha256"]
    loaded = result["model_source"]["sha256"]
    result["export_weights_sha256"] = expected
    result["from_saved_artifact"] = loaded == expected == result["sha_before_load"]
    atomic_write_json(out, result)
    if not result["from_saved_artifact"]:
        run.stage_done(
            "postsave",
            started=started,
            params={},
            inputs={"merged": str(model_dir)},
            outputs={"postsave_inference.json": str(out)},
            metrics={"loaded_sha256": loaded, "export_sha256": expected},
            status="failed: sha mismatch",
        )
        raise PostsaveError(
            f"the weights loaded from {model_dir} (sha256 {loaded}) are not the exported ones ({expected})"
        )
    return run.stage_done(
        "postsave",
        started=started,
        params={"episodes": config.export.postsave_episodes},
        inputs={"merged": str(model_dir)},
        outputs={"postsave_inference.json": str(out)},
        metrics={
            k: result[k]
            for k in ("validity_rate", "mean_return", "latency_s_p50", "latency_s_p95", "from_saved_artifact")
        },
    )


def artifact_paths(run_dir: Path) -> dict[str, dict]:
    """The run's loadable artifacts that exist: {name: {"path", "base"?}}."""
    run_dir = Path(run_dir)
    found = {}
    records = {
        stage: read_stage_record(run_dir, stage)
        for stage in ("grpo", "export", "sft")
        if (run_dir / stage / "stage.json").exists()
    }
    records = {stage: r for stage, r in records.items() if r.get("status") == "ok"}
    if "grpo" in records:
        found["grpo"] = {
            "path": records["grpo"]["outputs"]["adapter"],
            "base": records["grpo"]["outputs"]["base_model"],
        }
    if "export" in records:
        found["merged"] = {"path": records["export"]["outputs"]["merged"]}
    if "sft" in records:
        found["sft"] = {"path": records["sft"]["outputs"]["model"]}
    return found


def activate(run_dir: Path, artifact: str | None = None) -> dict:
    """Write <outputs>/active_model.json naming one artifact of the run and its sha. Without `artifact`, the first
    that exists of GRPO adapter, merged export, SFT model."""
    run_dir = Path(run_dir)
    available = artifact_paths(run_dir)
    if artifact is None:
        artifact = next((name for name in ARTIFACT_ORDER if name in available), None)
        if artifact is None:
            raise FileNotFoundError(f"{run_dir} has no finished grpo, export or sft stage to activate")
    if artifact not in ARTIFACT_ORDER:
        raise ValueError(f"unknown artifact {artifact!r}; choose one of {list(ARTIFACT_ORDER)}")
    if artifact not in available:
        raise FileNotFoundError(f"{run_dir} has no finished {artifact!r} artifact (available: {sorted(available)})")
    entry = available[artifact]
    record = {
        "run_dir": str(run_dir),
        "artifact": artifact,
        "path": entry["path"],
        "sha256": weights_sha256(Path(entry["path"])),
    }
    if "base" in entry:
        record["base"] = {"path": entry["base"], "sha256": weights_sha256(Path(entry["base"]))}
    atomic_write_json(run_dir.parent / "active_model.json", record)
    return record


def load_active(outputs_dir: Path, model_config):
    """Load the active model named by <outputs>/active_model.json, refusing it if its weights changed."""
    from ..inference import load_policy_model

    path = Path(outputs_dir) / "active_model.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; run `python -m lib activate outputs/<run_id>` first")
    record = json.loads(path.read_text())
    if weights_sha256(Path(record["path"])) != record["sha256"]:
        raise PostsaveError(f"active model {record['path']} changed since it was activated (sha256 mismatch)")
    if "base" in record:
        return load_policy_model(record["base"]["path"], model_config, record["path"])
    return load_policy_model(record["path"], model_config)
