"""`python -m lib bench-gpu --profile gpu-smollm2 --out bench/bench_gpu_<gpu>.json`: where a profile's time goes.

One process, one throw-away run folder, the real stages:
- SFT: the real stage (`sft.max_steps` steps), its tokens/s next to a bare forward+backward of the same model on
  the same batches (the ratio says how much of the hardware the stage uses), the shapes the trainer actually fed
  the model (rows, padded length, padding share), and a torch.profiler table of two of its steps;
- GRPO: the real stage (`grpo.max_steps` steps), seconds per step split into generation, reward and the rest;
- evaluation: closed-loop episodes per second with every live episode answered by one generate call;
- peak memory per phase, and the backend, dtype, device and package versions.
It runs on a CPU too (the tests do, on the tiny model); its bars are for an H100. The JSON holds no machine paths.
"""

from __future__ import annotations

import gc
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from ..config import load_config
from ..models import cuda_available, load_model, resolved_precision
from ..runs import Run, hardware, package_versions
from ..training.corpus import read_jsonl, run_corpus

# The bars, for an H100 with the gpu-smollm2 profile.
BARS = {"sft_stage_vs_bare_ratio_min": 0.30, "grpo_step_s_max": 0.7, "eval_episodes_per_s_min": 20.0}


def _sync() -> None:
    if cuda_available():  # pragma: no cover - CUDA only
        torch.cuda.synchronize()


def _reset_peak() -> None:
    gc.collect()  # the previous phase's trainer and model go before this phase is measured
    if cuda_available():  # pragma: no cover - CUDA only
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb() -> float:
    if cuda_available():  # pragma: no cover - CUDA only
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # process high-water mark


def _top_ops(prof, rows: int = 15) -> list[dict]:
    device = "cuda" if cuda_available() else "cpu"
    key = f"self_{device}_time_total"
    events = sorted(prof.key_averages(), key=lambda e: getattr(e, key, 0.0), reverse=True)[:rows]
    return [{"op": e.key, "calls": e.count, f"self_{device}_ms": round(getattr(e, key, 0.0) / 1000, 3)} for e in events]


def _profiler():
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda_available() else [])
    return profile(activities=activities)


def _backbone(model):
    return next(m for m in model.modules() if hasattr(m, "embed_tokens") and hasattr(m, "layers"))


class ShapeRecorder(TrainerCallback):
    """Records what the trainer feeds the model (rows, padded length, real tokens) and profiles two steps."""

    def __init__(self, profile_steps: tuple[int, int] = (3, 5)):
        self.shapes: list[tuple[int, int, int]] = []
        self.profile_steps = profile_steps
        self.ops: list[dict] = []
        self.gradient_checkpointing = None
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

        self._hook = _backbone(model).register_forward_pre_hook(record, with_kwargs=True)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.profile_steps[0]:
            self._prof = _profiler().__enter__()

    def on_step_end(self, args, state, control, **kwargs):
        if self._prof is not None and state.global_step >= self.profile_steps[1]:
            _sync()
            self._prof.__exit__(None, None, None)
            self.ops, self._prof = _top_ops(self._prof), None

    def on_train_end(self, args, state, control, **kwargs):
        if self._hook is not None:
            self._hook.remove()
        if self._prof is not None:
            self._prof.__exit__(None, None, None)
            self.ops, self._prof = _top_ops(self._prof), None

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


def bare_forward_backward(config, base: str, rows: list[dict], batches: int, warmup: int = 2) -> dict:
    """The same model, dtype and batches as the SFT stage (rows in corpus order, sft.batch_size per batch, padded
    to the longest), with nothing but forward, loss and backward: the ceiling the stage is compared with."""
    model, tokenizer, _ = load_model(base, config.model)
    device = "cuda" if cuda_available() else "cpu"
    model.to(device).train()
    tokenizer.padding_side = "right"
    texts = [tokenizer.apply_chat_template(r["prompt"] + r["completion"], tokenize=False) for r in rows]
    size = config.sft.batch_size
    chunks = [texts[i : i + size] for i in range(0, len(texts), size)][: warmup + batches]
    if len(chunks) <= warmup:
        raise ValueError(
            f"bare forward+backward needs more than {warmup} batches of {size} SFT rows; got {len(rows)} rows"
        )
    tokens, elapsed = 0, 0.0
    for i, chunk in enumerate(chunks):
        encoded = tokenizer(
            chunk,
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
            truncation=True,
            max_length=config.sft.max_length,
        ).to(device)
        labels = encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)
        _sync()
        began = time.perf_counter()
        model(**encoded, labels=labels).loss.backward()
        model.zero_grad(set_to_none=True)
        _sync()
        if i >= warmup:
            elapsed += time.perf_counter() - began
            tokens += int(encoded["attention_mask"].sum())
    with _profiler() as prof:
        encoded = tokenizer(chunks[-1], return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        model(**encoded, labels=encoded["input_ids"].masked_fill(encoded["attention_mask"] == 0, -100)).loss.backward()
        _sync()
    del model
    return {
        "batches": len(chunks) - warmup,
        "tokens": tokens,
        "seconds": round(elapsed, 4),
        "tokens_per_s": round(tokens / elapsed, 1),
        "top_ops_one_batch": _top_ops(prof),
    }


def _grpo_timings(log_path: Path) -> dict:
    steps = [r for r in map(json.loads, log_path.read_text().splitlines()) if "step_time" in r]
    if not steps:
        raise RuntimeError(f"GRPO logged no step timings in {log_path.name}")
    later = steps[1:] or steps  # the first step includes one-off warm-up (compilation, allocator)

    def median(key):
        return round(statistics.median(r.get(key, 0.0) for r in later), 4)

    split = {
        "step_s": median("step_time"),
        "generation_s": median("time/generation_s"),
        "reward_s": median("time/reward_s"),
    }
    split["rest_s"] = round(split["step_s"] - split["generation_s"] - split["reward_s"], 4)
    return {
        "steps": len(steps),
        "first_step_s": round(steps[0]["step_time"], 4),
        "median_after_first": split,
        "frac_reward_zero_std_mean": round(statistics.mean(r.get("frac_reward_zero_std", 0.0) for r in steps), 4),
    }


def run_bench(
    profile: str,
    overrides: dict | None = None,
    *,
    sft_steps: int = 30,
    grpo_steps: int = 6,
    eval_episodes: int = 200,
    bare_batches: int = 10,
    workdir: Path | None = None,
) -> dict:
    from ..evaluation.closed_loop import run_model_episodes
    from ..inference import load_policy_model
    from ..training.grpo import train_grpo
    from ..training.sft import run_sft

    config = load_config(profile, {**(overrides or {}), "sft.max_steps": sft_steps, "grpo.max_steps": grpo_steps})
    scratch = Path(tempfile.mkdtemp(prefix="bench-gpu-", dir=workdir))
    try:
        run = Run(scratch / "run", config)
        began = time.perf_counter()
        run_corpus(config, run)
        corpus_s = time.perf_counter() - began

        _reset_peak()
        recorder = ShapeRecorder()
        sft = run_sft(config, run, extra_callbacks=[recorder])
        sft_peak = _peak_mb()
        rows = read_jsonl(run.read_stage("corpus")["outputs"]["sft.jsonl"])
        _reset_peak()
        bare = bare_forward_backward(config, sft["inputs"]["base"], rows, bare_batches)
        bare_peak = _peak_mb()

        _reset_peak()
        train_grpo(config, run)  # the policy's GRPO only (the stage would add grpo_no_sft with that ablation)
        grpo_peak = _peak_mb()
        grpo_timing = _grpo_timings(run.dir / "grpo" / "train_log.jsonl")

        _reset_peak()
        model, tokenizer, source = load_policy_model(run.read_stage("sft")["outputs"]["model"], config.model)
        calls = []
        from .. import candidates, inference

        # the one batched model call per round: candidate scoring, or generation with free text
        module, name = (
            (candidates, "score_answers")
            if config.model.action_space == "candidates"
            else (inference, "generate_actions")
        )
        real_call = getattr(module, name)

        def counted(model, tokenizer, message_batches, *args, **kwargs):
            calls.append(len(message_batches))
            return real_call(model, tokenizer, message_batches, *args, **kwargs)

        setattr(module, name, counted)
        try:
            _sync()
            began = time.perf_counter()
            episodes, actions = run_model_episodes(
                config, (model, tokenizer, source), range(eval_episodes), "holdout", desc="bench/evaluate"
            )
            _sync()
            eval_s = time.perf_counter() - began
        finally:
            setattr(module, name, real_call)
        eval_peak = _peak_mb()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    sft_metrics = sft["metrics"]
    ratio = sft_metrics["tokens_per_s"] / bare["tokens_per_s"] if sft_metrics["tokens_per_s"] else None
    eval_rate = eval_episodes / eval_s
    device = hardware()
    device.pop("platform", None)
    report = {
        "profile": profile,
        "overrides": overrides or {},
        "device": device,
        "backend": sft_metrics["backend"],
        "precision": resolved_precision(config.model),
        "logprob_kernel": sft_metrics["logprob_kernel"],
        "packages": package_versions(("torch", "transformers", "trl", "peft", "accelerate", "unsloth", "gguf")),
        "corpus_s": round(corpus_s, 2),
        "sft": {
            "steps": sft_metrics["steps"],
            "batch_size": config.sft.batch_size,
            "grad_accum": config.sft.grad_accum,
            "train_tokens": sft_metrics["train_tokens"],
            "train_runtime_s": sft_metrics["train_runtime_s"],
            "tokens_per_s": sft_metrics["tokens_per_s"],
            "trainer_inputs": recorder.summary(),
            "top_ops_two_steps": recorder.ops,
        },
        "bare_forward_backward": bare,
        "sft_stage_vs_bare_ratio": round(ratio, 4) if ratio else None,
        "grpo": {
            "num_generations": config.grpo.num_generations,
            "batch_size": config.grpo.batch_size,
            "max_completion_length": config.grpo.max_completion_length,
            **grpo_timing,
        },
        "evaluation": {
            "episodes": eval_episodes,
            "seconds": round(eval_s, 3),
            "episodes_per_s": round(eval_rate, 2),
            "actions": len(actions),
            "generate_calls": len(calls),
            "episodes_per_generate_call_mean": round(statistics.mean(calls), 1),
            "mean_return": round(statistics.mean(e.episode_return for e in episodes), 4),
        },
        "peak_memory_mb": {
            "sft": sft_peak,
            "bare_forward_backward": bare_peak,
            "grpo": grpo_peak,
            "evaluation": eval_peak,
            "kind": "torch.cuda.max_memory_allocated per phase"
            if cuda_available()
            else "process max RSS so far (CPU: monotonic across phases)",
        },
        "bars_h100": {
            **BARS,
            "sft_ratio_met": bool(ratio and ratio >= BARS["sft_stage_vs_bare_ratio_min"]),
            "grpo_step_met": grpo_timing["median_after_first"]["step_s"] <= BARS["grpo_step_s_max"],
            "eval_rate_met": eval_rate >= BARS["eval_episodes_per_s_min"],
        },
    }
    return report
