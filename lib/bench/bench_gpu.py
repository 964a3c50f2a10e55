"""`python -m lib bench-gpu --profile gpu-smollm2 --out bench/bench_gpu_<gpu>.json`: where a profile's time goes.

One process, one throw-away run folder, the real stages:
- SFT: the real stage (`sft.max_steps` steps), its tokens/s (whole, and in its steady state: the steps after the
  warm-up and outside the profiled ones) next to a bare forward+backward of the same model on the trainer's own
  batches, replayed (the ratio says how much of the hardware the stage uses), the shapes the trainer actually fed
  the model (rows, padded length, padding share), and a torch.profiler table of two of its steps;
- GRPO: the real stage (`grpo.max_steps` steps), seconds per step split into generation, reward and the rest;
- evaluation: closed-loop episodes per second with every live episode answered by one generate call;
- what each trainer trained (parameter dtypes, trainable parameters), peak memory per phase (allocated, and reserved
  on CUDA), and the backend, dtype, device and package versions.
With `--random-model qwen2.5-0.5b` the stages train a random-weight model of that shape built here without the hub
(lib/bench/random_model.py); with `--modes auto,never` each `model.use_unsloth` mode runs in a fresh process of its
own (lib/bench/gpu_modes.py). It runs on a CPU too (the tests do, on the tiny model); its bars are the issue's, for
one lent GPU. The JSON holds no machine paths.
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

from ..config import load_config
from ..io import read_records
from ..models import cuda_available, resolved_precision
from ..provenance import hardware, package_versions
from ..runs import Run
from ..training.corpus import run_corpus
from .random_model import build_random_model
from .recorders import ModelRecorder, ShapeRecorder, bare_forward_backward, sync

PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "accelerate",
    "unsloth",
    "unsloth_zoo",
    "bitsandbytes",
    "xformers",
    "gguf",
)
# The bars, for one lent GPU (H100 or H200) with the gpu-smollm2 profile: the SFT trainer's steady state at
# half or more of the bare forward+backward of the same batches, and closed-loop evaluation at 20 episodes/s or more.
BARS = {"sft_steady_vs_bare_ratio_min": 0.5, "eval_episodes_per_s_min": 20.0}


def _reset_peak() -> None:
    gc.collect()  # the previous phase's trainer and model go before this phase is measured
    if cuda_available():  # pragma: no cover - CUDA only
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak_mb() -> float:
    if cuda_available():  # pragma: no cover - CUDA only
        return round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # process high-water mark


def _peaks() -> dict:
    """This phase's peak memory: allocated (on CPU: the process's max RSS so far) and, on CUDA, reserved."""
    peaks = {"allocated_mb": _peak_mb()}
    if cuda_available():  # pragma: no cover - CUDA only
        peaks["reserved_mb"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    return peaks


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


def _device() -> dict:
    """The machine, without its platform string; on CUDA also the torch CUDA version, compute capability, bf16
    support and the driver."""
    device = hardware()
    device.pop("platform", None)
    if cuda_available():  # pragma: no cover - CUDA only
        import subprocess

        props = torch.cuda.get_device_properties(0)
        device.update(
            torch_cuda=torch.version.cuda,
            capability=f"{props.major}.{props.minor}",
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
        try:
            device["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except OSError:
            pass
    return device


def _evaluation(config, run: Run, episodes: int) -> dict:
    """Closed-loop episodes per second of the SFT model on `episodes` holdout seeds, counting the batched model
    calls (candidate scoring, or generation with free text): every live episode is answered by one call."""
    from .. import candidates, inference
    from ..evaluation.closed_loop import run_model_episodes

    model, tokenizer, source = inference.load_policy_model(run.read_stage("sft")["outputs"]["model"], config.model)
    calls = []
    module, name = (
        (candidates, "score_answers") if config.model.action_space == "candidates" else (inference, "generate_actions")
    )
    real_call = getattr(module, name)

    def counted(model, tokenizer, message_batches, *args, **kwargs):
        calls.append(len(message_batches))
        return real_call(model, tokenizer, message_batches, *args, **kwargs)

    setattr(module, name, counted)
    try:
        sync()
        began = time.perf_counter()
        found, actions = run_model_episodes(
            config, (model, tokenizer, source), range(episodes), "holdout", desc="bench/evaluate"
        )
        sync()
        seconds = time.perf_counter() - began
    finally:
        setattr(module, name, real_call)
    return {
        "episodes": episodes,
        "seconds": round(seconds, 3),
        "episodes_per_s": round(episodes / seconds, 2),
        "actions": len(actions),
        "generate_calls": len(calls),
        "episodes_per_generate_call_mean": round(statistics.mean(calls), 1),
        "mean_return": round(statistics.mean(e.episode_return for e in found), 4),
    }


def _phases(config, run: Run, eval_episodes: int, bare_batches: int) -> dict:
    """The stages and loops measured, in order, each after the previous phase's memory is freed."""
    from ..training.grpo import train_grpo
    from ..training.sft import run_sft

    _reset_peak()
    shapes, sft_model, grpo_model = ShapeRecorder(), ModelRecorder(), ModelRecorder()
    sft = run_sft(config, run, extra_callbacks=[shapes, sft_model])
    peaks = {"sft": _peaks()}
    if not shapes.batches:
        raise RuntimeError(
            f"the SFT stage fed no batch after its {shapes.warmup_steps} warm-up and profiled steps: give it more "
            "steps (--sft-steps)"
        )
    _reset_peak()
    bare = bare_forward_backward(config, sft["inputs"]["base"], None, bare_batches, recorded=shapes.batches)
    # the same batches on both sides: the trainer's matched steps against their replay
    if bare["tokens"] != shapes.steady_state()["matched_tokens"]:
        raise RuntimeError(
            f"the bare loop replayed {bare['tokens']} tokens, the trainer's matched steps fed "
            f"{shapes.steady_state()['matched_tokens']}: not the same batches"
        )
    peaks["bare_forward_backward"] = _peaks()
    _reset_peak()
    # the policy's GRPO only (the stage would add grpo_no_sft with that ablation)
    train_grpo(config, run, extra_callbacks=[grpo_model])
    peaks["grpo"] = _peaks()
    grpo = _grpo_timings(run.dir / "grpo" / "train_log.jsonl")
    _reset_peak()
    evaluation = _evaluation(config, run, eval_episodes)
    peaks["evaluation"] = _peaks()
    trained = {"sft": sft_model.seen, "grpo": grpo_model.seen}
    return {
        "sft": sft,
        "shapes": shapes,
        "bare": bare,
        "grpo": grpo,
        "evaluation": evaluation,
        "peaks": peaks,
        "trained": trained,
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
    random_model: str | None = None,
) -> dict:
    """Measure every phase in a throw-away run folder (removed after); `random_model` (a shape of
    lib/bench/random_model.py) trains a random-weight model of that shape instead of the profile's."""
    steps = {"sft.max_steps": sft_steps, "grpo.max_steps": grpo_steps}
    config = load_config(profile, {**(overrides or {}), **steps})
    scratch = Path(tempfile.mkdtemp(prefix="bench-gpu-", dir=workdir))
    try:
        built = None
        if random_model is not None:
            model_dir = scratch / "random-model"
            config = load_config(profile, {**(overrides or {}), **steps, "model.name": str(model_dir)})
        run = Run(scratch / "run", config)
        began = time.perf_counter()
        run_corpus(config, run)
        corpus_s = time.perf_counter() - began
        if random_model is not None:
            rows = read_records(run.read_stage("corpus")["outputs"]["sft.jsonl"], missing_ok=False)
            built = build_random_model(
                random_model, rows, config.spec.vocabulary(), model_dir, resolved_precision(config.model)
            )
        phases = _phases(config, run, eval_episodes, bare_batches)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return _report(profile, overrides, config, corpus_s, built, phases)


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part and whole else None


def _report(profile: str, overrides: dict | None, config, corpus_s: float, built: dict | None, phases: dict) -> dict:
    sft_metrics, bare, grpo_timing, evaluation = (
        phases["sft"]["metrics"],
        phases["bare"],
        phases["grpo"],
        phases["evaluation"],
    )
    steady = phases["shapes"].steady_state()
    ratio = _ratio(sft_metrics["tokens_per_s"], bare["tokens_per_s"])
    steady_ratio = _ratio(steady["matched_tokens_per_s"], bare["tokens_per_s"])
    peaks = phases["peaks"]
    return {
        "profile": profile,
        "overrides": overrides or {},
        **({"random_model": built} if built else {}),
        "device": _device(),
        "backend": sft_metrics["backend"],
        "precision": resolved_precision(config.model),
        "logprob_kernel": sft_metrics["logprob_kernel"],
        "packages": package_versions(PACKAGES),
        "corpus_s": round(corpus_s, 2),
        "trained": phases["trained"],
        "sft": {
            "steps": sft_metrics["steps"],
            "batch_size": config.sft.batch_size,
            "grad_accum": config.sft.grad_accum,
            "train_tokens": sft_metrics["train_tokens"],
            "train_runtime_s": sft_metrics["train_runtime_s"],
            "tokens_per_s": sft_metrics["tokens_per_s"],
            "loss_first": sft_metrics["loss_first"],
            "loss_last": sft_metrics["loss_last"],
            "trainer_inputs": phases["shapes"].summary(),
            "steady_state": steady,
            "top_ops_two_steps": phases["shapes"].ops,
        },
        "bare_forward_backward": bare,
        # the whole stage's tokens/s (its first steps' warm-up and the two profiled steps included) against the bare
        # loop, and the trainer's matched steady steps (neither) against the same batches replayed
        "sft_stage_vs_bare_ratio": round(ratio, 4) if ratio else None,
        "sft_steady_vs_bare_ratio": round(steady_ratio, 4) if steady_ratio else None,
        "grpo": {
            "num_generations": config.grpo.num_generations,
            "batch_size": config.grpo.batch_size,
            "max_completion_length": config.grpo.max_completion_length,
            **grpo_timing,
        },
        "evaluation": evaluation,
        "peak_memory_mb": {
            **{phase: peak["allocated_mb"] for phase, peak in peaks.items()},
            "kind": "torch.cuda.max_memory_allocated per phase"
            if cuda_available()
            else "process max RSS so far (CPU: monotonic across phases)",
        },
        **(
            {"peak_memory_reserved_mb": {phase: peak["reserved_mb"] for phase, peak in peaks.items()}}
            if cuda_available()
            else {}
        ),
        "bars": {
            **BARS,
            "sft_ratio_met": bool(steady_ratio and steady_ratio >= BARS["sft_steady_vs_bare_ratio_min"]),
            "eval_rate_met": evaluation["episodes_per_s"] >= BARS["eval_episodes_per_s_min"],
        },
    }


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def summary_line(report: dict) -> str:
    """One line of the figures that matter: SFT's share of the bare loop, GRPO's step split, evaluation's rate."""
    sft, grpo, evaluation = report["sft"], report["grpo"]["median_after_first"], report["evaluation"]
    return (
        f"{report['device'].get('gpu', 'cpu')} {report['backend']} {report['precision']}: "
        f"SFT {_rate(sft['tokens_per_s'])} tok/s = {_share(report['sft_stage_vs_bare_ratio'])} of bare "
        f"forward+backward ({_rate(report['bare_forward_backward']['tokens_per_s'])} tok/s), steady state "
        f"{_rate(sft['steady_state']['matched_tokens_per_s'])} tok/s = {_share(report['sft_steady_vs_bare_ratio'])}; "
        f"GRPO {grpo['step_s']:.2f} s/step "
        f"(generation {grpo['generation_s']:.2f}, reward {grpo['reward_s']:.2f}, rest {grpo['rest_s']:.2f}); "
        f"evaluation {evaluation['episodes_per_s']:.1f} episodes/s"
    )
