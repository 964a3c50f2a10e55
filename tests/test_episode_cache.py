"""Each live episode's key/value cache kept across its states (lib/episode_cache.py, through `score_answers`): the
scores equal a whole pass to rounding, only the tokens after the shared run are computed, and a cache is reused
only for the tokens and the weights it was computed with."""

import random

import pytest
import torch

from lib.candidates import answers, score_answers, score_episodes, tally_tokens, whole_prompts
from lib.config import ConfigError, load_config
from lib.envs import get_spec
from lib.episode_cache import EpisodeCache, weights_fingerprint
from lib.evaluation.closed_loop import run_model_episodes

ENVS = ("polyguard", "sentinel_trust", "sentinel_cluster", "json_tasks")


def _episodes(name: str, seeds, steps: int, args=None):
    """Per seed, the states of a holdout episode under random legal actions: [(messages, offered answers)]."""
    spec = get_spec(name, args)
    out = []
    for seed in seeds:
        env, rng, states = spec.make_env(), random.Random(seed), []
        observation = env.reset(seed, "holdout")
        for _ in range(steps):
            states.append((env.render(observation), answers(observation)))
            result = env.step(states[-1][1][rng.randrange(len(observation.candidates))])
            if result.done:
                break
            observation = result.observation
        out.append(states)
    return out


def _whole(model, tokenizer, states):
    with whole_prompts():
        return score_answers(model, tokenizer, [m for m, _ in states], [a for _, a in states])


def _close(x, y):
    return all(a == pytest.approx(b, abs=1e-4) for xs, ys in zip(x, y) for a, b in zip(xs, ys))


@pytest.mark.parametrize("name", ENVS)
def test_episodes_in_lockstep_score_with_their_caches_as_a_whole_pass_and_compute_fewer_tokens(random_model, name):
    model, tokenizer = random_model
    episodes = _episodes(name, range(4), 6)
    cache = EpisodeCache(256)
    with tally_tokens() as counts:
        for step in range(max(map(len, episodes))):
            live = [(seed, states[step]) for seed, states in enumerate(episodes) if step < len(states)]
            # a small pass budget: rows lent caches of different lengths share a pass under the padding mask
            cached = score_answers(
                model,
                tokenizer,
                [m for _, (m, _) in live],
                [a for _, (_, a) in live],
                max_tokens=600,
                cache=cache,
                keys=[seed for seed, _ in live],
            )
            assert _close(cached, _whole(model, tokenizer, [s for _, s in live]))
    assert cache.stats["lent"] > 0 and cache.stats["refused_weights"] == 0
    assert counts["computed_prompt_tokens"] < counts["prompt_tokens"]


@pytest.mark.parametrize(
    ("name", "turns"), (("polyguard", "conversation"), ("json_tasks", "conversation"), ("polyguard", "updates"))
)
def test_an_episode_as_one_conversation_scores_as_a_whole_pass_and_computes_each_turn_only(random_model, name, turns):
    """Under `turns: conversation` a state's prompt extends the previous state's, answer and all: the cache lends
    all of it, so each state computes the answer before it and the parts that changed (`updates`: the parts only)."""
    model, tokenizer = random_model
    episodes = _episodes(name, range(3), 5, {"turns": turns})
    cache, scored = EpisodeCache(256), []
    with tally_tokens() as counts:
        for step in range(max(map(len, episodes))):
            live = [(seed, states[step]) for seed, states in enumerate(episodes) if step < len(states)]
            messages, offered = [m for _, (m, _) in live], [a for _, (_, a) in live]
            cached = score_answers(model, tokenizer, messages, offered, cache=cache, keys=[k for k, _ in live])
            scored.append((cached, [s for _, s in live]))
    for cached, states in scored:
        assert _close(cached, _whole(model, tokenizer, states))
    assert cache.stats["lent"] > 0
    assert counts["computed_prompt_tokens"] * 2 < counts["prompt_tokens"], counts


def test_the_imitation_check_scores_the_teacher_s_episodes_with_their_caches_as_a_whole_pass(random_model):
    from lib.training.imitation import agreement

    model, tokenizer = random_model
    episodes = _episodes("sentinel_trust", range(3), 5)
    with tally_tokens() as counts:
        scored = score_episodes(model, tokenizer, episodes, 64)
    assert [len(s) for s in scored] == [len(e) for e in episodes]
    for states, values in zip(episodes, scored):
        assert _close(values, _whole(model, tokenizer, states))
    assert counts["computed_prompt_tokens"] < counts["prompt_tokens"]
    config = load_config("cpu-smoke-sentinel_trust")
    cached = config.model_copy(update={"model": config.model.model_copy(update={"episode_cache_mb": 64})})
    loaded = (model, tokenizer, {"path": "tiny", "sha256": "0"})
    plain, again = agreement(config, loaded, 3), agreement(cached, loaded, 3)
    assert plain["teacher_states"] == again["teacher_states"] > 0
    assert plain["by_kind"].keys() == again["by_kind"].keys()
    for kind, tally in plain["by_kind"].items():
        assert again["by_kind"][kind]["p_teacher"] == pytest.approx(tally["p_teacher"], abs=1e-3)


def test_a_cache_is_refused_for_other_weights(random_model):
    model, tokenizer = random_model
    [states] = _episodes("polyguard", [0], 3)
    cache = EpisodeCache(64)
    score_answers(model, tokenizer, [states[0][0]], [states[0][1]], cache=cache, keys=["e"])
    weight = model.get_decoder().layers[0].mlp.up_proj.weight
    before, saved = weights_fingerprint(model), weight.detach().clone()
    weight.data.add_(0.05)  # a write the version counter does not see: the sum does
    assert weights_fingerprint(model) != before
    scores = score_answers(model, tokenizer, [states[1][0]], [states[1][1]], cache=cache, keys=["e"])
    assert cache.stats["refused_weights"] == 1 and cache.stats["lent"] == 0
    assert _close(scores, _whole(model, tokenizer, states[1:2]))
    with torch.no_grad():
        weight.sub_(0.05)  # an in-place update, as an optimizer step makes: the version counter moves
    score_answers(model, tokenizer, [states[2][0]], [states[2][1]], cache=cache, keys=["e"])
    assert cache.stats["refused_weights"] == 2 and cache.stats["lent"] == 0
    # the same weights again: the cache is lent
    score_answers(model, tokenizer, [states[2][0]], [states[2][1]], cache=cache, keys=["e"])
    assert cache.stats["lent"] == 1
    weight.data.copy_(saved)  # the session's model as it was


def test_a_cache_lends_only_the_tokens_it_shares(random_model):
    model, tokenizer = random_model
    [first], [other] = _episodes("polyguard", [0], 1), _episodes("json_tasks", [1], 1)
    cache = EpisodeCache(64)
    score_answers(model, tokenizer, [first[0][0]], [first[0][1]], cache=cache, keys=["e"])
    stored = cache.entries["e"][0]
    changed = list(stored)
    changed[40] = (changed[40] + 1) % len(tokenizer)
    lent, layers = cache.lend("e", changed, len(changed))
    assert lent == 40 and layers[0][0].shape[2] == 40
    assert cache.lend("e", stored, 10)[0] == 10  # never past the limit (a state's last prompt token is computed)
    # another environment's state under the same key: only the chat template's start is shared, the scores hold
    scores = score_answers(model, tokenizer, [other[0][0]], [other[0][1]], cache=cache, keys=["e"])
    assert _close(scores, _whole(model, tokenizer, other[:1]))


def test_a_pass_holds_at_most_its_key_value_columns_and_scores_the_same(random_model, monkeypatch):
    from lib import candidates
    from lib.candidates import _passes

    # rows lent 100 columns: two fit 300 columns (2 x 105), a third does not; rows lent none share a pass
    assert _passes([5, 5, 5, 5], [100, 100, 0, 0], 4096, 300) == [[0, 1], [2, 3]]
    assert _passes([5, 5], [100, 100], 4096, 1) == [[0], [1]]  # a state over the bound alone has a pass of its own
    assert _passes([5, 5, 5], [0, 0, 0], 10, 10**6) == [[0, 1], [2]]  # the new tokens' bound still holds
    model, tokenizer = random_model
    episodes = _episodes("polyguard", range(4), 4)
    passes = []
    score_rows = candidates.score_rows
    monkeypatch.setattr(
        candidates, "score_rows", lambda m, rows, *rest: passes.append(rest[2]) or score_rows(m, rows, *rest)
    )
    for columns in (None, 1):
        cache = EpisodeCache(256)
        for step in range(max(map(len, episodes))):
            live = [(seed, states[step]) for seed, states in enumerate(episodes) if step < len(states)]
            passes.clear()
            scores = score_answers(
                model,
                tokenizer,
                [m for _, (m, _) in live],
                [a for _, (_, a) in live],
                max_columns=columns,
                cache=cache,
                keys=[seed for seed, _ in live],
            )
            assert len(passes) == (len(live) if columns == 1 else 1)
            assert _close(scores, _whole(model, tokenizer, [s for _, s in live]))
        assert cache.stats["lent"] > 0


def test_a_cache_over_its_budget_is_not_kept_and_changes_no_score(random_model):
    model, tokenizer = random_model
    [states] = _episodes("sentinel_trust", [2], 3)
    cache = EpisodeCache(1)
    cache.budget = 1_000  # bytes: no prompt's cache fits
    for messages, offered in states:
        scores = score_answers(model, tokenizer, [messages], [offered], cache=cache, keys=["e"])
        assert _close(scores, _whole(model, tokenizer, [(messages, offered)]))
    assert cache.stats["over_budget"] == len(states) and not cache.entries and cache.stats["lent"] == 0
    with pytest.raises(ValueError, match="budget above 0"):
        EpisodeCache(0)
    with pytest.raises(ValueError, match="one key per state"):
        score_answers(model, tokenizer, [states[0][0]], [states[0][1]], cache=cache, keys=[])


def test_evaluation_plays_the_same_episodes_with_the_cache(random_model, tmp_path):
    model, tokenizer = random_model
    config = load_config("cpu-smoke")
    cached = config.model_copy(update={"model": config.model.model_copy(update={"episode_cache_mb": 64})})
    loaded = (model, tokenizer, {"path": "tiny", "sha256": "0"})
    plain, _ = run_model_episodes(config, loaded, range(6), "holdout", desc="plain", batch_size=3)
    with tally_tokens() as counts:
        again, actions = run_model_episodes(cached, loaded, range(6), "holdout", desc="cached", batch_size=3)
    assert [(e.seed, e.episode_return, e.steps) for e in again] == [(e.seed, e.episode_return, e.steps) for e in plain]
    assert counts["computed_prompt_tokens"] < counts["prompt_tokens"]


def test_the_cache_is_a_clear_error_where_the_model_generates_its_answers():
    with pytest.raises(ConfigError, match="episode_cache_mb"):
        load_config("cpu-smoke", overrides={"model.action_space": "free", "model.episode_cache_mb": 64})
