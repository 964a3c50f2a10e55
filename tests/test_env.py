"""PolyGuard: dynamics, reward rules, splits and the prompt's open items (the contract every environment keeps, from
determinism to the served round trip, is tests/test_env_contract.py)."""

import json

import pytest

from lib.envs.base import format_action
from lib.envs.polyguard import SPEC
from lib.envs.polyguard.env import PolyGuardEnv, render
from lib.envs.polyguard.reward import INVALID_PENALTY

make_policy = SPEC.make_policy


def _pick(obs, kind, *args):
    return next(c for c in obs.candidates if c.kind == kind and c.args[: len(args)] == args)


def test_invalid_is_never_coerced_into_an_action(env):
    env.reset(5, "train")
    before = env.state()
    result = env.step('{"action": "a999"}')
    assert result.reward == INVALID_PENALTY
    after = env.state()
    assert after["regimen"] == before["regimen"] and after["gathered"] == before["gathered"]
    assert [c.key for c in result.observation.candidates] != [] and "action" not in result.info


def test_finishing_with_a_major_risk_is_penalised(env):
    for seed in range(200):
        obs = env.reset(seed, "holdout")
        if any(p.is_major for p in env.current_problems()):
            break
    result = env.step(format_action(_pick(obs, "finish").id))
    assert result.done and result.components["anti_cheat"] < 0
    assert result.info["episode_return"] < 0.2


def test_second_review_is_review_abuse_and_ends_the_episode(env):
    obs = env.reset(1, "train")
    first = env.step(format_action(_pick(obs, "review").id))
    assert not first.done and any("pharmacist review" in n for n in first.observation.notes)
    second = env.step(format_action(_pick(first.observation, "review").id))
    assert second.done and second.info["exploit"] == "review_abuse" and second.components["anti_cheat"] < 0


def test_substituting_back_and_forth_is_a_loop(env):
    for seed in range(300):
        obs = env.reset(seed, "train")
        drug = obs.regimen[0][0]
        obs = env.step(format_action(_pick(obs, "gather", drug).id)).observation
        subs = [c for c in obs.candidates if c.kind == "substitute" and c.args[0] == drug]
        if not subs:
            continue
        new = subs[0].args[1]
        obs = env.step(format_action(subs[0].id)).observation
        obs = env.step(format_action(_pick(obs, "gather", new).id)).observation
        back = [c for c in obs.candidates if c.key == ("substitute", new, drug)]
        if back:
            result = env.step(format_action(back[0].id))
            assert result.done and result.info["exploit"] == "loop"
            return
    pytest.fail("no scenario allowed a substitution round trip")


def test_train_never_contains_a_reserved_pair_and_novel_plants_only_reserved(env):
    kb = env.kb
    for seed in range(300):
        env.reset(seed, "train")
        regimen = list(env.regimen)
        pairs = [kb.interaction(a, b) for i, a in enumerate(regimen) for b in regimen[i + 1 :]]
        assert not any(p is not None and p.reserved for p in pairs)
        env.reset(seed, "holdout_novel")
        interactions = [p for p in env.current_problems() if p.kind == "interaction"]
        assert interactions, "every novel scenario plants an interaction"
        assert all(kb.interaction(*p.drugs).reserved for p in interactions)


def test_scenarios_have_two_to_five_conditions_and_one_to_several_problems(env):
    for seed in range(300):
        env.reset(seed, "holdout")
        assert 2 <= len(env.patient.conditions) <= 5
        assert 1 <= len(env.initial_problems)
        assert env.kb.drugs  # the regimen treats its conditions:
        treated = {env.kb.drugs[d].indication for d in env.regimen}
        assert {c for c in env.patient.conditions if env.kb.conditions[c] == "treated"} <= treated


def _open_items(obs):
    last = render(obs)[1]["content"].splitlines()[-1]
    assert last.startswith("Open items: ")
    items = last.removeprefix("Open items: ").split(", ")
    return [] if items == ["none"] else items


def _safe_named(obs):
    """The `slot:number` pairs the line before the open items names as safe alternatives."""
    line = render(obs)[1]["content"].splitlines()[-2]
    assert line.startswith("Safe alternatives: ")
    pairs = line.removeprefix("Safe alternatives: ").split()
    return set() if pairs == ["none"] else set(pairs)


def _states(policies=("heuristic", "random", "evidence_expert"), seeds=range(12)):
    env = PolyGuardEnv()
    for name in policies:
        for seed in seeds:
            pol, obs = make_policy(name), env.reset(seed, "holdout")
            pol.begin(seed)
            while True:
                yield env, obs
                action = pol.act(obs, env)
                result = env.step(action)
                if result.done:
                    break
                obs = result.observation


def test_open_items_restate_the_evidence_and_match_the_hidden_problems_once_all_is_reviewed():
    checked = 0
    for env, obs in _states():
        slot = dict(env.slots)
        items = _open_items(obs)
        unreviewed = [str(slot[d]) for d, _, _ in obs.regimen if d not in {f.drug for f in obs.evidence}]
        review = [i for i in items if i.startswith("to review")]
        assert review == ([f"to review {' '.join(unreviewed)}"] if unreviewed else [])
        if unreviewed:
            continue

        def item(p, slot=slot):
            numbers = "+".join(str(n) for n in sorted(slot[d] for d in p.drugs))
            label = {
                "interaction": p.detail,
                "duplicate": "duplicate",
                "contraindication": "contraindicated",
                "renal": f"renal {p.detail}",
            }[p.kind]
            return f"{label} {numbers}"

        assert sorted(i for i in items if not i.startswith("moderate")) == sorted(map(item, env.current_problems()))
        monitored = set(obs.monitored)
        moderate = {
            f"moderate {'+'.join(str(n) for n in sorted((slot[a], slot[b])))}"
            for i, a in enumerate(env.regimen)
            for b in list(env.regimen)[i + 1 :]
            if (x := env.kb.interaction(a, b)) is not None and x.severity == "moderate" and not {a, b} & monitored
        }
        assert {i for i in items if i.startswith("moderate")} == moderate
        checked += 1
    assert checked > 50


def test_open_items_say_the_teachers_next_risk_last():
    """The teacher's next decision is the line's last item: gather its last number while any drug is unreviewed,
    stop the last number of a major interaction, duplicate or contraindication, otherwise finish."""
    decisions = 0
    for env, obs in _states(policies=("heuristic",), seeds=range(40)):
        items = _open_items(obs)
        last = items[-1] if items else "none"
        number = last.split()[-1].split("+")[-1]
        if last.startswith("to review"):
            expected = f"gather:{number}"
        elif last.split()[0] in ("major", "contraindicated", "duplicate"):
            expected = f"stop:{number}"
        else:
            expected = "finish"
        assert json.loads(make_policy("heuristic").act(obs, env))["action"] == expected
        decisions += expected.startswith("stop")
    assert decisions > 40


def test_open_items_name_the_safe_alternatives_of_each_risk_and_each_is_an_offered_substitute():
    named_any = 0
    for env, obs in _states():
        named = _safe_named(obs)
        offered = {c.id for c in obs.candidates}
        assert {f"substitute:{pair}" for pair in named} <= offered
        slot = dict(env.slots)
        for pair in named:
            drug = next(d for d, n in slot.items() if str(n) == pair.split(":")[0])
            alternatives = [f for f in obs.evidence if f.drug == drug and f.kind == "alternative"]
            assert alternatives[int(pair.split(":")[1]) - 1].detail == "ok"
        named_any += bool(named)
    assert named_any > 20
