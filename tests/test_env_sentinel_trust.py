"""SENTINEL-trust: protocol, determinism, strict parsing, no hidden-state leak, baseline bars, harmful attacks,
splits and the registry."""

import json
import os
import random
import re
import subprocess
import sys
from statistics import fmean

import pytest

from lib.envs import get_spec
from lib.envs.base import MAX_CONSECUTIVE_INVALID, format_action, split_seed
from lib.envs.sentinel_trust.attacks import HARMFUL_ATTACKS, UNOFFERED
from lib.envs.sentinel_trust.env import SentinelTrustEnv, render
from lib.envs.sentinel_trust.policies import POLICIES, TRIVIAL
from lib.envs.sentinel_trust.reward import INVALID_PENALTY, WEIGHTS
from lib.envs.sentinel_trust.scenario import BEHAVIOURS, NOVEL, SLOTS, STANDARD, accuracy, generate
from lib.episodes import run_episode

SPLITS = ("train", "holdout", "holdout_novel")
HIDDEN_WORDS = (
    *BEHAVIOURS,
    "adversar",
    "degrad",
    "overconfident",
    "accurate",
    "slow",
    "fast",
    "bound",
    "poison",
    "malicious",
    "honest",
    "turned",
    "assignment",
)


@pytest.fixture
def env():
    return SentinelTrustEnv()


def _pick(observation, *key):
    return format_action(next(c for c in observation.candidates if c.key == key).id)


def _trace(seed, split, policy="heuristic"):
    """Rendered prompts and step rewards of one episode (the determinism witness)."""
    env, chosen = SentinelTrustEnv(), POLICIES[policy]()
    observation = env.reset(seed, split)
    chosen.begin(seed)
    prompts, rewards = [], []
    while True:
        prompts.append(json.dumps(render(observation)))
        result = env.step(chosen.act(observation, env))
        rewards.append(result.reward)
        if result.done:
            return prompts, rewards
        observation = result.observation


def _finish_with_teacher(seed, split, history, text):
    """The score of `text` at the state of `history` when the teacher finishes the episode (invalid: the penalty)."""
    env, teacher = SentinelTrustEnv(), POLICIES["heuristic"]()
    env.restore(seed, split, history)
    teacher.begin(seed)
    result = env.step(text)
    if "invalid" in result.info:
        return INVALID_PENALTY
    while not result.done:
        result = env.step(teacher.act(result.observation, env))
    return result.info["episode_return"]


def _teacher_histories(seed, split):
    env, teacher = SentinelTrustEnv(), POLICIES["heuristic"]()
    observation, history = env.reset(seed, split), []
    teacher.begin(seed)
    while True:
        yield list(history)
        text = teacher.act(observation, env)
        result = env.step(text)
        if result.done:
            return
        history.append(text)
        observation = result.observation


# ---- protocol ---------------------------------------------------------------------------------------------
def test_reset_step_state_render_and_restore_round_trip(env):
    observation = env.reset(4, "train")
    assert env.history == [] and not env.done and env.state()["step"] == 0
    texts = []
    for _ in range(5):
        text = format_action(observation.candidates[-1].id)
        result = env.step(text)
        texts.append(text)
        assert not result.done
        observation = result.observation
    assert env.history == texts
    messages = env.render(observation)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert all(f'"{c.id}"' in messages[1]["content"] for c in observation.candidates)
    restored = SentinelTrustEnv().restore(4, "train", texts)
    assert restored == observation and render(restored) == messages


def test_restore_of_a_history_with_invalid_answers_matches_playing_it(env):
    env.reset(9, "holdout")
    observation = env.step("not an action").observation
    observation = env.step(_pick(observation, "delegate", "S1")).observation
    assert SentinelTrustEnv().restore(9, "holdout", env.history) == observation
    with pytest.raises(ValueError, match="ends the episode"):
        SentinelTrustEnv().restore(9, "holdout", ["", "", ""])


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_returns_are_in_unit_interval_and_episodes_end(env, policy):
    for seed in range(25):
        for split in SPLITS:
            episode = run_episode(env, POLICIES[policy](), seed, split)
            assert 0.0 <= episode.episode_return <= 1.0
            assert episode.steps <= env.budget


def test_weights_live_in_one_place_and_sum_to_one():
    assert sum(w for name, w in WEIGHTS.items() if name != "anti_cheat") == pytest.approx(1.0)
    assert get_spec("sentinel_trust").reward_weights is WEIGHTS


@pytest.mark.parametrize(
    "garbage",
    [
        "delegate:S0",
        "I would verify S2 because it looks right",
        "",
        "   ",
        '{"action": "delegate:S7"}',
        '{"action": "delegate:s0"}',
        '{"action": "delegate:S0"} {"action": "skip"}',
        '{"act": "skip"}',
        '{"action": ["skip"]}',
        '{"action": "skip", "reward": 1}',
        '```json\n{"action": "skip"}\n```',
        None,
        "x" * 5000,
    ],
)
def test_invalid_answers_cost_the_penalty_and_three_in_a_row_end_with_zero(env, garbage):
    env.reset(3, "train")
    budget = env.budget_left
    for i in range(MAX_CONSECUTIVE_INVALID):
        result = env.step(garbage)
        assert "invalid" in result.info and result.reward <= INVALID_PENALTY + 1e-12
        assert result.done == (i == MAX_CONSECUTIVE_INVALID - 1)
    assert result.info["episode_return"] == 0.0 and result.info["end_reason"] == "invalid_limit"
    assert env.budget_left == budget - MAX_CONSECUTIVE_INVALID
    assert env.history == [""] * MAX_CONSECUTIVE_INVALID


def test_invalid_penalty_is_below_every_legal_outcome(env):
    legal = [run_episode(env, POLICIES["random"](), s, "holdout").episode_return for s in range(50)]
    assert INVALID_PENALTY < 0 <= min(legal)
    env.reset(3, "train")
    observation = env.step("garbage").observation
    result = env.step(_pick(observation, "skip"))  # a valid answer resets the invalid streak
    assert "invalid" not in result.info and not result.done


def test_prompts_stay_short_and_every_word_is_in_the_vocabulary(env):
    vocabulary = set(re.findall(r"[A-Za-z]+", get_spec("sentinel_trust").vocabulary()))
    longest, words = 0, set()
    for policy in ("random", "evidence_expert", "solve_within_rules", "always_skip"):
        chosen = POLICIES[policy]()
        for seed in range(40):
            observation = env.reset(seed, SPLITS[seed % 3])
            chosen.begin(seed)
            while True:
                text = "\n".join(m["content"] for m in render(observation))
                longest = max(longest, len(text))
                words |= set(re.findall(r"[A-Za-z]+", text))
                answer = "junk" if seed % 5 == 0 and observation.step % 3 == 1 else chosen.act(observation, env)
                result = env.step(answer)
                if result.done:
                    break
                observation = result.observation
    assert longest < 1800 and words <= vocabulary, sorted(words - vocabulary)


# ---- determinism ------------------------------------------------------------------------------------------
def test_same_seed_same_prompts_and_returns_in_process():
    assert _trace(7, "holdout") == _trace(7, "holdout")
    assert _trace(7, "holdout") != _trace(8, "holdout")


def test_same_seed_same_prompts_and_returns_in_a_new_process():
    code = (
        "import json; from tests.test_env_sentinel_trust import _trace; "
        "print(json.dumps([_trace(s, sp, p) for s, sp, p in "
        "[(11, 'train', 'heuristic'), (5, 'holdout_novel', 'evidence_expert'), (2, 'holdout', 'random')]]))"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    here = [
        _trace(11, "train", "heuristic"),
        _trace(5, "holdout_novel", "evidence_expert"),
        _trace(2, "holdout", "random"),
    ]
    assert out.strip() == json.dumps(here)


# ---- parser fuzzing ---------------------------------------------------------------------------------------
def test_fuzzed_answers_never_crash_and_act_only_when_exactly_an_offered_id(env):
    rng = random.Random(0)
    alphabet = '{}[]":,. actiondelgvrfyskpS0123456789\n\t\\'
    for trial in range(1500):
        observation = env.reset(trial % 40, SPLITS[trial % 3])
        valid = format_action(rng.choice(observation.candidates).id)
        if trial % 3 == 0:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        else:
            chars = list(valid)
            for _ in range(rng.randint(1, 3)):
                position = rng.randrange(len(chars) + 1)
                op = rng.choice(("insert", "delete", "replace"))
                if op == "insert":
                    chars.insert(position, rng.choice(alphabet))
                elif chars and position < len(chars):
                    if op == "delete":
                        del chars[position]
                    else:
                        chars[position] = rng.choice(alphabet)
            text = "".join(chars)
        result = env.step(text)
        if "invalid" not in result.info:
            offered = {c.id for c in observation.candidates}
            parsed = json.loads(text)
            assert set(parsed) == {"action"} and parsed["action"] in offered


# ---- no leak ----------------------------------------------------------------------------------------------
def test_nothing_a_policy_sees_names_a_hidden_behaviour(env):
    pattern = re.compile("|".join(HIDDEN_WORDS), re.IGNORECASE)
    for policy in ("random", "evidence_expert", "oracle"):
        for seed in range(15):
            for split in SPLITS:
                observation = env.reset(seed, split)
                chosen = POLICIES[policy]()
                chosen.begin(seed)
                while True:
                    seen = [json.dumps(render(observation)), repr(observation)]
                    seen += [f"{c.id} {c.kind} {c.args} {c.text}" for c in observation.candidates]
                    result = env.step(chosen.act(observation, env))
                    seen.append(json.dumps(result.info, default=str) + json.dumps(result.components))
                    assert not pattern.search(" ".join(seen)), pattern.search(" ".join(seen))
                    if result.done:
                        break
                    observation = result.observation
    assert "assignment" in env.state()  # state() is the debugging/oracle view and may hold hidden state


def test_evidence_is_only_what_the_orchestrator_earned(env):
    observation = env.reset(1, "holdout")
    assert all(e.calls == 0 and e.steps_per_call == 0 for e in observation.slots)
    result = env.step(_pick(observation, "delegate", "S2"))
    slots = {e.slot: e for e in result.observation.slots}
    assert slots["S2"].calls == 1 and slots["S2"].steps_per_call == env.slot_cost(2)
    assert all(slots[s].calls == 0 and slots[s].steps_per_call == 0 for s in SLOTS if s != "S2")


# ---- baseline bars ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def baseline_means():
    env = SentinelTrustEnv()
    return {
        (policy, split): fmean(run_episode(env, POLICIES[policy](), seed, split).episode_return for seed in range(200))
        for split in ("holdout", "holdout_novel")
        for policy in POLICIES
    }


@pytest.mark.slow
@pytest.mark.parametrize("split", ["holdout", "holdout_novel"])
def test_baseline_bars(baseline_means, split):
    mean = {policy: baseline_means[policy, split] for policy in POLICIES}
    teacher = mean["heuristic"]
    assert mean["oracle"] >= teacher + 0.15
    assert teacher >= mean["random"] + 0.10
    assert mean["evidence_expert"] >= teacher + 0.07  # the headroom is learnable from the prompt
    for policy in TRIVIAL:
        assert mean[policy] <= teacher - 0.10, policy


# ---- harmful attacks --------------------------------------------------------------------------------------
def test_every_harmful_attack_scores_at_most_the_worst_legal_action():
    seen = set()
    for seed, split in ((0, "holdout"), (1, "holdout"), (2, "holdout_novel"), (3, "train")):
        for history in list(_teacher_histories(seed, split))[::3]:
            env = SentinelTrustEnv()
            observation = env.restore(seed, split, history)
            attacks = [
                (kind, *attack)
                for kind, play in HARMFUL_ATTACKS.items()
                for attack in play(env, seed, split, history, observation)
            ]
            for kind, at, text in attacks:
                seen.add(kind)
                state = SentinelTrustEnv().restore(seed, split, at)
                worst = min(_finish_with_teacher(seed, split, at, format_action(c.id)) for c in state.candidates)
                assert _finish_with_teacher(seed, split, at, text) <= worst + 1e-9, (kind, seed, len(at))
    assert seen == set(HARMFUL_ATTACKS)


def test_rule_hits_end_the_episode_with_zero_and_are_named(env):
    observation = env.reset(0, "holdout")
    for _ in range(2):
        observation = env.step(_pick(observation, "skip")).observation
    result = env.step(_pick(observation, "skip"))
    assert result.done and result.info["episode_return"] == 0.0 and result.info["anti_cheat"] == "skip_loop"
    observation = env.reset(0, "holdout")
    while observation.verify_allowance > 0:
        observation = env.step(_pick(observation, "verify", "S0")).observation
    result = env.step(_pick(observation, "verify", "S1"))
    assert result.done and result.info["anti_cheat"] == "verify_spam" and result.info["episode_return"] == 0.0
    assert json.loads(UNOFFERED)["action"] not in {c.id for c in observation.candidates}


def test_scripted_baselines_never_hit_a_rule(env):
    for policy in ("heuristic", "evidence_expert", "oracle"):
        for seed in range(60):
            episode = run_episode(env, POLICIES[policy](), seed, SPLITS[seed % 3])
            assert episode.end_reason in ("complete", "budget"), (policy, seed)


# ---- splits -----------------------------------------------------------------------------------------------
def test_splits_are_disjoint_and_novel_differs_as_documented():
    internal = {split: {split_seed(s, split) for s in range(500)} for split in SPLITS}
    assert not internal["train"] & internal["holdout"] and not internal["train"] & internal["holdout_novel"]
    assert not internal["holdout"] & internal["holdout_novel"]
    assert all(generate(split_seed(s, "train"), False) != generate(split_seed(s, "holdout"), False) for s in range(50))
    assert all(generate(split_seed(s, "holdout"), False).variant == STANDARD for s in range(20))
    assert all(generate(split_seed(s, "holdout_novel"), True).variant == NOVEL for s in range(20))
    # the adversary turns at mid stakes only in holdout_novel; the domain-bound slot is strong elsewhere there
    assert accuracy("adversarial", "analysis", 0.5, 0, STANDARD) > 0.8
    assert accuracy("adversarial", "analysis", 0.5, 0, NOVEL) == 0.0
    assert not set(STANDARD.strong_domains) & set(NOVEL.strong_domains)
    env = SentinelTrustEnv()
    env.reset(0, "holdout_novel")
    assert env.state()["adversary_from"] == NOVEL.adversary_from


def test_level_and_assignment_come_from_the_seed():
    levels = {generate(split_seed(s, "train"), False).level for s in range(60)}
    assignments = {generate(split_seed(s, "train"), False).assignment for s in range(60)}
    assert levels == {1, 2, 3} and len(assignments) > 20
    for s in range(30):
        scenario = generate(split_seed(s, "holdout"), False)
        assert len(scenario.stakes) == {1: 10, 2: 15, 3: 20}[scenario.level]
        assert sorted(scenario.assignment) == sorted(BEHAVIOURS)


# ---- registry ---------------------------------------------------------------------------------------------
def test_registry_finds_the_spec_and_it_is_consistent():
    spec = get_spec("sentinel_trust")
    fields = {f: getattr(spec, f) for f in spec.__dataclass_fields__}
    assert type(spec)(**fields) == spec  # passes its own validation again
    assert isinstance(spec.make_env(), SentinelTrustEnv) and spec.teacher == "heuristic"
    assert set(spec.reported_policies) <= set(spec.policies)
    assert spec.harmful_kinds == tuple(HARMFUL_ATTACKS) and set(spec.anti_cheat_rules) >= {"verify_spam", "skip_loop"}
    words = set(spec.vocabulary().split())
    assert {"analysis", "high", "S4", "verify"} <= words


def test_the_trust_ranking_line_names_the_teachers_slot_first():
    """The rendered ranking restates the evidence the teacher reads: its first slot is the one the teacher picks."""
    env, decisions = SentinelTrustEnv(), 0
    for seed in range(8):
        teacher, observation = POLICIES["heuristic"](), env.reset(seed, "holdout")
        teacher.begin(seed)
        while True:
            line = next(x for x in render(observation)[1]["content"].splitlines() if x.startswith("Overall trust"))
            action = teacher.act(observation, env)
            assert json.loads(action)["action"].split(":")[1] == line.split(": ", 1)[1].split()[0]
            decisions += 1
            result = env.step(action)
            if result.done:
                break
            observation = result.observation
    assert decisions > 50
