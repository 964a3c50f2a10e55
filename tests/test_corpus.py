"""The corpus: train seeds only, every episode position, fingerprinted, extras reported when skipped."""

import json

import pytest

from lib.config import load_config
from lib.envs.base import SEEDS_PER_SPLIT
from lib.envs.polyguard import SPEC
from lib.envs.polyguard.env import PolyGuardEnv, render
from lib.io import read_records
from lib.runs import Run, git_state
from lib.training.corpus import CorpusHashError, run_corpus

MICRO = {"corpus.sft_episodes": 12, "corpus.grpo_prompts": 24, "corpus.grpo_improvable_share": 0.0}  # states as sampled


@pytest.fixture(scope="module")
def corpus_run(tmp_path_factory):
    config = load_config("cpu-smoke", MICRO)
    run = Run(tmp_path_factory.mktemp("corpus"), config)
    record = run_corpus(config, run)
    return run, record


def test_holdout_never_leaks_into_the_corpus(corpus_run):
    run, record = corpus_run
    rows = read_records(record["outputs"]["sft.jsonl"]) + read_records(record["outputs"]["grpo_prompts.jsonl"])
    assert rows and all(r["split"] == "train" and 0 <= r["seed"] < SEEDS_PER_SPLIT for r in rows)
    corpus_prompts = {json.dumps(r["prompt"]) for r in rows}
    env = PolyGuardEnv()
    for split in ("holdout", "holdout_novel"):
        for seed in range(200):
            assert json.dumps(render(env.reset(seed, split))) not in corpus_prompts


def test_sft_rows_are_teacher_actions_and_grpo_states_span_positions(corpus_run):
    run, record = corpus_run
    sft = read_records(record["outputs"]["sft.jsonl"])
    assert {r["seed"] for r in sft} == set(range(12))
    assert all(r["completion"][0]["role"] == "assistant" for r in sft)
    grpo = read_records(record["outputs"]["grpo_prompts.jsonl"])
    positions = {r["position"] for r in grpo}
    assert len(grpo) == 24 and max(positions) >= 3 and 0 in positions
    # GRPO states are rebuilt exactly from their history
    for r in grpo[:5]:
        assert PolyGuardEnv().restore(r["seed"], r["split"], r["history"]) is not None
        assert render(PolyGuardEnv().restore(r["seed"], r["split"], r["history"])) == r["prompt"]


def test_same_seed_same_hashes_and_they_reach_the_manifest(corpus_run, tmp_path):
    run, record = corpus_run
    config = load_config("cpu-smoke", MICRO)
    again = run_corpus(config, Run(tmp_path / "again", config))
    assert again["metrics"]["hashes"] == record["metrics"]["hashes"]
    assert run.manifest()["corpus_hashes"] == record["metrics"]["hashes"]
    # each stage records the commit it ran at (a stage re-run later shows its own, not the run's first)
    assert run.manifest()["stages"]["corpus"]["git"] == git_state() == run.manifest()["git"]


@pytest.mark.slow
def test_expected_hash_is_enforced_and_unpinned_runs_warn(corpus_run, tmp_path, capsys):
    run, record = corpus_run
    pinned = load_config("cpu-smoke", {**MICRO, "corpus.expected_hash": record["metrics"]["hashes"]})
    run_corpus(pinned, Run(tmp_path / "pinned", pinned))
    assert "not pinned" not in capsys.readouterr().out
    wrong = load_config("cpu-smoke", {**MICRO, "corpus.expected_hash": {"sft.jsonl": "0" * 64}})
    with pytest.raises(CorpusHashError, match="sft.jsonl: expected 000000000000"):
        run_corpus(wrong, Run(tmp_path / "wrong", wrong))
    run_corpus(load_config("cpu-smoke", MICRO), Run(tmp_path / "unpinned", load_config("cpu-smoke", MICRO)))
    assert "corpus hashes are not pinned" in capsys.readouterr().out


def test_dart_noise_moves_episodes_off_the_teachers_path_but_every_label_is_the_teachers():
    import random

    from lib.envs.polyguard import SPEC
    from lib.training.corpus import sft_rows

    make_policy = SPEC.make_policy

    env, teacher = PolyGuardEnv(), make_policy("heuristic")
    clean = sft_rows(SPEC, env, range(20), noise=0.0)
    assert all(r["executed"] == r["completion"][0]["content"] for r in clean)
    noisy = sft_rows(SPEC, env, range(20), noise=0.3, rng=random.Random(0), excluded=("finish", "review"))
    off_path = [r for r in noisy if r["executed"] != r["completion"][0]["content"]]
    assert off_path and len(off_path) < len(noisy)
    assert not any('"finish"' in r["executed"] or '"review"' in r["executed"] for r in off_path)
    for r in noisy:  # the state is the one its history rebuilds, and its label is what the teacher does there
        state = PolyGuardEnv()
        obs = state.restore(r["seed"], "train", r["history"])
        assert render(obs) == r["prompt"]
        assert teacher.act(obs, state) == r["completion"][0]["content"]
    assert sft_rows(SPEC, env, range(20), noise=0.3, rng=random.Random(0), excluded=("finish", "review")) == noisy


@pytest.mark.slow
def test_improvable_share_draws_states_where_the_reference_is_beaten():
    import random

    from lib.envs.base import format_action
    from lib.envs.polyguard import SPEC
    from lib.training.corpus import INFORMATIVE_SPREAD, grpo_rows

    make_policy = SPEC.make_policy
    from lib.episodes import action_return

    env = PolyGuardEnv()
    policies = ["heuristic", "evidence_expert", "random"]

    def improvable(rows):
        return [r for r in rows if r["best_return"] - r["reference_return"] >= INFORMATIVE_SPREAD]

    plain, _ = grpo_rows(SPEC, env, range(200, 215), policies, 30, "heuristic", random.Random(0))
    rows, stats = grpo_rows(
        SPEC, env, range(200, 215), policies, 30, "heuristic", random.Random(0), improvable_share=0.6
    )
    assert len(rows) == 30 and stats["improvable_kept"] == len(improvable(rows)) >= 18
    assert len(improvable(plain)) < 18
    heuristic = make_policy("heuristic")
    for r in improvable(rows)[:4]:  # the recorded returns are the environment's, and the teacher's choice is beaten
        state = PolyGuardEnv()
        observation = state.restore(r["seed"], "train", r["history"])
        heuristic.begin(r["seed"])
        choice = heuristic.act(observation, state)
        assert (
            action_return(PolyGuardEnv(), r["seed"], "train", r["history"], choice, make_policy("heuristic"))[0]
            == r["reference_return"]
        )
        best = max(
            action_return(
                PolyGuardEnv(), r["seed"], "train", r["history"], format_action(c.id), make_policy("heuristic")
            )[0]
            for c in observation.candidates
        )
        assert best == r["best_return"] > r["reference_return"]


@pytest.mark.slow
def test_improvable_margin_keeps_only_states_where_the_teacher_loses_that_much():
    import random

    from lib.training.corpus import grpo_rows

    env = PolyGuardEnv()
    policies = ["heuristic", "evidence_expert", "random"]
    rows, stats = grpo_rows(
        SPEC,
        env,
        range(200, 230),
        policies,
        30,
        "heuristic",
        random.Random(0),
        improvable_share=0.5,
        improvable_margin=0.2,
    )
    gains = [r["best_return"] - r["reference_return"] for r in rows]
    assert stats["improvable_kept"] == sum(g >= 0.2 for g in gains) == 15  # the quota is filled with big losses only
    loose, _ = grpo_rows(SPEC, env, range(200, 230), policies, 30, "heuristic", random.Random(0), improvable_share=0.5)
    assert sum(r["best_return"] - r["reference_return"] >= 0.2 for r in loose) < 15  # 0.05 lets small gains in
    with pytest.raises(ValueError, match="corpus.grpo_improvable_margin: retired"):  # a function argument now
        load_config("cpu-smoke", {"corpus.grpo_improvable_margin": 0.2})


def test_grpo_rows_record_every_candidates_return_and_the_references_answer(corpus_run):
    run, record = corpus_run
    env = PolyGuardEnv()
    for r in read_records(record["outputs"]["grpo_prompts.jsonl"])[:5]:
        offered = {json.dumps({"action": c.id}) for c in env.restore(r["seed"], r["split"], r["history"]).candidates}
        assert set(r["returns"]) == offered
        assert r["returns"][r["reference_answer"]] == r["reference_return"]
        assert max(r["returns"].values()) == r["best_return"]


def test_label_smoothing_labels_that_share_of_rows_with_another_offered_candidate():
    from lib.training.corpus import sft_rows

    env = PolyGuardEnv()
    plain = sft_rows(SPEC, env, range(40))
    smoothed = sft_rows(SPEC, env, range(40), smoothing=0.3)
    assert [r["prompt"] for r in plain] == [r["prompt"] for r in smoothed]  # the same states
    changed = [r for r in smoothed if r["label_source"] == "smoothed"]
    assert 0.2 < len(changed) / len(smoothed) < 0.4
    for row in changed:
        answer = row["completion"][0]["content"]
        assert answer != row["teacher"]
        state = env.restore(row["seed"], "train", row["history"])
        assert answer in {json.dumps({"action": c.id}) for c in state.candidates}
    assert all(r["completion"][0]["content"] == r["teacher"] for r in smoothed if r["label_source"] == "teacher")


def test_sft_rows_can_be_labelled_by_the_improver_as_a_diagnostic():
    from lib.episodes import Improver
    from lib.training.corpus import sft_rows

    env = PolyGuardEnv()
    rows = sft_rows(SPEC, env, range(6), teacher="improver")
    assert rows and all(r["completion"][0]["content"] == r["teacher"] for r in rows)
    assert load_config("cpu-smoke", {"corpus.sft_policy": "improver"}).corpus.sft_policy == Improver.name
    with pytest.raises(ValueError, match="corpus.sft_policy"):
        load_config("cpu-smoke", {"corpus.sft_policy": "nobody"})


def test_grpo_states_scored_across_processes_are_the_rows_one_process_keeps():
    """The candidates' returns go out to forked workers a batch at a time; the rows kept, their order and the
    counts are those of one state at a time (here more workers' batches than the states needed: the surplus is
    scored and dropped, never kept)."""
    import random

    from lib.envs.polyguard.env import PolyGuardEnv
    from lib.training.corpus import grpo_rows

    policies = ["heuristic", "random"]
    one = grpo_rows(SPEC, PolyGuardEnv(), range(200, 212), policies, 20, "heuristic", random.Random(3), 0.5)
    spread = grpo_rows(
        SPEC,
        PolyGuardEnv(),
        range(200, 212),
        policies,
        20,
        "heuristic",
        random.Random(3),
        0.5,
        where=("polyguard", None),
        workers=2,
    )
    assert spread == one
    assert len(one[0]) == 20 and one[1]["states_examined"] >= 20
