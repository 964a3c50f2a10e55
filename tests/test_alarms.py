"""GRPO's collapse alarms: a falling validation curve and groups that stopped varying are said out loud, written to
grpo/alarms.jsonl, and stop the run only when asked to."""

import json
from types import SimpleNamespace

import pytest

from lib.config import ConfigError, load_config
from lib.training.alarms import CollapseAlarm, groups_stopped_varying, read_alarms, validation_drop


def _points(*returns, every=4):
    return [{"step": i * every, "mean_return": r} for i, r in enumerate(returns)]


def test_a_fall_beyond_the_drop_below_the_best_is_an_alarm_and_a_smaller_one_is_not():
    assert validation_drop(_points(0.35), 0.05) is None
    assert validation_drop(_points(0.35, 0.41, 0.38), 0.05) is None  # 0.03 below the best
    alarm = validation_drop(_points(0.35, 0.41, 0.38, 0.03), 0.05)
    assert alarm["kind"] == "validation_drop" and alarm["step"] == 12
    assert "0.380 below its best (0.410 at step 4" in alarm["message"]
    assert validation_drop(_points(0.35, 0.41, 0.45), 0.05) is None  # a new best


def test_groups_stop_varying_only_over_a_full_window_above_the_threshold():
    assert not groups_stopped_varying([1.0] * 9, 0.5)
    assert groups_stopped_varying([0.0] * 5 + [1.0] * 10, 0.5)
    assert not groups_stopped_varying([1.0] * 10 + [0.0] * 6, 0.5)  # the last 10 average 0.4


def _config(**rl):
    return load_config("cpu-smoke", {"rl.validate_every": 4, **{f"rl.{k}": v for k, v in rl.items()}})


def _control():
    return SimpleNamespace(should_training_stop=False)


@pytest.mark.parametrize("stop", [False, True])
def test_the_callback_writes_prints_and_warns_each_alarm_once_and_stops_only_when_asked(tmp_path, capsys, stop):
    alarm = CollapseAlarm(_config(stop_on_alarm=stop), tmp_path)
    curve = tmp_path / "validation.jsonl"
    curve.write_text("\n".join(json.dumps(p) for p in _points(0.35, 0.41)) + "\n")
    control = _control()
    alarm.on_step_end(None, SimpleNamespace(global_step=4), control)
    assert read_alarms(tmp_path) == [] and not control.should_training_stop
    curve.write_text("\n".join(json.dumps(p) for p in _points(0.35, 0.41, 0.10)) + "\n")
    with pytest.warns(UserWarning, match="validation_drop at step 8"):
        alarm.on_step_end(None, SimpleNamespace(global_step=8), control)
    for step in range(9, 20):
        alarm.on_log(None, SimpleNamespace(global_step=step), control, logs={"frac_reward_zero_std": 1.0})
    alarm.on_step_end(None, SimpleNamespace(global_step=8), control)  # the same point again: no second alarm
    assert [a["kind"] for a in read_alarms(tmp_path)] == ["validation_drop", "zero_std"]
    assert read_alarms(tmp_path)[1]["step"] == 18  # the 10th step with no spread
    assert "ALARM (validation_drop, step 8)" in capsys.readouterr().out
    assert control.should_training_stop is stop
    # a resumed run keeps its alarms and raises none of them again
    again = CollapseAlarm(_config(stop_on_alarm=stop), tmp_path)
    again.on_step_end(None, SimpleNamespace(global_step=8), _control())
    assert len(read_alarms(tmp_path)) == 2


def test_a_damaged_alarms_file_is_an_error_naming_its_line(tmp_path):
    (tmp_path / "alarms.jsonl").write_text('{"kind": "zero_std", "step": 3}\n{not json\n')
    with pytest.raises(ValueError, match="alarms.jsonl:2: not a JSON line"):
        read_alarms(tmp_path)


def test_alarm_settings_out_of_range_are_config_errors():
    with pytest.raises(ConfigError, match="alarm_zero_std"):
        load_config("cpu-smoke", {"grpo.alarm_zero_std": 1.5})


def test_the_report_says_the_alarms_first_and_nothing_when_there_are_none(tmp_path):
    from lib.reporting.report import _alarm_lines

    assert _alarm_lines(tmp_path) == []  # no grpo stage
    (tmp_path / "grpo").mkdir()
    record = {"metrics": {"alarms": [], "kept_step": 40, "stopped_early": False}}
    (tmp_path / "grpo" / "stage.json").write_text(json.dumps(record))
    assert _alarm_lines(tmp_path) == []
    record["metrics"] |= {"alarms": ["step 60: validation_drop: fell"], "stopped_early": True}
    (tmp_path / "grpo" / "stage.json").write_text(json.dumps(record))
    lines = _alarm_lines(tmp_path)
    assert lines[0].startswith("**GRPO raised 1 collapse alarm** (the run kept step 40). It stopped early")
    assert "- step 60: validation_drop: fell" in lines
