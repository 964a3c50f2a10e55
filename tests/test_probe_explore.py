"""`python -m lib probe-explore` (lib/bench/probe_explore.py): the policy over each state's candidates at a run's
first GRPO prompts, and what GRPO's exploration metrics expect there; each figure re-derived here from the
policy's own scores."""

import json
import subprocess
import sys

import pytest

from lib.bench.probe_explore import expected_group_metrics, probe
from lib.candidates import answers, distribution, score_answers
from lib.config import TinyModelConfig
from lib.inference import load_policy_model
from lib.io import read_records
from lib.models import build_tiny
from tests.micro import MICRO, corpus_run

pytestmark = pytest.mark.slow  # a model scores states


def test_the_probe_reads_the_policys_probability_of_the_reference_and_the_best_answers(tmp_path, monkeypatch):
    config, run, _ = corpus_run("cpu-smoke", MICRO, tmp_path / "run")
    rows = read_records(run.read_stage("corpus")["outputs"]["grpo_prompts.jsonl"])[:6]
    # a model of random weights: a broad policy, so every probability below is a number strictly between 0 and 1
    texts = [m["content"] for row in rows for m in row["prompt"]] + [config.spec.vocabulary()]
    model_dir = str(build_tiny(texts, TinyModelConfig(num_hidden_layers=2), tmp_path / "model", seed=0))
    report = probe(config, run, model_dir, states=6)
    model, tokenizer, _ = load_policy_model(model_dir, config.model)
    env = config.spec.make_env()
    p_reference = []
    for row in rows:
        observation = env.restore(row["seed"], row["split"], row["history"])
        offered = answers(observation)
        [logprobs] = score_answers(model, tokenizer, [row["prompt"]], [offered])
        p_reference.append(dict(zip(offered, distribution(logprobs)))[row["reference_answer"]])
    everything, improvable = report["all"], report["improvable"]
    assert everything["states"] == 6 and 0 <= improvable["states"] <= 6
    assert everything["p_reference"] == pytest.approx(sum(p_reference) / 6, abs=1e-3)
    assert 0 < everything["p_best"] < 1  # this random model favours short answers: p_reference is about 1e-7
    # a uniform policy over each state's candidates: p_reference is the mean of 1 / (candidates offered)
    from lib.bench import probe_explore

    def uniform(model, tokenizer, messages, observation):
        offered = answers(observation)
        return {"entropy": 0.0, "mass": 1.0, "by_answer": {a: 1 / len(offered) for a in offered}}

    with monkeypatch.context() as patch:
        patch.setattr(probe_explore, "policy_candidate_distribution", uniform)
        flat = probe(config, run, model_dir, states=6)["all"]
    sizes = [len(config.spec.make_env().restore(r["seed"], r["split"], r["history"]).candidates) for r in rows]
    assert flat["p_reference"] == pytest.approx(sum(1 / n for n in sizes) / 6, abs=1e-4) and flat["p_reference"] > 0
    assert report["group_size"] == config.grpo.num_generations
    # the command prints the same and writes it (atomically) where --out says
    out = tmp_path / "probe.json"
    done = subprocess.run(
        [sys.executable, "-m", "lib", "probe-explore", "--run-dir", str(run.dir), "--model", model_dir]
        + ["--states", "6", "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"p(reference's answer) {everything['p_reference']:.3f}" in done.stdout
    assert json.loads(out.read_text())["all"]["p_reference"] == pytest.approx(everything["p_reference"], abs=1e-3)


def test_what_a_group_expects_is_exact_for_a_known_distribution():
    # two answers at 0.5: with 2 samples P(some beats 0.5) = 1 - 0.5^2; the invalid mass scores the penalty
    m = expected_group_metrics({"a": 0.5, "b": 0.5}, {"a": 1.0, "b": 0.0}, 0.5, -0.1, 2)
    assert m["beats_reference"] == pytest.approx(0.75) and m["best_minus_reference"] == pytest.approx(0.25)
    m = expected_group_metrics({"a": 0.6}, {"a": 0.0}, 0.5, -0.1, 4)  # 0.4 of the mass is invalid output
    assert m["beats_reference"] == pytest.approx(0.0) and m["best_minus_reference"] < -0.49
