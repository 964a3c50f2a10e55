"""`python -m lib compare --pairs`: two runs on the same seeds, B - A paired by episode seed, with both gates."""

import json
import shutil
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

    def run(name, returns, grpo, overrides, config=None):
        folder = tmp_path / name
        (folder / "grpo").mkdir(parents=True)
        paired = {"mean": 0.1, "ci95": [0.0, 0.2]}
        quick = {
            "returns": {"grpo": {str(s): r for s, r in enumerate(returns)}},
            "policies": {"grpo": {"mean_return": sum(returns) / len(returns)}},
            "paired": {"grpo-sft": paired, "grpo-teacher": paired},
        }
        (folder / "quickcheck.json").write_text(json.dumps(quick))
        manifest = {"forked_from": {"overrides": overrides}, **({"config": config} if config else {})}
        (folder / "manifest.json").write_text(json.dumps(manifest))
        (folder / "grpo" / "stage.json").write_text(json.dumps({"metrics": grpo}))
        return folder

    shares = {"frac_reward_zero_std_mean": 0.0, "explore/beats_reference_first_quarter": 0.25}
    base = run("soft", [0.5, 0.5], shares, {})
    overrides = {"rl.algorithm": "aggrevate"}
    agg = run("agg", [0.7, 0.9], {"frac_reward_zero_std_mean": None}, overrides, {"rl": {"algorithm": "aggrevate"}})
    old = run("old", [0.7, 0.9], {}, {"grpo.mode": "aggrevate"}, {"grpo": {"mode": "aggrevate"}})  # before rl
    header, _, first, second, third = compare_table([base, agg, old]).splitlines()
    assert header.startswith("| run | change | RL stage | RL | RL - SFT | RL - teacher |")
    assert "| (base recipe) | RL (GRPO) |" in first and "| 0.000 | 0.250 | reference |" in first  # a zero is a number
    assert "rl.algorithm=aggrevate | RL (AggreVaTe) |" in second and "| n/a | n/a | +0.300 [" in second
    assert "grpo.mode=aggrevate | RL (AggreVaTe) |" in third


def test_the_seed_table_names_each_runs_rl_stage_and_reads_a_split_from_its_quickcheck(tmp_path):
    """`python -m lib summary --seeds`: a row per run and split, the RL stage's mode in it; a split the evaluate
    stage did not play comes from the run's quickcheck of it, labelled so; a split with neither is left out."""
    from lib.reporting.summary import seed_table

    def entry(grpo: float):
        policies = {name: {"mean_return": value} for name, value in (("sft", 0.5), ("grpo", grpo), ("t", 0.5))}
        policies.update(imp={"mean_return": 0.9}, o={"mean_return": 1.0})
        paired = {"grpo-teacher": {"mean": grpo - 0.5, "ci95": [grpo - 0.6, grpo - 0.4]}}
        gap = {"mean": (grpo - 0.5) / 0.5, "ci95": [0.0, 1.0]}
        return {"policies": policies, "paired": paired, "gap_closure": gap, "gap_closure_improver": gap}

    roles = {"teacher": "t", "improver": "imp", "oracle": "o"}
    runs = []
    for name, mode, seed, novel in (("agg", "aggrevate", 2, True), ("soft", "soft_target", 3, False)):
        folder = tmp_path / name
        (folder / "evaluate").mkdir(parents=True)
        report = {"env": "polyguard", "roles": roles, "splits": {"holdout": entry(0.9 if novel else 0.6)}}
        (folder / "evaluate" / "eval.json").write_text(json.dumps(report))
        (folder / "manifest.json").write_text(json.dumps({"config": {"seed": seed, "grpo": {"mode": mode}}}))
        if novel:
            (folder / "quickcheck_holdout_novel.json").write_text(json.dumps({"roles": roles, **entry(0.8)}))
            (folder / "grpo").mkdir()
            metrics = {"frac_states_zero_spread": 0.117, "p_reference_start": 0.9512}
            (folder / "grpo" / "stage.json").write_text(json.dumps({"metrics": metrics}))
            points = [{"step": s, "mean_return": m} for s, m in ((6, 0.8), (0, 0.5), (12, 0.74))]  # any order
            (folder / "grpo" / "validation.jsonl").write_text("".join(json.dumps(p) + "\n" for p in points))
        runs.append(folder)
    # a GRPO run: its p_reference at the start is the first logged one
    grpo = tmp_path / "grpo-run"
    shutil.copytree(runs[1], grpo)
    (grpo / "grpo").mkdir()
    (grpo / "grpo" / "stage.json").write_text(json.dumps({"metrics": {"frac_reward_zero_std_mean": 0.25}}))
    logged = [{"step": 1, "loss": 0.1}, {"step": 2, "explore/p_reference": 0.88}, {"explore/p_reference": 0.5}]
    (grpo / "grpo" / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logged))
    runs.append(grpo)
    rows = seed_table(runs).splitlines()
    assert rows[0].startswith("| environment | seed | RL stage | split | SFT | RL |") and len(rows) == 6
    agg = "| polyguard | 2 | RL (AggreVaTe) |"  # a manifest in the layout before rl.algorithm: grpo.mode aggrevate
    assert rows[2].startswith(f"{agg} holdout | 0.500 | 0.900 | 0.500 | 0.900 | 1.000 | +0.400")
    assert rows[3].startswith(f"{agg} holdout_novel (quickcheck) | 0.500 | 0.800 |")
    assert rows[4].startswith("| polyguard | 3 | RL (GRPO) soft_target | holdout | 0.500 | 0.600 |")  # no novel split
    assert rows[0].endswith("| no spread | p_reference (start) | validation last - best |")
    assert rows[2].endswith("| 0.117 | 0.951 | -0.060 |") and rows[3].endswith("| 0.117 | 0.951 | -0.060 |")
    assert rows[4].endswith("| n/a | n/a | n/a |")  # no RL record, no curve: nothing to read
    assert rows[5].endswith("| 0.250 | 0.880 | n/a |")
