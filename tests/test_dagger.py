"""DAgger (`corpus.dagger_from`, lib/training/dagger.py): an earlier SFT plays fresh train episodes, the teacher labels
every state it reached, and those rows join the corpus; bad sources are named, not half-used."""

import shutil

import pytest

from lib.config import load_config
from lib.envs.base import format_action
from lib.io import read_records
from lib.runs import Run
from lib.training.dagger import DAGGER_SEED_OFFSET, dagger_rows, dagger_seeds
from lib.training.sft import run_sft
from tests.micro import MICRO, corpus_run

pytestmark = pytest.mark.slow  # an SFT model plays

TRUST = {**MICRO, "corpus.sft_label_smoothing": 0.0}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    config, run, _ = corpus_run("cpu-smoke-sentinel_trust", TRUST, tmp_path_factory.mktemp("source"))
    run_sft(config, run)
    return config, run


def test_the_teacher_labels_every_state_of_the_models_own_episodes_and_the_corpus_adds_them(source, tmp_path):
    config, run = source
    overrides = {**TRUST, "corpus.dagger_from": str(run.dir), "corpus.dagger_episodes": 3}
    _, fresh, rows = corpus_run("cpu-smoke-sentinel_trust", overrides, tmp_path / "dagger")
    corpus = fresh.read_stage("corpus")
    base = read_records(run.read_stage("corpus")["outputs"]["sft.jsonl"])
    assert rows[: len(base)] == base  # the teacher's own rows first, unchanged
    added = rows[len(base) :]
    record = corpus["metrics"]["dagger"]
    assert added and record["rows"] == len(added) and record["episodes"] == 3
    assert record["sft_weights_sha256"] == run.read_stage("sft")["metrics"]["weights_sha256"]
    assert corpus["inputs"]["dagger_from"] == str(run.dir)
    env, teacher = config.spec.make_env(), config.spec.make_policy(config.spec.teacher)
    for row in added:
        assert row["label_source"] == "dagger" and row["split"] == "train"
        assert row["seed"] in dagger_seeds(3) and row["seed"] >= DAGGER_SEED_OFFSET
        observation = env.restore(row["seed"], row["split"], row["history"])
        assert env.render(observation) == row["prompt"]
        offered = [format_action(c.id) for c in observation.candidates]
        assert row["executed"] in offered and row["completion"][-1]["content"] == row["teacher"] in offered
        # the label is the teacher's choice at exactly this state (rebuilt with the teacher's own begin)
        teacher.begin(row["seed"])
        replay = env.reset(row["seed"], row["split"])
        for action in row["history"]:
            teacher.act(replay, env)
            replay = env.step(action).observation
        assert teacher.act(replay, env) == row["teacher"]
    # consecutive rows of a seed continue the model's own path: each history is the last one plus what it played
    for before, after in zip(added, added[1:]):
        if before["seed"] == after["seed"]:
            assert after["history"] == before["history"] + [before["executed"]]


def test_a_source_that_is_not_a_run_of_this_environment_with_its_model_is_refused(source, tmp_path):
    config, run = source
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        dagger_rows(config, tmp_path / "nothing", dagger_seeds(1))
    other = load_config("cpu-smoke", MICRO)
    Run(tmp_path / "polyguard", other)
    with pytest.raises(ValueError, match="cannot play this environment"):
        dagger_rows(config, tmp_path / "polyguard", dagger_seeds(1))
    moved = tmp_path / "moved"
    shutil.copytree(run.dir, moved)
    shutil.rmtree(moved / "sft" / "model")
    with pytest.raises(FileNotFoundError, match="SFT model is not there"):
        dagger_rows(config, moved, dagger_seeds(1))
