"""bench-trial-tokens (lib/bench/trial_tokens.py): two SFT trials' tokens per trained row and per played state, read
from their own records, and the ratios before / after."""

import json

import pytest

from lib.bench.trial_tokens import trial_tokens


def _trial(folder, *, rows, train_tokens, played, read=None, episodes=10, vs=None, play=True):
    (folder / "sft").mkdir(parents=True)
    stage = {"metrics": {"train_tokens": train_tokens, "rows": rows, "train_runtime_s": 9.0}, "inputs": {}}
    (folder / "sft" / "stage.json").write_text(json.dumps(stage))
    check = {
        "episodes": episodes,
        "learner": {"turns": "state"},
        "sft-teacher": {"mean": 0.0},
        **(
            {
                "play": {
                    "computed_per_state": played,
                    "seconds": 3.0,
                    "states": 20,
                    "prompt_tokens": 20 * (read or played),
                }
            }
            if play
            else {}
        ),
        **({"vs": {"run": str(vs), "sft-vs": {"mean": 0.01}}} if vs else {}),
    }
    (folder / "sft" / "check_holdout.json").write_text(json.dumps(check))
    return folder


def test_the_ratios_are_before_over_after_per_row_and_per_state(tmp_path):
    """The played ratio's before is the prompt read whole at each state (no cache); the cached one is beside it."""
    before = _trial(tmp_path / "a", rows=100, train_tokens=50_000, played=330.0, read=440.0)
    after = _trial(tmp_path / "b", rows=100, train_tokens=20_000, played=110.0, read=400.0, vs=tmp_path / "a")
    report = trial_tokens(before, after, "holdout")
    assert report["tokens"] == {
        "trained_tokens_ratio": 2.5,
        "played_tokens_ratio": 4.0,
        "played_tokens_ratio_cached_before": 3.0,
    }
    assert report["before"]["read_per_state"] == 440.0
    assert report["after-before"] == {"mean": 0.01}
    assert report["before"]["trained_per_row"] == 500.0 and report["after"]["trained_per_row"] == 200.0


def test_checks_of_other_lengths_or_without_a_play_record_are_refused(tmp_path):
    before = _trial(tmp_path / "a", rows=10, train_tokens=100, played=3.0)
    other = _trial(tmp_path / "b", rows=10, train_tokens=100, played=3.0, episodes=20)
    with pytest.raises(ValueError, match="played 10 and 20 episodes"):
        trial_tokens(before, other, "holdout")
    old = _trial(tmp_path / "c", rows=10, train_tokens=100, played=3.0, play=False)
    with pytest.raises(ValueError, match="no play record"):
        trial_tokens(before, old, "holdout")
    with pytest.raises(FileNotFoundError, match="sft-check --split holdout_novel"):
        trial_tokens(before, old, "holdout_novel")


def _trained_on(folder, hardware, tokens_per_s=300.0):
    (folder / "sft").mkdir(parents=True)
    (folder / "corpus").mkdir()
    (folder / "corpus" / "sft.jsonl").write_text("{}\n")
    (folder / "manifest.json").write_text(json.dumps({"hardware": hardware}))
    stage = {"metrics": {"tokens_per_s": tokens_per_s}, "inputs": {"sft.jsonl": "./corpus/sft.jsonl"}}
    (folder / "sft" / "stage.json").write_text(json.dumps(stage))
    return folder


HERE = {"cpu": "AMD EPYC (avx512f)", "cpu_count": 2, "cpu_bf16": ["avx512_bf16"], "cuda": False}


def test_sft_of_bare_is_the_run_s_rate_over_its_bare_loop_timed_here(tmp_path, monkeypatch):
    from lib.bench import bench_learner
    from lib.bench import trial_tokens as module

    run = _trained_on(tmp_path / "r", HERE)
    monkeypatch.setattr("lib.runs.read_config", lambda _: "config")
    seen = {}

    def bare(config, rows, steps):
        seen.update(config=config, rows=rows, steps=steps)
        return {"steps": steps, "tokens": 4000, "seconds": 8.0, "tokens_per_s": 500.0}

    monkeypatch.setattr(bench_learner, "bare_loop", bare)
    result = module.sft_of_bare(run, 3, here=HERE)
    assert result["ratio"] == 0.6 and seen == {"config": "config", "rows": [{}], "steps": 3}


def test_sft_of_bare_refuses_a_run_trained_on_other_hardware_or_without_a_rate(tmp_path):
    from lib.bench.trial_tokens import sft_of_bare

    zen3 = {**HERE, "cpu": "AMD EPYC", "cpu_bf16": []}
    with pytest.raises(ValueError, match="other hardware than this machine.*cpu_bf16"):
        sft_of_bare(_trained_on(tmp_path / "a", zen3), 3, here=HERE)
    with pytest.raises(ValueError, match="no tokens_per_s"):
        sft_of_bare(_trained_on(tmp_path / "b", HERE, tokens_per_s=None), 3, here=HERE)
