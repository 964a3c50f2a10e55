"""`python -m lib bench-train`: a benchmark, not a test. The wall time of the corpus, sft and grpo stage commands,
each a fresh process as a user runs them, repeated into fresh run folders."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from ..config import load_config
from ..io import atomic_write_json
from ..runs import new_run_id


def bench_train(profile: str, repeats_wanted: int, out: Path | None) -> dict:
    """Wall time of `python -m lib stage corpus|sft|grpo` (each a fresh process, as a user runs them), repeated
    into fresh run folders; prints each repeat and the median, and writes them to --out as JSON."""
    config = load_config(profile)  # a bad profile fails here, before anything runs
    repeats = []
    for i in range(repeats_wanted):
        run_dir = Path(config.output_root) / f"{new_run_id(config.profile)}-bench{i + 1}"
        stages = {}
        for stage in ("corpus", "sft", "grpo"):
            began = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "lib", "stage", stage, "--profile", profile, "--run-dir", str(run_dir)],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            stages[stage] = round(time.perf_counter() - began, 1)
        total = round(sum(stages.values()), 1)
        repeats.append({"run_dir": str(run_dir), "stages_s": stages, "total_s": total})
        print(f"repeat {i + 1}: corpus+sft+grpo {total:.0f} s {stages} -> {run_dir}", flush=True)
    median = statistics.median(r["total_s"] for r in repeats)
    print(f"median of {len(repeats)}: {median:.0f} s ({median / 60:.1f} min)")
    report = {"profile": profile, "repeats": repeats, "median_total_s": median}
    if out:
        atomic_write_json(out, report)
    return report
