"""SFT and GRPO through TRL on a micro profile: determinism, reward wiring, guards, checkpoints and resume."""

import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from lib.checkpoints import CorruptCheckpointError, verify_checkpoint
from lib.config import ConfigError, load_config
from lib.envs.base import format_action
from lib.envs.polyguard import SPEC
from lib.envs.polyguard.env import PolyGuardEnv
from lib.envs.polyguard.reward import INVALID_PENALTY
from lib.episodes import action_return, action_returns, policy_actor, run_episode
from lib.inference import load_policy_model
from lib.reward import make_reward_function
from lib.runs import Run
from lib.training.corpus import run_corpus
from lib.training.harness import (
    AnswerTooLongError,
    FiniteLossGuard,
    NonFiniteLossError,
    PromptTooLongError,
    check_answer_length,
)
from lib.training.rl import run_rl
from lib.training.sft import run_sft
from tests import micro

pytestmark = pytest.mark.slow  # every test here trains or loads a model (make test-fast skips them)

make_policy = SPEC.make_policy

MICRO = {**micro.MICRO, "sft.logging_steps": 1, "grpo.max_steps": 4, "grpo.logging_steps": 1}


def _config(**extra):
    return load_config("cpu-smoke", {**MICRO, **extra})


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """corpus + SFT once; GRPO tests copy this folder."""
    config = _config()
    run = Run(tmp_path_factory.mktemp("run"), config)
    run_corpus(config, run)
    run_sft(config, run)
    return run


def _fresh(trained, tmp_path, **extra):
    config = _config(**extra)
    target = tmp_path / "run"
    shutil.copytree(trained.dir, target)
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["config"] = config.model_dump(mode="json")
    (target / "manifest.json").write_text(json.dumps(manifest))
    return config, Run(target, config)


def test_sft_loss_covers_the_prompt_only_when_asked(tmp_path):
    """TRL builds a row's labels from its completion mask only under completion_only_loss (trl.SFTTrainer's
    _prepare_dataset); `sft.prompt_loss` turns that off, so every token of the row is trained."""
    from lib.training.sft import sft_args

    for prompt_loss in (False, True):
        config = _config(**{"sft.prompt_loss": prompt_loss})
        args = sft_args(config, Run(tmp_path / str(prompt_loss), config), tmp_path / str(prompt_loss))
        assert args.completion_only_loss is (not prompt_loss)


def test_sft_batches_rows_of_like_length_when_asked(trained, tmp_path):
    """`sft.group_by_length`: transformers' LengthGroupedSampler draws the batches, so each carries far less padding
    than a random batch of the same rows; every row is still trained once an epoch."""
    from datasets import Dataset
    from trl import SFTTrainer

    from lib.io import read_records
    from lib.models import load_model
    from lib.training.sft import sft_args

    rows = read_records(trained.read_stage("corpus")["outputs"]["sft.jsonl"])
    dataset = Dataset.from_list([{"prompt": r["prompt"], "completion": r["completion"]} for r in rows])
    padding, seen = {}, {}
    for grouped in (False, True):
        config = _config(**{"sft.group_by_length": grouped, "sft.batch_size": 4})
        model, tokenizer, _ = load_model(trained.read_stage("sft")["outputs"]["model"], config.model)
        out = tmp_path / str(grouped)
        trainer = SFTTrainer(
            model=model,
            args=sft_args(config, Run(out, config), out),
            train_dataset=dataset,
            processing_class=tokenizer,
        )
        masks = [batch["attention_mask"] for batch in trainer.get_train_dataloader()]
        padding[grouped] = 1 - sum(int(m.sum()) for m in masks) / sum(m.numel() for m in masks)
        seen[grouped] = sum(int(m.sum()) for m in masks)
    assert seen[True] == seen[False]  # the same rows, the same tokens
    assert padding[True] < 0.75 * padding[False], padding  # measured 0.15 against 0.32 on these rows


def test_sft_is_full_finetune_of_the_tiny_model_and_loss_falls(trained):
    sft = trained.read_stage("sft")
    assert sft["metrics"]["full_finetune"] and sft["metrics"]["backend"] == "trl_transformers"
    assert sft["metrics"]["loss_last"] < sft["metrics"]["loss_first"]
    assert (Path(sft["outputs"]["model"]) / "model.safetensors").exists()


def test_sft_counts_the_tokens_it_trained_on(trained):
    """train_tokens is the trainer's own count (TrainerState.num_input_tokens_seen, non-padding): with a log every
    step it equals TRL's running num_tokens at the last step."""
    sft = trained.read_stage("sft")["metrics"]
    logs = [json.loads(line) for line in (trained.dir / "sft" / "train_log.jsonl").read_text().splitlines()]
    assert sft["train_tokens"] == max(r["num_tokens"] for r in logs if "num_tokens" in r) > 0


def test_sft_checks_its_saved_model_against_the_teacher_at_the_teachers_states(trained):
    check = trained.read_stage("sft")["metrics"]["imitation"]
    assert check["episodes"] == 3 and check["teacher_states"] >= 3 and check["played_actions"] >= 3
    assert 0 <= check["agreement"] <= 1 and check["teacher_top_share"] <= 1
    assert check["collapsed"] == (check["distinct_actions"] < check["ratio"] * check["teacher_distinct_actions"])


def test_same_seed_same_sft_loss_curve_on_cpu(trained, tmp_path):
    config, run = _fresh(trained, tmp_path)
    again = run_sft(config, run)
    assert again["metrics"]["losses"] == trained.read_stage("sft")["metrics"]["losses"]


def test_reward_is_the_environments_return_and_invalid_gets_the_penalty():
    config = _config()
    reward = make_reward_function(config)
    env = PolyGuardEnv()
    observation = env.reset(4, "train")
    candidate = observation.candidates[0]
    expected, _ = action_return(PolyGuardEnv(), 4, "train", [], format_action(candidate.id), make_policy("heuristic"))
    scores = reward(
        prompts=[None] * 3,
        completions=[
            [{"role": "assistant", "content": format_action(candidate.id)}],
            [{"role": "assistant", "content": "stop everything"}],
            [{"role": "assistant", "content": format_action(candidate.id) + " reward=1"}],
        ],
        seed=[4] * 3,
        split=["train"] * 3,
        history=["[]"] * 3,
    )
    assert scores[0] == pytest.approx(expected) and scores[0] >= 0
    assert scores[1] == INVALID_PENALTY
    assert scores[2] <= 0.0  # blocklisted text forfeits any positive reward


def test_batched_action_returns_equal_one_state_at_a_time():
    """The batched scorer (GRPO reward) and the single-state one (corpus filter) are the same function: every
    legal candidate and one invalid text, at three mid-episode states, finished by the teacher or by random."""
    env = PolyGuardEnv()
    items = []
    for seed in (1, 2, 3):
        history = run_episode(env, make_policy("heuristic"), seed, "train", keep_transitions=True).transitions[2][
            "history"
        ]
        observation = env.restore(seed, "train", history)
        items += [(seed, "train", history, format_action(c.id)) for c in observation.candidates] + [
            (seed, "train", history, "nope")
        ]
    for name in ("heuristic", "random"):
        batched = action_returns([PolyGuardEnv() for _ in items], items, policy_actor(make_policy(name)))
        single = [action_return(env, *item, make_policy(name)) for item in items]
        assert [b[0] for b in batched] == pytest.approx([s[0] for s in single])
        assert [b[1].get("end_reason") for b in batched] == [s[1].get("end_reason") for s in single]
    assert all(score == INVALID_PENALTY for (score, _), item in zip(batched, items) if item[3] == "nope")
    assert len({round(b[0], 6) for b in batched}) > 3  # the actions are told apart


def test_blocklist_reads_the_completion_never_the_prompt():
    config = _config(**{"grpo.blocklist": ["patient"]})  # every prompt contains "Patient"
    reward = make_reward_function(config)
    observation = PolyGuardEnv().reset(9, "train")
    finish = next(c for c in observation.candidates if c.kind == "gather")
    text = format_action(finish.id)
    [score] = reward(
        prompts=[[{"role": "user", "content": "Patient: ..."}]],
        completions=[[{"role": "assistant", "content": text}]],
        seed=[9],
        split=["train"],
        history=["[]"],
    )
    assert score > 0


def test_grpo_trains_a_lora_adapter_with_env_metrics(trained, tmp_path):
    config, run = _fresh(trained, tmp_path)
    record = run_rl(config, run)
    assert record["metrics"]["steps"] == 4 and record["metrics"]["backend"] == "trl_transformers"
    assert (Path(record["outputs"]["adapter"]) / "adapter_model.safetensors").exists()
    logs = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    step_logs = [entry for entry in logs if "reward" in entry]
    assert step_logs and all(
        k in step_logs[0]
        for k in (
            "frac_reward_zero_std",
            "env/invalid_rate",
            "time/generation_s",
            "time/reward_s",
            "step_time",
            "time/backward_s",
            "peak_memory_mb",
        )
    )
    assert (run.dir / "grpo" / "samples.jsonl").exists()


@pytest.mark.parametrize("shared", [True, False])
def test_grpo_loss_reads_each_groups_prompt_once_unless_checkpointing(trained, tmp_path, monkeypatch, shared):
    """The trainer's loss goes through lib/training/prompt_pass.py (a group's samples share one pass over their
    prompt), and with gradient checkpointing every row is left to TRL's own pass."""
    import lib.training.samplers as samplers

    answered = []

    def counted(*args, **kwargs):
        answered.append(samplers_shared(*args, **kwargs))
        return answered[-1]

    samplers_shared = samplers.shared_prompt_logps
    monkeypatch.setattr(samplers, "shared_prompt_logps", counted)
    config, run = _fresh(trained, tmp_path, **{"grpo.max_steps": 2, "grpo.gradient_checkpointing": not shared})
    record = run_rl(config, run)
    assert record["metrics"]["steps"] == 2
    if shared:
        assert answered and all(result is not None for result in answered)  # step mode's groups share a prompt
    else:
        assert answered == []


def test_prompt_longer_than_the_guard_is_an_error(trained, tmp_path):
    config, run = _fresh(trained, tmp_path, **{"grpo.max_prompt_length": 64})
    with pytest.raises(PromptTooLongError, match="exceed grpo.max_prompt_length=64"):
        run_rl(config, run)


def test_answers_longer_than_the_completion_limit_are_an_error_before_sft_trains(trained, tmp_path):
    """An id that needs more tokens than grpo.max_completion_length would be cut off in every GRPO sample and
    every evaluated action (all invalid); the SFT stage refuses to start instead."""
    _, tokenizer, _ = load_policy_model(trained.read_stage("sft")["outputs"]["model"], trained.config.model)
    answers = [format_action("substitute:4:2"), format_action("gather:1")]
    longest = check_answer_length(tokenizer, answers, 64)
    with pytest.raises(AnswerTooLongError, match=f"up to {longest} tokens .* raise it to {longest}"):
        check_answer_length(tokenizer, answers, longest - 1)
    config = load_config("cpu-smoke", {**MICRO, "grpo.max_completion_length": 4})
    run = Run(tmp_path / "short", config)
    run_corpus(config, run)
    with pytest.raises(AnswerTooLongError, match="grpo.max_completion_length is 4"):
        run_sft(config, run)
    assert not (run.dir / "sft" / "stage.json").exists()


class PoisonAt(TrainerCallback):
    """Makes the trainable weights NaN right after the checkpoint of `step` is written."""

    def __init__(self, step):
        self.step = step

    def on_save(self, args, state, control, model=None, **kwargs):
        if state.global_step == self.step:
            with torch.no_grad():
                for p in model.parameters():
                    if p.requires_grad:
                        p.fill_(float("nan"))


def test_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(trained, tmp_path):
    config, run = _fresh(trained, tmp_path, **{"grpo.checkpoint_every": 2, "grpo.max_steps": 6})
    with pytest.raises(NonFiniteLossError, match=r"non-finite at step \d+; last good checkpoint: .*checkpoint-2"):
        run_rl(config, run, extra_callbacks=[PoisonAt(2)])
    checkpoints = sorted((run.dir / "grpo" / "trainer").glob("checkpoint-*"))
    assert [c.name for c in checkpoints] == ["checkpoint-2"]
    verify_checkpoint(checkpoints[0])
    assert json.loads((run.dir / "grpo" / "stage.json").read_text())["status"].startswith("failed")


def test_guard_stops_on_a_non_finite_logged_loss_without_saving():
    from transformers import TrainerControl, TrainerState

    guard, control, state = FiniteLossGuard(), TrainerControl(), TrainerState()
    state.global_step = 7
    control.should_save = True
    guard.on_log(None, state, control, logs={"loss": float("inf")})
    assert guard.bad_step == 7 and control.should_training_stop and not control.should_save
    fine = FiniteLossGuard()
    fine.on_log(None, state, TrainerControl(), logs={"loss": 0.3, "grad_norm": 1.0})
    assert fine.bad_step is None


class KillAfter(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_save(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            raise KeyboardInterrupt("simulated kill after a checkpoint")


def _adapter(run):
    return load_file(run.dir / "grpo" / "adapter" / "adapter_model.safetensors")


RESUME_TOLERANCE = 1e-4  # max abs difference of any adapter weight, resumed vs uninterrupted (CPU, fp32)


def test_kill_then_resume_matches_an_uninterrupted_run(trained, tmp_path):
    extra = {"grpo.checkpoint_every": 2, "grpo.max_steps": 4}
    config, straight = _fresh(trained, tmp_path / "a", **extra)
    run_rl(config, straight)
    config, killed = _fresh(trained, tmp_path / "b", **extra)
    with pytest.raises(KeyboardInterrupt):
        run_rl(config, killed, extra_callbacks=[KillAfter(2)])
    checkpoint = killed.dir / "grpo" / "trainer" / "checkpoint-2"
    verify_checkpoint(checkpoint)
    run_rl(config, killed, resume_from=str(checkpoint))
    a, b = _adapter(straight), _adapter(killed)
    assert a.keys() == b.keys()
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst <= RESUME_TOLERANCE, worst


def test_corrupted_or_incomplete_checkpoint_is_a_clear_error(trained, tmp_path):
    config, run = _fresh(trained, tmp_path, **{"grpo.checkpoint_every": 2, "grpo.max_steps": 2})
    run_rl(config, run)
    checkpoint = run.dir / "grpo" / "trainer" / "checkpoint-2"
    weights = checkpoint / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10] ^= 0xFF
    weights.write_bytes(bytes(data))
    with pytest.raises(CorruptCheckpointError, match="adapter_model.safetensors is corrupted"):
        run_rl(config, run, resume_from=str(checkpoint))
    (checkpoint / "checkpoint_manifest.json").unlink()
    with pytest.raises(CorruptCheckpointError, match="incomplete"):
        verify_checkpoint(checkpoint)
    with pytest.raises(CorruptCheckpointError, match="does not exist"):
        verify_checkpoint(tmp_path / "nope")


def test_hub_id_code_path_loads_a_local_folder_with_lora(trained, tmp_path):
    """A non-'tiny' model name goes through from_pretrained + LoRA, exactly as a hub id would."""
    local = Path(trained.read_stage("sft")["outputs"]["model"])
    config = _config(**{"model.name": str(local), "model.sft_full_finetune": False})
    target = tmp_path / "hub"
    shutil.copytree(trained.dir / "corpus", target / "corpus")
    run = Run(target, config)
    corpus_record = json.loads((target / "corpus" / "stage.json").read_text())
    corpus_record["outputs"] = {k: str(target / "corpus" / Path(v).name) for k, v in corpus_record["outputs"].items()}
    (target / "corpus" / "stage.json").write_text(json.dumps(corpus_record))
    record = run_sft(config, run)
    assert record["metrics"]["full_finetune"] is False and record["metrics"]["backend"] == "trl_transformers"
    assert not (target / "sft" / "base_model").exists()  # nothing was built: the folder was loaded by path
    assert math.isfinite(record["metrics"]["loss_last"])


def _greedy_ids(model, tokenizer, messages, tokens=8):
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model.generate(**encoded, max_new_tokens=tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id)[
            0
        ].tolist()


def test_grpo_samples_with_the_prompt_in_context(trained):
    """TRL samples GRPO completions in training mode with gradient checkpointing on; transformers 5 then drops the KV
    cache in every layer, so tokens after the first never see the prompt. `sampling_mode` must restore the model's
    real (eval-mode) distribution, and the broken path must differ, or this test proves nothing."""
    from peft import get_peft_model

    from lib.models import lora_config
    from lib.training.samplers import sampling_mode

    config = _config()
    model, tokenizer, _ = load_policy_model(trained.read_stage("sft")["outputs"]["model"], config.model)
    model = get_peft_model(model, lora_config(config.model))
    messages = PolyGuardEnv().render(PolyGuardEnv().reset(0, "holdout"))
    model.eval()
    reference = _greedy_ids(model, tokenizer, messages)
    model.gradient_checkpointing_enable()
    model.train()
    assert _greedy_ids(model, tokenizer, messages) != reference  # the bug this guards against
    with sampling_mode(model):
        assert _greedy_ids(model, tokenizer, messages) == reference
    assert model.is_gradient_checkpointing and model.training  # training itself still checkpoints


def test_grpo_trainer_generates_without_checkpointed_layers(trained, tmp_path, monkeypatch):
    from trl import GRPOTrainer

    seen = []
    real = GRPOTrainer._generate

    def spy(self, prompts):
        layers = [
            m
            for m in self.model.modules()
            if hasattr(m, "gradient_checkpointing") and "DecoderLayer" in type(m).__name__
        ]
        seen.append((self.args.gradient_checkpointing, any(layer.gradient_checkpointing for layer in layers)))
        return real(self, prompts)

    monkeypatch.setattr(GRPOTrainer, "_generate", spy)
    # training checkpoints (cpu-smoke turns it off; this is the case sampling_mode exists for)
    config, run = _fresh(trained, tmp_path, **{"grpo.max_steps": 1, "grpo.gradient_checkpointing": True})
    run_rl(config, run)
    assert seen and all(args_on and not layer_on for args_on, layer_on in seen)


def test_a_fork_shares_corpus_and_sft_and_changes_only_grpo_settings(trained, tmp_path):
    from lib.pipeline.fork import fork_run

    with pytest.raises(
        ConfigError,
        match=r"can only change rl\.\*, grpo\.\*, aggrevate\.\*, eval\.\*, export\.\*, corpus\.grpo_\*, "
        r"not \[.sft.epochs.\]",
    ):
        fork_run(trained.dir, tmp_path / "bad", {"sft.epochs": 3})
    share = 0.0 if trained.config.corpus.grpo_improvable_share else 1.0  # anything other than the base's
    _, other_prompts = fork_run(trained.dir, tmp_path / "prompts", {"corpus.grpo_improvable_share": share})
    assert (
        other_prompts.manifest()["corpus_hashes"]["grpo_prompts.jsonl"]
        != trained.manifest()["corpus_hashes"]["grpo_prompts.jsonl"]
    )
    assert other_prompts.manifest()["corpus_hashes"]["sft.jsonl"] == trained.manifest()["corpus_hashes"]["sft.jsonl"]
    config, run = fork_run(trained.dir, tmp_path / "fork", {"grpo.max_steps": 2, "grpo.temperature": 1.3})
    assert config.grpo.temperature == 1.3 and config.sft == trained.config.sft
    sft = run.read_stage("sft")
    assert sft["outputs"]["model"].startswith(str(run.dir))  # the fork's own paths, not the base's
    assert (Path(sft["outputs"]["model"]) / "model.safetensors").samefile(
        Path(trained.read_stage("sft")["outputs"]["model"]) / "model.safetensors"
    )  # a hard link, not a copy
    assert json.loads((run.dir / "manifest.json").read_text())["forked_from"]["overrides"] == {
        "grpo.max_steps": 2,
        "grpo.temperature": 1.3,
    }
    with pytest.raises(FileExistsError):
        fork_run(trained.dir, tmp_path / "fork", {})
    record = run_rl(config, run)
    logs = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "explore/beats_reference" in r]
    assert len(steps) == 2
    for r in steps:
        assert 0 <= r["explore/beats_reference"] <= 1 and r["explore/candidate_entropy"] >= 0
        assert 0 <= r["explore/p_best"] <= 1
    assert 0 <= record["metrics"]["explore/beats_reference_first_quarter"] <= 1
    assert trained.read_stage("sft")["outputs"]["model"].startswith(str(trained.dir))  # the base is untouched


def test_a_fork_that_changes_the_episode_count_makes_its_baselines_again_and_gates_its_manifest(trained, tmp_path):
    """The baselines stage records eval.episodes: a fork that changes it plays its own baselines (a fork that does
    not shares the base's), so every stage record of the fork ran with the fork's config."""
    from lib.evaluation.baselines import run_baselines_stage
    from lib.gate import _manifest
    from lib.pipeline.fork import fork_run

    config, base = _fresh(trained, tmp_path, **{"eval.episodes": 3})
    run_baselines_stage(config, base)
    _, same = fork_run(base.dir, tmp_path / "same", {"grpo.max_steps": 2})
    assert (same.dir / "baselines" / "baselines.json").samefile(base.dir / "baselines" / "baselines.json")
    _, other = fork_run(base.dir, tmp_path / "other", {"eval.episodes": 4})
    assert other.read_stage("baselines")["params"] == {"episodes": 4}
    assert "baselines" not in json.loads((other.dir / "manifest.json").read_text())["forked_from"]["shared_stages"]
    assert _manifest(other.dir).startswith("profile cpu-smoke")
    assert _manifest(same.dir).startswith("profile cpu-smoke")


def test_exploration_metrics_count_only_groups_that_beat_the_reference():
    from lib.reward import group_metrics

    below = group_metrics([0.1, 0.2, 0.3, 0.4], [0.5] * 4, 2)
    assert below["explore/beats_reference"] == 0 and below["explore/best_minus_reference"] < 0
    tie = group_metrics([0.5, 0.5], [0.5, 0.5], 2)
    assert tie["explore/beats_reference"] == 0  # matching the teacher is not beating it
    with pytest.raises(ValueError, match="groups of 4"):
        group_metrics([0.1] * 6, [0.5] * 6, 4)


def test_grpo_groups_are_drawn_from_the_candidate_policy_and_every_answer_is_valid(trained, tmp_path, monkeypatch):
    """model.action_space=candidates: GRPO's rollout_func samples every completion from the policy over the state's
    candidates, so every sampled answer is an offered one (env/invalid_rate 0), and it logs the policy's spread."""
    from lib.training import rollout as rollout_module

    seen = []
    real = rollout_module.candidate_rollout

    def spy(*args, **kwargs):
        rollout = real(*args, **kwargs)

        def wrapped(prompts, trainer):
            out = rollout(prompts, trainer)
            texts = [trainer.processing_class.decode(ids, skip_special_tokens=True) for ids in out["completion_ids"]]
            seen.append((prompts, texts))
            return out

        return wrapped

    monkeypatch.setattr("lib.training.samplers.candidate_rollout", spy)
    config, run = _fresh(trained, tmp_path, **{"grpo.max_steps": 2})
    run_rl(config, run)
    rows = {json.dumps(r["prompt"], sort_keys=True): r for r in map(json.loads, _corpus_lines(run))}
    env = PolyGuardEnv()
    assert seen and all(len(texts) == config.grpo.batch_size for _, texts in seen)
    for prompts, texts in seen:
        for prompt, text in zip(prompts, texts):
            row = rows[json.dumps(prompt, sort_keys=True)]
            offered = [format_action(c.id) for c in env.restore(row["seed"], row["split"], row["history"]).candidates]
            assert text in offered
    logs = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "explore/candidate_entropy" in r]
    assert len(steps) == 2
    for r in steps:
        assert r["env/invalid_rate"] == 0
        assert r["explore/candidate_entropy"] >= 0
        assert 0 <= r["explore/p_best"] <= 1 and 0 <= r["explore/p_reference"] <= 1


def _corpus_lines(run):
    return (run.dir / "corpus" / "grpo_prompts.jsonl").read_text().splitlines()


def test_the_candidate_sampler_is_on_policy(trained):
    """Drawn many times at one state, the sampler's answer frequencies match the policy's probabilities."""
    from collections import Counter
    from types import SimpleNamespace

    from lib.candidates import answers, distribution, score_answers
    from lib.envs import get_spec
    from lib.training.rollout import candidate_rollout

    config = _config()
    model, tokenizer, _ = load_policy_model(trained.read_stage("sft")["outputs"]["model"], config.model)
    row = json.loads(_corpus_lines(trained)[0])
    draws = 4000
    trainer = SimpleNamespace(
        processing_class=tokenizer,
        model=model,
        state=SimpleNamespace(global_step=0),
        args=SimpleNamespace(gradient_checkpointing_kwargs=None),
    )  # only public trainer attributes: the sampler's metrics leave in its output (rollout_metrics)
    out = candidate_rollout([row], get_spec("polyguard"), draws, 1.0, seed=0)([row["prompt"]] * draws, trainer)
    counts = Counter(tokenizer.decode(ids, skip_special_tokens=True) for ids in out["completion_ids"])
    offered = answers(PolyGuardEnv().restore(row["seed"], row["split"], row["history"]))
    [scores] = score_answers(model, tokenizer, [row["prompt"]], [offered])
    for answer, p in zip(offered, distribution(scores)):
        assert counts[answer] / draws == pytest.approx(p, abs=4 * math.sqrt(p * (1 - p) / draws) + 1e-3)
    assert set(counts) <= set(offered)
    assert len(out["prompt_ids"]) == draws and out["rollout_metrics"]["explore/candidate_entropy"] > 0


def test_an_every_candidate_group_holds_each_offered_answer_round_robin():
    import torch

    from lib.training.rollout import every_candidate

    group = every_candidate(3, 8, torch.Generator().manual_seed(0))
    assert sorted(group.count(i) for i in range(3)) == [2, 3, 3] and len(group) == 8
    assert group[:3] == group[3:6] and sorted(group[:3]) == [0, 1, 2]  # one permutation, repeated
    subset = every_candidate(10, 4, torch.Generator().manual_seed(1))
    assert len(set(subset)) == 4 and set(subset) <= set(range(10))
    assert subset == every_candidate(10, 4, torch.Generator().manual_seed(1))  # seeded: a resumed run draws it again


def test_every_candidate_groups_ignore_the_policy_and_cover_the_state(trained):
    """grpo.mode: every_candidate: however sharp the policy, a group of twice the candidates holds each offered
    answer exactly twice, and its coverage is logged as 1."""
    from collections import Counter
    from types import SimpleNamespace

    from lib.candidates import answers
    from lib.envs import get_spec
    from lib.training.rollout import candidate_rollout

    config = _config()
    model, tokenizer, _ = load_policy_model(trained.read_stage("sft")["outputs"]["model"], config.model)
    row = json.loads(_corpus_lines(trained)[0])
    offered = answers(PolyGuardEnv().restore(row["seed"], row["split"], row["history"]))
    size = 2 * len(offered)
    trainer = SimpleNamespace(processing_class=tokenizer, model=model, state=SimpleNamespace(global_step=0))
    rollout = candidate_rollout([row], get_spec("polyguard"), size, 1.0, seed=0, every=True)
    out = rollout([row["prompt"]] * size, trainer)
    counts = Counter(tokenizer.decode(ids, skip_special_tokens=True) for ids in out["completion_ids"])
    assert counts == {answer: 2 for answer in offered}
    assert out["rollout_metrics"]["explore/group_coverage"] == 1.0


def test_every_candidate_mode_trains_and_needs_the_candidate_policy(trained, tmp_path):
    with pytest.raises(ConfigError, match="every_candidate acts through the candidate policy"):
        load_config("cpu-smoke", {"grpo.mode": "every_candidate", "model.action_space": "free"})
    config, run = _fresh(trained, tmp_path, **{"grpo.max_steps": 2, "grpo.mode": "every_candidate"})
    record = run_rl(config, run)
    assert record["metrics"]["mode"] == "every_candidate"
    logs = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "explore/group_coverage" in r]
    assert len(steps) == 2 and all(0 < r["explore/group_coverage"] <= 1 and r["env/invalid_rate"] == 0 for r in steps)


def test_a_soft_target_is_the_policy_tilted_toward_the_better_returns_within_its_kl():
    from lib.training.rollout import soft_targets, tilt

    probs, returns = [0.97, 0.02, 0.01], [0.5, 0.9, 0.2]
    for kl in (0.01, 0.1, 0.5):
        q = tilt(probs, returns, kl)
        assert sum(q) == pytest.approx(1.0)
        assert sum(a * math.log(a / b) for a, b in zip(q, probs) if a > 0) == pytest.approx(kl, rel=1e-4)
        assert q[1] > probs[1] and q[2] < probs[2]  # the better answer gains, the worse loses, however unlikely
    assert tilt(probs, returns, 0.1)[1] < tilt(probs, returns, 0.5)[1]  # a larger bound moves further
    assert tilt(probs, [0.3, 0.3, 0.3], 0.1) == probs  # ties: no target, no signal
    assert tilt([0.5, 0.3, 0.2], [1.0, 1.0, 0.0], 5.0) == pytest.approx(
        [0.625, 0.375, 0.0]
    )  # the limit: the best, in proportion

    # a best answer the policy gives no probability at all cannot be tilted toward (and must not crash the bound)
    assert tilt([1.0, 0.0], [0.0, 1.0], 0.1) == [1.0, 0.0]
    # a bound far tighter than the returns' spread is still met (the search widens until it is)
    assert sum(a * math.log(a / b) for a, b in zip(tilt([0.5, 0.5], [1e7, 0.0], 1e-9), [0.5, 0.5])) < 2e-9

    # a group of 8 over 3 candidates (3, 3 and 2 appearances): each appearance carries its share of q - pi
    keys = ["a", "b", "c"] * 2 + ["a", "b"]
    rewards = soft_targets(keys, [returns[ord(k) - 97] for k in keys], [probs[ord(k) - 97] for k in keys], 8, 0.1)
    assert sum(rewards) == pytest.approx(0.0, abs=1e-5)  # TRL's group mean is then zero: nothing shifts them
    q = tilt(probs, returns, 0.1)
    assert rewards[0] == pytest.approx((q[0] - probs[0]) / 3, abs=1e-6)
    assert rewards[2] == pytest.approx((q[2] - probs[2]) / 2, abs=1e-6) and rewards[1] > 0
    with pytest.raises(ValueError, match="do not make groups of 8"):
        soft_targets(keys[:5], [0.0] * 5, [0.1] * 5, 8, 0.1)


def test_soft_target_mode_trains_on_moves_and_reports_the_returns(trained, tmp_path):
    with pytest.raises(ConfigError, match="soft_target acts through the candidate policy"):
        load_config("cpu-smoke", {"grpo.mode": "soft_target", "model.action_space": "free"})
    with pytest.raises(ConfigError, match="grpo.target_kl: retired, measured not to help"):
        load_config("cpu-smoke", {"grpo.target_kl": 0.5})
    with pytest.raises(ConfigError, match="soft_target moves the policy itself"):
        load_config("cpu-smoke", {"grpo.mode": "soft_target", "grpo.temperature": 1.5})
    config, run = _fresh(trained, tmp_path, **{"grpo.max_steps": 2, "grpo.mode": "soft_target"})
    record = run_rl(config, run)
    assert record["metrics"]["mode"] == "soft_target"
    logs = [json.loads(line) for line in (run.dir / "grpo" / "train_log.jsonl").read_text().splitlines()]
    steps = [r for r in logs if "explore/target_move" in r]
    assert len(steps) == 2
    for r in steps:
        assert abs(r["reward"]) < 1e-5  # each group's moves sum to zero
        assert 0 <= r["explore/target_move"] <= 1 and 0 < r["soft_target/return_mean"] <= 1
    assert record["metrics"]["reward_first"] == steps[0]["soft_target/return_mean"]  # the summary reads the returns


def test_validation_curve_is_written_read_back_and_the_best_adapter_kept(trained, tmp_path):
    from lib.training.alarms import validation_drop
    from lib.training.labelling import VALIDATION_SEED_OFFSET
    from lib.training.validation import read_curve

    config, run = _fresh(
        trained,
        tmp_path,
        **{"grpo.max_steps": 4, "rl.validate_every": 2, "rl.validation_episodes": 4, "rl.alarm_drop": 0.0},
    )
    record = run_rl(config, run)
    curve = read_curve(run.dir / "grpo" / "validation.jsonl")
    assert [p["step"] for p in curve] == [0, 2, 4]  # the SFT start, every 2 steps, the last
    # every point below the best before it (alarm_drop 0) is an alarm in the stage record, and no other
    implied = [validation_drop(curve[: k + 1], 0.0) for k in range(1, 3)]
    expected = [f"step {a['step']}: {a['kind']}: {a['message']}" for a in implied if a]
    assert record["metrics"]["alarms"] == expected and record["metrics"]["stopped_early"] is False
    # the levels the curve is drawn against: the teacher and the oracle on the same validation seeds
    levels = json.loads((run.dir / "grpo" / "validation_references.json").read_text())
    assert levels["n"] == 4 and levels["split"] == "train"
    assert levels["teacher"]["policy"] == config.spec.teacher and levels["oracle"]["policy"] == config.spec.oracle
    assert all(0 <= levels[role]["mean_return"] <= 1 for role in ("teacher", "oracle"))
    assert all(p["n"] == 4 and 0 <= p["mean_return"] <= 1 and p["ci95"][0] <= p["mean_return"] for p in curve)
    best = max(curve, key=lambda p: (p["mean_return"], -p["step"]))
    metrics = record["metrics"]
    assert metrics["validation_best_step"] == best["step"] == metrics["kept_step"]
    assert metrics["validation_best"] == best["mean_return"]
    kept = Path(record["outputs"]["adapter"])
    assert (kept / "adapter_model.safetensors").read_bytes() == (
        run.dir / "grpo" / "adapter_best" / "adapter_model.safetensors"
    ).read_bytes()
    assert VALIDATION_SEED_OFFSET > config.corpus.sft_episodes + config.corpus.grpo_prompts  # no corpus seed
    (run.dir / "grpo" / "validation.jsonl").write_text('{"step": 0, "mean_return": 0.5}\nnot json\n')
    with pytest.raises(ValueError, match="validation.jsonl:2: not a JSON line"):
        read_curve(run.dir / "grpo" / "validation.jsonl")
