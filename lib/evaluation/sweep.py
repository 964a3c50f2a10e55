"""`python -m lib sweep --run-dir R`, the playing part: every saved GRPO checkpoint (and the SFT model as step 0)
played closed-loop on the same seeds by the evaluation's own episode runner, into `sweep/sweep.json`; the table and
the `sweep` chart are drawn from that file by lib/reporting/sweep.py.

Checkpoints exist when the run trained with `grpo.checkpoint_every` > 0: `grpo/trainer/checkpoint-N/`, each with
its LoRA adapter and a sha256 manifest (lib/checkpoints.py). Every expected checkpoint (each multiple of
`checkpoint_every` up to the run's GRPO steps, and the last step, which the trainer also saves) must be there and
match its manifest before a single episode is played; a missing or corrupt one is an error naming its folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from ..checkpoints import CorruptCheckpointError, verify_checkpoint
from ..config import migrate_config
from ..runs import read_json_record, read_stage_record, to_run_relative

SWEEP = "sweep/sweep.json"
CHECKPOINT = re.compile(r"checkpoint-(\d+)")


class NoCheckpointsError(ValueError):
    """The run saved no GRPO checkpoints (grpo.checkpoint_every is 0, or none are on disk)."""


def checkpoint_folders(run_dir: Path | str) -> dict[int, Path]:
    """{step: folder} of every `grpo/trainer/checkpoint-N` folder on disk, by step."""
    trainer = Path(run_dir) / "grpo" / "trainer"
    found = {}
    for path in trainer.glob("checkpoint-*") if trainer.is_dir() else ():
        match = CHECKPOINT.fullmatch(path.name)
        if match and path.is_dir():
            found[int(match[1])] = path
    return dict(sorted(found.items()))


def expected_steps(every: int, steps: int) -> list[int]:
    """The steps the trainer saves with `save_steps=every`: each multiple of `every`, and the last step.

    >>> expected_steps(2, 5)
    [2, 4, 5]
    >>> expected_steps(0, 5)
    []
    """
    return sorted({*range(every, steps + 1, every), steps}) if every > 0 and steps > 0 else []


def sweep_checkpoints(every: int, run_dir: Path, grpo_steps: int) -> dict[int, Path]:
    """The checkpoints to sweep (`every`: the run's grpo.checkpoint_every), each verified against its manifest;
    NoCheckpointsError when the run has none, and CorruptCheckpointError naming the folder of a missing or corrupt
    one."""
    found = checkpoint_folders(run_dir)
    trainer = Path(run_dir) / "grpo" / "trainer"
    if not found:
        why = (
            f"this run has grpo.checkpoint_every={every}, so GRPO saved none"
            if every == 0
            else f"grpo.checkpoint_every={every} but {trainer} holds no checkpoint-N folder (deleted or never saved?)"
        )
        raise NoCheckpointsError(
            f"no GRPO checkpoints to sweep in {run_dir}: {why}; train with --set grpo.checkpoint_every=N (N > 0)"
        )
    missing = [step for step in expected_steps(every, grpo_steps) if step not in found]
    if missing:
        raise CorruptCheckpointError(
            f"checkpoint {trainer / f'checkpoint-{missing[0]}'} is missing: grpo.checkpoint_every={every} over "
            f"{grpo_steps} GRPO steps saves steps {expected_steps(every, grpo_steps)}; missing {missing}"
        )
    for folder in found.values():
        verify_checkpoint(folder)
    return found


def adapter_sha256(folder: Path) -> str:
    """The sha256 of a checkpoint's adapter weights alone (`adapter_model.*`), taken as `io.weights_sha256` takes a
    folder's: comparable with the adapter_sha256 grpo/stage.json records (a checkpoint also holds training_args.bin,
    which `weights_sha256` of the whole folder counts)."""
    from ..io import files_sha256

    files = sorted(p for p in Path(folder).glob("adapter_model.*") if p.suffix in (".safetensors", ".bin"))
    if not files:
        raise FileNotFoundError(f"no adapter weights (adapter_model.safetensors or .bin) in {folder}")
    return files_sha256(files)


def run_sweep(run_dir: Path | str, split: str = "holdout", episodes: int = 50) -> dict:
    """Play SFT (step 0) and every GRPO checkpoint greedily on the same `episodes` seeds of `split` (the evaluation's
    seeds: `split_seeds`), with the environment's teacher on those seeds as the reference line. Writes sweep.json."""
    import gc

    from ..inference import load_policy_model
    from ..io import atomic_write_json
    from ..runs import Run, read_config
    from ..stats import bootstrap_ci, paired_difference
    from .closed_loop import model_artifacts, returns_by_seed, run_model_episodes, split_seeds
    from .scripted import run_policy_episodes

    if episodes < 1:
        raise ValueError(f"--episodes must be at least 1, not {episodes}")
    run_dir = Path(run_dir)
    # the checkpoints first, from the files alone: a run without any says so whatever else it lacks
    recorded = read_json_record(run_dir / "manifest.json", "the run's manifest").get("config") or {}
    grpo = read_stage_record(run_dir, "grpo").get("metrics") or {}
    every = int((migrate_config(recorded).get("grpo") or {}).get("checkpoint_every", 0))
    folders = sweep_checkpoints(every, run_dir, int(grpo.get("steps") or 0))
    config = read_config(run_dir)
    run = Run(run_dir, config)
    artifacts = model_artifacts(config, run)
    seeds = list(split_seeds(config, split))[:episodes]
    resamples = config.eval.bootstrap_resamples
    targets = [(0, artifacts["sft"]["model"], None)]
    targets += [(step, artifacts["grpo"]["model"], folder) for step, folder in folders.items()]
    points, returns_by_step = [], {}
    for step, model_dir, adapter in targets:
        loaded = load_policy_model(model_dir, config.model, adapter)
        found, actions = run_model_episodes(config, loaded, seeds, split, desc=f"sweep/step {step}")
        source = loaded[2]
        del loaded
        gc.collect()
        weights = adapter_sha256(adapter) if adapter is not None else None
        returns = returns_by_seed(found)
        returns_by_step[step] = returns
        values = [returns[s] for s in seeds]
        points.append(
            {
                "step": step,
                "artifact": {"path": to_run_relative(source["path"], run_dir), "sha256": source["sha256"]},
                "kind": "sft" if adapter is None else "grpo checkpoint",
                # the adapter's weights alone, as grpo/stage.json's adapter_sha256 is taken: equal for the kept step
                "adapter_sha256": weights,
                "is_grpo_adapter": weights is not None and weights == grpo.get("adapter_sha256"),
                "n": len(values),
                "mean_return": float(np.mean(values)),
                "ci95": list(bootstrap_ci(values, resamples=resamples)),
                "invalid_rate": sum(not a["valid"] for a in actions) / len(actions),
                "paired_vs_sft": paired_difference(returns, returns_by_step[0], resamples=resamples),
                "returns": values,
            }
        )
    teacher = config.spec.teacher
    by_seed = returns_by_seed(run_policy_episodes(config.spec, teacher, seeds, split)[0])
    taught = [by_seed[s] for s in seeds]
    report = {
        "run_id": run_dir.name,
        "env": config.env,
        "split": split,
        "seeds": seeds,
        "greedy": True,
        "checkpoint_every": every,
        "grpo_steps": int(grpo["steps"]),
        "kept_step": grpo.get("kept_step"),
        "reference": {
            "role": "teacher",
            "policy": teacher,
            "mean_return": float(np.mean(taught)),
            "ci95": list(bootstrap_ci(taught, resamples=resamples)),
        },
        "points": points,
    }
    atomic_write_json(run_dir / SWEEP, report)
    return report
