"""Training what is scored (lib/training/candidate_loss.py, `sft.candidate_loss`): the candidates rebuilt from a
corpus row are the ones its prompt offered, the loss is the scoring policy's cross-entropy and a step on it moves the
policy toward the label, and the sft stage trains and records it inside TRL's trainer."""

import math

import pytest
import torch

from lib.candidates import distribution, score_answers
from lib.config import ConfigError, ModelConfig, TinyModelConfig, load_config
from lib.models import build_tiny, load_model
from lib.training.candidate_loss import candidate_cross_entropy, candidate_table
from lib.training.sft import run_sft
from tests.micro import MICRO
from tests.micro import corpus_run as micro_corpus_run


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    overrides = {**MICRO, "sft.candidate_loss": 1.0, "sft.gradient_checkpointing": False}
    return micro_corpus_run("cpu-smoke", overrides, tmp_path_factory.mktemp("run"))


def test_the_table_rebuilds_each_rows_offered_candidates_and_finds_its_label(corpus_run):
    config, _, rows = corpus_run
    table = candidate_table(config.spec, rows)
    assert len(table) == len(rows) and any(entry is not None for entry in table)
    for row, entry in zip(rows, table):
        if entry is None:  # a label that is no offered answer (the corpus's noise may write free text)
            continue
        prompt, offered, label = entry
        assert prompt == row["prompt"] and offered[label] == row["completion"][-1]["content"].strip()
        for answer in offered:  # the replayed state offers exactly what the rendered prompt lists
            assert answer.split('"')[3] in row["prompt"][-1]["content"]


def test_a_step_on_the_loss_raises_the_labels_probability(corpus_run, tmp_path):
    config, _, rows = corpus_run
    entries = [e for e in candidate_table(config.spec, rows) if e is not None][:6]
    texts = [m["content"] for r in rows for m in r["prompt"] + r["completion"]]
    model, tokenizer, _ = load_model(
        build_tiny(texts, TinyModelConfig(), tmp_path / "tiny", seed=0), ModelConfig(name="tiny"), trainable=True
    )

    def label_probabilities():
        with torch.no_grad():
            scores = score_answers(model, tokenizer, [e[0] for e in entries], [e[1] for e in entries])
        return [distribution(s)[e[2]] for s, e in zip(scores, entries)]

    before = label_probabilities()
    loss = candidate_cross_entropy(model, tokenizer, entries)
    # the loss is the mean of -log pi(label), pi the scoring policy
    assert loss.item() == pytest.approx(-sum(math.log(p) for p in before) / len(before), abs=1e-4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    loss.backward()
    optimizer.step()
    assert sum(label_probabilities()) > sum(before)


def test_the_sft_stage_trains_and_records_it(corpus_run):
    config, run, _ = corpus_run
    metrics = run_sft(config, run)["metrics"]
    assert metrics["candidate_ce_first"] > 0 and metrics["candidate_ce_last"] > 0
    assert run.read_stage("sft")["params"]["candidate_loss"] == 1.0


def test_it_refuses_gradient_checkpointing():
    with pytest.raises(ConfigError, match="gradient_checkpointing: false"):
        load_config("cpu-smoke", {"sft.candidate_loss": 1.0, "sft.gradient_checkpointing": True})
