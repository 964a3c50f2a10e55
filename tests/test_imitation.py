"""The SFT stage's imitation check (lib/training/imitation.py): agreement with the teacher at the teacher's own
states, and a collapse onto one action said loudly, in the stage record and first in the report."""

import json
import warnings

import pytest

import lib.training.imitation as imitation
from lib.envs import get_spec
from lib.reporting.report import _imitation_lines

SPEC = get_spec("tests.toyenv")


def _scorer(pick):
    """A stand-in for the model's candidate scores: 0 for the answer `pick(prompt, answers)` names, -5 elsewhere."""

    def score(model, tokenizer, prompts, answer_lists):
        return [[0.0 if a == pick(p, answers) else -5.0 for a in answers] for p, answers in zip(prompts, answer_lists)]

    return score


def test_a_policy_that_answers_like_the_teacher_agrees_everywhere_and_has_not_collapsed(monkeypatch):
    rows = imitation.teacher_rows(SPEC, imitation.validation_seeds(8))
    teacher = {json.dumps(prompt): f'{{"action": "{chosen}"}}' for prompt, _, _, chosen in rows}
    monkeypatch.setattr(imitation, "score_answers", _scorer(lambda prompt, answers: teacher[json.dumps(prompt)]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", imitation.CollapseWarning)
        check = imitation.imitation_check(SPEC, None, None, episodes=8, margin=0.3)
        imitation.announce(check)
    assert check["states"] == len(rows) == 8 * 3 and check["agreement"] == 1.0
    assert check["top_share"] == check["teacher_top_share"] and not check["collapsed"]
    assert "COLLAPSED" not in imitation.describe(check)


def test_a_policy_that_always_answers_one_option_is_called_collapsed_and_warns(monkeypatch, capsys):
    monkeypatch.setattr(imitation, "score_answers", _scorer(lambda prompt, answers: '{"action": "opt:0"}'))
    check = imitation.imitation_check(SPEC, None, None, episodes=8, margin=0.3)
    assert check["top_action"] == "opt:0" and check["top_share"] == 1.0 and check["distinct_actions"] == 1
    assert check["teacher_top_share"] < 0.7 and check["collapsed"]
    with pytest.warns(imitation.CollapseWarning, match="COLLAPSED onto one action"):
        imitation.announce(check)
    assert "'opt:0', at 100% of them" in capsys.readouterr().out


def test_the_margin_decides_what_a_collapse_is(monkeypatch):
    monkeypatch.setattr(imitation, "score_answers", _scorer(lambda prompt, answers: '{"action": "opt:0"}'))
    share = imitation.imitation_check(SPEC, None, None, episodes=8, margin=0.3)
    gap = share["top_share"] - share["teacher_top_share"]
    assert not imitation.imitation_check(SPEC, None, None, episodes=8, margin=min(1.0, gap + 0.01))["collapsed"]


def test_the_report_says_a_collapse_first_and_nothing_otherwise(tmp_path, monkeypatch):
    monkeypatch.setattr(imitation, "score_answers", _scorer(lambda prompt, answers: '{"action": "opt:0"}'))
    check = imitation.imitation_check(SPEC, None, None, episodes=4, margin=0.3)
    (tmp_path / "sft").mkdir()
    assert _imitation_lines(tmp_path) == []  # no sft stage record: nothing to say
    (tmp_path / "sft" / "stage.json").write_text(json.dumps({"metrics": {"imitation": check}}))
    lines = _imitation_lines(tmp_path)
    assert lines[0].startswith("**SFT chose the teacher's action") and "COLLAPSED" in lines[0]
    (tmp_path / "sft" / "stage.json").write_text(json.dumps({"metrics": {"imitation": {**check, "collapsed": False}}}))
    assert _imitation_lines(tmp_path) == []
