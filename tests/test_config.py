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


def test_the_real_model_profile_uses_the_embedded_model_in_auto_precision():
    from lib.models import resolved_precision

    config = load_config("gpu-smollm2")
    assert config.model.name == "smollm2-135m-instruct" and config.model.precision == "auto"
    assert resolved_precision(config.model) == "fp32"  # this machine has no GPU; bf16 or fp16 is chosen on one
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
                "grpo.top_k=3",
            ]
        )
        == 0
    )
    config = read_config(run_dir)
    assert (config.corpus.sft_episodes, config.corpus.grpo_prompts, config.grpo.top_k) == (2, 2, 3)


def test_a_run_keeps_its_config_and_tolerates_fields_added_since(tmp_path):
    import json

    from lib.runs import Run

    config = load_config("cpu-smoke")
    Run(tmp_path / "r", config)
    with pytest.raises(ValueError, match="made with a different config"):
        Run(tmp_path / "r", load_config("cpu-smoke", {"sft.epochs": 9}))
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    del manifest["config"]["corpus"]["grpo_improvable_margin"]  # as written by code older than that field
    (tmp_path / "r" / "manifest.json").write_text(json.dumps(manifest))
    assert Run(tmp_path / "r", config).config == config


def test_exploration_options_validate_and_bad_values_are_named():
    config = load_config(
        "cpu-full",
        {
            "grpo.epsilon_high": 0.28,
            "grpo.entropy_coef": 0.01,
            "grpo.scale_rewards": "batch",
            "grpo.use_adaptive_entropy": True,
            "grpo.entropy_target": 0.5,
        },
    )
    assert (config.grpo.epsilon_high, config.grpo.entropy_coef, config.grpo.scale_rewards) == (0.28, 0.01, "batch")
    assert load_config("cpu-full").grpo.epsilon_high is None  # TRL's default: symmetric clipping
    with pytest.raises(ConfigError) as error:
        load_config("cpu-full", {"grpo.epsilon_high": -1, "grpo.entropy_coef": -0.1, "grpo.scale_rewards": "sometimes"})
    assert all(key in str(error.value) for key in ("grpo.epsilon_high", "grpo.entropy_coef", "grpo.scale_rewards"))
