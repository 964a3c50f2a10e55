"""What the sft and grpo stages put around a TRL trainer: the precision and tracking arguments, the callbacks that
log every step to a jsonl file and write each checkpoint's manifest, and the atomic save of what was trained."""

from __future__ import annotations

import json
import resource
import shutil
import time
from pathlib import Path

import torch
from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ..checkpoints import write_checkpoint_manifest
from ..config import RunConfig
from ..distributed import is_main, wait_for_everyone
from ..models import cuda_available, resolved_precision
from ..runs import Run


def precision_flags(config: RunConfig) -> dict:
    on_cuda, precision = cuda_available(), resolved_precision(config.model)
    return {"use_cpu": not on_cuda, "fp16": on_cuda and precision == "fp16", "bf16": on_cuda and precision == "bf16"}


class TrackingUnavailableError(RuntimeError):
    """`tracking` names a tracker whose package is not installed."""


def tracking_args(config: RunConfig, run: Run, stage: str) -> dict:
    """TRL's report_to (and trackio's project and run name) for `config.tracking`. Trackio logs locally: the Space
    id is pinned to None, so nothing leaves the machine."""
    if config.tracking == "none":
        return {"report_to": "none"}
    import importlib.util

    if importlib.util.find_spec(config.tracking) is None:
        raise TrackingUnavailableError(
            f"tracking: {config.tracking} needs the {config.tracking} package: pip install {config.tracking} "
            "(or set tracking: none)"
        )
    extra = {}
    if config.tracking == "trackio":
        extra = {"project": f"agent-rl-workbook-{config.env}", "trackio_space_id": None}
    return {"report_to": [config.tracking], "run_name": f"{run.dir.name}/{stage}", **extra}


def _peak_memory_mb() -> float:
    if cuda_available():  # pragma: no cover - CUDA only
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class JsonlLogger(TrainerCallback):
    """Writes every trainer log (loss, reward, timings, memory) to a jsonl file as it happens."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.writes = is_main()  # under accelerate / torchrun rank 0 alone writes the log
        if self.writes:
            self.path.unlink(missing_ok=True)
        self._last: tuple[float, float] | None = None  # (time, num_tokens) at the previous log

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.writes:
            return
        record = {
            "step": state.global_step,
            "time": time.time(),
            "peak_memory_mb": round(_peak_memory_mb(), 1),
            **{k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))},
        }
        if all(k in record for k in ("step_time", "time/generation_s", "time/reward_s")):
            # TRL's step_time covers generation, reward and the optimisation step; the rest is forward+backward
            record["time/backward_s"] = record["step_time"] - record["time/generation_s"] - record["time/reward_s"]
        if "num_tokens" in record:
            if self._last is not None and record["time"] > self._last[0]:
                record["throughput_tokens_per_s"] = (record["num_tokens"] - self._last[1]) / (
                    record["time"] - self._last[0]
                )
            self._last = (record["time"], record["num_tokens"])
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")


class CheckpointManifestCallback(TrainerCallback):
    """After each checkpoint the trainer saves (<output_dir>/checkpoint-<step>/, with everything TRL adds to it),
    writes its manifest (lib/checkpoints.py); on the process that saves (args.should_save)."""

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if args.should_save and folder.is_dir():
            write_checkpoint_manifest(folder)


def save_atomically(trainer, tokenizer, target: Path, merge: bool) -> None:
    """Save into a temporary sibling folder and rename it into place, so a crash never leaves half a model. Under
    accelerate / torchrun rank 0 saves and every process waits until it has."""
    if not is_main():
        wait_for_everyone()
        return
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model = trainer.model
    if merge:
        model = model.merge_and_unload()
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(target)
    tmp.rename(target)
    wait_for_everyone()
