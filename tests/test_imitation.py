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
from lib.stats import kind_log_weights

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


def _two_kind_rows():
    """Four teacher states offering a common and a rare candidate; the teacher takes the rare one at the first."""
    kinds = {"c": "common", "r": "rare"}
    return [([], ["c", "r"], ["c", "r"], "r" if i == 0 else "c", kinds) for i in range(4)]


def test_logit_adjustment_subtracts_each_kinds_shift_before_the_argmax():
    rows, scores = _two_kind_rows(), [[-0.5, 0.0]] * 4  # the model leans to the rare answer everywhere
    plain = imitation.tally(rows, scores)
    assert {k: v["agreement"] for k, v in plain["by_kind"].items()} == {"common": 0.0, "rare": 1.0}
    assert plain["confusions"] == {"common -> rare": 3}
    undone = imitation.tally(rows, scores, {"rare": 1.0, "common": -0.2})  # 0.0 - 1.0 < -0.5 + 0.2
    assert {k: v["agreement"] for k, v in undone["by_kind"].items()} == {"common": 1.0, "rare": 0.0}
    assert (
        undone["agreement"] == 0.75 and undone["by_kind"]["rare"]["p_teacher"] < plain["by_kind"]["rare"]["p_teacher"]
    )


def test_logit_adjustment_scores_once_and_tallies_every_tau(monkeypatch):
    rows, calls = _two_kind_rows(), []
    monkeypatch.setattr(imitation, "teacher_state_scores", lambda *a: calls.append(a) or (rows, [[-0.5, 0.0]] * 4))
    weights = kind_log_weights({"corpus": {"common": 0.9, "rare": 0.1}, "trained": {"common": 0.6, "rare": 0.4}})
    report = imitation.logit_adjusted(CONFIG, LOADED, 4, weights, [0.0, 1.0])
    assert len(calls) == 1 and set(report["by_tau"]) == {"0.0", "1.0"}
    assert report["by_tau"]["0.0"]["by_kind"]["rare"]["agreement"] == 1.0
    assert report["by_tau"]["1.0"]["by_kind"]["rare"]["agreement"] == 0.0  # log 4 - log(2/3) = 1.79 > 0.5


def test_logit_adjustment_refuses_a_kind_the_resampling_never_weighed_and_a_run_without_a_mix():
    for missing in (None, {}):
        with pytest.raises(ValueError, match="no kind_mix"):
            kind_log_weights(missing)
    with pytest.raises(ValueError, match="rare"):
        kind_log_weights({"corpus": {"common": 0.9, "rare": 0.1}, "trained": {"common": 1.0}})


def test_the_agreement_verb_refuses_logit_adjustment_without_a_kind_mix_and_bad_taus(tmp_path):
    from lib.bench import cli

    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "stage.json").write_text(json.dumps({"metrics": {"precision": "fp32"}}))
    args = type("Args", (), {"run_dir": tmp_path, "episodes": 4, "logit_adjust": "0,1"})
    with pytest.raises(ValueError, match="no kind_mix"):
        cli._agreement(args)
    for bad, message in (("0,x", "not a comma-separated"), ("0,1.5", "outside")):
        args.logit_adjust = bad
        with pytest.raises(SystemExit, match=message):
            cli._agreement(args)


def test_a_kind_shift_at_play_moves_the_choice_off_the_shifted_kind(monkeypatch):
    """sft-check --logit-adjust plays through `candidate_actor(kind_shift=...)`: the shift is taken off the score of
    every candidate of its kind before the choice, and free text refuses it."""
    from types import SimpleNamespace

    from lib.envs import get_spec
    from lib.envs.base import format_action
    from lib.inference import candidate_actor, model_actor

    env = get_spec("sentinel_trust").make_env()
    observation = env.reset(0, "holdout")
    kinds = {format_action(c.id): c.kind for c in observation.candidates}
    favourite = next(a for a, k in kinds.items() if k == "verify")  # the model leans to one verification
    monkeypatch.setattr(
        candidates,
        "score_answers",
        lambda m, t, messages, options, **_: [[-1.0 + (a == favourite) for a in o] for o in options],
    )
    entry = SimpleNamespace(observation=observation, env=env, extra={})
    assert candidate_actor(None, None)([entry]) == [favourite]
    [chosen] = candidate_actor(None, None, kind_shift={"verify": 2.0})([entry])
    assert kinds[chosen] == "delegate" and 0 < entry.extra["p_action"] < 1
    [kept] = candidate_actor(None, None, kind_shift={"verify": 0.5})([entry])  # 0.0 - 0.5 > -1.0: still verifies
    assert kept == favourite
    with pytest.raises(ValueError, match="candidate scoring"):
        model_actor(None, None, action_space="free", kind_shift={"verify": 1.0})
