"""json_tasks on your own tasks: a JSON Lines tasks file (`make_spec(tasks=...)`), its errors, and the registry's
`get_spec(name, args)`, which builds an environment from (name, args) and keeps no process state."""

import json
import re

import pytest

import lib.envs as envs
from lib.config import ConfigError, load_config
from lib.envs import EnvironmentArgsError, get_spec
from lib.envs.base import MAX_ACTION_CHARS, SPLITS, format_action
from lib.envs.json_tasks import JsonTasksEnv, TasksFileError, make_spec
from lib.envs.json_tasks.attacks import ANTI_CHEAT_RULES
from lib.envs.json_tasks.policies import TRIVIAL
from lib.envs.json_tasks.tasks_file import load_tasks
from lib.episodes import run_episode

# ---- tasks files ------------------------------------------------------------------------------------------
DATE = "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"
INVOICE = {
    "prompt": "Invoice 2291 from Acme Corp, total 412.50 EUR, due 2025-07-01, paid: no",
    "schema": {
        "title": "invoice",
        "type": "object",
        "properties": {
            "vendor": {"type": "string", "description": "who billed"},
            "total": {"type": "number"},
            "currency": {"enum": ["EUR", "USD", "GBP"]},
            "due": {"type": "string", "pattern": DATE},
            "paid": {"type": "boolean"},
            "account": {"type": "integer", "description": "account number"},
        },
        "required": ["vendor", "total", "currency", "due", "paid", "account"],
        "additionalProperties": False,
    },
    "gold": {
        "vendor": "Acme Corp",
        "total": 412.5,
        "currency": "EUR",
        "due": "2025-07-01",
        "paid": False,
        "account": 55,
    },
    "lookup": {"account": 55},
}
TABLE = {
    "prompt": "Table for 4 at Luigi's on 2025-05-02",
    "schema": {
        "type": "object",
        "properties": {"party": {"type": "integer"}, "date": {"type": "string", "pattern": DATE}},
        "required": ["party", "date"],
    },
    "gold": {"party": 4, "date": "2025-05-02"},
}


def _write(tmp_path, lines, name="tasks.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n")
    return path


def _good_lines():
    return [INVOICE, {**TABLE, "split": "holdout"}, {**TABLE, "split": "holdout_novel"}]


def test_a_tasks_file_plays_its_own_tasks_with_every_policy(tmp_path):
    spec = make_spec(tasks=str(_write(tmp_path, _good_lines())))
    env = spec.make_env()
    observation = env.reset(0, "train")
    assert env.task.gold == INVOICE["gold"] and observation.prompt == INVOICE["prompt"]
    assert ("lookup", "account") in {c.key for c in observation.candidates}
    assert 55 not in [
        json.loads(c.args[1]) for c in observation.candidates if c.kind == "set" and c.args[0] == "account"
    ]
    for policy in spec.reported_policies:
        for split in SPLITS:
            assert 0.0 <= run_episode(env, spec.make_policy(policy), 0, split).episode_return <= 1.0
    assert run_episode(env, spec.make_policy("oracle"), 0, "train").episode_return == 1.0
    assert {"Acme", "Luigi", "vendor", "invoice"} <= set(re.findall(r"[A-Za-z]+", spec.vocabulary()))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "x", "schema": ', "not JSON"),
        ("[1, 2]", "a line must be a JSON object"),
        ({"prompt": "x", "schema": TABLE["schema"]}, "missing key 'gold'"),
        ({**TABLE, "answer": 1}, "unknown key 'answer'"),
        ({**TABLE, "split": "test"}, "'split' must be one of"),
        ({**TABLE, "schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}, "not a valid JSON Schema"),
        ({**TABLE, "gold": {"party": "four", "date": "2025-05-02"}}, "gold is not valid under its schema"),
        ({**TABLE, "gold": {"party": 4}}, "gold is not valid under its schema: 'date' is a required property"),
        (
            {**TABLE, "schema": {"type": "object", "properties": {"items": {"type": "array"}}}, "gold": {"items": []}},
            "field 'items' has type \"array\", which the environment cannot offer candidates for",
        ),
        ({**TABLE, "lookup": {"seats": 2}}, "lookup names 'seats', which is not a field of the schema"),
        ({**TABLE, "gold": {"party": 4, "date": "2025-05-02", "x": 1}}, "fields the schema does not define"),
        ({**TABLE, "prompt": ""}, "'prompt' must be a non-empty string"),
        (
            {
                **TABLE,
                "schema": {"type": "object", "properties": {"note": {"type": "string"}}},
                "gold": {"note": "y" * 300},
            },
            "too long to offer as a candidate",
        ),
    ],
)
def test_a_bad_line_is_an_error_naming_the_file_the_line_and_what_is_wrong(tmp_path, line, message):
    path = _write(tmp_path, [*_good_lines()[:2], line, _good_lines()[2]])
    with pytest.raises(TasksFileError) as error:
        load_tasks(path)
    assert f"tasks file {path}, line 3: " in str(error.value) and message in str(error.value), str(error.value)


def test_a_tasks_file_needs_every_split_and_must_exist(tmp_path):
    with pytest.raises(TasksFileError, match="no task for split holdout, holdout_novel"):
        load_tasks(_write(tmp_path, [INVOICE]))
    with pytest.raises(TasksFileError, match="no such file"):
        load_tasks(tmp_path / "missing.jsonl")


def test_offered_values_of_a_file_task_are_the_gold_and_distractors_from_its_text(tmp_path):
    split, tasks = "train", load_tasks(_write(tmp_path, _good_lines()))
    options = tasks[split][0].options
    assert options["total"][0] == 412.5 and 2291 in options["total"]
    assert options["due"][0] == "2025-07-01" and "who billed" in options["vendor"]
    assert options["paid"] == (True, False) and set(options["currency"]) >= {"EUR", "USD", "GBP"}
    assert all(len(format_action(f"set:{f}={v}")) <= MAX_ACTION_CHARS for f, vs in options.items() for v in vs)


# ---- the registry: environments built from (name, args), no process state ---------------------------------
def _holdout_gold(spec):
    env = spec.make_env()
    env.reset(0, "holdout")
    return env.task.gold


def test_validating_a_config_with_env_args_changes_no_state(tmp_path):
    builtin = get_spec("json_tasks")
    path = str(_write(tmp_path, _good_lines()))
    config = load_config("cpu-smoke-json_tasks", {"env_args": {"tasks": path}})
    assert config.spec is not builtin and config.spec is config.spec  # memoised: the same spec every time
    assert _holdout_gold(config.spec) == TABLE["gold"]
    assert config.reference_policy == config.spec.teacher
    assert get_spec("json_tasks") is builtin and get_spec("json_tasks", {}) is builtin  # still the built-in one
    env = envs.make_env("json_tasks")  # a bare name, as before any config was validated
    env.reset(0, "holdout")
    assert env.task.gold != TABLE["gold"]
    assert load_config("cpu-smoke-json_tasks").spec is builtin


def test_two_configurations_of_one_environment_live_side_by_side(tmp_path):
    own = str(_write(tmp_path, _good_lines()))
    swapped = str(_write(tmp_path, [TABLE, {**INVOICE, "split": "holdout"}, {**TABLE, "split": "holdout_novel"}], "b"))
    builtin = get_spec("json_tasks")
    first, second = get_spec("json_tasks", {"tasks": own}), get_spec("json_tasks", {"tasks": swapped})
    assert len({id(builtin), id(first), id(second)}) == 3
    assert get_spec("json_tasks", {"tasks": own}) is first  # memoised on the arguments' values, not the dict
    at_once = [builtin.make_env(), first.make_env(), second.make_env(), envs.make_env("json_tasks", {"tasks": own})]
    golds = []
    for env in at_once:  # made before any is reset: each plays its own configuration's tasks
        env.reset(0, "holdout")
        golds.append(env.task.gold)
    assert golds[1] == golds[3] == TABLE["gold"] and golds[2] == INVOICE["gold"]
    assert golds[0] not in (TABLE["gold"], INVOICE["gold"])
    for spec in (builtin, first, second):
        assert run_episode(spec.make_env(), spec.make_policy("oracle"), 0, "holdout").episode_return == 1.0
    configs = [load_config("cpu-smoke-json_tasks", {"env_args": {"tasks": p}}) for p in (own, swapped)]
    assert configs[0].spec is first and configs[1].spec is second and _holdout_gold(first) == TABLE["gold"]


def test_bad_arguments_are_clear_errors_and_leave_the_registry_as_it_was(tmp_path):
    builtin = get_spec("json_tasks")
    with pytest.raises(EnvironmentArgsError, match=r"unknown argument 'task'; it accepts \['tasks'\]"):
        get_spec("json_tasks", {"task": "x.jsonl"})
    with pytest.raises(EnvironmentArgsError, match="takes no arguments"):
        get_spec("sentinel_trust", {"tasks": "x.jsonl"})
    with pytest.raises(EnvironmentArgsError, match="must be JSON values"):
        get_spec("json_tasks", {"tasks": object()})
    with pytest.raises(EnvironmentArgsError, match="must map names to values"):
        envs.make_env("json_tasks", ["tasks"])
    path = _write(tmp_path, [INVOICE, {**TABLE, "gold": {"party": "four", "date": "2025-05-02"}}])
    with pytest.raises(TasksFileError, match=rf"tasks file {re.escape(str(path))}, line 2: gold is not valid"):
        get_spec("json_tasks", {"tasks": str(path)})
    with pytest.raises(ConfigError, match=r"unknown argument 'task'; it accepts \['tasks'\]"):
        load_config("cpu-smoke-json_tasks", {"env_args": {"task": "x.jsonl"}})
    with pytest.raises(ConfigError, match=rf"tasks file {re.escape(str(path))}, line 2"):
        load_config("cpu-smoke-json_tasks", {"env_args": {"tasks": str(path)}})
    assert get_spec("json_tasks") is builtin and get_spec("sentinel_trust").name == "sentinel_trust"
    good = get_spec("json_tasks", {"tasks": str(_write(tmp_path, _good_lines(), "good.jsonl"))})
    assert _holdout_gold(good) == TABLE["gold"]


def test_the_spec_names_its_teacher_rule_and_words():
    spec = get_spec("json_tasks")
    assert isinstance(spec.make_env(), JsonTasksEnv) and spec.teacher == "heuristic" and spec.oracle == "oracle"
    assert set(spec.trivial) == {*TRIVIAL, "first_candidate", "repeat_last"}
    assert spec.anti_cheat_rules == ANTI_CHEAT_RULES
    words = set(spec.vocabulary().split())
    assert {"express", "BOS", "Lisbon", "senior", "lookup", "submit"} <= words
    assert make_spec() is spec
