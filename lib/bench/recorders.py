"""What the GPU benchmark (lib/bench/bench_gpu.py) hangs into a trainer or wraps around a loop: the shapes the trainer
feeds the model with a profiler table of two of its steps and its steady-state timing (`ShapeRecorder`), what it
trains (`ModelRecorder`), the bare forward+backward loop the SFT stage is compared with (`bare_forward_backward`), and
the profiler and device synchronisation they share."""

from __future__ import annotations

import statistics
import time

import torch
from transformers import TrainerCallback

from ..models import cuda_available, load_model, with_lora


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
    """Records what the trainer feeds the model (rows, padded length, real tokens), profiles two steps, and times the
    steady state.

    Steady state: the steps after `warmup_steps` and outside the profiled ones, each timed between device
    synchronisations (the trainer's forward, loss, metrics, backward, optimizer and callbacks; the batch is fetched
    before a step begins). The batches of the first `keep_batches` forwards of those steps are kept (on their
    device) for the bare loop to replay, so the two are compared on the same batches (`matched`). Nothing in a
    timed step waits on the device for the recorder: masks are summed after training."""

    def __init__(self, profile_steps: tuple[int, int] = (3, 5), warmup_steps: int = 2, keep_batches: int = 10):
        self.profile_steps = profile_steps
        self.ops: list[dict] = []
        self.gradient_checkpointing = None
        self.warmup_steps, self.keep_batches = warmup_steps, keep_batches
        self._forwards: list[tuple[int, int, torch.Tensor | None]] = []  # rows, padded length, 2-D mask
        self._steps: list[tuple[float, int, int]] = []  # seconds, its forwards [first, end)
        self._kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}  # forward index -> (input ids, mask)
        self._began: tuple[float, int] | None = None
        self._prof = None
        self._hook = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.gradient_checkpointing = bool(args.gradient_checkpointing)

        def record(module, positional, keyword):
            ids = keyword.get("input_ids", positional[0] if positional else None)
            if ids is None or not torch.is_grad_enabled():
                return
            mask = keyword.get("attention_mask")
            mask = mask.detach() if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
            if self._began is not None and len(self._kept) < self.keep_batches:
                kept = mask if mask is not None else torch.ones_like(ids)
                self._kept[len(self._forwards)] = (ids.detach().clone(), kept.clone())
            self._forwards.append((ids.shape[0], ids.shape[1], mask))

        self._hook = _backbone(model).register_forward_pre_hook(record, with_kwargs=True)

    def _timed(self, step: int) -> bool:
        return step >= self.warmup_steps and not (self.profile_steps[0] <= step < self.profile_steps[1])

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.profile_steps[0]:
            self._prof = profiler().__enter__()
        if self._timed(state.global_step):
            sync()
            self._began = (time.perf_counter(), len(self._forwards))

    def on_step_end(self, args, state, control, **kwargs):
        if self._began is not None:
            sync()
            began, first = self._began
            self._steps.append((time.perf_counter() - began, first, len(self._forwards)))
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

    def _real(self, index: int) -> int:
        rows, length, mask = self._forwards[index]
        return int(mask.sum()) if mask is not None else rows * length

    @property
    def shapes(self) -> list[tuple[int, int, int]]:
        """(rows, padded length, real tokens) of every training forward."""
        return [(rows, length, self._real(i)) for i, (rows, length, _) in enumerate(self._forwards)]

    @property
    def steady(self) -> list[tuple[float, int]]:
        """(seconds, real tokens) of every timed step."""
        return [(seconds, sum(self._real(i) for i in range(first, end))) for seconds, first, end in self._steps]

    def _matched_steps(self) -> list[tuple[float, int, int]]:
        """The timed steps whose every forward's batch was kept."""
        return [step for step in self._steps if step[1] < step[2] and all(i in self._kept for i in range(*step[1:]))]

    @property
    def batches(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The kept batches of the matched steps, in order: what the bare loop replays."""
        return [self._kept[i] for _, first, end in self._matched_steps() for i in range(first, end)]

    def summary(self) -> dict:
        if not self._forwards:
            return {"forwards": 0}
        rows, lengths, real = zip(*self.shapes)
        padded = sum(r * n for r, n in zip(rows, lengths))
        return {
            "forwards": len(self._forwards),
            "rows_per_forward": statistics.mean(rows),
            "padded_length_mean": round(statistics.mean(lengths), 1),
            "padded_length_max": max(lengths),
            "padding_share": round(1 - sum(real) / padded, 4),
            "gradient_checkpointing": self.gradient_checkpointing,
        }

    def steady_state(self) -> dict:
        """The timed steps: their seconds, real tokens and tokens/s; and the same for the matched ones, whose batches
        the bare loop replays."""

        def figures(steps):
            seconds = sum(s for s, _, _ in steps)
            tokens = sum(self._real(i) for _, first, end in steps for i in range(first, end))
            return seconds, tokens, (round(tokens / seconds, 1) if seconds else None)

        seconds, tokens, rate = figures(self._steps)
        matched = self._matched_steps()
        matched_seconds, matched_tokens, matched_rate = figures(matched)
        return {
            "steps": len(self._steps),
            "seconds": round(seconds, 4),
            "tokens": tokens,
            "tokens_per_s": rate,
            "step_s_median": round(statistics.median(s for s, _, _ in self._steps), 4) if self._steps else None,
            "matched_steps": len(matched),
            "matched_seconds": round(matched_seconds, 4),
            "matched_tokens": matched_tokens,
            "matched_tokens_per_s": matched_rate,
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


def _forward_backward(model, batch: dict, device: str) -> int:
    """One forward, loss and backward of `batch` (every real token labelled); returns its real tokens."""
    batch = {key: value.to(device) for key, value in batch.items()}
    model(**batch, labels=batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)).loss.backward()
    model.zero_grad(set_to_none=True)
    return int(batch["attention_mask"].sum())


def bare_forward_backward(
    config, base: str, rows: list[dict] | None, batches: int, warmup: int = 2, recorded: list | None = None
) -> dict:
    """The SFT stage's model, dtype and trainable weights (its LoRA adapters, when it trains them) with nothing but
    forward, loss and backward: the ceiling the stage is compared with. `recorded` (the (input ids, attention mask)
    batches the SFT trainer fed the model, from ShapeRecorder) replays the trainer's own batches, every one once
    untimed first; without it, `rows` in corpus order, sft.batch_size per batch, padded to the longest (the first
    `warmup` batches untimed)."""
    from ..training.sft import trains_adapter

    model, tokenizer, backend = load_model(base, config.model)
    if trains_adapter(config):
        model, peft = with_lora(model, config.model, backend)
        if peft is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft)
    device = "cuda" if cuda_available() else "cpu"
    model.to(device).train()
    if recorded:
        encoded_batches = [{"input_ids": ids, "attention_mask": mask} for ids, mask in recorded]
        warmup = len(encoded_batches)
        encoded_batches = encoded_batches + encoded_batches
    else:
        tokenizer.padding_side = "right"
        texts = [tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) for r in rows or []]
        size = config.sft.batch_size
        chunks = [texts[i : i + size] for i in range(0, len(texts), size)][: warmup + batches]
        if len(chunks) <= warmup:
            raise ValueError(
                f"bare forward+backward needs more than {warmup} batches of {size} SFT rows; got {len(texts)} rows"
            )
        encoded_batches = [
            dict(
                tokenizer(
                    chunk,
                    return_tensors="pt",
                    padding=True,
                    add_special_tokens=False,
                    truncation=True,
                    max_length=config.sft.max_length,
                )
            )
            for chunk in chunks
        ]
    tokens, elapsed = 0, 0.0
    for i, encoded in enumerate(encoded_batches):
        sync()
        began = time.perf_counter()
        real = _forward_backward(model, encoded, device)
        sync()
        if i >= warmup:
            elapsed += time.perf_counter() - began
            tokens += real
    with profiler() as prof:
        _forward_backward(model, encoded_batches[-1], device)
        sync()
    del model
    return {
        "batches": len(encoded_batches) - warmup,
        "source": "the SFT trainer's own batches, replayed" if recorded else "corpus rows in order",
        "trainable": "the SFT stage's LoRA adapters" if trains_adapter(config) else "every weight",
        "tokens": tokens,
        "seconds": round(elapsed, 4),
        "tokens_per_s": round(tokens / elapsed, 1) if elapsed else None,
        "top_ops_one_batch": top_ops(prof),
    }
