"""`python -m lib bench-speed`: a benchmark, not a test. Learning per CPU-minute, today's path against the new one, in
one run, on the same profile and seeds, with the machine's physical limit beside them.

For each of two checkouts (`--baseline-ref`, checked out into a temporary git worktree, and this one) it runs, as a
user would, `python -m lib stage corpus|sft|grpo` into a fresh run folder (the profile's SFT, or `--sft-steps` steps
of it, then multi-turn GRPO, `--grpo-steps` steps, no validation), then plays `--eval-episodes` greedy holdout
episodes of one and the same SFT model (this checkout's) with each checkout's evaluation code. It reads:
- SFT tokens/s (the stage's own count of the tokens trained on, over its train runtime);
- GRPO: stage seconds, played turns/s and trained turns/s (turns over the grpo stage's seconds), and played turns
  per second of playing (the sampler's own time, `time/generation_s`);
- evaluation: episodes/s and scoring tokens/s (prompt and answer tokens scored, over the wall time).

Beside them, the limit of this machine for the same model: a bare PyTorch loop of forward + backward at the SFT
batch shape (`lib.bench.recorders.bare_forward_backward`), and of forward only at the evaluation's row length
(last logit only, the cost of scoring), the fastest of several batch sizes, the scoring pass's own among them.
Run it alone: two torch jobs on two cores slow each other several times.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

from ..config import _merge, dotted_to_nested, load_config
from ..io import atomic_write_json
from ..provenance import cpu_model

# what both checkouts' configs accept: multi-turn GRPO for a fixed number of steps, no validation, no ablations
COMMON = {
    "grpo.mode": "multi_turn",
    "rl.validate_every": 0,
    "eval.ablations": [],
}

EVALUATE = """
import json, sys, time
import lib.candidates as candidates
from lib.config import load_config
from lib.evaluation.closed_loop import run_model_episodes
from lib.inference import load_policy_model

config = load_config(sys.argv[1])
loaded = load_policy_model(sys.argv[2], config.model)
scored = []
original = candidates.score_answers

def counted(model, tokenizer, messages, answers, *args, **kwargs):
    scored.append((messages, answers))
    return original(model, tokenizer, messages, answers, *args, **kwargs)

candidates.score_answers = counted
run_model_episodes(config, loaded, range(4), "holdout", desc=None)  # warm-up
scored.clear()
began = time.perf_counter()
episodes, actions = run_model_episodes(config, loaded, range(int(sys.argv[3])), "holdout", desc=None)
seconds = time.perf_counter() - began
tokenizer = loaded[1]
tokens = sum(
    len(candidates.prompt_ids(tokenizer, m)) + sum(len(candidates.answer_ids(tokenizer, a)) for a in options)
    for batch, offered in scored for m, options in zip(batch, offered)
)
print(json.dumps({
    "episodes": len(episodes), "seconds": round(seconds, 3), "states": len(actions), "scoring_tokens": tokens,
    "mean_return": sum(e.episode_return for e in episodes) / len(episodes),
}))
"""


@contextmanager
def worktree(ref: str):
    """A temporary checkout of `ref` (git worktree), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="bench-speed-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), ref], check=True, capture_output=True)
    try:
        yield folder
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], capture_output=True)


def _profile_file(tree: Path, profile: str, overrides: dict, folder: Path) -> Path:
    """The profile as `tree` ships it, with `overrides`, written to a yaml file the stage commands read."""
    raw = yaml.safe_load((tree / "lib" / "profiles" / f"{profile}.yaml").read_text())
    path = folder / f"{profile}-bench.yaml"
    path.write_text(yaml.safe_dump(_merge(raw, dotted_to_nested(overrides))))
    return path


def _stage(tree: Path, stage: str, profile: Path, run_dir: Path) -> None:
    command = [sys.executable, "-m", "lib", "stage", stage, "--profile", str(profile), "--run-dir", str(run_dir)]
    subprocess.run(command, cwd=tree, check=True, stdout=subprocess.DEVNULL)


def _grpo_figures(run_dir: Path, episodes_per_step: int) -> dict:
    record = json.loads((run_dir / "grpo" / "stage.json").read_text())
    log = [json.loads(line) for line in (run_dir / "grpo" / "train_log.jsonl").read_text().splitlines() if line]
    steps = [h for h in log if "multi_turn/episode_len" in h]
    played = sum(h.get("multi_turn/played_turns", h["multi_turn/episode_len"] * episodes_per_step) for h in steps)
    # the earlier sampler trained one turn per episode and did not log the count
    trained = sum(h.get("multi_turn/trained_turns", episodes_per_step) for h in steps)
    seconds = record["duration_s"]
    playing = sum(h["time/generation_s"] for h in steps)  # the sampler: every episode of the step played
    return {
        "steps": len(steps),
        "stage_s": seconds,
        "play_s": round(playing, 2),
        "played_turns": round(played),
        "trained_turns": round(trained),
        "played_turns_per_s": round(played / seconds, 2),
        "played_turns_per_play_s": round(played / playing, 2),
        "trained_turns_per_s": round(trained / seconds, 2),
        "step_time_s_median": sorted(h["step_time"] for h in log if "step_time" in h)[len(steps) // 2]
        if steps
        else None,
    }


def measure_checkout(tree: Path, profile: str, overrides: dict, work: Path, name: str) -> dict:
    """corpus, sft and grpo stage commands of `tree` into a fresh run folder; the SFT and GRPO figures."""
    path = _profile_file(tree, profile, overrides, work)
    run_dir = work / f"run-{name}"
    seconds = {}
    for stage in ("corpus", "sft", "grpo"):
        began = time.perf_counter()
        _stage(tree, stage, path, run_dir)
        seconds[stage] = round(time.perf_counter() - began, 1)
        print(f"  {name}: {stage} {seconds[stage]} s", flush=True)
    sft = json.loads((run_dir / "sft" / "stage.json").read_text())["metrics"]
    episodes_per_step = load_config(path).grpo.batch_size  # the same profile in both checkouts
    return {
        "profile_file": path.name,
        "command_s": seconds,
        "sft": {k: sft[k] for k in ("train_tokens", "train_runtime_s", "tokens_per_s", "steps")},
        "grpo": _grpo_figures(run_dir, episodes_per_step),
        "run_dir": run_dir,
    }


def measure_evaluation(tree: Path, profile_file: Path, model_dir: Path, episodes: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", EVALUATE, str(profile_file), str(model_dir), str(episodes)],
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["episodes_per_s"] = round(figures["episodes"] / figures["seconds"], 2)
    figures["scoring_tokens_per_s"] = round(figures["scoring_tokens"] / figures["seconds"], 1)
    return figures


def bare_forward(model_dir: Path, length: int, batch: int, batches: int = 8, warmup: int = 2) -> dict:
    """Forward only, last logit only, of the model at (batch, length): what scoring prompts can reach at best."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    elapsed, tokens = 0.0, 0
    with torch.no_grad():
        for i in range(warmup + batches):
            ids = torch.randint(3, vocab, (batch, length), generator=generator)
            began = time.perf_counter()
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
            if i >= warmup:
                elapsed += time.perf_counter() - began
                tokens += batch * length
    return {"batch": batch, "length": length, "tokens_per_s": round(tokens / elapsed, 1)}


def fastest_bare_forward(model_dir: Path, length: int) -> dict:
    """The bare forward at several batch sizes, the scoring pass's own among them (`lib.candidates.PASS_TOKENS` on a
    CPU): the fastest is the limit scoring is compared with. On a 2-core CPU 4-16 rows of ~550 tokens ran about 1.5x
    faster per token than 64 (the attention of a large batch outgrows the caches), so one batch size is not a limit."""
    from ..candidates import PASS_TOKENS

    sizes = sorted({max(1, PASS_TOKENS["cpu"] // length), 8, 16, 64})
    runs = [bare_forward(model_dir, length, size) for size in sizes]
    best = max(runs, key=lambda r: r["tokens_per_s"])
    return {**best, "by_batch": {r["batch"]: r["tokens_per_s"] for r in runs}}


def run_bench(
    profile: str, baseline_ref: str, grpo_steps: int, eval_episodes: int, out: Path | None, sft_steps: int | None = None
) -> dict:
    """See the module docstring. A short SFT (`sft_steps`) measures its rate, but leaves a policy whose episodes are
    not the trained policy's: the GRPO and evaluation figures are representative only after the profile's SFT."""
    from ..io import read_records
    from .recorders import bare_forward_backward

    overrides = {**COMMON, "grpo.max_steps": grpo_steps, **({"sft.max_steps": sft_steps} if sft_steps else {})}
    load_config(profile, overrides)  # a bad profile fails here, before anything runs
    work = Path(tempfile.mkdtemp(prefix="bench-speed-runs-"))
    print(f"bench-speed: {profile}, {grpo_steps} GRPO steps, {eval_episodes} evaluation episodes; work in {work}")
    with worktree(baseline_ref) as old:
        print(f"today's path ({baseline_ref}):", flush=True)
        before = measure_checkout(old, profile, overrides, work, "baseline")
        print("the new path (this checkout):", flush=True)
        after = measure_checkout(Path.cwd(), profile, overrides, work, "new")
        model_dir = after["run_dir"] / "sft" / "model"
        new_profile = work / after["profile_file"]
        old_profile = work / before["profile_file"]
        before["evaluation"] = measure_evaluation(old, old_profile, model_dir, eval_episodes)
        after["evaluation"] = measure_evaluation(Path.cwd(), new_profile, model_dir, eval_episodes)
    config = load_config(new_profile)
    rows = read_records(after["run_dir"] / "corpus" / "sft.jsonl", missing_ok=False)
    score_length = round(after["evaluation"]["scoring_tokens"] / max(1, after["evaluation"]["states"]))
    limits = {
        "forward_backward": {
            k: v
            for k, v in bare_forward_backward(config, str(after["run_dir"] / "sft" / "base_model"), rows, 10).items()
            if k != "top_ops_one_batch"
        },
        "forward_last_logit": fastest_bare_forward(model_dir, score_length),
    }
    for side in (before, after):
        side["run_dir"] = side["run_dir"].name

    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    report = {
        "profile": profile,
        "baseline_ref": baseline_ref,
        "overrides": overrides,
        "machine": {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "today": before,
        "new": after,
        "limits": limits,
        "ratios": {
            "grpo_trained_turns_per_s": ratio(
                after["grpo"]["trained_turns_per_s"], before["grpo"]["trained_turns_per_s"]
            ),
            "grpo_played_turns_per_s": ratio(after["grpo"]["played_turns_per_s"], before["grpo"]["played_turns_per_s"]),
            "grpo_played_turns_per_play_s": ratio(
                after["grpo"]["played_turns_per_play_s"], before["grpo"]["played_turns_per_play_s"]
            ),
            "evaluation_episodes_per_s": ratio(
                after["evaluation"]["episodes_per_s"], before["evaluation"]["episodes_per_s"]
            ),
            "sft_tokens_per_s": ratio(after["sft"]["tokens_per_s"], before["sft"]["tokens_per_s"]),
            "new_sft_vs_bare_forward_backward": ratio(
                after["sft"]["tokens_per_s"], limits["forward_backward"]["tokens_per_s"]
            ),
            "today_sft_vs_bare_forward_backward": ratio(
                before["sft"]["tokens_per_s"], limits["forward_backward"]["tokens_per_s"]
            ),
            "new_scoring_vs_bare_forward": ratio(
                after["evaluation"]["scoring_tokens_per_s"], limits["forward_last_logit"]["tokens_per_s"]
            ),
            "today_scoring_vs_bare_forward": ratio(
                before["evaluation"]["scoring_tokens_per_s"], limits["forward_last_logit"]["tokens_per_s"]
            ),
        },
    }
    print(json.dumps(report["ratios"], indent=2))
    if out:
        atomic_write_json(out, report)
    return report
