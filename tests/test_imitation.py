"""The SFT stage's imitation check (lib/training/imitation.py): agreement with the teacher at the teacher's own
states, and a collapse onto one action in the policy's own episodes, said loudly, in the stage record and first in
the report."""

import json
import warnings

import pytest

import lib.candidates as candidates
import lib.training.imitation as imitation
from lib.config import load_config
from lib.reporting.report import _imitation_lines

CONFIG = load_config("cpu-smoke", {"env": "tests.toyenv", "corpus.grpo_rollout_policies": None})
LOADED = (None, None, {"path": "a stand-in for the model"})


def _scorer(monkeypatch, pick):
    """The model's candidate scores, stood in for both where the check reads them (at the teacher's states and in
    the policy's own episodes): 0 for the answer `pick(prompt)` names, -5 elsewhere."""

    def score(model, tokenizer, prompts, answer_lists, **_):
        return [[0.0 if a == pick(p) else -5.0 for a in answers] for p, answers in zip(prompts, answer_lists)]

    monkeypatch.setattr(imitation, "score_answers", score)
    monkeypatch.setattr(candidates, "score_answers", score)


def test_a_policy_that_answers_like_the_teacher_agrees_everywhere_and_has_not_collapsed(monkeypatch):
    rows = imitation.teacher_rows(CONFIG.spec, imitation.validation_seeds(8))
    teacher = {json.dumps(prompt): f'{{"action": "{chosen}"}}' for prompt, _, _, chosen, _ in rows}
    _scorer(monkeypatch, lambda prompt: teacher[json.dumps(prompt)])
    with warnings.catch_warnings():
        warnings.simplefilter("error", imitation.CollapseWarning)
        check = imitation.imitation_check(CONFIG, LOADED, episodes=8, ratio=0.5)
        imitation.announce(check)
    assert check["teacher_states"] == len(rows) == check["played_actions"] == 8 * 3 and check["agreement"] == 1.0
    assert check["top_share"] == check["teacher_top_share"] and check["mix_distance"] == 0 and not check["collapsed"]
    assert check["distinct_actions"] == check["teacher_distinct_actions"]
    assert "COLLAPSED" not in imitation.describe(check)
    assert {k: v["agreement"] for k, v in check["agreement_by_kind"].items()} == {"opt": 1.0}


def test_agreement_per_kind_counts_each_miss_and_names_the_confusion(monkeypatch):
    rows = imitation.teacher_rows(CONFIG.spec, imitation.validation_seeds(8))
    teacher = {json.dumps(prompt): chosen for prompt, _, _, chosen, _ in rows}
    # right wherever the teacher chose opt:1, opt:0 everywhere else
    _scorer(monkeypatch, lambda p: f'{{"action": "{"opt:1" if teacher[json.dumps(p)] == "opt:1" else "opt:0"}"}}')
    report = imitation.agreement(CONFIG, LOADED, episodes=8)
    right = sum(chosen in ("opt:0", "opt:1") for _, _, _, chosen, _ in rows)
    assert 0 < right < len(rows) and report["agreement"] == round(right / len(rows), 4)
    [(kind, tally)] = report["by_kind"].items()
    assert kind == "opt" and tally["states"] == len(rows) == report["teacher_states"]
    assert report["confusions"] == {"opt -> opt": len(rows) - right}  # a wrong target within the kind
    assert sum(report["teacher_mix"].values()) == len(rows)
    assert 0 < tally["p_teacher"] < 1
    assert all(kinds[chosen] == "opt" for *_, chosen, kinds in rows)  # the kind is the candidate's own


def test_a_policy_that_always_answers_one_option_is_called_collapsed_and_warns(monkeypatch, capsys):
    _scorer(monkeypatch, lambda prompt: '{"action": "opt:0"}')
    check = imitation.imitation_check(CONFIG, LOADED, episodes=8, ratio=0.5)
    # choosing one option twice in a row is the toy's exploit: the policy's own episodes end after two steps
    assert check["top_action"] == "opt:0" and check["top_share"] == 1.0 and check["distinct_actions"] == 1
    assert check["played_actions"] == 16 and check["teacher_top_share"] < 0.5 and check["collapsed"]
    with pytest.warns(imitation.CollapseWarning, match="COLLAPSED onto a few actions"):
        imitation.announce(check)
    assert "it used 1 distinct actions to the teacher's 4, 'opt:0' at 100% of its 16 steps" in capsys.readouterr().out


def test_the_ratio_decides_what_a_collapse_is(monkeypatch):
    _scorer(monkeypatch, lambda prompt: '{"action": "opt:0"}')
    check = imitation.imitation_check(CONFIG, LOADED, episodes=8, ratio=0.5)
    assert check["distinct_actions"] == 1 and check["teacher_distinct_actions"] == 4  # the toy offers four options
    assert imitation.imitation_check(CONFIG, LOADED, episodes=8, ratio=0.26)["collapsed"]  # 1 < 0.26 x 4
    assert not imitation.imitation_check(CONFIG, LOADED, episodes=8, ratio=0.25)["collapsed"]  # 1 is not < 1
    assert check["mix_distance"] == 1 - check["teacher_top_share"]  # all on one action: the rest of the teacher's


def test_the_report_says_a_collapse_first_and_nothing_otherwise(tmp_path, monkeypatch):
    _scorer(monkeypatch, lambda prompt: '{"action": "opt:0"}')
    check = imitation.imitation_check(CONFIG, LOADED, episodes=4, ratio=0.5)
    (tmp_path / "sft").mkdir()
    assert _imitation_lines(tmp_path) == []  # no sft stage record: nothing to say
    (tmp_path / "sft" / "stage.json").write_text(json.dumps({"metrics": {"imitation": check}}))
    lines = _imitation_lines(tmp_path)
    assert lines[0].startswith("**SFT chose the teacher's action") and "COLLAPSED" in lines[0]
    (tmp_path / "sft" / "stage.json").write_text(json.dumps({"metrics": {"imitation": {**check, "collapsed": False}}}))
    assert _imitation_lines(tmp_path) == []
