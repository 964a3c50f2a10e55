"""Multi-process training: `accelerate launch --multi_gpu --num_processes 2` runs the sft and grpo stages as two
CPU processes (gloo; no GPU here, so accelerate's launcher falls back to the CPU backend), rank 0 alone writes the
run's files, the manifest records each stage's world size, and the run is evaluated and gated like any other."""

import json
import shutil
import subprocess
import sys

import pytest

from lib.config import load_config
from lib.distributed import is_main, rank_key, world_size
from tests import micro

MICRO = {
    **micro.MICRO,
    **micro.MICRO_EVAL,
    "corpus.sft_episodes": 12,
    "sft.batch_size": 4,
    "sft.logging_steps": 1,
    "rl.validate_every": 2,
    "rl.validation_episodes": 4,
    "grpo.logging_steps": 1,
    "eval.improver_episodes": 2,
}


def test_one_process_is_rank_zero_of_one(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert is_main() and world_size() == 1 and rank_key() == ""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert not is_main() and world_size() == 2 and rank_key() == "/r1"


@pytest.mark.slow
def test_two_processes_train_and_the_run_is_gated(tmp_path):
    from lib.pipeline.stages import run_stage
    from lib.runs import Run

    accelerate = shutil.which("accelerate", path=str(__import__("pathlib").Path(sys.executable).parent))
    assert accelerate, "accelerate's launcher is not installed next to this python"
    config = load_config("cpu-smoke", MICRO)
    run = Run(tmp_path / "run", config)
    run_stage("corpus", config, run)
    run_stage("baselines", config, run)
    for stage in ("sft", "grpo"):
        launched = subprocess.run(
            [accelerate, "launch", "--multi_gpu", "--num_processes", "2", "-m", "lib", "stage", stage,
             "--run-dir", str(run.dir)],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
        assert launched.stdout.count(f"stage {stage} ok") == 1  # rank 0 alone reports
    stages = json.loads((run.dir / "manifest.json").read_text())["stages"]
    assert stages["sft"]["world_size"] == stages["grpo"]["world_size"] == 2
    assert stages["corpus"]["world_size"] == 1
    for log in ("sft/train_log.jsonl", "grpo/train_log.jsonl"):
        lines = [json.loads(line) for line in (run.dir / log).read_text().splitlines()]
        steps = [line["step"] for line in lines if "loss" in line]  # one per logged step; the summary line apart
        assert steps == sorted(set(steps)) and len(steps) >= 2, f"{log}: written by more than one process"
    events = [json.loads(line)["event"] for line in (run.dir / "run_log.jsonl").read_text().splitlines()]
    assert events.count("grpo_start") == 1
    sft_record = run.read_stage("sft")
    # 2 processes x batch 4: half the optimizer steps one process would take over the same rows
    rows = sft_record["metrics"]["steps"]
    assert rows == -(-len((run.dir / "corpus" / "sft.jsonl").read_text().splitlines()) // 8)
    validation = (run.dir / "grpo" / "validation.jsonl").read_text().splitlines()
    assert len(validation) == len({json.loads(v)["step"] for v in validation})
    results = {stage: run_stage(stage, config, run) for stage in ("evaluate", "export", "postsave", "report")}
    verdict = results["report"]["verdict"]
    failed = [c for c in verdict["checks"] if not c["passed"] and c["name"] not in ("improved", "beats_teacher")]
    assert verdict["integrity_passed"], failed
