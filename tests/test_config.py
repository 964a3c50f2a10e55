"""One pydantic RunConfig: every profile validates; bad keys, types and values are errors naming the key."""

import pytest

from lib.config import ConfigError, available_profiles, load_config


@pytest.mark.parametrize(
    "profile", ["cpu-smoke", "cpu-full", "gpu-smollm2", "t4-qwen0.5b", "t4-qwen1.5b", "a100-qwen3b"]
)
def test_every_profile_loads_and_validates(profile):
    assert profile in available_profiles()
    config = load_config(profile)
    assert config.profile == profile
    assert config.grpo.num_generations >= 4
    assert config.grpo.batch_size % config.grpo.num_generations == 0


def test_hub_profiles_use_lora_and_tiny_profiles_do_not_need_a_hub():
    assert load_config("t4-qwen0.5b").model.sft_full_finetune is False
    assert load_config("t4-qwen0.5b").model.precision == "fp16"  # a T4 has no bf16
    assert load_config("cpu-smoke").model.name == "tiny"


def test_the_real_model_profile_uses_the_embedded_model_in_auto_precision(monkeypatch):
    from lib.models import resolved_precision

    config = load_config("gpu-smollm2")
    assert config.model.name == "smollm2-135m-instruct" and config.model.precision == "auto"
    monkeypatch.setattr("lib.provenance.cpu_bf16", lambda: [])
    assert resolved_precision(config.model) == "fp32"  # no GPU and no bf16 instructions: fp32
    with pytest.raises(ConfigError, match="model.precision"):
        load_config("gpu-smollm2", {"model.precision": "fp8"})


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"grpo.max_stepz: unknown key"):
        load_config("cpu-smoke", {"grpo.max_stepz": 3})


def test_wrong_type_and_bad_value_are_named():
    with pytest.raises(ConfigError) as error:
        load_config("cpu-smoke", {"sft.batch_size": "many", "grpo.num_generations": 2})
    assert "sft.batch_size" in str(error.value) and "grpo.num_generations" in str(error.value)


def test_missing_critical_field_is_named(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("profile: broken\ncorpus: {sft_episodes: 3, grpo_prompts: 3}\nmodel: {name: tiny}\n")
    with pytest.raises(ConfigError, match=r"sft: missing required key"):
        load_config(path)


def test_indivisible_grpo_batch_is_rejected():
    with pytest.raises(ConfigError, match="multiple of num_generations"):
        load_config("cpu-smoke", {"grpo.batch_size": 12, "grpo.num_generations": 8})


def test_a_prompt_without_the_candidate_list_needs_a_learner_that_scores_the_candidates():
    config = load_config("cpu-smoke", {"env_args": {"list_candidates": False}})
    assert config.model.action_space == "candidates"
    assert "Candidates:" not in config.spec.make_env().render(config.spec.make_env().reset(0, "train"))[1]["content"]
    with pytest.raises(ConfigError, match="list_candidates: false .* set model.action_space: candidates"):
        load_config("cpu-smoke", {"env_args": {"list_candidates": False}, "model.action_space": "free"})


def test_unknown_profile_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="unknown profile 'gpu-huge'"):
        load_config("gpu-huge")
    bad = tmp_path / "bad.yaml"
    bad.write_text("profile: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_bench_train_rejects_a_bad_profile_before_running_anything(monkeypatch, capsys):
    import subprocess

    from lib.__main__ import main

    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    assert main(["bench-train", "--profile", "no-such-profile", "--repeats", "1"]) == 2
    assert "no-such-profile" in capsys.readouterr().err
    assert ran == []


def test_repeated_set_flags_all_apply(tmp_path):
    from lib.__main__ import main
    from lib.runs import read_config

    run_dir = tmp_path / "run"
    assert (
        main(
            [
                "stage",
                "corpus",
                "--run-dir",
                str(run_dir),
                "--set",
                "corpus.sft_episodes=2",
                "--set",
                "corpus.grpo_prompts=2",
                "grpo.temperature=0.5",
            ]
        )
        == 0
    )
    config = read_config(run_dir)
    assert (config.corpus.sft_episodes, config.corpus.grpo_prompts, config.grpo.temperature) == (2, 2, 0.5)


def test_a_run_keeps_its_config_and_tolerates_fields_added_since(tmp_path):
    import json

    from lib.runs import Run

    config = load_config("cpu-smoke")
    Run(tmp_path / "r", config)
    with pytest.raises(ValueError, match="made with a different config"):
        Run(tmp_path / "r", load_config("cpu-smoke", {"sft.epochs": 9}))
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    del manifest["config"]["corpus"]["dagger_episodes"]  # as written by code older than that field
    (tmp_path / "r" / "manifest.json").write_text(json.dumps(manifest))
    assert Run(tmp_path / "r", config).config == config


def test_scale_rewards_validates_and_a_bad_value_is_named():
    assert load_config("cpu-full", {"grpo.scale_rewards": "batch"}).grpo.scale_rewards == "batch"
    with pytest.raises(ConfigError) as error:
        load_config("cpu-full", {"grpo.scale_rewards": "sometimes", "grpo.temperature": -1})
    assert all(key in str(error.value) for key in ("grpo.scale_rewards", "grpo.temperature"))


def test_a_retired_setting_in_a_new_config_is_an_error_naming_its_evidence(tmp_path):
    from lib.config import PROFILES_DIR, RETIRED

    for dotted, (neutral, _) in RETIRED.items():
        with pytest.raises(ConfigError) as error:
            load_config("cpu-smoke", {dotted: neutral})  # even at its old default: the key is gone
        assert f"{dotted}: retired, measured not to help" in str(error.value)
    with pytest.raises(ConfigError, match="retired for grpo.anchor"):
        load_config("cpu-smoke-sentinel_trust", {"sft.candidate_loss": 0.5})
    with pytest.raises(ConfigError, match="96 of 656 played turns"):
        load_config("cpu-smoke", {"grpo.train_turns": "one"})
    with pytest.raises(ConfigError, match=r"grpo.beta: retired, .*seed 3 -0.036 \[-0.056, -0.018\]"):
        load_config("cpu-smoke", {"grpo.beta": 0.04})
    with pytest.raises(ConfigError, match=r"grpo.anchor: retired, .*`best` - `sft`: -0.000"):
        load_config("cpu-smoke", {"grpo.anchor": "best"})
    profile = tmp_path / "mine.yaml"
    profile.write_text((PROFILES_DIR / "cpu-smoke.yaml").read_text().replace("corpus:\n", "corpus:\n  sft_label: x\n"))
    with pytest.raises(ConfigError, match="corpus.sft_label: retired"):
        load_config(profile)


# Settings that are not experiment levers: paths, logging, limits, export and evaluation plumbing.
NOT_LEVERS = {
    "env_args", "deterministic", "output_root", "tracking", "corpus.seed_offset", "corpus.expected_hash",
    "model.tiny.max_position_embeddings", "model.lora.dropout", "model.lora.target_modules", "model.use_unsloth",
    "model.load_in_4bit", "sft.logging_steps", "sft.max_steps", "sft.check_episodes", "sft.collapse_ratio",
    "grpo.env_url", "grpo.max_turns", "grpo.blocklist", "rl.alarm_drop", "grpo.alarm_zero_std",
    "grpo.logging_steps", "grpo.sample_completions", "eval.splits", "eval.improver_episodes",
    "eval.bootstrap_resamples", "eval.veto_k", "export.push_to_hub", "export.hub_repo", "export.check_prompts",
    "export.postsave_episodes",
}  # fmt: skip


def test_every_lever_left_is_set_by_a_profile_or_listed_in_the_lever_index():
    """No lever lingers unused: a setting no profile sets is plumbing (NOT_LEVERS) or a row of the lever index in
    the first 80 lines of docs/RESULTS.md (with its verdict: kept, or open)."""
    import re
    from pathlib import Path

    import yaml
    from pydantic import BaseModel

    from lib.config import MOVED, PROFILES_DIR, RunConfig

    def keys(model, prefix=""):
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield from keys(annotation, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    def set_keys(data, prefix=""):
        for name, value in data.items():
            if isinstance(value, dict) and name not in ("env_args", "expected_hash"):
                yield from set_keys(value, f"{prefix}{name}.")
            else:
                yield f"{prefix}{name}"

    used = {k for p in PROFILES_DIR.glob("*.yaml") for k in set_keys(yaml.safe_load(p.read_text()))}
    head = "\n".join(Path("docs/RESULTS.md").read_text(encoding="utf-8").splitlines()[:80])
    indexed = {m for row in head.splitlines() if row.startswith("| `") for m in re.findall(r"`([a-z_.]+)`", row)}
    indexed |= {MOVED[k] for k in indexed if k in MOVED}  # an index row under a key's old name (grpo.rounds)
    loose = sorted(k for k in keys(RunConfig) if k not in used | indexed | NOT_LEVERS)
    assert loose == [], f"settings no profile sets and the lever index does not list: {loose}"
    assert NOT_LEVERS <= set(keys(RunConfig)), "NOT_LEVERS names a setting the config no longer has"


def test_a_run_made_before_settings_were_retired_still_loads_replays_and_gates(tmp_path):
    """A committed run's manifest is a record: it names settings retired since (grpo.top_k, grpo.entropy_coef, ...),
    and the run still reads, replays its evaluated episodes to the same mean, and gates as it did. The same run with a
    retired setting at a value the code can no longer honour still reads and gates, and a stage is not re-run on it."""
    import json
    import shutil
    from pathlib import Path

    from lib.config import RETIRED
    from lib.gate import run_gate
    from lib.pipeline.stages import run_stage
    from lib.runs import RetiredSettingError, Run, read_config
    from lib.serve import replay

    committed = Path(__file__).resolve().parents[1] / "outputs" / "cmp-mt-s1"
    run_dir = tmp_path / "cmp-mt-s1"
    shutil.copytree(committed, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["corpus_hashes"] = {}  # committed without its corpus files (size): the gate could only say so
    manifest["config"]["grpo"]["anchor"] = "sft"  # as a run made while grpo.anchor was a setting recorded it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    grpo_record = json.loads((run_dir / "grpo" / "stage.json").read_text())
    grpo_record["params"]["anchor"] = "sft"
    (run_dir / "grpo" / "stage.json").write_text(json.dumps(grpo_record))
    recorded = manifest["config"]
    assert {"top_k", "entropy_coef", "epsilon_high", "beta", "anchor"} <= set(recorded["grpo"])
    assert "sft_label" in recorded["corpus"] and recorded["grpo"]["beta"] == RETIRED["grpo.beta"][0]
    config = read_config(run_dir)
    assert config.env == "polyguard" and not {"top_k", "beta", "anchor"} & set(type(config.grpo).model_fields)

    evaluated = json.loads((run_dir / "evaluate" / "eval.json").read_text())["splits"]["holdout"]["policies"]["grpo"]
    played = replay.load(run_dir, config.spec)
    returns = [played.play("holdout", seed) for seed in range(evaluated["n"])]
    assert sum(r["misses"] for r in returns) == 0
    assert abs(sum(r["episode_return"] for r in returns) / len(returns) - evaluated["mean_return"]) < 1e-9

    before = {c["name"]: c["passed"] for c in json.loads((committed / "gate.json").read_text())["checks"]}
    verdict = {c["name"]: c for c in run_gate(run_dir, write=False)["checks"]}
    assert verdict["manifest_valid"]["passed"], verdict["manifest_valid"]["detail"]  # stage params vs the record
    for name in ("improved", "beats_teacher", "improvement_claim_supported", "anti_hacking_passed"):
        assert verdict[name]["passed"] == before[name], name

    manifest["config"]["sft"]["candidate_loss"] = 0.5  # as a run made with that lever would have recorded it
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    sft_record = json.loads((run_dir / "sft" / "stage.json").read_text())
    sft_record["params"]["candidate_loss"] = 0.5
    (run_dir / "sft" / "stage.json").write_text(json.dumps(sft_record))
    assert read_config(run_dir) == config
    assert {c["name"]: c["passed"] for c in run_gate(run_dir, write=False)["checks"]}["manifest_valid"]
    with pytest.raises(RetiredSettingError, match=r"sft.candidate_loss=0.5 \(on SENTINEL trust") as error:
        run_stage("sft", config, Run(run_dir, config))
    assert RETIRED["sft.candidate_loss"][1] in str(error.value)
    assert json.loads((run_dir / "manifest.json").read_text())["config"]["sft"]["candidate_loss"] == 0.5  # untouched


def test_the_rl_algorithm_is_one_key_and_a_grpo_mode_no_longer_names_it():
    """rl.algorithm picks the RL stage's algorithm; its shared settings live in rl, AggreVaTe's own in aggrevate, and
    `aggrevate` is not a value of any GRPO setting."""
    import typing

    from lib.config import GRPOStageConfig

    assert "aggrevate" not in typing.get_args(GRPOStageConfig.model_fields["mode"].annotation)
    assert not {"validate_every", "keep", "rounds", "alarm_drop", "stop_on_alarm"} & set(GRPOStageConfig.model_fields)
    claim = load_config("cpu-smollm2-polyguard")
    assert (claim.rl.algorithm, claim.rl.validate_every, claim.rl.keep, claim.aggrevate.rounds) == (
        "aggrevate",
        1,
        "last",
        1,
    )
    smoke = load_config("cpu-smoke")
    assert (smoke.rl.algorithm, smoke.rl.validate_every, smoke.rl.keep) == ("grpo", 20, "best")
    with pytest.raises(ConfigError, match=r"rl.keep last \(is best\)"):
        load_config("cpu-smoke", {"rl.algorithm": "aggrevate"})  # validates (rl.validate_every 20), keeps the best
    with pytest.raises(ConfigError, match=r"aggrevate.rounds \(3\) counts AggreVaTe rounds; it needs rl.algorithm"):
        load_config("cpu-smoke", {"aggrevate.rounds": 3})
    with pytest.raises(ConfigError, match="rl.algorithm: unknown|rl.algorithm: Input should be"):
        load_config("cpu-smoke", {"rl.algorithm": "ppo"})


@pytest.mark.parametrize(
    "override, named",
    [
        ({"grpo.mode": "aggrevate"}, r"grpo.mode: aggrevate is not a GRPO mode any more.*set rl.algorithm=aggrevate"),
        ({"grpo.rounds": 2}, r"grpo.rounds: moved to aggrevate.rounds"),
        ({"grpo.validate_every": 4}, r"grpo.validate_every: moved to rl.validate_every"),
        ({"grpo.keep": "last"}, r"grpo.keep: moved to rl.keep"),
        ({"grpo.stop_on_alarm": True}, r"grpo.stop_on_alarm: moved to rl.stop_on_alarm"),
    ],
)
def test_the_old_rl_keys_are_a_config_error_naming_the_new_one_in_a_profile_a_set_and_a_fork(override, named, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from lib.config import override_config
    from lib.pipeline.fork import fork_run

    with pytest.raises(ConfigError, match=named):
        load_config("cpu-smoke", override)
    with pytest.raises(ConfigError, match=named):
        override_config(load_config("cpu-smoke"), override)
    committed = Path(__file__).resolve().parents[1] / "outputs" / "cmp-mt-s1"
    with pytest.raises(ConfigError, match=named):
        fork_run(committed, tmp_path / "fork", override)
    assert not (tmp_path / "fork").exists()
    if "grpo.mode" in override:  # the command line says the same
        done = subprocess.run(
            [sys.executable, "-m", "lib", "fork", str(committed), "--run-dir", str(tmp_path / "f"), "--set",
             "grpo.mode=aggrevate"],
            capture_output=True, text=True,
        )  # fmt: skip
        assert done.returncode != 0 and "set rl.algorithm=aggrevate" in done.stderr, done.stderr
