"""The policy over the offered candidates (lib/candidates.py): exact scores, answers valid by construction on every
environment (a property test over many states, with a model of random weights), and the improver reference."""

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lib.candidates import (
    MIN_PREFIX,
    _common_prefix,
    _rows,
    answer_ids,
    answers,
    distribution,
    prompt_ids,
    score_answers,
    whole_prompts,
)
from lib.envs import get_spec
from lib.envs.base import Action, parse_action
from lib.episodes import Improver, Start, play, policy_actor, run_episode, scripted_policy
from lib.inference import model_actor

ENVS = ("polyguard", "sentinel_trust", "sentinel_cluster", "json_tasks")


def _state(name: str, seed: int, steps: int):
    """A mid-episode state of `name`: `steps` random legal actions from a holdout start (fewer if it ends)."""
    spec = get_spec(name)
    env = spec.make_env()
    observation = env.reset(seed, "holdout")
    rng = random.Random(seed)
    for _ in range(steps):
        result = env.step(answers(observation)[rng.randrange(len(observation.candidates))])
        if result.done:
            observation = env.reset(seed, "holdout")
            break
        observation = result.observation
    return env, observation


@torch.no_grad()
def _naive_logprob(model, tokenizer, messages, answer):
    prompt, tail = prompt_ids(tokenizer, messages), answer_ids(tokenizer, answer)
    logits = model(input_ids=torch.tensor([prompt + tail])).logits[0].float().log_softmax(-1)
    return sum(float(logits[len(prompt) - 1 + i, token]) for i, token in enumerate(tail))


def test_prefix_shared_scores_equal_scoring_each_whole_sequence(random_model):
    model, tokenizer = random_model
    states = [_state(name, seed, steps) for name in ENVS for seed, steps in ((0, 0), (1, 3))]
    messages = [env.render(obs) for env, obs in states]
    offered = [answers(obs) for _, obs in states]
    # a small token budget: several batches, prompts of different lengths padded together, every answer's own tokens
    # side by side under the 4D mask
    fast = score_answers(model, tokenizer, messages, offered, max_tokens=2_000)
    assert fast == score_answers(model, tokenizer, messages, offered)[: len(fast)] or all(
        a == pytest.approx(b, abs=1e-4)
        for x, y in zip(fast, score_answers(model, tokenizer, messages, offered))
        for a, b in zip(x, y)
    )
    for m, options, scores in zip(messages, offered, fast):
        assert len(scores) == len(options)
        for answer, score in zip(options, scores):
            assert score == pytest.approx(_naive_logprob(model, tokenizer, m, answer), abs=1e-3)


@pytest.mark.parametrize("name", ENVS)
def test_the_instructions_every_prompt_begins_with_are_read_once_and_change_no_score(random_model, name):
    model, tokenizer = random_model
    states = [_state(name, seed, steps) for seed, steps in ((0, 0), (1, 3), (2, 1), (3, 5))]
    messages = [env.render(obs) for env, obs in states]
    offered = [answers(obs) for _, obs in states]
    length, layers = _common_prefix(model, _rows(tokenizer, messages, offered), torch.device("cpu"))
    assert length >= MIN_PREFIX and layers[0][0].shape[0] == 1  # the path under test is taken: one row, read once
    shared = score_answers(model, tokenizer, messages, offered, max_tokens=1_000)  # several passes lend one cache
    with whole_prompts():
        whole = score_answers(model, tokenizer, messages, offered)
    for x, y, m, options in zip(shared, whole, messages, offered):
        assert x == pytest.approx(y, abs=1e-4)
        assert x[0] == pytest.approx(_naive_logprob(model, tokenizer, m, options[0]), abs=1e-3)
    # one state shares nothing with another: no prefix pass
    assert _common_prefix(model, _rows(tokenizer, messages[:1], offered[:1]), torch.device("cpu")) is None


def test_whole_prompts_reads_every_prompt_whole_as_before(random_model, monkeypatch):
    import lib.candidates as candidates

    model, tokenizer = random_model
    states = [_state("polyguard", seed, 1) for seed in range(3)]
    messages, offered = [env.render(obs) for env, obs in states], [answers(obs) for _, obs in states]
    calls = []
    real = candidates._common_prefix
    monkeypatch.setattr(candidates, "_common_prefix", lambda *a: calls.append(1) or real(*a))
    with whole_prompts():
        whole = score_answers(model, tokenizer, messages, offered)
    assert calls == []
    shared = score_answers(model, tokenizer, messages, offered)
    assert calls == [1]
    assert all(x == pytest.approx(y, abs=1e-4) for a, b in zip(whole, shared) for x, y in zip(a, b))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(ENVS),
    seed=st.integers(0, 10_000),
    steps=st.integers(0, 12),
    greedy=st.booleans(),
    temperature=st.floats(0.2, 5.0),
)
def test_the_candidate_policy_never_answers_outside_the_offered_candidates(
    random_model, name, seed, steps, greedy, temperature
):
    model, tokenizer = random_model
    env, observation = _state(name, seed, steps)
    act = model_actor(
        model,
        tokenizer,
        action_space="candidates",
        greedy=greedy,
        temperature=temperature,
        generator=torch.Generator().manual_seed(seed),
    )

    class Live:  # what `episodes.play` hands an actor
        pass

    live = Live()
    live.env, live.observation, live.extra = env, observation, {}
    [text] = act([live])
    assert text in answers(observation)
    assert isinstance(parse_action(text, observation.candidates), Action)
    assert 0 < live.extra["p_action"] <= 1


@pytest.mark.parametrize("name", ENVS)
def test_whole_episodes_of_a_random_model_have_no_invalid_action(random_model, name):
    model, tokenizer = random_model
    spec = get_spec(name)
    seeds = range(2) if name == "sentinel_cluster" else range(4)
    episodes = play(
        spec.make_env,
        [Start(seed, "holdout") for seed in seeds],
        model_actor(model, tokenizer, action_space="candidates", greedy=False, generator=torch.Generator()),
        batch_size=4,
    )
    assert all(e.invalid == 0 for e in episodes)
    assert all(e.end_reason != "invalid_limit" for e in episodes)


def test_distribution_is_a_softmax_that_temperature_flattens():
    probs = distribution([-1.0, -2.0, -4.0])
    assert sum(probs) == pytest.approx(1.0) and probs[0] > probs[1] > probs[2]
    flat = distribution([-1.0, -2.0, -4.0], temperature=10.0)
    assert flat[0] < probs[0] and flat[2] > probs[2]


@pytest.mark.slow
@pytest.mark.parametrize("name, seeds", [("polyguard", 12), ("sentinel_trust", 8), ("sentinel_cluster", 2)])
def test_the_improver_is_at_least_the_teacher_on_average(name, seeds):
    spec = get_spec(name)
    env = spec.make_env()
    teacher = [run_episode(env, spec.make_policy(spec.teacher), s, "holdout").episode_return for s in range(seeds)]
    improver = [run_episode(env, Improver(spec), s, "holdout").episode_return for s in range(seeds)]
    assert sum(improver) / seeds >= sum(teacher) / seeds
    assert sum(improver) > sum(teacher)  # and strictly better somewhere: there is something for RL to learn


def test_improver_episodes_in_lockstep_equal_episodes_played_alone():
    """Its lookahead runs in its own scratch environment, shared by the copies `play` makes per live episode."""
    spec = get_spec("polyguard")
    alone = [run_episode(spec.make_env(), Improver(spec), seed, "holdout").episode_return for seed in (3, 4, 5)]
    together = play(spec.make_env, [Start(s, "holdout") for s in (3, 4, 5)], policy_actor(Improver(spec)), batch_size=3)
    assert [e.episode_return for e in together] == alone


def test_an_improver_can_finish_its_lookahead_with_another_policy_and_an_unknown_one_is_refused():
    """`improver:<policy>` is the same lookahead finished by that policy: by policy improvement at least as good as
    it on average (here the scripted expert, on a few seeds), and a name the environment lacks is a clear error."""
    spec = get_spec("polyguard")
    env = spec.make_env()
    expert = [run_episode(env, spec.make_policy("evidence_expert"), s, "holdout").episode_return for s in range(6)]
    improved = [run_episode(env, scripted_policy(spec, "improver:evidence_expert"), s, "holdout") for s in range(6)]
    assert isinstance(scripted_policy(spec, "improver:evidence_expert"), Improver)
    assert sum(e.episode_return for e in improved) >= sum(expert)
    with pytest.raises(ValueError, match="has no policy 'nobody'"):
        scripted_policy(spec, "improver:nobody")


def test_a_broken_model_s_scores_are_a_clear_error_not_a_choice():
    from lib.candidates import NonFiniteScoreError

    with pytest.raises(NonFiniteScoreError, match="nan"):
        distribution([-1.0, float("nan")])


def test_pass_size_follows_the_device():
    from lib.candidates import PASS_COLUMNS, PASS_TOKENS, pass_tokens

    assert pass_tokens(torch.device("cpu")) == PASS_TOKENS["cpu"] < PASS_TOKENS["cuda"]
    assert pass_tokens(torch.device("cuda", 0)) == PASS_TOKENS["cuda"]
    assert pass_tokens(torch.device("meta")) == PASS_TOKENS["cuda"]  # any other accelerator: the large pass
    assert pass_tokens(torch.device("cpu"), PASS_COLUMNS) == PASS_COLUMNS["cpu"] < PASS_COLUMNS["cuda"]
    assert pass_tokens(torch.device("meta"), PASS_COLUMNS) == PASS_COLUMNS["cuda"]
