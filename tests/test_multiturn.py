"""grpo.mode: multi_turn: whole episodes played by the one episode runner (in this process, or against a served
environment when a URL is given), the model acting at every turn, every played turn a training row; a multi-turn run
evaluated and gated like any other; the served and in-process paths agreeing; and the replay of its trained policy,
served without a model, returning exactly the evaluated returns."""

import json
from types import SimpleNamespace

import pytest

from lib.candidates import answer_ids, prompt_ids
from lib.config import ConfigError, load_config
from lib.serve import replay
from lib.serve.launch import served
from lib.training.multiturn import episode_starts, make_episode_reward, multi_turn_rollout, rows_per_start
from tests import micro

pytestmark = pytest.mark.slow  # trains a model and runs the pipeline (make test-fast skips this module)

MICRO = {
    **micro.MICRO,
    **micro.MICRO_EVAL,
    "corpus.sft_episodes": 20,
    "corpus.grpo_prompts": 8,
    "sft.epochs": 2,
    "sft.logging_steps": 1,
    "grpo.mode": "multi_turn",
    "eval.improver_episodes": 2,
}


@pytest.fixture(scope="module")
def multi_turn_run(tmp_path_factory):
    """A PolyGuard run whose GRPO stage played whole episodes in this process, then every stage after."""
    from lib.pipeline.stages import STAGE_NAMES, run_stage
    from lib.runs import Run

    config = load_config("cpu-smoke", MICRO)
    run = Run(tmp_path_factory.mktemp("mt") / "run", config)
    results = {stage: run_stage(stage, config, run) for stage in STAGE_NAMES}
    return config, run, results


def test_multi_turn_needs_the_candidate_policy():
    with pytest.raises(ConfigError, match="multi_turn"):
        load_config("cpu-smoke", {"grpo.mode": "multi_turn", "model.action_space": "free"})
    with pytest.raises(ConfigError, match="grpo.mode"):
        load_config("cpu-smoke", {"grpo.mode": "episodes"})


def test_a_multi_turn_run_trains_every_turn_in_process_and_is_evaluated_and_gated(multi_turn_run):
    config, run, results = multi_turn_run
    grpo = results["grpo"]["metrics"]
    assert grpo["mode"] == "multi_turn" and "env_url" not in grpo  # no server: played in this process
    assert grpo["steps"] == config.grpo.max_steps and grpo["episode_starts"] >= 1
    log = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    trained = [r for r in log if "multi_turn/episode_len" in r]
    assert len(trained) == config.grpo.max_steps and all(r["multi_turn/episode_len"] >= 1 for r in trained)
    for record in trained:  # every played turn trained (none subsampled at this size)
        played = record["multi_turn/episode_len"] * config.grpo.batch_size
        assert record["multi_turn/played_turns"] == pytest.approx(played)
        assert record["multi_turn/trained_turns"] == min(played, config.grpo.batch_size * config.grpo.turn_rows)
    verdict = results["report"]["verdict"]
    failed = [c for c in verdict["checks"] if not c["passed"] and c["name"] not in ("improved", "beats_teacher")]
    assert verdict["integrity_passed"], failed
    assert "grpo" in results["evaluate"]["metrics"] or (run.dir / "evaluate" / "eval.json").exists()


def _rollout_output(config, model, tokenizer, env_url=None, **grpo):
    g = config.grpo.model_copy(update={"num_generations": 4, **grpo})
    starts = episode_starts(config.spec, [5000, 5001])
    group = rows_per_start(g)
    prompts = [s["prompt"] for s in starts for _ in range(group)]
    trainer = SimpleNamespace(processing_class=tokenizer, model=model, state=SimpleNamespace(global_step=0))
    rollout = multi_turn_rollout(config.spec, starts, g, 0, env_url=env_url)
    return rollout(prompts, trainer), rollout(prompts, trainer), g


def test_every_row_is_a_turn_the_policy_played_with_its_episode_advantage_and_the_served_path_agrees(multi_turn_run):
    """The rollout in this process: every trained row's prompt is one turn's own rendered state and its completion one
    of that state's candidate answers; its episode's return is what the answers of the whole episode earn offline;
    the rows' rewards are the episode advantages, summing to zero over each start's group. Against a server (the
    OpenEnv wire) the same seeds draw the same answers and earn the same rewards and returns."""
    from lib.inference import load_policy_model

    config, run, _ = multi_turn_run
    model, tokenizer, _ = load_policy_model(run.read_stage("sft")["outputs"]["model"], config.model)
    out, again, g = _rollout_output(config, model, tokenizer)
    assert out["episode_answers"] == again["episode_answers"]  # seeded: a resumed run draws the same episodes
    group = rows_per_start(g)
    assert len(out["prompt_ids"]) == len(out["completion_ids"]) == len(out["row_reward"]) == 2 * group
    spec = config.spec
    for index, (answers, seed, ret, trained) in enumerate(
        zip(out["episode_answers"], out["episode_seed"], out["episode_return"], out["row_trained"])
    ):
        env = spec.make_env()
        observation, states = env.reset(seed, "train"), []
        for answer in answers:
            offered = [f'{{"action": "{c.id}"}}' for c in observation.candidates]
            assert answer in offered  # the policy only ever answers with an offered candidate
            states.append((prompt_ids(tokenizer, env.render(observation)), answer_ids(tokenizer, answer)))
            result = env.step(answer)
            observation = result.observation
        assert result.done and result.info["episode_return"] == pytest.approx(ret)
        assert (out["prompt_ids"][index], out["completion_ids"][index]) in states
        assert out["env_mask"][index] == [int(trained)] * len(out["completion_ids"][index])
    for start in range(2):
        rows = slice(start * group, (start + 1) * group)
        assert sum(out["row_reward"][rows]) == pytest.approx(0.0, abs=1e-9)
    metrics = out["rollout_metrics"]
    assert sum(out["row_trained"]) == metrics["multi_turn/trained_turns"] <= metrics["multi_turn/played_turns"]
    assert metrics["multi_turn/trained_turns"] >= min(group, metrics["multi_turn/played_turns"])
    assert make_episode_reward()([""] * len(out["row_reward"]), **out) == out["row_reward"]
    with served(config.env) as url:
        remote, _, _ = _rollout_output(config, model, tokenizer, env_url=url)
    for key in ("episode_answers", "episode_return", "row_reward", "row_trained", "prompt_ids", "completion_ids"):
        assert remote[key] == out[key], key


def test_replay_returns_equal_the_evaluated_returns_and_a_missing_seed_falls_back(multi_turn_run):
    import urllib.request

    config, run, _ = multi_turn_run
    summary = replay.record(run.dir)
    lines = [json.loads(line) for line in (run.dir / "replay.jsonl").read_text().splitlines()]
    assert summary["actions"] == len(lines) and summary["source"] == "evaluate/episodes.jsonl"
    assert {"env", "split", "seed", "step", "action", "artifact"} <= set(lines[0])
    adapter_sha = run.read_stage("grpo")["metrics"]["adapter_sha256"]
    assert all(line["artifact"]["sha256"] == adapter_sha for line in lines)
    episodes = [json.loads(line) for line in (run.dir / "evaluate" / "episodes.jsonl").read_text().splitlines()]
    grpo = [e for e in episodes if e["policy"] == "grpo"]
    evaluated = {(e["split"], e["seed"]): e["return"] for e in grpo if "ablation" not in e}
    assert any("ablation" in e for e in grpo)  # the file holds both; replay keeps the greedy evaluation
    assert len(evaluated) == summary["episodes"] > 0
    with served(config.env, run_dir=run.dir) as url:

        def get(path):
            return json.loads(urllib.request.urlopen(f"{url}{path}").read())

        status = get("/policy/model_status")
        assert status["policy"] == "grpo" and status["replay_episodes"] == len(evaluated)
        for (split, seed), expected in sorted(evaluated.items()):
            trace = json.loads(
                urllib.request.urlopen(f"{url}/api/episode?policy=grpo&split={split}&seed={seed}").read()
            )
            assert trace["episode_return"] == pytest.approx(expected, abs=1e-12) and trace["replay_misses"] == 0
        missing = max(seed for split, seed in evaluated if split == "holdout") + 1
        trace = get(f"/api/episode?policy=grpo&split=holdout&seed={missing}")
        assert trace["replay_misses"] == len(trace["steps"]) > 0 and all(s["replay_miss"] for s in trace["steps"])
        teacher = json.loads(
            urllib.request.urlopen(f"{url}/api/episode?policy=heuristic&split=holdout&seed={missing}").read()
        )
        assert trace["episode_return"] == teacher["episode_return"]
        status = get("/policy/model_status")
        assert status["replay_misses_served"]["steps"] == trace["replay_misses"]


def test_a_damaged_replay_is_an_error_naming_its_line(multi_turn_run, tmp_path):
    import shutil

    config, run, _ = multi_turn_run
    if not (run.dir / "replay.jsonl").exists():
        replay.record(run.dir)
    copy = tmp_path / "copy"
    shutil.copytree(run.dir / "evaluate", copy / "evaluate")
    lines = (run.dir / "replay.jsonl").read_text().splitlines()
    (copy / "replay.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(replay.ReplayError, match=r"replay.jsonl:2: damaged"):
        replay.load(copy, config.spec)
    with pytest.raises(replay.ReplayError, match="does not exist"):
        replay.load(tmp_path, config.spec)
