"""SENTINEL-cluster (lib/envs/sentinel_cluster/): an invalid answer allocates nothing, physics, no hidden-state leak,
vocabulary and prompt length, the anti-cheat rules and their warnings, and splits (the contract every environment
keeps, from determinism to the served round trip, is tests/test_env_contract.py)."""

import json
import re
import statistics

import pytest

from lib.envs.base import SPLITS, format_action, split_seed
from lib.envs.sentinel_cluster import SPEC, vocabulary
from lib.envs.sentinel_cluster.env import SentinelClusterEnv
from lib.envs.sentinel_cluster.scenario import BEHAVIOURS, SIZES, generate

HIDDEN = tuple(b.lower() for b in BEHAVIOURS)


@pytest.fixture()
def env():
    return SentinelClusterEnv()


def play(env, policy_name, seed, split, check=None):
    """Play one episode with a named policy, calling `check(env, observation, result)` after every step."""
    policy = SPEC.make_policy(policy_name)
    observation = env.reset(seed, split)
    policy.begin(seed)
    while True:
        result = env.step(policy.act(observation, env))
        if check:
            check(env, observation, result)
        if result.done:
            return result
        observation = result.observation


# ---- an invalid answer ------------------------------------------------------------------------------------
def test_an_invalid_answer_is_never_a_default_action(env):
    env.reset(0, "train")
    before = env.state()
    result = env.step("allocate the most urgent job")
    assert "invalid" in result.info and "action" not in result.info and env.history == [""]
    assert all(g["jobs"] == [] for g in env.state()["gpus"].values()) and before["gpus"] == env.state()["gpus"]


# ---- physics ----------------------------------------------------------------------------------------------
class PhysicsCheck:
    """After every step: memory never overcommitted, only running jobs hold a GPU, and the jobs that sat on a
    failed GPU before the step made no progress in it."""

    def __init__(self):
        self.stuck: list[tuple] = []

    def __call__(self, env, observation, result):
        for gpu in env.gpus:
            assert gpu.used == sum(j.memory for j in gpu.jobs) <= gpu.memory
            assert all(j.status == "running" and j.gpu is gpu for j in gpu.jobs)
        for job in env.jobs:
            assert (job.gpu is not None) == (job.status == "running")
        for job, progress in self.stuck:
            assert job.progress <= progress + 1e-12  # stopped (a preempt even loses work)
        self.stuck = [(j, j.progress) for g in env.gpus if g.down for j in g.jobs]


@pytest.mark.parametrize("split", ["holdout", "holdout_novel"])
def test_physics_holds_at_every_step_of_every_policy(env, split):
    for name in SPEC.policies:
        for seed in range(10):
            play(env, name, seed, split, PhysicsCheck())


def test_finished_and_timed_out_jobs_free_their_gpu(env):
    seen = set()

    def check(env, observation, result):
        for job in env.jobs:
            if job.status in ("claimed", "timed_out", "confirmed"):
                seen.add(job.status)
                assert job.gpu is None and all(job not in g.jobs for g in env.gpus)

    for seed in range(10):
        play(env, "heuristic", seed, "holdout", check)
    assert seen == {"claimed", "timed_out", "confirmed"}


def _drive(env, seed, split, behaviour, until):
    """Reset, allocate one job onto a GPU of the first worker with `behaviour` (a job it lies about, if any), then
    let the cluster run (asking other workers for telemetry, so no wait is idle) until `until(job)`."""
    observation = env.reset(seed, split)
    worker = next(w for w in env.workers if w.behaviour == behaviour)
    for candidate in observation.candidates:
        if candidate.kind == "alloc" and env.gpu(candidate.args[1]).worker is worker:
            job = env.job(candidate.args[0])
            if env.lies_about(worker, job) or behaviour == "degrading":
                break
    else:
        return None
    result = env.step(format_action(candidate.id))
    while not until(job):
        if result.done or job.status not in ("running", "claimed"):
            return None
        result = env.step(format_action(_telemetry_elsewhere(env, result.observation, worker).id))
    return job, worker, result.observation


def _telemetry_elsewhere(env, observation, worker):
    """A telemetry request to another worker that is off its cooldown (there always is one: three workers)."""
    return next(
        c
        for c in observation.candidates
        if c.kind == "info"
        and c.args[0] != worker.name
        and ((other := env.worker(c.args[0])).last_info is None or env.tick - other.last_info >= 3)
    )


def _false_claim(job):
    return job.status == "claimed" and job.done_at is None


def _lie_while_running(job):
    return job.lied and job.status == "running"


@pytest.mark.parametrize(
    "behaviour, split, until",
    [
        ("overreporter", "train", _false_claim),  # a false "done": the unfinished job left its GPU
        ("adversarial", "holdout_novel", _false_claim),
        ("slow", "train", _lie_while_running),  # full-speed reports on a job that runs at half speed
        ("degrading", "train", _lie_while_running),  # full-speed reports on a stalled job
    ],
)
def test_every_false_reporter_changes_state_and_verify_catches_it(env, behaviour, split, until):
    for seed in range(200):
        if behaviour not in generate(split_seed(seed, split), split == "holdout_novel").behaviours:
            continue
        driven = _drive(env, seed, split, behaviour, until)
        if driven is None or driven[0].name not in {v.name for v in (*driven[2].running, *driven[2].claims)}:
            continue
        job, worker, observation = driven
        assert job.reported - job.progress > 0.05  # the report is false, and the true state shows the harm:
        if until is _false_claim:
            assert job.gpu is None and job.progress < 1.0
        else:
            assert job.progress < job.expected() - 0.05
        caught_before = next(w.caught for w in observation.workers if w.name == worker.name)
        result = env.step(format_action(f"verify:{job.name}"))
        assert "invalid" not in result.info and job.caught
        assert next(w.caught for w in result.observation.workers if w.name == worker.name) == caught_before + 1
        assert abs(job.reported - job.progress) < 1e-9  # the truth is what the scheduler now knows
        if until is _false_claim:
            assert job.status in ("queued", "timed_out")  # the false "done" is undone
        return
    pytest.fail(f"no seed exercised {behaviour}")


def test_a_degrading_worker_stalls_after_its_onset(env):
    for seed in range(200):
        if "degrading" not in generate(split_seed(seed, "train"), False).behaviours:
            continue
        driven = _drive(env, seed, "train", "degrading", lambda j: j.lied)
        if driven is None:
            continue
        job, worker, _ = driven
        frozen = job.progress
        assert worker.active >= env.scenario.degrade_onset and frozen < 1.0
        env.step(format_action("wait"))
        assert job.progress == frozen and (job.status == "claimed" or job.reported > frozen)
        return
    pytest.fail("no seed exercised a degrading worker")


def _first_stuck_job(env, seed):
    """(history, job name) at the first state of an always_allocate episode with a job on a failed GPU, or None."""
    policy, observation = SPEC.make_policy("always_allocate"), env.reset(seed, "train")
    while not env.done:
        stuck = [j for g in env.gpus if g.down for j in g.jobs]
        if stuck:
            return list(env.history), stuck[0].name
        observation = env.step(policy.act(observation, env)).observation
    return None


def test_jobs_on_a_failed_gpu_stop_and_verify_shows_it(env):
    for seed in range(100):
        found = _first_stuck_job(env, seed)
        if found is None:
            continue
        history, name = found
        observation = env.restore(seed, "train", history)
        job = env.job(name)
        assert any(job.gpu.name in w.down for w in observation.workers)
        assert next(v for v in observation.running if v.name == name).flag == "down"
        frozen = job.progress
        result = env.step(format_action(f"verify:{name}"))
        assert job.progress == frozen and job.reported == frozen
        assert next(v for v in result.observation.running if v.name == name).reported == round(100 * frozen)
        return
    pytest.fail("no seed put a job on a failed GPU")


# ---- leaks and prompts ------------------------------------------------------------------------------------
def test_nothing_shown_or_returned_leaks_a_hidden_behaviour(env):
    def check(env, observation, result):
        shown = [
            json.dumps(env.render(observation)),
            repr(observation),
            json.dumps(result.info, default=str),
            *(c.id + " " + c.text for c in observation.candidates),
        ]
        if not result.done:
            shown.append(repr(result.observation))
        text = " ".join(shown).lower()
        assert not any(name in text for name in HIDDEN), [name for name in HIDDEN if name in text]

    for name in SPEC.policies:
        for split in ("holdout", "holdout_novel"):
            for seed in range(3):
                play(env, name, seed, split, check)
    assert any(name in json.dumps(env.state()) for name in HIDDEN)  # state() is the debugging/oracle view


def test_vocabulary_covers_every_word_a_prompt_shows(env):
    known = set(re.findall(r"[A-Za-z]+", vocabulary()))

    def check(env, observation, result):
        for message in env.render(observation):
            assert set(re.findall(r"[A-Za-z]+", message["content"])) <= known

    for name in ("heuristic", "evidence_expert", "random"):
        for seed in range(4):
            play(env, name, seed, "holdout_novel", check)


def test_prompts_stay_short_at_the_largest_size(env):
    longest = 0
    for seed in range(40):

        def check(env, observation, result):
            nonlocal longest
            longest = max(longest, sum(len(m["content"]) for m in env.render(observation)))

        if generate(split_seed(seed, "holdout"), False).size == 2:
            play(env, "evidence_expert", seed, "holdout", check)
    assert 0 < longest <= 1800


# ---- anti-cheat rules -------------------------------------------------------------------------------------
def _allocate(observation):
    return format_action(next(c for c in observation.candidates if c.kind == "alloc").id)


def _first_running(kind):
    return lambda observation: format_action(f"{kind}:{observation.running[0].name}")


@pytest.mark.parametrize(
    "rule, answers",
    [
        ("idle_loop", [format_action("wait")] * 4),
        ("verify_spam", [_allocate, _first_running("verify"), _first_running("verify")]),
        ("verify_spam", [format_action("info:W1"), format_action("info:W1")]),
        ("preempt_churn", [_allocate, _first_running("preempt")]),
    ],
)
def test_anti_cheat_rules_end_the_episode_at_zero_and_are_named(env, rule, answers):
    observation = env.reset(0, "holdout")
    for answer in answers:
        result = env.step(answer(observation) if callable(answer) else answer)
        observation = result.observation
    assert result.done and result.info["anti_cheat"] == rule and result.info["episode_return"] == 0.0
    assert result.components["anti_cheat"] == -1.0 and set(result.components) == set(SPEC.reward_weights)
    result = play(env, "heuristic", 0, "holdout")
    assert result.info["anti_cheat"] is None and result.components["anti_cheat"] == 0.0


def test_the_prompt_warns_before_each_anti_cheat_rule_it_can(env):
    """A job verified, or a worker asked for telemetry, within the cooldown is marked LOCKED until asking again is
    allowed; waits in a row with allocations offered are counted, so neither rule needs arithmetic on ticks."""
    prompt = lambda o: env.render(o)[1]["content"]  # noqa: E731
    observation = env.reset(0, "holdout")
    observation = env.step(format_action("info:W1")).observation
    assert re.search(r"^W1 .*info .* t0 LOCKED$", prompt(observation), re.M)
    observation = env.step(_allocate(observation)).observation
    job = observation.running[0].name
    observation = env.step(format_action(f"verify:{job}")).observation
    assert re.search(rf"^- {job} .*verified t2 LOCKED$", prompt(observation), re.M)
    while observation.tick < 5:  # the cooldown (3 ticks) passes: the marks go
        observation = env.step(_allocate(observation) if observation.queue else format_action("wait")).observation
    assert "LOCKED" not in prompt(observation)
    assert "Waited" not in prompt(observation)
    for waits in (1, 2, 3):
        assert any(c.kind == "alloc" for c in observation.candidates)
        observation = env.step(format_action("wait")).observation
        assert f"Waited {waits} ticks in a row with allocations offered; wait 4 in a row ends" in prompt(observation)
    observation = env.step(_allocate(observation)).observation
    assert "Waited" not in prompt(observation)


# ---- splits -----------------------------------------------------------------------------------------------
def test_splits_are_disjoint_and_every_size_occurs():
    blocks = {split: {split_seed(seed, split) for seed in range(500)} for split in SPLITS}
    assert not blocks["train"] & blocks["holdout"] and not blocks["holdout"] & blocks["holdout_novel"]
    assert not blocks["train"] & blocks["holdout_novel"]
    sizes = {generate(split_seed(seed, "holdout"), False).size for seed in range(30)}
    assert sizes == set(range(len(SIZES)))


def test_holdout_novel_differs_as_documented():
    def stats(split):
        scenarios = [generate(split_seed(seed, split), split == "holdout_novel") for seed in range(300)]
        jobs = [j for s in scenarios for j in s.jobs]
        return (
            scenarios,
            statistics.fmean(j.priority for j in jobs),
            statistics.fmean((j.deadline - j.arrival) / j.work for j in jobs),
        )

    train, train_priority, train_slack = stats("train")
    novel, novel_priority, novel_slack = stats("holdout_novel")
    assert all(s.behaviours.count("reliable") == 2 for s in train)
    assert all("adversarial" not in s.behaviours for s in train if s.size < 2)
    assert all(s.behaviours.count("reliable") == 1 and "adversarial" in s.behaviours for s in novel)
    assert {(s.degrade_onset, s.adversary_priority) for s in train} == {(6, 4)}
    assert {(s.degrade_onset, s.adversary_priority) for s in novel} == {(3, 3)}
    assert novel_priority > train_priority + 0.5 and novel_slack < train_slack


# ---- waits: until_change (the environment's decision rule) ------------------------------------------------
def _until_change():
    from lib.envs import get_spec

    return get_spec("sentinel_cluster", {"waits": "until_change"})


@pytest.mark.parametrize("split", ["holdout", "holdout_novel"])
def test_after_a_wait_the_clock_runs_until_the_view_changes_for_every_policy(split):
    """Every policy, the same rule: the observation after a wait never offers the decision the wait answered
    (unless the episode ended), each skipped tick showed that same decision, and no other answer skips a tick."""
    from lib.envs.sentinel_cluster.env import decision_view

    spec = _until_change()
    env, skipped = spec.make_env(), 0
    for name in spec.policies:
        for seed in range(6):
            policy, observation = spec.make_policy(name), env.reset(seed, split)
            policy.begin(seed)
            while True:
                answer, tick, before = policy.act(observation, env), observation.tick, env.ticks_skipped
                result = env.step(answer)
                waited = "invalid" not in result.info and result.info["action_key"] == ["wait"]
                if not waited and not result.done:
                    assert env.tick == tick + 1 and env.ticks_skipped == before, (name, seed, tick)
                if result.done:
                    break
                if waited:
                    assert decision_view(result.observation) != decision_view(observation), (name, seed, tick)
                    assert env.tick == tick + 1 + env.ticks_skipped - before
                observation = result.observation
            skipped += env.ticks_skipped
    assert skipped > 0


def test_one_tick_per_answer_stays_the_default_and_until_change_asks_the_teacher_less():
    from lib.episodes import run_episode

    ticks, asked = SentinelClusterEnv(), _until_change().make_env()
    assert ticks.waits == "one_tick" and SPEC.make_env().waits == "one_tick"
    teacher = SPEC.make_policy(SPEC.teacher)
    for seed in range(8):
        old = run_episode(ticks, teacher, seed, "holdout")
        new = run_episode(asked, teacher, seed, "holdout")
        assert old.steps == ticks.tick and ticks.ticks_skipped == 0  # one answer, one tick
        assert new.steps + asked.ticks_skipped == asked.tick and new.steps < old.steps
        assert asked.tick == ticks.tick  # the same clock, fewer questions


def test_an_invalid_answer_after_a_wait_passes_one_tick_only():
    env = _until_change().make_env()
    env.reset(0, "train")
    env.step(format_action("wait"))
    tick, before = env.tick, env.ticks_skipped
    result = env.step("wait, please")
    assert "invalid" in result.info and env.tick == tick + 1 and env.ticks_skipped == before


def test_the_prompt_says_what_a_wait_does_and_a_bad_value_is_refused(env):
    from lib.envs import EnvironmentArgsError, get_spec

    long_wait = _until_change().make_env()
    said = {e.waits: e.render(e.reset(3, "holdout")) for e in (env, long_wait)}
    assert "wait lets the clock run until something changes" in said["until_change"][0]["content"]
    assert {c.text for c in long_wait.reset(3, "holdout").candidates if c.kind == "wait"} == {
        "wait until something changes"
    }
    assert "until something changes" not in said["one_tick"][0]["content"] + said["one_tick"][1]["content"]
    with pytest.raises(ValueError, match="waits must be one of"):
        get_spec("sentinel_cluster", {"waits": "forever"})
    with pytest.raises(EnvironmentArgsError, match="accepts \\['waits'\\]"):
        get_spec("sentinel_cluster", {"wait": "until_change"})


def test_until_change_prompts_stay_short_and_in_the_vocabulary():
    env, known, longest = _until_change().make_env(), set(re.findall(r"[A-Za-z]+", vocabulary())), 0
    for seed in range(40):
        if generate(split_seed(seed, "holdout"), False).size != 2 and seed > 3:
            continue
        policy, observation = SPEC.make_policy("evidence_expert"), env.reset(seed, "holdout")
        policy.begin(seed)
        while True:
            text = "\n".join(m["content"] for m in env.render(observation))
            longest = max(longest, len(text) - 1)
            assert set(re.findall(r"[A-Za-z]+", text)) <= known
            result = env.step(policy.act(observation, env))
            if result.done:
                break
            observation = result.observation
    assert 0 < longest <= 1800
