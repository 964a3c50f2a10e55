"""`python -m lib.bench.where_time_goes PROFILE.json`: where a command's CPU time went, from a py-spy profile.

Record one first (py-spy is in requirements-dev.txt), e.g. one multi-turn GRPO stage, the child processes included:

    py-spy record --subprocesses --format speedscope -o grpo.json -- python -m lib stage grpo --run-dir outputs/ID

Every sample (one stack of one process or thread, idle ones excluded) goes to the first bucket whose rule matches
its stack, read from the outermost frame in: start-up and imports; the backward pass; the training forward (TRL's
loss); candidate scoring's model forward; the chat template and tokenisation; the environment; serialisation
(JSON, pydantic, WebSockets, the OpenEnv server); the rest of Python. Prints a Markdown table of seconds and shares.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

# (bucket, frame name or file fragments, any of which puts a stack there); the first match wins
RULES = (
    ("start-up and imports", ("<frozen importlib._bootstrap>", "_find_and_load")),
    ("backward", ("_engine_run_backward",)),
    ("training forward (TRL loss)", ("_get_per_token_logps_and_entropies", "compute_loss")),
    ("chat template and tokenisation", ("apply_chat_template", "tokenization_utils", "prompt_ids", "answer_ids")),
    ("candidate scoring: model forward", ("score_answers",)),
    ("environment", ("/lib/envs/",)),
    ("serialisation", ("json/", "pydantic", "websockets", "/openenv/", "uvicorn", "starlette", "asyncio")),
)
MODEL = ("modeling_qwen2", "modeling_llama", "torch/nn/", "peft/tuners")


def _bucket(stack: list[dict]) -> str:
    where = [f"{frame['name']} {frame.get('file', '')}" for frame in stack]
    for bucket, needles in RULES:
        if any(needle in place for place in where for needle in needles):
            if bucket == "candidate scoring: model forward" and not any(m in p for p in where for m in MODEL):
                return "candidate scoring: Python"
            return bucket
    return "other Python"


def split_profile(path: Path) -> dict[str, float]:
    """Seconds of CPU per bucket over every process and thread of a py-spy speedscope file."""
    data = json.loads(Path(path).read_text())
    frames = data["shared"]["frames"]
    seconds: Counter = Counter()
    for profile in data["profiles"]:
        unit = {"seconds": 1.0, "milliseconds": 1e-3, "microseconds": 1e-6}.get(profile.get("unit", "seconds"), 1.0)
        for sample, weight in zip(profile["samples"], profile["weights"]):
            if sample:
                seconds[_bucket([frames[i] for i in sample])] += weight * unit
    return dict(seconds)


def table(seconds: dict[str, float]) -> str:
    total = sum(seconds.values())
    lines = ["| where | CPU s | share |", "| --- | --- | --- |"]
    for bucket, value in sorted(seconds.items(), key=lambda item: -item[1]):
        lines.append(f"| {bucket} | {value:.1f} | {value / total:.0%} |")
    return "\n".join(lines + [f"| total | {total:.1f} | 100% |"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="a py-spy speedscope file (py-spy record --format speedscope)")
    args = parser.parse_args(argv)
    if not args.profile.is_file():
        parser.error(f"{args.profile} does not exist")
    print(table(split_profile(args.profile)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
