"""DAgger (`corpus.dagger_from`, lib/training/dagger.py): an earlier SFT plays fresh train episodes, the teacher labels
every state it reached, and those rows join the corpus; bad sources are named, not half-used."""

import shutil

import pytest

from lib.config import load_config
from lib.envs.base import format_action
from lib.io import read_records
from lib.runs import Run
from lib.training.dagger import DAGGER_SEED_OFFSET, dagger_rows, dagger_seeds
from lib.training.sft import run_sft
from tests.micro import MICRO, corpus_run

pytestmark = pytest.mark.slow  # an SFT model plays

TRUST = {**MICRO, "corpus.sft_label_smoothing": 0.0}


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    config, run, _ = corpus_run("cpu-smoke-sentinel_trust", TRUST, tmp_path_factory.mktemp("source"))
    run_sft(config, run)
    return config, run


def test_the_teacher_labels_every_state_of_the_models_own_episodes_and_the_corpus_adds_them(source, tmp_path):
    config, run = source
    overrides = {**TRUST, "corpus.dagger_from": str(run.dir), "corpus.dagger_episodes": 3}
    _, fresh, rows = corpus_run("cpu-smoke-sentinel_trust", overrides, tmp_path / "dagger")
    corpus = fresh.read_stage("corpus")
    base = read_records(run.read_stage("corpus")["outputs"]["sft.jsonl"])
    assert rows[: len(base)] == base  # the teacher's own rows first, unchanged
    added = rows[len(base) :]
    record = corpus["metrics"]["dagger"]
    assert added and record["rows"] == len(added) and record["episodes"] == 3
    assert record["sft_weights_sha256"] == run.read_stage("sft")["metrics"]["weights_sha256"]
    assert corpus["inputs"]["dagger_from"] == str(run.dir)
    env, teacher = config.spec.make_env(), config.spec.make_policy(config.spec.teacher)
    for row in added:
        assert row["label_source"] == "dagger" and row["split"] == "train"
        assert row["seed"] in dagger_seeds(3) and row["seed"] >= DAGGER_SEED_OFFSET
        observation = env.restore(row["seed"], row["split"], row["history"])
        assert env.render(observation) == row["prompt"]
        offered = [format_action(c.id) for c in observation.candidates]
        assert row["executed"] in offered and row["completion"][-1]["content"] == row["teacher"] in offered
        # the label is the teacher's choice at exactly this state (rebuilt with the teacher's own begin)
        teacher.begin(row["seed"])
        replay = env.reset(row["seed"], row["split"])
        for action in row["history"]:
            teacher.act(replay, env)
            replay = env.step(action).observation
        assert teacher.act(replay, env) == row["teacher"]
    # consecutive rows of a seed continue the model's own path: each history is the last one plus what it played
    for before, after in zip(added, added[1:]):
        if before["seed"] == after["seed"]:
            assert after["history"] == before["history"] + [before["executed"]]


def test_a_source_that_is_not_a_run_of_this_environment_with_its_model_is_refused(source, tmp_path):
    config, run = source
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        dagger_rows(config, tmp_path / "nothing", dagger_seeds(1))
    other = load_config("cpu-smoke", MICRO)
    Run(tmp_path / "polyguard", other)
    with pytest.raises(ValueError, match="cannot play this environment"):
        dagger_rows(config, tmp_path / "polyguard", dagger_seeds(1))
    moved = tmp_path / "moved"
    shutil.copytree(run.dir, moved)
    shutil.rmtree(moved / "sft" / "model")
    with pytest.raises(FileNotFoundError, match="SFT model is not there"):
        dagger_rows(config, moved, dagger_seeds(1))


def test_aggrevate_fits_the_improvers_labels_at_the_policys_own_states_and_evaluate_loads_its_adapter(
    source, tmp_path, monkeypatch
):
    """rl.algorithm aggrevate (lib/training/aggrevate.py): the SFT model plays its own train episodes, the improver
    labels every state it reached, and an adapter trained on those labels is the RL stage's model; a second round's
    policy plays with the first round's adapter, and a fresh adapter is fitted to both rounds' rows (DAgger's
    aggregate)."""
    import json

    from lib.config import ConfigError
    from lib.episodes import Improver, candidate_returns
    from lib.evaluation.closed_loop import model_artifacts
    from lib.inference import load_policy_model
    from lib.models import weights_sha256
    from lib.pipeline.fork import fork_run
    from lib.training import aggrevate
    from lib.training.labelling import AGGREVATE_SEED_OFFSET
    from lib.training.rl import run_rl

    with pytest.raises(ConfigError, match="grpo.mode: aggrevate is not a GRPO mode.*set rl.algorithm=aggrevate"):
        load_config("cpu-smoke-sentinel_trust", {**TRUST, "grpo.mode": "aggrevate"})
    with pytest.raises(ConfigError, match="keeps the last round's adapter.*set rl.keep last"):
        load_config("cpu-smoke-sentinel_trust", {**TRUST, "rl.algorithm": "aggrevate", "rl.validate_every": 1})
    with pytest.raises(ConfigError, match="aggrevate.rounds .2. counts AggreVaTe rounds"):
        load_config("cpu-smoke-sentinel_trust", {**TRUST, "aggrevate.rounds": 2})
    _, run = source
    target = tmp_path / "run"
    shutil.copytree(run.dir, target)
    config = load_config("cpu-smoke-sentinel_trust", {**TRUST, "rl.algorithm": "aggrevate"})
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["config"] = config.model_dump(mode="json")
    (target / "manifest.json").write_text(json.dumps(manifest))
    base = Run(target, config)
    played_with = []  # (adapter, its sha256) each time a round's policy was loaded to play

    def spy(model_dir, model_config, adapter_dir=None):
        played_with.append((adapter_dir, adapter_dir and weights_sha256(adapter_dir)))
        return load_policy_model(model_dir, model_config, adapter_dir)

    monkeypatch.setattr(aggrevate, "load_policy_model", spy)
    fitted = []  # the rows each round's fit trained on

    def fit_spy(config, run, out, stage, base_model, rows, callbacks):
        fitted.append([(r["seed"], r["round"], json.dumps(r["completion"], sort_keys=True)) for r in rows])
        return fit(config, run, out, stage, base_model, rows, callbacks)

    fit = aggrevate._fit
    monkeypatch.setattr(aggrevate, "_fit", fit_spy)
    (first,) = run_rl(config, base)["metrics"]["rounds"]  # round 1: the SFT policy plays
    assert played_with == [(None, None)]
    base_log = (target / "grpo" / "train_log.jsonl").read_text()
    # a fork that adds a round goes on from the base's: round 2's policy is the SFT model with round 1's adapter
    config, fork = fork_run(target, tmp_path / "more", {"aggrevate.rounds": 2})
    record = run_rl(config, fork)
    metrics = record["metrics"]
    assert record["status"] == "ok" and metrics["mode"] == "aggrevate" and metrics["label_source"] == "improver"
    assert metrics["steps"] >= 2 and 0 < metrics["train_loss"] < 50
    rows = read_records(record["outputs"]["rows"])
    assert len(rows) == metrics["rows"] and {r["seed"] for r in rows} <= set(range(AGGREVATE_SEED_OFFSET, 10**6))
    again, second = metrics["rounds"]
    assert again == first and metrics["resumed_from"] == {"round": 1, "adapter_sha256": first["adapter_sha256"]}
    assert len(played_with) == 2 and played_with[1][1] == first["adapter_sha256"]
    assert second["adapter_sha256"] == metrics["adapter_sha256"] != first["adapter_sha256"]
    assert first["seeds"][1] == second["seeds"][0] and first["rows"] + second["rows"] == len(rows)
    # round 2 fitted a fresh adapter to round 1's rows and its own: every row of the stage, each once
    assert len(fitted) == 2 and len(fitted[0]) == first["rows"] == first["trained_rows"]
    assert sorted(fitted[1]) == sorted(
        (r["seed"], r["round"], json.dumps(r["completion"], sort_keys=True)) for r in rows
    )
    assert second["trained_rows"] == len(rows) and {row[1] for row in fitted[1]} == {1, 2}
    assert rows[: first["rows"]] == read_records(target / "grpo" / "rows.jsonl")
    for round_ in (first, second):
        assert {r["seed"] for r in rows if r["round"] == round_["round"]} <= set(range(*round_["seeds"]))
    assert {r["round"] for r in read_records(fork.dir / "grpo" / "train_log.jsonl")} == {1, 2}
    # the base is untouched: its adapter, its log
    assert weights_sha256(target / "grpo" / "adapter") == first["adapter_sha256"]
    assert (target / "grpo" / "train_log.jsonl").read_text() == base_log
    # a record written before aggrevate.rounds (one round, no `rounds`, rows untagged) is continued the same way
    legacy_config, legacy = fork_run(target, tmp_path / "legacy", {"aggrevate.rounds": 2})
    path = legacy.dir / "grpo" / "stage.json"
    old = json.loads(path.read_text())
    del old["metrics"]["rounds"]
    path.write_text(json.dumps(old))
    untagged = [{k: v for k, v in r.items() if k != "round"} for r in read_records(legacy.dir / "grpo" / "rows.jsonl")]
    (legacy.dir / "grpo" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in untagged))
    rounds, legacy_rows, _ = aggrevate.done_rounds(
        legacy_config, legacy, "grpo", legacy.read_stage("sft")["outputs"]["model"]
    )
    recorded_later = ("policy_p_teacher", "policy_p_label", "policy_p_label_differs")  # not in a record this old
    assert [{**r, "tokens": 0} for r in rounds] == [
        {**{k: v for k, v in first.items() if k not in recorded_later}, "tokens": 0}
    ]
    assert legacy_rows == rows[: first["rows"]]
    # a shared stage whose adapter is not the one its record names is not continued
    _, broken = fork_run(target, tmp_path / "broken", {"aggrevate.rounds": 3})
    weights = next((broken.dir / "grpo" / "adapter").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[:-8] + bytes(8))
    with pytest.raises(ValueError, match="is not that adapter: re-run the stage from round 1"):
        run_rl(broken.config, broken)
    spec = config.spec
    env = spec.make_env()
    margin = Improver(spec).margin  # where outcomes are drawn, closer returns than this keep the teacher's answer
    for row in rows:  # each label is the candidate of the best return when the teacher finishes from this state
        assert row["label_source"] == "improver"
        observation = env.restore(row["seed"], row["split"], row["history"])
        returns = candidate_returns(
            spec.make_env(), row["seed"], "train", row["history"], observation, spec.make_policy(spec.teacher)
        )
        label, best = row["completion"][-1]["content"], max(returns.values())
        if label == row["teacher"]:
            assert returns[label] >= best - margin - 1e-9
        else:
            assert returns[label] == pytest.approx(best) and best - returns[row["teacher"]] > margin
        assert row["label_spread"] == pytest.approx(max(returns.values()) - min(returns.values()))
    # each row has the playing policy's probability of the teacher's answer and of the label at that state: round
    # 1's, the SFT policy's own, re-scored here alone (batched scoring differs by float rounding only)
    from lib.candidates import answers, distribution, score_answers
    from lib.evaluation.closed_loop import sft_model_dir

    model, tokenizer, _ = load_policy_model(sft_model_dir(fork), config.model)
    for row in [r for r in rows if r["round"] == 1][:8]:
        observation = env.restore(row["seed"], row["split"], row["history"])
        offered = answers(observation)
        [logprobs] = score_answers(model, tokenizer, [row["prompt"]], [offered])
        probs = dict(zip(offered, distribution(logprobs)))
        assert row["p_teacher"] == pytest.approx(probs[row["teacher"]], abs=1e-4)
        assert row["p_label"] == pytest.approx(probs[row["completion"][-1]["content"]], abs=1e-4)
    for round_ in (first, second):
        mine = [r for r in rows if r["round"] == round_["round"]]
        assert round_["policy_p_teacher"] == pytest.approx(sum(r["p_teacher"] for r in mine) / len(mine), abs=1e-4)
        assert round_["policy_p_label"] == pytest.approx(sum(r["p_label"] for r in mine) / len(mine), abs=1e-4)
    assert metrics["p_reference_start"] == first["policy_p_teacher"]
    spread = [r["label_spread"] <= 1e-9 for r in rows]
    assert metrics["frac_states_zero_spread"] == pytest.approx(sum(spread) / len(spread), abs=1e-4)
    assert metrics["improver_differs_from_teacher"] == pytest.approx(
        sum(r["completion"][-1]["content"] != r["teacher"] for r in rows) / len(rows), abs=1e-4
    )
    where = model_artifacts(config, fork)["grpo"]  # the evaluate stage's models: the SFT model and this adapter
    assert where["adapter"] == record["outputs"]["adapter"]
    load_policy_model(where["model"], config.model, where["adapter"])


def test_an_aggrevate_stage_validates_the_sft_and_every_rounds_policy_and_a_continued_fork_extends_the_curve(
    source, tmp_path
):
    """With rl.validate_every > 0 the SFT policy and each round's policy play the validation seeds: one point per
    policy at its cumulative training step, tagged with its round; the stage records the best point and how far the
    kept (last) round fell short of it. A fork that adds a round extends the base's curve by one point."""
    import json

    from lib.inference import load_policy_model
    from lib.pipeline.fork import fork_run
    from lib.training.rl import run_rl
    from lib.training.validation import read_curve, validation_point

    _, run = source
    target = tmp_path / "run"
    shutil.copytree(run.dir, target)
    settings = {"rl.algorithm": "aggrevate", "rl.validate_every": 1, "rl.keep": "last", "rl.validation_episodes": 3}
    config = load_config("cpu-smoke-sentinel_trust", {**TRUST, **settings})
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["config"] = config.model_dump(mode="json")
    (target / "manifest.json").write_text(json.dumps(manifest))
    metrics = run_rl(config, Run(target, config))["metrics"]
    (first,) = metrics["rounds"]
    points = read_curve(target / "grpo" / "validation.jsonl")
    assert [(p["round"], p["step"], p["n"]) for p in points] == [(0, 0, 3), (1, first["steps"], 3)]
    model, tokenizer, _ = load_policy_model(run.read_stage("sft")["outputs"]["model"], config.model)
    assert validation_point(config, model, tokenizer, 0, round=0) == points[0]  # the SFT policy, as evaluated
    levels = json.loads((target / "grpo" / "validation_references.json").read_text())
    assert {"teacher", "oracle"} <= set(levels) and levels["n"] == 3
    config, fork = fork_run(target, tmp_path / "more", {"aggrevate.rounds": 2})
    metrics = run_rl(config, fork)["metrics"]
    second = metrics["rounds"][1]
    points = read_curve(fork.dir / "grpo" / "validation.jsonl")
    assert [(p["round"], p["step"]) for p in points] == [
        (0, 0),
        (1, first["steps"]),
        (2, first["steps"] + second["steps"]),
    ]
    best = max(points, key=lambda p: (p["mean_return"], -p["step"]))
    assert metrics["validation_best_step"] == best["step"] and metrics["kept_step"] == points[-1]["step"]
    assert metrics["validation_last_minus_best"] == pytest.approx(points[-1]["mean_return"] - best["mean_return"])
    assert len(read_curve(target / "grpo" / "validation.jsonl")) == 2  # the base's curve is untouched


def test_the_improver_keeps_the_teachers_answer_unless_a_candidate_beats_it_by_more_than_its_margin():
    """`Improver(margin=)`: a candidate must beat the teacher's answer by more than the margin to be the label."""
    from lib.envs import get_spec
    from lib.episodes import Improver, run_episode

    spec = get_spec("polyguard")
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    gains = []
    for seed in range(6):
        for t in run_episode(env, spec.make_policy(spec.teacher), seed, "train", keep_transitions=True).transitions:
            observation = env.restore(seed, "train", t["history"])
            plain = Improver(spec)
            plain.begin(seed)
            label, returns = plain.choose(observation, env)
            teacher.begin(seed)
            own = teacher.act(observation, env)
            gain = returns[label] - returns[own]
            assert gain >= 0
            if gain > 0:
                gains.append((seed, t["history"], own, label, gain))
    assert gains, "no state where the improver beats the teacher"
    for seed, history, own, label, gain in gains[:4]:
        for margin, expected in ((gain * 0.99, label), (gain, own), (gain * 1.01, own)):
            improver = Improver(spec, margin=margin)
            improver.begin(seed)
            assert improver.act(env.restore(seed, "train", history), env) == expected, (margin, gain)


def test_the_improvers_margin_is_the_draws_noise_where_outcomes_are_drawn_and_exact_ties_elsewhere():
    from lib.envs import get_spec
    from lib.episodes import FUTURE_MARGIN, Improver

    assert Improver(get_spec("sentinel_trust")).margin == FUTURE_MARGIN == 0.01
    assert Improver(get_spec("polyguard")).margin == 1e-12
    assert Improver(get_spec("sentinel_trust"), margin=0.0).margin == 1e-12
