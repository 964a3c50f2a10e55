"""GPU check: the repo's real corpus -> sft -> grpo stages on a Qwen2.5-0.5B-shaped model, on CUDA, no hub access.

    python -m lib.bench.gpu_check --out bench/gpu_check_<gpu>.json [--log bench/gpu_check_<gpu>.log]

What it does, in order:
1. `python -m lib stage corpus --profile t4-qwen0.5b --run-dir W/run-<mode> --set ...` (small overrides: few SFT
   episodes, few GRPO prompts and steps; `model.name` = the folder of step 2; `model.use_unsloth` = the mode).
2. Once, on the CPU: a byte-level BPE tokenizer from `lib.models.train_tokenizer`, trained on that corpus's text (the
   same texts `lib.models.build_tiny` uses), and a randomly initialised `Qwen2ForCausalLM` with Qwen2.5-0.5B-Instruct's
   shape (vocab padded to 151,936 like the real model, so embedding size and memory match), saved as a normal
   Hugging Face folder in fp16 (`--save-dtype`).
3. `python -m lib stage sft --run-dir ...`, then `stage grpo` (the run's own config; each stage a fresh process that
   calls `lib.__main__.main`, then reports `torch.cuda.max_memory_allocated/reserved`; an NVML thread here samples
   the whole device's used memory meanwhile).
4. Reads each stage's stage.json and train_log.jsonl and writes one JSON (backend, precision, peak memory, SFT
   tokens/s and steps/s, GRPO seconds per step split into generation / reward / the rest), and prints a table.

Modes: `auto` (Unsloth when importable: backend `trl_unsloth`) and `never` (`trl_transformers`). `auto` is skipped,
with the reason recorded, when `import unsloth` fails. Exits 2 with a message when CUDA is absent.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]  # the repository root (this file is lib/bench/gpu_check.py)
PROFILE = "t4-qwen0.5b"
# Qwen/Qwen2.5-0.5B-Instruct's config.json shape (vocab 151,936 including padding; tied embeddings).
QWEN25_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
)
# Only for checking this script's plumbing on a machine without a GPU (--allow-cpu --small); never a benchmark.
SMALL = dict(
    QWEN25_05B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=16384,
)
PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "peft",
    "datasets",
    "accelerate",
    "tokenizers",
    "pydantic",
    "triton",
    "unsloth",
    "unsloth_zoo",
    "bitsandbytes",
    "xformers",
    "torchao",
    "cut_cross_entropy",
    "huggingface_hub",
)
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}


def versions() -> dict:
    from lib.runs import package_versions

    return package_versions(PACKAGES)


# ---------------------------------------------------------------------------------------------------- child side
def child(mem_path: str, argv: list[str]) -> int:
    """Runs one `python -m lib ...` command in this process, then writes its CUDA memory peaks to mem_path."""
    import torch

    import lib.models
    from lib.__main__ import main

    loaded = []
    original_load_model = lib.models.load_model

    def observed_load_model(*args, **kwargs):
        """Observation only: records the dtypes of what lib.models.load_model returned (lib.training.train
        imports it later)."""
        model, tokenizer, backend = original_load_model(*args, **kwargs)
        dtypes: dict[str, int] = {}
        for parameter in model.parameters():
            dtypes[str(parameter.dtype)] = dtypes.get(str(parameter.dtype), 0) + parameter.numel()
        loaded.append(
            {
                "backend": backend,
                "parameter_dtypes": dtypes,
                "class": type(model).__name__,
                "config_dtype": str(getattr(model.config, "dtype", None)),
            }
        )
        return model, tokenizer, backend

    lib.models.load_model = observed_load_model
    began = time.perf_counter()
    rc = main(argv)
    record = {"rc": rc, "in_process_s": round(time.perf_counter() - began, 2), "loaded_models": loaded}
    if torch.cuda.is_available():
        record["max_memory_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        record["max_memory_reserved_mb"] = round(torch.cuda.max_memory_reserved() / 2**20, 1)
    record["unsloth_imported"] = "unsloth" in sys.modules
    Path(mem_path).write_text(json.dumps(record))
    return rc


# --------------------------------------------------------------------------------------------------- parent side
class NvmlPeak:
    """Samples the device's used memory (all processes, CUDA contexts included) every 0.2 s while running."""

    def __init__(self):
        self.peak_mb = None
        self._stop = threading.Event()
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # noqa: BLE001 - NVML is optional
            self._nvml = None

    def used_mb(self):
        return self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**20 if self._nvml else None

    def __enter__(self):
        if self._nvml:
            self.peak_mb = self.used_mb()
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(0.2):
            self.peak_mb = max(self.peak_mb, self.used_mb())

    def __exit__(self, *exc):
        self._stop.set()
        if self._nvml:
            self._thread.join()
            self.peak_mb = round(max(self.peak_mb, self.used_mb()), 1)


def run_stage(lib_argv: list[str], log_path: Path, env: dict) -> dict:
    mem_path = log_path.with_suffix(".mem.json")
    mem_path.unlink(missing_ok=True)
    command = [sys.executable, "-m", "lib.bench.gpu_check", "_child", str(mem_path), *lib_argv]
    began = time.perf_counter()
    with NvmlPeak() as nvml, log_path.open("w") as log:
        log.write("$ python -m lib " + " ".join(lib_argv) + "\n")
        log.flush()
        proc = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    record = {"wall_s": round(time.perf_counter() - began, 2), "rc": proc.returncode, "nvml_peak_used_mb": nvml.peak_mb}
    if mem_path.exists():
        record.update(json.loads(mem_path.read_text()))
    if proc.returncode != 0:
        record["error_tail"] = log_path.read_text().splitlines()[-60:]
    return record


def build_model(run_dir: Path, model_dir: Path, shape: dict, tokenizer_vocab: int, save_dtype: str, seed: int) -> dict:
    """Tokenizer from the corpus (lib.models.train_tokenizer), random Qwen2.5-0.5B-shaped model, saved as an HF
    folder."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from lib.models import train_tokenizer
    from lib.runs import read_config
    from lib.training.corpus import read_jsonl

    began = time.perf_counter()
    config = read_config(run_dir)
    rows = read_jsonl(run_dir / "corpus" / "sft.jsonl")
    texts = [m["content"] for r in rows for m in r["prompt"] + r["completion"]] + [config.spec.vocabulary()]
    tokenizer = train_tokenizer(texts, tokenizer_vocab)
    if len(tokenizer) > shape["vocab_size"]:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than vocab_size {shape['vocab_size']}")
    torch.manual_seed(seed)
    qwen = Qwen2Config(
        **shape, bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model = Qwen2ForCausalLM(qwen)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    dtype = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[save_dtype]
    model = model.to(dtype)
    shutil.rmtree(model_dir, ignore_errors=True)
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    prompt_tokens = [
        len(
            tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for r in rows
    ]
    return {
        "folder": str(model_dir),
        "save_dtype": save_dtype,
        "shape": shape,
        "parameters": sum(p.numel() for p in model.parameters()),
        "folder_mb": round(sum(f.stat().st_size for f in model_dir.iterdir()) / 2**20, 1),
        "tokenizer_len": len(tokenizer),
        "tokenizer_vocab_requested": tokenizer_vocab,
        "sft_prompt_tokens_mean": round(statistics.mean(prompt_tokens), 1),
        "sft_prompt_tokens_max": max(prompt_tokens),
        "build_s": round(time.perf_counter() - began, 2),
        "note": "random weights; tokenizer is a byte-level BPE trained on this corpus (lib.models.train_tokenizer), "
        "not Qwen's, so token counts per prompt differ from the real model's",
    }


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def _mean(values):
    return round(statistics.mean(values), 4) if values else None


def _median(values):
    return round(statistics.median(values), 4) if values else None


def summarize_sft(run_dir: Path, record: dict) -> dict:
    stage = (
        json.loads((run_dir / "sft" / "stage.json").read_text()) if (run_dir / "sft" / "stage.json").exists() else {}
    )
    log = read_jsonl(run_dir / "sft" / "train_log.jsonl")
    final = next((r for r in reversed(log) if "train_runtime" in r), {})
    tokens = [r["num_tokens"] for r in log if "num_tokens" in r]
    metrics = stage.get("metrics", {})
    out = {
        "status": stage.get("status"),
        "backend": metrics.get("backend"),
        "logprob_kernel": metrics.get("logprob_kernel"),
        "steps": metrics.get("steps"),
        "stage_duration_s": stage.get("duration_s"),
        "loss_first": metrics.get("loss_first"),
        "loss_last": metrics.get("loss_last"),
        "train_runtime_s": final.get("train_runtime"),
        "train_steps_per_second": final.get("train_steps_per_second"),
        "train_samples_per_second": final.get("train_samples_per_second"),
        "num_tokens": tokens[-1] if tokens else None,
        "peak_memory_mb_train_log": max((r["peak_memory_mb"] for r in log), default=None),
    }
    if tokens and final.get("train_runtime"):
        out["tokens_per_s"] = round(tokens[-1] / final["train_runtime"], 1)
    steady = [r["throughput_tokens_per_s"] for r in log if "throughput_tokens_per_s" in r][1:]
    out["tokens_per_s_median_between_logs_after_first"] = _median(steady)
    return {**record, **out}


def summarize_grpo(run_dir: Path, record: dict) -> dict:
    stage = (
        json.loads((run_dir / "grpo" / "stage.json").read_text()) if (run_dir / "grpo" / "stage.json").exists() else {}
    )
    log = read_jsonl(run_dir / "grpo" / "train_log.jsonl")
    steps = [
        {
            "step": r["step"],
            "step_time": r.get("step_time"),
            "generation_s": r.get("time/generation_s"),
            "reward_s": r.get("time/reward_s"),
            "backward_s": r.get("time/backward_s"),
            "reward": r.get("reward"),
            "completion_mean_length": r.get("completions/mean_length"),
            "peak_memory_mb": r.get("peak_memory_mb"),
        }
        for r in log
        if "step_time" in r
    ]
    final = next((r for r in reversed(log) if "train_runtime" in r), {})
    later = steps[1:]  # the first step carries one-off warm-up (kernel compiles, allocator growth)
    metrics = stage.get("metrics", {})
    return {
        **record,
        "status": stage.get("status"),
        "backend": metrics.get("backend"),
        "logprob_kernel": metrics.get("logprob_kernel"),
        "steps": metrics.get("steps"),
        "stage_duration_s": stage.get("duration_s"),
        "train_runtime_s": final.get("train_runtime"),
        "reward_mean": metrics.get("reward_mean"),
        "frac_reward_zero_std_mean": metrics.get("frac_reward_zero_std_mean"),
        "peak_memory_mb_train_log": max((r["peak_memory_mb"] for r in log), default=None),
        "first_step_s": steps[0]["step_time"] if steps else None,
        "after_first": {
            "n": len(later),
            **{
                f"{k}_median": _median([s[k] for s in later if s[k] is not None])
                for k in ("step_time", "generation_s", "reward_s", "backward_s")
            },
            **{
                f"{k}_mean": _mean([s[k] for s in later if s[k] is not None])
                for k in ("step_time", "generation_s", "reward_s", "backward_s")
            },
        },
        "per_step": steps,
    }


def unsloth_probe(env: dict) -> dict:
    if metadata_version("unsloth") is None:
        return {"installed": False, "importable": False, "error": "unsloth is not installed"}
    proc = subprocess.run(
        [sys.executable, "-c", "import unsloth, sys; print('unsloth', unsloth.__version__)"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    return {
        "installed": True,
        "importable": proc.returncode == 0,
        "error": None if proc.returncode == 0 else "\n".join(lines[-25:]),
        "import_output_tail": lines[-10:],
    }


def metadata_version(name: str):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def source_info() -> dict:
    """Which code ran: REPO/SOURCE_SHA (written when the tree is a `git archive` snapshot), else git itself."""
    from lib.runs import git_state

    marker = REPO / "SOURCE_SHA"
    if marker.exists():
        return {"sha": marker.read_text().strip(), "how": "git archive snapshot (SOURCE_SHA)", "path": str(REPO)}
    state = git_state(REPO)
    how = "git" if state["sha"] else "unknown (no git, no SOURCE_SHA)"
    return {**state, "how": how, "path": str(REPO)}


def device_info() -> dict:
    import torch

    info = {
        "cuda": torch.cuda.is_available(),
        "torch_cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    if info["cuda"]:
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_mb=round(props.total_memory / 2**20),
            capability=f"{props.major}.{props.minor}",
            bf16_supported=torch.cuda.is_bf16_supported(),
        )
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except OSError:
            pass
    return info


def fmt(value, spec=".1f"):
    return "-" if value is None else format(value, spec)


def table(result: dict) -> str:
    head = (
        f"{'mode':<6} {'backend':<17} {'prec':<5} {'SFT steps':>9} {'SFT tok/s':>9} {'SFT it/s':>8} "
        f"{'SFT peak MB':>11} {'GRPO s/step':>11} {'gen':>6} {'reward':>6} {'rest':>6} {'GRPO peak MB':>12} "
        f"{'status':<10}"
    )
    lines = [head, "-" * len(head)]
    for mode, run in result["runs"].items():
        if run.get("skipped"):
            lines.append(f"{mode:<6} skipped: {run['skipped']}")
            continue
        sft, grpo = run.get("sft", {}), run.get("grpo", {})
        a = grpo.get("after_first", {})
        status = "ok" if sft.get("rc") == 0 and grpo.get("rc") == 0 else "FAILED"
        lines.append(
            f"{mode:<6} {str(sft.get('backend') or grpo.get('backend')):<17} {run['precision']:<5} "
            f"{fmt(sft.get('steps'), 'd') if sft.get('steps') is not None else '-':>9} "
            f"{fmt(sft.get('tokens_per_s'), '.0f'):>9} "
            f"{fmt(sft.get('train_steps_per_second'), '.2f'):>8} {fmt(sft.get('max_memory_allocated_mb'), '.0f'):>11} "
            f"{fmt(a.get('step_time_median'), '.2f'):>11} {fmt(a.get('generation_s_median'), '.2f'):>6} "
            f"{fmt(a.get('reward_s_median'), '.2f'):>6} {fmt(a.get('backward_s_median'), '.2f'):>6} "
            f"{fmt(grpo.get('max_memory_allocated_mb'), '.0f'):>12} {status:<10}"
        )
    lines.append(
        "SFT/GRPO peak MB: torch.cuda.max_memory_allocated in the stage process; GRPO s/step: median over steps "
        "after the first, split into generation, reward and the rest (forward+backward+optimizer)."
    )
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] == "_child":
        return child(sys.argv[2], sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file to write")
    parser.add_argument("--log", type=Path, default=None, help="also write every stage's console output here")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path(os.environ.get("TMPDIR", "/tmp")) / "gpu_check",
        help="scratch folder for the model and the run folders (emptied first)",
    )
    parser.add_argument("--modes", default="auto,never", help="model.use_unsloth values to run, in order")
    parser.add_argument("--sft-episodes", type=int, default=40)
    parser.add_argument("--sft-epochs", type=float, default=1.0)
    parser.add_argument("--grpo-prompts", type=int, default=64)
    parser.add_argument("--grpo-steps", type=int, default=8)
    parser.add_argument("--tokenizer-vocab", type=int, default=8000)
    parser.add_argument("--save-dtype", choices=["fp16", "fp32", "bf16"], default="fp16")
    parser.add_argument(
        "--precision",
        choices=["fp16", "bf16", "fp32"],
        default="fp16",
        help="model.precision for the stages (the T4 profile's is fp16)",
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="extra config overrides")
    parser.add_argument("--note", default=None, help="free text stored in the JSON (e.g. a patch applied to the tree)")
    parser.add_argument("--allow-cpu", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--small", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print(
            "gpu_check: CUDA is not available (torch.cuda.is_available() is False); this check needs an NVIDIA GPU.",
            file=sys.stderr,
        )
        return 2
    started = time.time()
    env = {**os.environ, **OFFLINE_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    model_dir = args.work / "qwen2.5-0.5b-shaped"
    shape = SMALL if args.small else QWEN25_05B
    overrides = [
        f"model.name={model_dir}",
        f"model.precision={args.precision}",
        f"corpus.sft_episodes={args.sft_episodes}",
        f"corpus.grpo_prompts={args.grpo_prompts}",
        f"sft.epochs={args.sft_epochs}",
        "sft.logging_steps=1",
        f"grpo.max_steps={args.grpo_steps}",
        *args.set,
    ]
    result = {
        "what": "lib stages corpus -> sft -> grpo (profile t4-qwen0.5b, small overrides) on a random-weight "
        "Qwen2.5-0.5B-shaped model",
        "started_unix": round(started),
        "source": source_info(),
        "device": device_info(),
        "packages": versions(),
        "profile": PROFILE,
        "overrides": overrides,
        "small_shape": args.small,
        "note": args.note,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "runs": {},
    }
    print(f"device: {result['device'].get('gpu', 'cpu')}; packages: {result['packages']}", flush=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "auto" in modes:
        result["unsloth"] = unsloth_probe(env)
        print(f"unsloth: {result['unsloth']}", flush=True)
    logs = []

    def save():
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    for mode in modes:
        run_dir = args.work / f"run-{mode}"
        run = result["runs"][mode] = {"use_unsloth": mode, "precision": args.precision, "run_dir": str(run_dir)}
        if mode == "auto" and not result["unsloth"]["importable"]:
            run["skipped"] = (
                "import unsloth failed, so auto would either crash in lib.models.load_model (installed) "
                "or fall back to trl_transformers (not installed): " + result["unsloth"]["error"].splitlines()[-1]
            )
            print(f"[{mode}] skipped: {run['skipped']}", flush=True)
            continue
        stage_args = {
            "corpus": [
                "stage",
                "corpus",
                "--profile",
                PROFILE,
                "--run-dir",
                str(run_dir),
                "--set",
                *overrides,
                f"model.use_unsloth={mode}",
            ],
            "sft": ["stage", "sft", "--run-dir", str(run_dir)],
            "grpo": ["stage", "grpo", "--run-dir", str(run_dir)],
        }
        for stage, lib_argv in stage_args.items():
            log_path = args.work / f"{mode}-{stage}.log"
            print(f"[{mode}] {stage} ...", flush=True)
            record = run_stage(lib_argv, log_path, env)
            logs.append(log_path)
            if stage == "sft":
                record = summarize_sft(run_dir, record)
            elif stage == "grpo":
                record = summarize_grpo(run_dir, record)
            run[stage] = record
            save()
            print(f"[{mode}] {stage} rc={record['rc']} wall {record['wall_s']} s", flush=True)
            if record["rc"] != 0:
                print("\n".join(record.get("error_tail", [])[-30:]), flush=True)
                break
            if stage == "corpus" and not model_dir.exists():
                result["model"] = build_model(run_dir, model_dir, shape, args.tokenizer_vocab, args.save_dtype, seed=0)
                print(f"model: {json.dumps({k: v for k, v in result['model'].items() if k != 'shape'})}", flush=True)
        run["wall_s"] = round(sum(run[s]["wall_s"] for s in stage_args if s in run), 2)
    result["total_wall_s"] = round(time.time() - started, 1)
    result["table"] = table(result).splitlines()
    save()
    if args.log:
        with args.log.open("w") as handle:
            for path in logs:
                handle.write(f"===== {path.name}\n{path.read_text()}\n")
    print(table(result))
    print(f"wrote {args.out}")
    failed = [
        m
        for m, r in result["runs"].items()
        if not r.get("skipped") and any(r.get(s, {}).get("rc") != 0 for s in ("corpus", "sft", "grpo"))
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
