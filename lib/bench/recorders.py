"""What the GPU benchmark (lib/bench/bench_gpu.py) hangs into a trainer or wraps around a loop: the shapes the trainer
feeds the model with a profiler table of two of its steps (`ShapeRecorder`), what it trains (`ModelRecorder`), and the
profiler and device synchronisation they share."""

from __future__ import annotations

import statistics
import time

import torch
from transformers import TrainerCallback

from ..models import cuda_available


def sync() -> None:
    if cuda_available():  # pragma: no cover - CUDA only
        torch.cuda.synchronize()


def top_ops(prof, rows: int = 15) -> list[dict]:
    device = "cuda" if cuda_available() else "cpu"
    # torch 2.x keeps a GPU's time as self_device_time_total (self_cuda_time_total is gone: every row read 0.0)
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:rows]
    return [{"op": e.key, "calls": e.count, f"self_{device}_ms": round(getattr(e, key, 0.0) / 1000, 3)} for e in events]


def profiler():
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda_available() else [])
    return profile(activities=activities)


def _backbone(model):
    return next(m for m in model.modules() if hasattr(m, "embed_tokens") and hasattr(m, "layers"))


class ShapeRecorder(TrainerCallback):
    """Records what the trainer feeds the model (rows, padded length, real tokens) and profiles two steps."""

    def __init__(self, profile_steps: tuple[int, int] = (3, 5), warmup_steps: int = 2, keep_batches: int = 10):
        self.shapes: list[tuple[int, int, int]] = []
        self.profile_steps = profile_steps
        self.ops: list[dict] = []
        self.gradient_checkpointing = None
        # steady state: the steps after `warmup_steps` and outside the profiled ones, each timed between device
        # synchronisations with the real tokens it fed, and the first `keep_batches` of their batches (input ids and
        # attention mask, on the CPU) for the bare loop to replay
        self.warmup_steps, self.keep_batches = warmup_steps, keep_batches
        self.steady: list[tuple[float, int]] = []
        self.batches: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._began: tuple[float, int] | None = None
        self._prof = None
        self._hook = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.gradient_checkpointing = bool(args.gradient_checkpointing)

        def record(module, positional, keyword):
            ids = keyword.get("input_ids", positional[0] if positional else None)
            mask = keyword.get("attention_mask")
            if ids is not None and torch.is_grad_enabled():
                real = int(mask.sum()) if isinstance(mask, torch.Tensor) and mask.dim() == 2 else ids.numel()
                self.shapes.append((ids.shape[0], ids.shape[1], real))
                if self._began is not None and len(self.batches) < self.keep_batches:
                    kept = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else torch.ones_like(ids)
                    self.batches.append((ids.detach().cpu(), kept.detach().cpu()))

        self._hook = _backbone(model).register_forward_pre_hook(record, with_kwargs=True)

    def _timed(self, step: int) -> bool:
        return step >= self.warmup_steps and not (self.profile_steps[0] <= step < self.profile_steps[1])

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.profile_steps[0]:
            self._prof = profiler().__enter__()
        if self._timed(state.global_step):
            sync()
            self._began = (time.perf_counter(), len(self.shapes))

    def on_step_end(self, args, state, control, **kwargs):
        if self._began is not None:
            sync()
            began, first = self._began
            self.steady.append((time.perf_counter() - began, sum(real for *_, real in self.shapes[first:])))
            self._began = None
        if self._prof is not None and state.global_step >= self.profile_steps[1]:
            sync()
            self._prof.__exit__(None, None, None)
            self.ops, self._prof = top_ops(self._prof), None

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self.ops, self._prof = top_ops(self._prof), None

    def summary(self) -> dict:
        if not self.shapes:
            return {"forwards": 0}
        rows, lengths, real = zip(*self.shapes)
        padded = sum(r * n for r, n in zip(rows, lengths))
        return {
            "forwards": len(self.shapes),
            "rows_per_forward": statistics.mean(rows),
            "padded_length_mean": round(statistics.mean(lengths), 1),
            "padded_length_max": max(lengths),
            "padding_share": round(1 - sum(real) / padded, 4),
            "gradient_checkpointing": self.gradient_checkpointing,
        }

    def steady_state(self) -> dict:
        """The timed steps (after the warm-up, outside the profiled ones): their seconds, real tokens and tokens/s,
        the trainer's whole step (data, forward, loss, metrics, backward, optimizer, callbacks) between device
        synchronisations."""
        seconds = sum(s for s, _ in self.steady)
        tokens = sum(t for _, t in self.steady)
        return {
            "steps": len(self.steady),
            "seconds": round(seconds, 4),
            "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1) if seconds else None,
            "step_s_median": round(statistics.median(s for s, _ in self.steady), 4) if self.steady else None,
        }


class ModelRecorder(TrainerCallback):
    """What the trainer trains, as it starts: the model's class, its parameters by dtype and how many it trains."""

    def __init__(self):
        self.seen: dict = {}

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        dtypes: dict[str, int] = {}
        for parameter in model.parameters():
            dtypes[str(parameter.dtype)] = dtypes.get(str(parameter.dtype), 0) + parameter.numel()
        self.seen = {
            "class": type(model).__name__,
            "parameter_dtypes": dtypes,
            "trainable_parameters": sum(p.numel() for p in model.parameters() if p.requires_grad),
        }
