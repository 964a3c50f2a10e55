"""The scripted policies' episodes spread over processes: the same episodes, in seed order, as one process plays
them."""

import os

from lib.config import load_config
from lib.evaluation.closed_loop import roles
from lib.evaluation.scripted import _play_chunk, run_policies


def _without_latency(actions):
    return [{k: v for k, v in a.items() if k != "latency_s"} for a in actions]


def test_policies_played_across_processes_match_one_process_seed_for_seed():
    config = load_config("cpu-smoke", {})
    improver = roles(config.spec)["improver"]
    other = next(name for name in config.spec.reported_policies if name not in ("random", improver))
    jobs = [("random", list(range(7))), (improver, list(range(5))), (other, [])]
    alone = run_policies(config.env, config.env_args, jobs, "holdout", workers=1)
    spread = run_policies(config.env, config.env_args, jobs, "holdout", workers=2)
    assert list(spread) == list(alone) == [name for name, _ in jobs]
    for name, seeds in jobs:
        episodes, actions = spread[name]
        assert [e.seed for e in episodes] == seeds  # chunks put back in seed order
        assert [e.episode_return for e in episodes] == [e.episode_return for e in alone[name][0]]
        assert _without_latency(actions) == _without_latency(alone[name][1])
    assert len(spread["random"][1]) > len(jobs[0][1])  # every action recorded, not one per episode


def test_jobs_without_seeds_need_no_worker_and_a_policy_plays_once(monkeypatch):
    import pytest

    from lib import parallel

    def no_pool(*args, **kwargs):
        raise AssertionError("a worker process was started")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    config = load_config("cpu-smoke", {})
    assert run_policies(config.env, config.env_args, [("random", [])], "holdout", workers=4) == {"random": ([], [])}
    with pytest.raises(ValueError, match="names one twice"):
        run_policies(config.env, config.env_args, [("random", [1]), ("random", [2])], "holdout", workers=1)


PARENT = os.getpid()
PLAY_CHUNK = _play_chunk  # the real one, before a test replaces it


def _die_in_a_worker(*args):
    """What a forked worker runs: it dies there; in this process it plays its chunk."""
    if os.getpid() != PARENT:
        os._exit(9)
    return PLAY_CHUNK(*args)


def test_a_worker_that_dies_leaves_the_same_episodes_played_here_with_a_warning(monkeypatch):
    import pytest

    from lib.evaluation import scripted

    config = load_config("cpu-smoke", {})
    jobs = [("random", list(range(4)))]
    alone = run_policies(config.env, config.env_args, jobs, "holdout", workers=1)
    monkeypatch.setattr(scripted, "_play_chunk", _die_in_a_worker)
    with pytest.warns(UserWarning, match="worker process died"):
        again = run_policies(config.env, config.env_args, jobs, "holdout", workers=2)
    assert [e.episode_return for e in again["random"][0]] == [e.episode_return for e in alone["random"][0]]
