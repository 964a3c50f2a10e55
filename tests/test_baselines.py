"""The environment's promises about its baselines, on 500 episodes per split (as the CLI reports them)."""

import json
import subprocess
import sys

import pytest

from lib.envs.polyguard import SPEC
from lib.evaluation.baselines import run_baselines

TRIVIAL = SPEC.trivial


@pytest.fixture(scope="module", params=["holdout", "holdout_novel"])
def report(request):
    return run_baselines(SPEC, request.param, 500, 0)


@pytest.mark.slow
def test_oracle_heuristic_random_ordering(report):
    p = {name: r["mean_return"] for name, r in report["policies"].items()}
    assert p["oracle"] >= p["heuristic"] + 0.15
    assert p["heuristic"] >= p["random"] + 0.15


def test_every_trivial_policy_loses_to_the_teacher_by_a_margin(report):
    heuristic = report["policies"]["heuristic"]["mean_return"]
    for name in TRIVIAL:
        assert report["policies"][name]["mean_return"] <= heuristic - 0.20, name


def test_headroom_is_reachable_from_the_observation_alone(report):
    """A policy that reads only the prompt's evidence closes most of the heuristic-oracle gap."""
    p = {name: r["mean_return"] for name, r in report["policies"].items()}
    assert p["evidence_expert"] >= p["heuristic"] + 0.15
    assert p["evidence_expert"] >= p["heuristic"] + 0.7 * (p["oracle"] - p["heuristic"])


def test_cli_writes_the_documented_schema(tmp_path):
    out = tmp_path / "b.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lib",
            "baselines",
            "--env",
            "polyguard",
            "--split",
            "holdout",
            "--episodes",
            "20",
            "--seed",
            "0",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "env steps/second" in proc.stdout and "oracle" in proc.stdout
    data = json.loads(out.read_text())
    assert {"env", "split", "episodes", "policies", "env_steps_per_second"} <= set(data)
    for stats in data["policies"].values():
        assert {"mean_return", "ci95", "mean_steps", "invalid_rate"} <= set(stats)
        assert stats["ci95"][0] <= stats["mean_return"] <= stats["ci95"][1]
    assert data["env_steps_per_second"] > 0


def test_cli_rejects_bad_input_clearly():
    proc = subprocess.run(
        [sys.executable, "-m", "lib", "baselines", "--env", "nope", "--episodes", "5"], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "unknown environment 'nope'" in proc.stderr
    proc = subprocess.run(
        [sys.executable, "-m", "lib", "baselines", "--env", "polyguard", "--policies", "psychic", "--episodes", "5"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unknown policy 'psychic' for environment 'polyguard'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lib", "baselines"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--env" in proc.stderr and "polyguard" in proc.stderr  # the known ones listed


def test_the_improver_is_a_reference_row_that_plays_the_same_episodes_as_evaluation():
    """`--policies improver` plays the teacher's one-step improvement (lib/episodes.py), kind reference, seed for seed
    the episodes evaluation's improver row plays."""
    from lib.evaluation.scripted import run_policy_episodes

    report = run_baselines(SPEC, "holdout", 3, 5, ["heuristic", "improver"])
    row = report["policies"]["improver"]
    assert row["kind"] == "reference" and report["policies"]["heuristic"]["kind"] == "baseline"
    episodes, _ = run_policy_episodes(SPEC, "improver", range(5, 8), "holdout")
    assert row["returns"] == {str(e.seed): e.episode_return for e in episodes}
