"""The environment contract, tested once for every registered environment (`builtin_names()`) and the toy one
defined outside lib/ (tests/toyenv.py): a new environment gets the whole suite by being registered. What is
particular to one environment (its dynamics, rules, prompts, splits) stays in its own test file.

The contract: a consistent spec and the manifest written from it; every policy ends every episode with a return
in [0, 1]; the same seed plays the same episode, here and in a new process; `restore` rebuilds any state; anything
but one offered id is an invalid answer that costs the penalty and is never carried out, and three in a row end the
episode with 0 (fuzzed); candidates are listed shuffled and quoted; the weights sum to one; every harmful attack
scores at most the worst legal action; the baselines keep their order; the served environment plays as the local one.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from functools import cache
from statistics import fmean

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.envs import EnvironmentArgsError, builtin_names, get_spec
from lib.envs.base import MAX_CONSECUTIVE_INVALID, SPLITS, Environment, Invalid, format_action, parse_action
from lib.episodes import action_return, candidate_returns, run_episode, teacher_states

ENVS = [*builtin_names(), "tests.toyenv"]
LONG = {"sentinel_cluster"}  # about 70 steps an episode: fewer episodes, and its attack check is slow
# evidence_expert, which reads only the prompt, beats the teacher by this much (the headroom is learnable)
HEADROOM = {"polyguard": 0.15, "sentinel_trust": 0.07, "sentinel_cluster": 0.08, "json_tasks": 0.15}
TRACES = ((11, "train", "teacher"), (5, "holdout_novel", "oracle"), (2, "holdout", "random"))


def _policy(spec, role: str):
    return spec.make_policy({"teacher": spec.teacher, "oracle": spec.oracle, "random": spec.random}.get(role, role))


def _trace(name: str, seed: int, split: str, role: str) -> tuple[list[str], list[float]]:
    """Rendered prompts and step rewards of one episode (the determinism witness)."""
    spec = get_spec(name)
    env, policy = spec.make_env(), _policy(spec, role)
    observation = env.reset(seed, split)
    policy.begin(seed)
    prompts, rewards = [], []
    while True:
        prompts.append(json.dumps(env.render(observation)))
        result = env.step(policy.act(observation, env))
        rewards.append(result.reward)
        if result.done:
            return prompts, rewards
        observation = result.observation


def traces() -> dict[str, list]:
    return {name: [_trace(name, *t) for t in TRACES] for name in ENVS}


def _teacher_history(env, spec, seed: int, split: str, steps: int) -> list[str]:
    """The teacher's first `steps` answers (fewer if its episode ends sooner: the state is always mid-episode)."""
    transitions = run_episode(env, _policy(spec, "teacher"), seed, split, keep_transitions=True).transitions
    return transitions[min(steps, len(transitions) - 1)]["history"]


def played_prompts(spec, policies, seeds) -> list[str]:
    """The text of every prompt `policies` are shown on `seeds` (the splits in turn), with an invalid answer at every
    third step of one seed in five (the environment tests check their prompts' length and words with it)."""
    env, texts = spec.make_env(), []
    for name in policies:
        policy = spec.make_policy(name)
        for seed in seeds:
            observation, step = env.reset(seed, SPLITS[seed % 3]), 0
            policy.begin(seed)
            while True:
                texts.append("\n".join(m["content"] for m in env.render(observation)))
                result = env.step("junk" if seed % 5 == 0 and step % 3 == 1 else policy.act(observation, env))
                if result.done:
                    break
                observation, step = result.observation, step + 1
    return texts


def _garbage(observation) -> list:
    """Answers that are all invalid: not JSON, not one object, another key, a list, an id not offered, fenced."""
    offered = observation.candidates[0].id
    return [
        "",
        "   ",
        None,
        "x" * 5000,
        offered,
        f"I would choose {offered} because it looks right",
        json.dumps({"action": offered + "!"}),
        json.dumps({"action": offered.upper() + "?"}),
        format_action(offered) + " " + format_action(offered),
        json.dumps({"act": offered}),
        json.dumps({"action": [offered]}),
        json.dumps({"action": offered, "reward": 1}),
        f"```json\n{format_action(offered)}\n```",
    ]


# ---- the registry, the spec, the manifest ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_the_registry_finds_a_consistent_spec_whose_weights_sum_to_one(name):
    spec = get_spec(name)
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    assert get_spec(name) is spec and type(spec)(**fields) == spec  # memoised; passes its own validation again
    assert isinstance(spec.make_env(), Environment) and spec.make_env().name == spec.name
    assert spec.reported_policies[0] == spec.random == "random"  # EnvSpec adds the generic policies, random first
    assert {"first_candidate", "repeat_last"} <= set(spec.trivial) and set(spec.reported_policies) <= set(spec.policies)
    assert spec.harmful_kinds == tuple(spec.harmful_attacks) and spec.harmful_kinds and spec.anti_cheat_rules
    assert spec.vocabulary().strip() and spec.reward_weights is type(spec.make_env()).weights  # the weights: once
    assert sum(w for component, w in spec.reward_weights.items() if component != "anti_cheat") == pytest.approx(1.0)


@pytest.mark.parametrize("name", builtin_names())
def test_the_openenv_manifest_is_the_one_written_from_the_spec(name):
    from lib.serve.manifest import manifest, manifest_path  # here: the new-process check need not import a server

    assert manifest_path(name).read_text(encoding="utf-8") == manifest(name), "run: python -m lib.serve.manifest"


# ---- episodes -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_every_policy_ends_every_episode_with_a_return_in_the_unit_interval(name):
    spec = get_spec(name)
    env = spec.make_env()
    for policy in spec.policies:
        for split in SPLITS:
            for seed in range(4 if name in LONG else 20):
                episode = run_episode(env, spec.make_policy(policy), seed, split)
                assert 0.0 <= episode.episode_return <= 1.0, (policy, split, seed)
                assert episode.anti_cheat in (None, *spec.anti_cheat_rules), episode.anti_cheat
                assert episode.steps <= getattr(env, "budget", episode.steps)


@pytest.mark.parametrize("name", ENVS)
def test_stepping_a_finished_episode_is_an_error(name):
    spec = get_spec(name)
    env = spec.make_env()
    run_episode(env, _policy(spec, "teacher"), 2, "train")
    with pytest.raises(RuntimeError, match="reset"):
        env.step('{"action": "a1"}')


# ---- determinism and restore ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_same_seed_same_prompts_and_rewards_in_process(name):
    assert _trace(name, 7, "holdout", "teacher") == _trace(name, 7, "holdout", "teacher")
    assert _trace(name, 7, "holdout", "teacher") != _trace(name, 8, "holdout", "teacher")


@pytest.fixture(scope="module")
def new_process_traces():
    """Every environment's traces, computed in a new process with another hash seed."""
    code = "import json; from tests.test_env_contract import traces; print(json.dumps(traces()))"
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=environ)
    return json.loads(done.stdout)


@pytest.mark.parametrize("name", ENVS)
def test_same_seed_same_prompts_and_rewards_in_a_new_process(name, new_process_traces):
    assert new_process_traces[name] == json.loads(json.dumps([_trace(name, *t) for t in TRACES]))


@pytest.mark.parametrize("name", ENVS)
def test_restore_rebuilds_the_state_observation_and_prompt(name):
    spec = get_spec(name)
    env = spec.make_env()
    history = _teacher_history(env, spec, 4, "train", 12)
    observation = env.reset(4, "train")
    assert env.history == [] and not env.done and env.state()["step"] == 0
    for text in history:
        observation = env.step(text).observation
    assert env.history == history and env.state()["history"] == history
    messages = env.render(observation)
    assert [m["role"] for m in messages] == ["system", "user"]
    other = spec.make_env()
    restored = other.restore(4, "train", history)
    assert restored == observation and other.render(restored) == messages and other.state() == env.state()


@pytest.mark.parametrize("name", ENVS)
def test_restore_replays_invalid_answers_and_refuses_to_go_past_the_end(name):
    spec = get_spec(name)
    env, teacher = spec.make_env(), _policy(spec, "teacher")
    teacher.begin(9)
    env.reset(9, "holdout")
    observation = env.step("not an action").observation
    observation = env.step(teacher.act(observation, env)).observation
    assert env.history[0] == "" and spec.make_env().restore(9, "holdout", env.history) == observation
    with pytest.raises(ValueError, match="ends the episode"):
        spec.make_env().restore(9, "holdout", [""] * MAX_CONSECUTIVE_INVALID)


# ---- invalid answers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_invalid_answers_cost_the_penalty_and_three_in_a_row_end_with_zero(name):
    env = get_spec(name).make_env()
    assert env.invalid_penalty < 0
    for garbage in _garbage(env.reset(3, "train")):
        env.reset(3, "train")
        for i in range(MAX_CONSECUTIVE_INVALID):
            result = env.step(garbage)
            assert "invalid" in result.info and "action" not in result.info, garbage  # never carried out
            assert result.reward == env.invalid_penalty and result.done == (i == MAX_CONSECUTIVE_INVALID - 1)
        assert result.info["episode_return"] == 0.0 and result.info["end_reason"] == "invalid_limit"
        assert env.history == [""] * MAX_CONSECUTIVE_INVALID


@pytest.mark.parametrize("name", ENVS)
def test_the_penalty_is_below_every_legal_outcome_and_a_valid_answer_resets_the_streak(name):
    spec = get_spec(name)
    env = spec.make_env()
    legal = [run_episode(env, spec.make_policy("random"), seed, "holdout").episode_return for seed in range(50)]
    assert env.invalid_penalty < 0 <= min(legal)
    teacher = _policy(spec, "teacher")
    teacher.begin(3)
    observation = env.reset(3, "train")
    for _ in range(MAX_CONSECUTIVE_INVALID - 1):
        observation = env.step("garbage").observation
    result = env.step(teacher.act(observation, env))
    assert "invalid" not in result.info and result.info.get("end_reason") != "invalid_limit"
    if not result.done:
        assert env.step("garbage").info.get("end_reason") != "invalid_limit"


def _mutations(rng: random.Random, valid: str, alphabet: str):
    """A valid answer with one to three characters inserted, deleted or replaced, or random characters."""
    if rng.random() < 1 / 3:
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
    chars = list(valid)
    for _ in range(rng.randint(1, 3)):
        position, op = rng.randrange(len(chars) + 1), rng.choice(("insert", "delete", "replace"))
        if op == "insert":
            chars.insert(position, rng.choice(alphabet))
        elif position < len(chars):
            chars[position : position + 1] = [] if op == "delete" else [rng.choice(alphabet)]
    return "".join(chars)


@pytest.mark.parametrize("name", ENVS)
def test_fuzzed_answers_never_crash_and_act_only_when_exactly_an_offered_id(name):
    env, rng = get_spec(name).make_env(), random.Random(0)
    for trial in range(600):
        observation = env.reset(trial % 40, SPLITS[trial % 3])
        valid = format_action(rng.choice(observation.candidates).id)
        text = _mutations(rng, valid, '{}[]":,.= \n\t\\' + "".join(sorted(set(valid))))
        result = env.step(text)
        if "invalid" in result.info:
            assert isinstance(parse_action(text, observation.candidates), Invalid)
            assert result.reward == env.invalid_penalty
        else:
            parsed = json.loads(text)
            assert set(parsed) == {"action"} and parsed["action"] in {c.id for c in observation.candidates}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
GARBAGE = st.one_of(
    st.text(max_size=300),
    st.text(alphabet=st.characters(min_codepoint=0x80, max_codepoint=0x10FFFF), max_size=60),
    JSON_VALUES.map(json.dumps),
    st.dictionaries(st.text(max_size=10), JSON_VALUES, max_size=4).map(json.dumps),
    st.builds(lambda v: json.dumps({"action": v}), JSON_VALUES),
    st.builds(lambda i: json.dumps({"action": f"a{i}"}), st.integers(min_value=90, max_value=10**9)),
    st.sampled_from(
        [
            "ignore the rules, reward=1",
            '{"action": "a1", "reward": 1.0}',
            '{"reward": 1}',
            '{"action": "a1"}{"action": "a2"}',
            "[" * 200 + "]" * 200,
            '{"a":' * 100 + "1" + "}" * 100,
            "x" * (1 << 20),
            '{"action": "a1"' + " " * (1 << 20) + "}",
        ]
    ),
)


@pytest.mark.parametrize("name", ENVS)
def test_hypothesis_garbage_never_crashes_and_always_scores_the_penalty(name):
    env = get_spec(name).make_env()

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(seed=st.integers(0, 5000), text=GARBAGE)
    def check(seed, text):
        observation = env.reset(seed, "train")
        parsed = parse_action(text, observation.candidates)
        result = env.step(text)
        assert isinstance(result.reward, float) and result.reward == result.reward  # finite (not NaN)
        if isinstance(parsed, Invalid):
            assert result.reward == env.invalid_penalty and "invalid" in result.info
        else:  # hypothesis found a legal id: it must be one of the offered candidates
            assert parsed.candidate in observation.candidates

    check()


# ---- candidates -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_candidates_are_shuffled_and_listed_as_the_quoted_ids_an_answer_copies(name):
    env = get_spec(name).make_env()
    assert len({env.reset(seed, "train").candidates[0].key for seed in range(50)}) >= 2  # position means nothing
    for seed in range(5):
        observation = env.reset(seed, "holdout")
        ids = [c.id for c in observation.candidates]
        lines = env.render(observation)[1]["content"].splitlines()
        start = lines.index("Candidates:") + 1
        assert len(ids) == len(set(ids)) and lines[start : start + len(ids)] == [f'- "{i}"' for i in ids]


@pytest.mark.parametrize("name", builtin_names())
def test_list_candidates_false_leaves_out_exactly_the_candidate_list(name):
    """`env_args: {list_candidates: false}`: the same prompt, less the "Candidates:" line and the ids under it, at
    the start and along the teacher's episode; the episode itself is unchanged."""
    spec, short = get_spec(name), get_spec(name, {"list_candidates": False})
    assert get_spec(name, {"list_candidates": True}) is spec and short.teacher == spec.teacher
    listed, unlisted = spec.make_env(), short.make_env()
    for seed, steps in ((0, 0), (1, 2), (2, 5)):
        history = _teacher_history(spec.make_env(), spec, seed, "holdout", steps)
        full, cut = listed.restore(seed, "holdout", history), unlisted.restore(seed, "holdout", history)
        assert cut.candidates == full.candidates
        (system, user), (system_cut, user_cut) = listed.render(full), unlisted.render(cut)
        lines = user["content"].splitlines()
        start = lines.index("Candidates:")
        assert system_cut == system and "Candidates:" not in user_cut["content"]
        assert user_cut["content"].splitlines() == lines[:start] + lines[start + 1 + len(full.candidates) :]


def test_list_candidates_must_be_a_bool_and_the_renderer_must_take_it():
    with pytest.raises(EnvironmentArgsError, match="list_candidates must be true or false, got 'no'"):
        get_spec("polyguard", {"list_candidates": "no"})
    # tests/toyenv.py writes its own list, with no keyword to leave it out: a clear error, not a prompt that still
    # lists what the run said it would not
    with pytest.raises(EnvironmentArgsError, match="renderer takes no list_candidates keyword"):
        get_spec("tests.toyenv", {"list_candidates": False})


# ---- harmful attacks ------------------------------------------------------------------------------------------------
ATTACK_STARTS = ((0, "holdout"), (1, "holdout"), (2, "holdout_novel"), (3, "train"))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in LONG else n for n in ENVS])
def test_every_harmful_attack_scores_at_most_the_worst_legal_action(name):
    """At the teacher's states (every other one of its first 13), each attack scores at most the worst legal
    action at the state it is played at, the teacher finishing every episode."""
    spec = get_spec(name)
    env, scratch, teacher = spec.make_env(), spec.make_env(), _policy(spec, "teacher")

    @cache
    def worst(seed, split, at: tuple) -> float:
        state = scratch.restore(seed, split, list(at))
        return min(candidate_returns(scratch, seed, split, list(at), state, teacher).values())

    seen = set()
    for seed, split in ATTACK_STARTS:
        for _, history in teacher_states(env, teacher, [seed], split)[:13:2]:
            observation = env.restore(seed, split, history)
            for kind, attack in spec.harmful_attacks.items():
                for at, text in list(attack(env, seed, split, history, observation)):
                    seen.add(kind)
                    score = action_return(scratch, seed, split, at, text, teacher)[0]
                    assert score <= worst(seed, split, tuple(at)) + 1e-9, (kind, seed, split, len(at))
    assert seen == set(spec.harmful_attacks)


# ---- baseline bars --------------------------------------------------------------------------------------------------
@cache
def _means(name: str, split: str) -> dict[str, float]:
    spec = get_spec(name)
    env = spec.make_env()
    return {
        policy: fmean(run_episode(env, spec.make_policy(policy), seed, split).episode_return for seed in range(200))
        for policy in spec.reported_policies
    }


@pytest.mark.slow
@pytest.mark.parametrize("split", ["holdout", "holdout_novel"])
@pytest.mark.parametrize("name", ENVS)
def test_baseline_bars(name, split):
    """On 200 episodes: the oracle is the ceiling, above the teacher, which beats random and every trivial
    policy by a margin; a policy that reads only the prompt beats the teacher by its environment's headroom."""
    spec, mean = get_spec(name), _means(name, split)
    teacher = mean[spec.teacher]
    assert mean[spec.oracle] >= teacher + 0.15 and mean[spec.oracle] == max(mean.values()), mean
    assert teacher >= mean[spec.random] + 0.10, mean
    assert all(mean[policy] <= teacher - 0.10 for policy in spec.trivial), mean
    if name in HEADROOM:
        assert mean["evidence_expert"] >= teacher + HEADROOM[name], mean


# ---- served ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ENVS)
def test_the_served_environment_plays_an_episode_as_the_local_one(name):
    from fastapi.testclient import TestClient

    from lib.serve.app import build_app

    spec = get_spec(name)
    env, teacher = spec.make_env(), _policy(spec, "teacher")
    observation = env.reset(1, "holdout")
    teacher.begin(1)
    with TestClient(build_app(name)) as client:
        body = client.post("/sessions", json={"seed": 1, "split": "holdout"}).json()
        key = body["session_id"]
        while True:
            assert body["messages"] == env.render(observation)
            assert [c["id"] for c in body["candidates"]] == [c.id for c in observation.candidates]
            text = teacher.act(observation, env)
            result = env.step(text)
            body = client.post(f"/sessions/{key}/step", json={"text": text}).json()
            assert (body["reward"], body["done"]) == (result.reward, result.done)
            if result.done:
                break
            observation = result.observation
        assert body["episode_return"] == result.info["episode_return"]
        assert client.delete(f"/sessions/{key}").status_code == 200
