"""The committed GPU runs under bench/ gate from what git holds: every check but the two that need the weights they
were kept without."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lib.gate import run_gate

REPO = Path(__file__).resolve().parents[1]
GPU_RUNS = sorted(p for p in (REPO / "bench").glob("run_gpu-*") if (p / "evaluate" / "eval.json").is_file())
NEEDS_WEIGHTS = {"grpo_artifact_ok", "postsave_from_saved_artifact"}


@pytest.mark.parametrize("run", GPU_RUNS, ids=lambda p: p.name)
def test_a_committed_gpu_run_fails_only_the_checks_that_need_the_weights_it_was_kept_without(run, tmp_path):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    checks = {c["name"]: c for c in run_gate(copy, write=False)["checks"]}
    failed = {name for name, c in checks.items() if not c["passed"]}
    assert failed == NEEDS_WEIGHTS, {n: checks[n]["detail"] for n in failed}
    assert "grpo/adapter" in checks["grpo_artifact_ok"]["detail"]
    assert "names no adapter" in checks["postsave_from_saved_artifact"]["detail"]
