"""Rare decisions trained more often (`sft.kind_balance`, lib/training/balance.py): a row's kind is its answer's
among the candidates offered at its state, the resampling keeps the corpus's size and moves the mix toward equal
kinds, and the sft stage trains on the resampled rows and records both mixes."""

import random

import pytest

from lib.config import ConfigError, load_config
from lib.io import read_records
from lib.runs import Run
from lib.training.balance import OTHER, answer_kinds, balanced, kind_mix
from lib.training.corpus import run_corpus
from lib.training.sft import _trained_rows, run_sft
from tests.micro import MICRO, corpus_run

TRUST = {**MICRO, "corpus.sft_label_smoothing": 0.0}


@pytest.fixture(scope="module")
def trust_corpus(tmp_path_factory):
    return corpus_run("cpu-smoke-sentinel_trust", TRUST, tmp_path_factory.mktemp("run"))


def test_each_rows_kind_is_its_answers_among_the_offered_candidates(trust_corpus):
    config, _, rows = trust_corpus
    kinds = answer_kinds(config.spec, rows)
    assert len(kinds) == len(rows)
    for row, kind in zip(rows, kinds):  # trust's answers name their kind: delegate:S0, verify:S2, solve, skip
        assert kind == row["completion"][-1]["content"].split('"')[3].split(":")[0]
    mix = kind_mix(kinds)
    assert list(mix)[0] == "delegate" and 0 < mix["verify"] < 0.5 and sum(mix.values()) == pytest.approx(1, abs=1e-3)
    garbled = [{**rows[0], "completion": [{"role": "assistant", "content": "no such answer"}]}]
    assert answer_kinds(config.spec, garbled) == [OTHER]


def test_resampling_keeps_the_size_and_evens_the_kinds(trust_corpus):
    config, _, rows = trust_corpus
    kinds = answer_kinds(config.spec, rows)
    assert balanced(kinds, 0.0, random.Random(0)) == list(range(len(rows)))
    before = kind_mix(kinds)
    shares = {}
    for balance in (0.5, 1.0):
        drawn = balanced(kinds, balance, random.Random(0))
        assert len(drawn) == len(rows) and all(0 <= i < len(rows) for i in drawn)
        shares[balance] = kind_mix([kinds[i] for i in drawn])
    assert before["delegate"] > shares[0.5]["delegate"] > shares[1.0]["delegate"]
    assert before["verify"] < shares[0.5]["verify"] < shares[1.0]["verify"]
    assert balanced(kinds, 1.0, random.Random(0)) == balanced(kinds, 1.0, random.Random(0))  # seeded


def test_the_config_rejects_a_balance_outside_zero_to_one():
    with pytest.raises(ConfigError, match="kind_balance"):
        load_config("cpu-smoke-sentinel_trust", {**TRUST, "sft.kind_balance": 1.5})


def test_without_balance_sft_trains_every_corpus_row_once(trust_corpus):
    config, _, rows = trust_corpus
    assert _trained_rows(config, rows) == (rows, None)


@pytest.mark.slow
def test_the_sft_stage_trains_the_resampled_rows_and_records_both_mixes(trust_corpus, tmp_path):
    config, _, rows = trust_corpus
    balanced_config = load_config("cpu-smoke-sentinel_trust", {**TRUST, "sft.kind_balance": 1.0})
    trained, mix = _trained_rows(balanced_config, rows)
    assert len(trained) == len(rows) and mix["corpus"] == kind_mix(answer_kinds(config.spec, rows))
    assert mix["trained"]["verify"] > mix["corpus"]["verify"]
    fresh = Run(tmp_path / "balanced", balanced_config)
    run_corpus(balanced_config, fresh)  # the same corpus: balance changes only what SFT trains on
    assert read_records(fresh.read_stage("corpus")["outputs"]["sft.jsonl"]) == rows
    run_sft(balanced_config, fresh)
    record = fresh.read_stage("sft")
    assert record["metrics"]["kind_mix"] == mix and record["params"]["kind_balance"] == 1.0
