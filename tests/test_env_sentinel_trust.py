"""SENTINEL-trust: what an invalid answer costs, prompts and vocabulary, no hidden-state leak, earned evidence, the
anti-cheat rules, splits and the trust ranking line (the contract every environment keeps, from determinism to the
served round trip, is tests/test_env_contract.py)."""

import json
import random
import re

import pytest

from lib.envs import get_spec
from lib.envs.base import MAX_CONSECUTIVE_INVALID, format_action, split_seed
from lib.envs.sentinel_trust import SPEC
from lib.envs.sentinel_trust.attacks import UNOFFERED
from lib.envs.sentinel_trust.env import SentinelTrustEnv, render
from lib.envs.sentinel_trust.reward import INVALID_PENALTY
from lib.envs.sentinel_trust.scenario import BEHAVIOURS, NOVEL, SLOTS, STANDARD, accuracy, generate
from lib.episodes import run_episode
from tests.test_env_contract import played_prompts

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


# ---- invalid answers and prompts -----------------------------------------------------------------------------
@pytest.mark.parametrize("garbage", ["delegate:S0", '{"action": "delegate:S7"}', '{"action": "delegate:s0"}'])
def test_an_invalid_answer_also_burns_a_step_of_the_budget(env, garbage):
    env.reset(3, "train")
    budget = env.budget_left
    for _ in range(MAX_CONSECUTIVE_INVALID):
        result = env.step(garbage)
        assert "invalid" in result.info and result.reward == INVALID_PENALTY
    assert result.info["end_reason"] == "invalid_limit" and env.budget_left == budget - MAX_CONSECUTIVE_INVALID


def test_prompts_stay_short_and_every_word_is_in_the_vocabulary():
    vocabulary = set(re.findall(r"[A-Za-z]+", SPEC.vocabulary()))
    texts = played_prompts(SPEC, ("random", "evidence_expert", "solve_within_rules", "always_skip"), range(40))
    words = {word for text in texts for word in re.findall(r"[A-Za-z]+", text)}
    assert max(map(len, texts)) < 1800 and words <= vocabulary, sorted(words - vocabulary)


# ---- no leak -------------------------------------------------------------------------------------------------
def test_nothing_a_policy_sees_names_a_hidden_behaviour(env):
    pattern = re.compile("|".join(HIDDEN_WORDS), re.IGNORECASE)
    for policy in ("random", "evidence_expert", "oracle"):
        for seed in range(15):
            for split in SPLITS:
                observation = env.reset(seed, split)
                chosen = SPEC.make_policy(policy)
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


# ---- the anti-cheat rules ------------------------------------------------------------------------------------
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
            episode = run_episode(env, SPEC.make_policy(policy), seed, SPLITS[seed % 3])
            assert episode.end_reason in ("complete", "budget"), (policy, seed)


# ---- splits --------------------------------------------------------------------------------------------------
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


# ---- registry ------------------------------------------------------------------------------------------------
def test_the_spec_names_its_teacher_rules_and_words():
    spec = get_spec("sentinel_trust")
    assert isinstance(spec.make_env(), SentinelTrustEnv) and spec.teacher == "heuristic"
    assert set(spec.anti_cheat_rules) >= {"verify_spam", "skip_loop"}
    assert {"analysis", "high", "S4", "verify"} <= set(spec.vocabulary().split())


def test_the_trust_ranking_line_names_the_teachers_slot_first():
    """The rendered ranking restates the evidence the teacher reads: its first slot is the one the teacher picks."""
    env, decisions = SentinelTrustEnv(), 0
    for seed in range(8):
        teacher, observation = SPEC.make_policy("heuristic"), env.reset(seed, "holdout")
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


def _teacher_history(seed: int, steps: int) -> list[str]:
    env = SentinelTrustEnv()
    return run_episode(env, SPEC.make_policy(SPEC.teacher), seed, "train", keep_transitions=True).transitions[steps][
        "history"
    ]


def test_a_redrawn_future_keeps_the_past_and_replays_by_its_number():
    """`redraw_future` changes who answers right from the state on, never what already happened; the same draw
    at the same state replays the same episode, and different draws give different ones."""
    from lib.episodes import Start, play, policy_actor

    seed, history = 3, _teacher_history(3, 4)
    plain = SentinelTrustEnv().restore(seed, "train", history)
    redrawn_env = SentinelTrustEnv()
    redrawn_env.restore(seed, "train", history)
    redrawn_env.redraw_future(5)
    assert redrawn_env._observe() == plain and redrawn_env.history == history

    def finish(draw):
        starts = [Start(seed, "train", tuple(history), redraw=draw)]
        episode = play(SentinelTrustEnv, starts, policy_actor(SPEC.make_policy(SPEC.teacher)))[0]
        return episode.episode_return, episode.components

    assert finish(7) == finish(7)
    own = run_episode(SentinelTrustEnv(), SPEC.make_policy(SPEC.teacher), seed, "train").episode_return
    assert finish(None)[0] == own  # no redraw: the seed's own future
    assert len({finish(d)[0] for d in range(12)}) > 1


class _OtherLuck(SentinelTrustEnv):
    """The same past, and other outcome draws from the restored state on: the same observation, another future."""

    def restore(self, seed, split, history):
        observation = super().restore(seed, split, history)
        self._rng = random.Random(self._internal + 424242)
        return observation


def test_the_lookahead_averages_futures_and_does_not_read_the_seed_s_own():
    """On this environment (outcomes drawn at random) every candidate's worth is its mean over FUTURE_DRAWS
    redrawn futures; so it is the same whatever outcomes the episode's seed holds, which nothing in the prompt
    shows. Read off the seed's own future (`draws=0`) it is not."""
    from lib.episodes import FUTURE_DRAWS, action_return, candidate_returns

    teacher = SPEC.make_policy(SPEC.teacher)
    differs = 0
    for seed, steps in ((3, 4), (5, 8), (11, 2)):
        history = _teacher_history(seed, steps)
        env, other = SentinelTrustEnv(), _OtherLuck()
        observation = env.restore(seed, "train", history)
        assert other.restore(seed, "train", history) == observation
        expected = candidate_returns(env, seed, "train", history, observation, teacher)
        assert expected == candidate_returns(other, seed, "train", history, observation, teacher)
        some = format_action(observation.candidates[0].id)
        by_hand = [action_return(env, seed, "train", history, some, teacher, d)[0] for d in range(FUTURE_DRAWS)]
        assert expected[some] == pytest.approx(sum(by_hand) / FUTURE_DRAWS)
        own = candidate_returns(env, seed, "train", history, observation, teacher, draws=0)
        differs += own != candidate_returns(other, seed, "train", history, observation, teacher, draws=0)
    assert differs > 0
