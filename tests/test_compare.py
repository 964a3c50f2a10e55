"""`python -m lib compare --pairs`: two runs on the same seeds, B - A paired by episode seed, with both gates."""

import json
import subprocess
import sys

import pytest

from lib.reporting.compare import pair_table


def _run(folder, seed: int, returns: dict[int, float], improved: bool, ablation: float | None = None):
    (folder / "evaluate").mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"config": {"seed": seed}}))
    lines = [{"policy": "grpo", "split": "holdout", "seed": s, "return": r} for s, r in returns.items()]
    lines += [{"policy": "sft", "split": "holdout", "seed": s, "return": 0.0} for s in returns]
    if ablation is not None:  # a sampled-decoding ablation episode: never part of the greedy pair
        lines.append({"policy": "grpo", "split": "holdout", "seed": 0, "return": ablation, "ablation": "sampled"})
    (folder / "evaluate" / "episodes.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    verdict = {"improved": improved, "beats_teacher": False, "integrity_passed": True}
    (folder / "gate.json").write_text(json.dumps(verdict))
    return folder


def test_pairs_are_differenced_by_episode_seed_and_name_both_gates(tmp_path):
    a = _run(tmp_path / "step", 3, {0: 0.5, 1: 0.2, 2: 0.4}, improved=False, ablation=1.0)
    b = _run(tmp_path / "mt", 3, {0: 0.7, 1: 0.2, 2: 0.6}, improved=True)
    table = pair_table([a, b], splits=("holdout",))
    row = table.splitlines()[2]
    assert row.startswith("| 3 | holdout | step | mt | 0.367 | 0.500 | +0.133 [")  # the ablation's 1.0 is left out
    assert "improved no" in row and "improved yes" in row and "integrity ok" in row


def test_an_odd_number_of_runs_or_a_run_without_episodes_is_a_clear_error(tmp_path):
    a = _run(tmp_path / "a", 1, {0: 0.5}, improved=False)
    with pytest.raises(ValueError, match="two by two"):
        pair_table([a])
    with pytest.raises(FileNotFoundError, match="episodes.jsonl is missing"):
        pair_table([a, tmp_path / "nothing"])
    out = subprocess.run(
        [sys.executable, "-m", "lib", "compare", "--pairs", str(a)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 2 and "two by two" in out.stderr


def test_the_ablation_table_reads_an_aggrevate_run_which_draws_no_groups(tmp_path):
    """`compare` (no --pairs): a GRPO run's zero-std share is printed; an AggreVaTe run has none, and says n/a."""
    from lib.reporting.compare import compare_table

    def run(name, returns, grpo, overrides):
        folder = tmp_path / name
        (folder / "grpo").mkdir(parents=True)
        paired = {"mean": 0.1, "ci95": [0.0, 0.2]}
        quick = {
            "returns": {"grpo": {str(s): r for s, r in enumerate(returns)}},
            "policies": {"grpo": {"mean_return": sum(returns) / len(returns)}},
            "paired": {"grpo-sft": paired, "grpo-teacher": paired},
        }
        (folder / "quickcheck.json").write_text(json.dumps(quick))
        (folder / "manifest.json").write_text(json.dumps({"forked_from": {"overrides": overrides}}))
        (folder / "grpo" / "stage.json").write_text(json.dumps({"metrics": grpo}))
        return folder

    shares = {"frac_reward_zero_std_mean": 0.0, "explore/beats_reference_first_quarter": 0.25}
    base = run("soft", [0.5, 0.5], shares, {})
    agg = run("agg", [0.7, 0.9], {"frac_reward_zero_std_mean": None}, {"grpo.mode": "aggrevate"})
    first, second = compare_table([base, agg]).splitlines()[2:]
    assert "| 0.000 | 0.250 | reference |" in first  # a zero share is a number, not a missing one
    assert "grpo.mode=aggrevate" in second and "| n/a | n/a | +0.300 [" in second
