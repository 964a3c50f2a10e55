"""json_tasks: candidate ids, prompts and vocabulary, scoring with jsonschema, the anti-cheat rule, lookups, the
budget, no hidden-state leak, the teacher's blind spots, fast baseline bars and splits (novel schemas). Tasks files
and `get_spec(name, args)`: tests/test_env_json_tasks_files.py; the contract every environment keeps, from
determinism to the served round trip: tests/test_env_contract.py."""

import json
import re
from dataclasses import replace
from statistics import fmean

import pytest

from lib.envs import get_spec
from lib.envs.base import format_action, split_seed
from lib.envs.json_tasks import SPEC, JsonTasksEnv
from lib.envs.json_tasks.attacks import ANTI_CHEAT_RULES
from lib.envs.json_tasks.env import render
from lib.envs.json_tasks.policies import extract
from lib.envs.json_tasks.reward import WEIGHTS, terminal_components
from lib.envs.json_tasks.scenario import NOVEL_FAMILIES, TRAIN_FAMILIES, generate
from lib.envs.json_tasks.task import Task, literal
from lib.episodes import run_episode
from tests.test_env_contract import played_prompts
from tests.test_env_json_tasks_files import TABLE, _good_lines, _write  # noqa: F401 (test_serve's)

SPLITS = ("train", "holdout", "holdout_novel")
TEACHER = "heuristic"


@pytest.fixture
def env():
    return JsonTasksEnv()


def _pick(observation, *key):
    return format_action(next(c for c in observation.candidates if c.key == key).id)


def _task(schema, gold, prompt="text", lookup=None, options=None):
    options = options or {name: (value,) for name, value in gold.items()}
    return Task("t", "", prompt, schema, gold, lookup or {}, options)


# ---- the prompt and the candidates ------------------------------------------------------------------------
def test_the_prompt_shows_the_object_so_far_and_an_invalid_answer_uses_a_step(env):
    observation = env.reset(9, "holdout")
    setting = next(c for c in observation.candidates if c.kind == "set" and c.args[0] in env.task.fields)
    observation = env.step(format_action(setting.id)).observation
    content = render(observation)[1]["content"]
    assert f"Object so far: {json.dumps(dict(observation.obj))}" in content
    empty = [name for name in env.task.fields if name != setting.args[0]]
    assert f"Empty fields: {', '.join(empty)}\n" in content
    observation = env.step("not an action").observation
    assert observation.last == "invalid answer, one step used" and observation.step == 2
    full = replace(observation, obj=tuple((name, 1) for name in env.task.fields))
    assert "\nEmpty fields: none\n" in render(full)[1]["content"]


def test_candidate_ids_are_unique_short_and_name_what_they_do(env):
    for seed in range(60):
        observation = env.reset(seed, SPLITS[seed % 3])
        ids = [c.id for c in observation.candidates]
        assert len(ids) == len(set(ids)) and ids.count("submit") == 1
        assert all(len(format_action(i)) <= 64 for i in ids)
        for c in observation.candidates:
            if c.kind == "set":
                assert c.id == f"set:{c.args[0]}={literal(json.loads(c.args[1]))}"
            elif c.kind == "lookup":
                assert c.id == f"lookup:{c.args[0]}" and c.args[0] in env.task.lookup
    # shuffled per step, deterministically
    first = env.reset(3, "holdout").candidates
    again = env.reset(3, "holdout").candidates
    later = env.step(format_action(first[0].id) if first[0].kind != "submit" else format_action(first[1].id))
    assert first == again and [c.id for c in later.observation.candidates] != [c.id for c in first]


def test_prompts_stay_bounded_and_every_word_is_in_the_vocabulary():
    vocabulary = set(re.findall(r"[A-Za-z]+", SPEC.vocabulary()))
    texts = played_prompts(SPEC, ("random", "evidence_expert", "oracle"), range(60))
    words = {word for text in texts for word in re.findall(r"[A-Za-z]+", text)}
    assert max(map(len, texts)) < 2800 and words <= vocabulary, sorted(words - vocabulary)


# ---- scoring ----------------------------------------------------------------------------------------------
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "full name"},
        "n": {"type": "integer"},
        "kg": {"type": "number"},
        "speed": {"type": "string", "enum": ["standard", "express"]},
        "day": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
        "wrap": {"type": "boolean"},
    },
    "required": ["name", "n", "kg", "speed", "day"],
    "additionalProperties": False,
}
GOLD = {"name": "Dana Kim", "n": 3, "kg": 2.5, "speed": "express", "day": "2025-03-04", "wrap": False}


@pytest.mark.parametrize(
    ("change", "valid", "fields"),
    [
        ({}, 1.0, 1.0),
        ({"name": "  dana   KIM. "}, 1.0, 1.0),  # strings: case-folded, whitespace collapsed, end punctuation
        ({"name": "Dana"}, 1.0, 5 / 6),
        ({"n": 4}, 1.0, 5 / 6),
        ({"kg": 2.51}, 1.0, 5 / 6),
        ({"wrap": None}, 1.0, 5 / 6),  # an optional field left out: valid, but a gold field missing counts wrong
        ({"speed": "Express"}, 0.0, 0.0),  # enums are exact: invalid, so no field counts
        ({"day": "03/04/2025"}, 0.0, 0.0),  # pattern
        ({"n": "3"}, 0.0, 0.0),  # type
        ({"n": None}, 0.0, 0.0),  # a required field missing
        ({"note": "x"}, 0.0, 0.0),  # a field the schema does not define
    ],
)
def test_components_validate_with_jsonschema_and_compare_field_by_field(change, valid, fields):
    task = _task(SCHEMA, GOLD)
    obj = {k: v for k, v in {**GOLD, **change}.items() if v is not None}
    components = terminal_components(task, obj, steps=len(GOLD) + 1, exploit=None)
    assert components["valid"] == valid and components["fields"] == pytest.approx(fields)
    assert components["efficiency"] == pytest.approx(fields) and components["anti_cheat"] == 0.0
    assert task.is_valid(obj) == (not task.errors(obj))


def test_efficiency_is_small_and_falls_with_extra_steps():
    task = _task(SCHEMA, GOLD)
    quick = terminal_components(task, dict(GOLD), steps=7, exploit=None)
    slow = terminal_components(task, dict(GOLD), steps=14, exploit=None)
    assert quick["efficiency"] == 1.0 and slow["efficiency"] == 0.5 and WEIGHTS["efficiency"] <= 0.1


# ---- the anti-cheat rule, lookups, the budget -------------------------------------------------------------
def _copy_candidate(env, observation):
    return next(
        (c for c in observation.candidates if c.kind == "set" and env.task.copies_schema(json.loads(c.args[1]))),
        None,
    )


def test_copying_the_schema_text_ends_the_episode_with_zero_and_names_the_rule(env):
    hits = 0
    for seed in range(40):
        observation = env.reset(seed, "holdout")
        copy = _copy_candidate(env, observation)
        if copy is None:
            continue
        value = json.loads(copy.args[1])
        field = env.task.schema["properties"][copy.args[0]]
        assert value in ("string", field.get("description"))  # offered: a type name or the field's description
        result = env.step(format_action(copy.id))
        assert result.done and result.info["end_reason"] == "exploit"
        assert result.info["anti_cheat"] == "copies_schema" == result.info["exploit"]
        assert result.info["episode_return"] == 0.0 and result.components["fields"] == 0.0
        assert result.components["anti_cheat"] == -1.0
        hits += 1
    assert hits >= 8 and ANTI_CHEAT_RULES == ("copies_schema",)


def test_a_value_read_from_the_text_never_counts_as_a_schema_copy():
    task = _task(
        {"title": "invoice", "type": "object", "properties": {"who": {"type": "string", "description": "biller"}}},
        {"who": "Acme"},
        prompt="Invoice from Acme",
    )
    assert not task.copies_schema("Invoice") and task.copies_schema("biller") and task.copies_schema("STRING")
    assert task.copies_schema("Invoice from Acme.") and not task.copies_schema("Acme")


def test_lookup_reveals_a_value_the_text_does_not_show_and_costs_a_step(env):
    checked = 0
    for seed in range(60):
        observation = env.reset(seed, SPLITS[seed % 3])
        lookups = [c for c in observation.candidates if c.kind == "lookup"]
        if not lookups:
            continue
        field = lookups[0].args[0]
        gold = env.gold[field]
        prop = env.task.schema["properties"][field]
        if "enum" not in prop:
            assert gold not in [
                json.loads(c.args[1]) for c in observation.candidates if c.kind == "set" and c.args[0] == field
            ]
            assert str(gold) not in env.render(observation)[1]["content"]
        result = env.step(format_action(lookups[0].id))
        after = result.observation
        assert after.looked_up == ((field, gold),) and after.step == 1 and not result.done
        assert f"Looked up: {field} = {gold}" in env.render(after)[1]["content"]
        assert ("set", field, json.dumps(gold)) in {c.key for c in after.candidates}
        assert ("lookup", field) not in {c.key for c in after.candidates}
        checked += 1
    assert checked >= 20


def test_the_budget_ends_an_episode_scored_as_it_stands(env):
    episode = run_episode(env, SPEC.make_policy("repeat_last"), 5, "holdout")
    assert episode.end_reason == "budget" and episode.steps == env.budget
    assert episode.episode_return == 0.0  # one field set over and over: required fields missing
    observation = env.reset(5, "holdout")
    teacher = SPEC.make_policy(TEACHER)
    while True:  # the teacher fills every field, then pads to the budget with the same field: scored as it stands
        text = teacher.act(observation, env)
        if json.loads(text)["action"] == "submit":
            first = env.task.fields[0]
            text = _pick(observation, "set", first, json.dumps(dict(observation.obj)[first]))
        result = env.step(text)
        if result.done:
            break
        observation = result.observation
    assert result.info["end_reason"] == "budget" and result.components["valid"] == 1.0
    assert 0 < result.components["efficiency"] < result.components["fields"]


def test_scripted_baselines_never_hit_a_rule_and_the_teacher_never_looks_up(env):
    for policy in (TEACHER, "evidence_expert", "oracle", "schema_defaults"):
        for seed in range(45):
            split = SPLITS[seed % 3]
            episode = run_episode(env, SPEC.make_policy(policy), seed, split, keep_transitions=True)
            assert episode.end_reason == "submit", (policy, seed)
            if policy == TEACHER:
                assert not any('"lookup:' in t["action"] for t in episode.transitions)


# ---- no leak ----------------------------------------------------------------------------------------------
def test_nothing_a_policy_sees_holds_an_unasked_lookup_value(env):
    checked = 0
    for policy in ("random", TEACHER):
        for seed in range(30):
            observation = env.reset(seed, SPLITS[seed % 3])
            chosen = SPEC.make_policy(policy)
            chosen.begin(seed)
            hidden = [v for f, v in env.task.lookup.items() if "enum" not in env.task.schema["properties"][f]]
            while True:
                seen = json.dumps(render(observation)) + repr(observation)
                asked = dict(observation.looked_up)
                assert not [v for v in hidden if v not in asked.values() and str(v) in seen]
                result = env.step(chosen.act(observation, env))
                checked += 1
                if result.done:
                    break
                assert str(env.task.gold) not in json.dumps(result.info)
                observation = result.observation
    assert checked > 200 and {"gold", "lookup"} <= set(env.state())  # state() is the debugging/oracle view


# ---- the teacher's blind spots ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "prop", "values", "text", "expected"),
    [
        ("quantity", {"type": "integer", "description": "items ordered"}, [24, 3, 8], "quantity: 3 packs of 8", 3),
        ("weight_kg", {"type": "number"}, [2.5, 5.5], "weight: 5.5 lb (2.5 kg)", 5.5),
        ("weight_kg", {"type": "number"}, [2.5, 5.5], "weight: 2.5 kg", 2.5),
        (
            "shipping",
            {"enum": ["standard", "express"], "default": "standard"},
            ["standard", "express"],
            "overnight delivery",
            "standard",
        ),  # fmt: skip
        (
            "shipping",
            {"enum": ["standard", "express"]},
            ["standard", "express", "Express"],
            "Express shipping",
            "express",
        ),  # fmt: skip
        ("gift_wrap", {"type": "boolean"}, [True, False], "gift wrap: no", False),
        ("gift_wrap", {"type": "boolean"}, [True, False], "no gift wrap needed", True),
        (
            "recipient",
            {"type": "string"},
            ["Dana Kim", "Ana Ruiz"],
            "placed by Ana Ruiz; deliver to Dana Kim",
            "Ana Ruiz",
        ),  # fmt: skip
        (
            "recipient",
            {"type": "string"},
            ["Dana Kim", "Ana Ruiz"],
            "placed by Ana Ruiz; recipient: Dana Kim",
            "Dana Kim",
        ),  # fmt: skip
    ],
)
def test_the_teacher_is_a_plausible_keyword_extractor_with_its_blind_spots(field, prop, values, text, expected):
    assert extract(field, prop, values, text) == expected


# ---- the teacher as the continuation of someone else's episode --------------------------------------------
def test_a_scripted_policy_keeps_a_field_someone_else_set_and_the_oracle_corrects_it(env):
    """The teacher finishes episodes others began (the improver, step-mode GRPO's reward): it fills the empty
    fields and keeps the ones already set, so the value an action set is what the return measures. The oracle
    corrects every field that is not gold."""
    checked = 0
    for seed in range(20):
        observation = env.reset(seed, "holdout")
        teacher_first = SPEC.make_policy(TEACHER).act(observation, env)
        field = next(c for c in observation.candidates if format_action(c.id) == teacher_first).args[0]
        other = next(
            (
                c
                for c in observation.candidates
                if c.kind == "set" and c.args[0] == field and format_action(c.id) != teacher_first
            ),
            None,
        )
        if other is None:
            continue
        result = env.step(format_action(other.id))
        if result.done:  # a schema-copying value ends the episode (the anti-cheat rule): nothing to continue
            continue
        kept = dict(result.observation.obj)[field]
        for name in (TEACHER, "evidence_expert", "schema_defaults"):
            follow = JsonTasksEnv()
            state = follow.restore(seed, "holdout", [format_action(other.id)])
            policy = SPEC.make_policy(name)
            policy.begin(seed)
            while True:
                step = follow.step(policy.act(state, follow))
                if step.done:
                    break
                state = step.observation
                assert dict(state.obj)[field] == kept, (name, seed)
        follow = JsonTasksEnv()
        state, oracle = follow.restore(seed, "holdout", [format_action(other.id)]), SPEC.make_policy("oracle")
        oracle.begin(seed)
        while not (step := follow.step(oracle.act(state, follow))).done:
            state = step.observation
        if field in follow.gold and follow.gold[field] != kept:
            assert dict(state.obj)[field] == follow.gold[field]  # the oracle rewrote the field to gold
            checked += 1
        assert step.info["episode_return"] >= 0.95  # all gold; one step more than it needed costs a little
    assert checked >= 10, checked


@pytest.mark.slow
def test_the_improver_has_headroom_over_the_teacher():
    """The teacher's one-step improvement (what step-mode GRPO's reward points to) beats the teacher clearly: it
    measured 0.968 against 0.799 on 60 holdout seeds; when the teacher rewrote every field it was exactly 0.799."""
    from lib.episodes import Improver

    spec, env = get_spec("json_tasks"), JsonTasksEnv()
    teacher = fmean(run_episode(env, SPEC.make_policy(TEACHER), s, "holdout").episode_return for s in range(30))
    improver = fmean(run_episode(env, Improver(spec), s, "holdout").episode_return for s in range(30))
    assert improver >= teacher + 0.10, (teacher, improver)


# ---- baseline bars ----------------------------------------------------------------------------------------
def test_trivial_policies_lose_and_the_oracle_wins_on_a_few_episodes(env):
    """The fast tier's version of the contract's bars (tests/test_env_contract.py): 40 episodes per split."""
    for split in ("holdout", "holdout_novel"):
        mean = {
            p: fmean(run_episode(env, SPEC.make_policy(p), s, split).episode_return for s in range(40))
            for p in SPEC.reported_policies
        }
        assert mean["oracle"] == 1.0 and mean["oracle"] >= mean[TEACHER] + 0.1 >= mean["random"] + 0.2
        assert all(mean[p] <= mean[TEACHER] - 0.2 for p in SPEC.trivial), mean


# ---- splits -----------------------------------------------------------------------------------------------
def test_splits_are_disjoint_and_holdout_novel_schemas_never_appear_in_train():
    internal = {split: {split_seed(s, split) for s in range(500)} for split in SPLITS}
    assert not internal["train"] & internal["holdout"] and not internal["train"] & internal["holdout_novel"]
    assert not internal["holdout"] & internal["holdout_novel"]
    train = [generate(split_seed(s, "train"), False) for s in range(500)]
    holdout = [generate(split_seed(s, "holdout"), False) for s in range(200)]
    novel = [generate(split_seed(s, "holdout_novel"), True) for s in range(200)]
    assert {t.prompt for t in train}.isdisjoint(t.prompt for t in holdout)
    assert {t.family for t in train} == {t.family for t in holdout} == set(TRAIN_FAMILIES)
    assert {t.family for t in novel} == set(NOVEL_FAMILIES) and not set(TRAIN_FAMILIES) & set(NOVEL_FAMILIES)
    train_schemas = {json.dumps(t.schema, sort_keys=True) for t in train}
    train_field_sets = {frozenset(t.fields) for t in train}
    assert not any(json.dumps(t.schema, sort_keys=True) in train_schemas for t in novel)
    assert not any(frozenset(t.fields) in train_field_sets for t in novel)
    env = JsonTasksEnv()
    env.reset(0, "holdout_novel")
    assert env.state()["family"] in NOVEL_FAMILIES


def test_every_built_in_schema_is_a_valid_json_schema_and_its_gold_validates():
    from jsonschema import Draft202012Validator

    for seed in range(150):
        task = generate(split_seed(seed, SPLITS[seed % 3]), seed % 3 == 2)
        Draft202012Validator.check_schema(task.schema)
        assert task.is_valid(task.gold) and task.field_share(task.gold) == 1.0
        assert len(task.fields) >= 5 and set(task.lookup) <= set(task.fields)
        assert all(any(v == task.gold[f] and type(v) is type(task.gold[f]) for v in task.options[f]) for f in task.gold)
