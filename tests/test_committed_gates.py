"""The committed runs gate from what git holds: the claim run every check (its merged weights rebuilt from its
adapters), the GPU runs under bench/ every check but the two that need the weights they were kept without."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lib.gate import run_gate
from tests.committed import CLAIM_RUN

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


@pytest.mark.slow
def test_the_claim_run_passes_every_check_from_its_committed_files(tmp_path):
    run = CLAIM_RUN
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    assert not (copy / "sft" / "model").exists() and not (copy / "export" / "merged").exists()  # as committed
    verdict = run_gate(copy, write=False)
    assert verdict["passed"], [c for c in verdict["checks"] if not c["passed"]]
    postsave = next(c["detail"] for c in verdict["checks"] if c["name"] == "postsave_from_saved_artifact")
    assert postsave.startswith("rebuilt from the run's adapters")
