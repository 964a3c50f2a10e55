"""Experiment tracking is the user's choice (`tracking`, default none), passed through to TRL's report_to."""

import importlib.util

import pytest

from lib.config import ConfigError, load_config
from lib.runs import Run
from lib.training.corpus import run_corpus
from lib.training.harness import TrackingUnavailableError, tracking_args
from lib.training.sft import run_sft

TINY_SFT = {"corpus.sft_episodes": 4, "corpus.grpo_prompts": 4, "sft.max_steps": 2, "sft.batch_size": 4}


def test_default_is_no_tracking_and_an_unknown_tracker_is_refused(tmp_path):
    config = load_config("cpu-smoke")
    assert config.tracking == "none"
    assert tracking_args(config, Run(tmp_path / "r", config), "sft") == {"report_to": "none"}
    with pytest.raises(ConfigError, match="tracking"):
        load_config("cpu-smoke", {"tracking": "wandb"})


def test_a_tracker_that_is_not_installed_is_a_clear_error(tmp_path, monkeypatch):
    config = load_config("cpu-smoke", {"tracking": "trackio"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(TrackingUnavailableError, match="pip install trackio"):
        tracking_args(config, Run(tmp_path / "r", config), "grpo")


def test_trackio_logs_locally_only(tmp_path, monkeypatch):
    config = load_config("cpu-smoke", {"tracking": "trackio"})
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "trackio" else real(name, *a))
    args = tracking_args(config, Run(tmp_path / "r", config), "grpo")
    assert args["report_to"] == ["trackio"] and args["trackio_space_id"] is None and args["run_name"] == "r/grpo"


@pytest.mark.slow
def test_tensorboard_tracking_writes_event_files_into_the_run(tmp_path):
    config = load_config("cpu-smoke", {**TINY_SFT, "tracking": "tensorboard"})
    run = Run(tmp_path / "run", config)
    run_corpus(config, run)
    run_sft(config, run)
    events = list((run.dir / "sft" / "trainer" / "runs").rglob("events.out.tfevents.*"))
    assert events and all(e.stat().st_size > 0 for e in events)
