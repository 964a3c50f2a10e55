"""The cheap pretrained learner's options (lib/models.py): precision on a CPU (bf16 where the CPU has it, an error
where it does not), a model cut to its first k layers, and adapters on the top layers only. Each on a tiny model of
random weights saved to a local folder, the path a hub id or the embedded SmolLM2 takes."""

import pytest
import torch

from lib.candidates import answers, score_answers
from lib.config import ConfigError, LoraConfig, ModelConfig, TinyModelConfig, load_config
from lib.envs import get_spec
from lib.models import DepthCutError, PrecisionError, build_tiny, load_model, lora_config, resolved_precision


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A 4-layer tiny model of random weights whose tokenizer has seen PolyGuard's prompts."""
    spec = get_spec("polyguard")
    env = spec.make_env()
    texts = [m["content"] for seed in range(4) for m in env.render(env.reset(seed, "train"))] + [spec.vocabulary()]
    return build_tiny(texts, TinyModelConfig(num_hidden_layers=4), tmp_path_factory.mktemp("tiny4"), seed=0)


def _local(folder, **settings) -> ModelConfig:
    return ModelConfig(name=str(folder), **settings)


def _cpu_with(monkeypatch, flags: list[str]) -> None:
    monkeypatch.setattr("lib.provenance.cpu_bf16", lambda: list(flags))
    monkeypatch.setattr("lib.models.cuda_available", lambda: False)


def test_auto_precision_on_a_cpu_is_bf16_where_it_has_bf16_instructions_and_fp32_elsewhere(monkeypatch):
    _cpu_with(monkeypatch, ["avx512_bf16"])
    assert resolved_precision(ModelConfig(name="x", precision="auto")) == "bf16"
    assert resolved_precision(ModelConfig(name="x", precision="fp16")) == "fp32"  # a CPU has no fast fp16
    _cpu_with(monkeypatch, [])
    assert resolved_precision(ModelConfig(name="x", precision="auto")) == "fp32"
    assert resolved_precision(ModelConfig(name="x", precision="fp32")) == "fp32"


def test_bf16_on_a_cpu_without_bf16_instructions_is_a_clear_error(monkeypatch, folder):
    _cpu_with(monkeypatch, [])
    with pytest.raises(PrecisionError, match="amx_bf16, avx512_bf16"):
        load_model(folder, _local(folder, precision="bf16"))


def test_bf16_candidate_scores_differ_from_fp32_by_rounding_only(monkeypatch, folder):
    """The same weights scored in bf16 and in fp32: every answer's log-likelihood within bf16's rounding (8 bits of
    mantissa over ~10 answer tokens), and the loaded weights really are bf16."""
    _cpu_with(monkeypatch, ["avx512_bf16"])
    spec = get_spec("polyguard")
    env = spec.make_env()
    observations = [env.reset(seed, "holdout") for seed in range(6)]
    messages, offered = [env.render(o) for o in observations], [answers(o) for o in observations]
    wide, _, _ = load_model(folder, _local(folder, precision="fp32"), trainable=False)
    narrow, tokenizer, _ = load_model(folder, _local(folder, precision="bf16"), trainable=False)
    assert next(narrow.parameters()).dtype == torch.bfloat16 and next(wide.parameters()).dtype == torch.float32
    exact = score_answers(wide.eval(), tokenizer, messages, offered)
    rounded = score_answers(narrow.eval(), tokenizer, messages, offered)
    for a, b in zip(exact, rounded):
        differences = [abs(x - y) for x, y in zip(a, b)]
        assert max(differences) <= 0.03 * max(abs(x) for x in a) + 0.05, (a, b)
        assert max(differences) > 0  # it did compute in bf16


def test_the_retired_depth_cut_is_refused_by_name():
    with pytest.raises(ConfigError, match="model.keep_layers: retired, measured not to help"):
        load_config("gpu-smollm2", {"model.keep_layers": 10})


def test_adapters_on_the_top_layers_only_and_a_count_past_the_model_is_an_error(folder):
    from peft import get_peft_model

    model, _, _ = load_model(folder, _local(folder, lora=LoraConfig(top_layers=1)))
    peft_model = get_peft_model(model, lora_config(_local(folder, lora=LoraConfig(top_layers=1)), model))
    trained = {name.split(".layers.")[1].split(".")[0] for name, p in peft_model.named_parameters() if p.requires_grad}
    assert trained == {"3"}
    model, _, _ = load_model(folder, _local(folder))
    with pytest.raises(DepthCutError, match="top_layers is 7, but the model has 4 decoder layers"):
        lora_config(_local(folder, lora=LoraConfig(top_layers=7)), model)


@pytest.mark.slow
def test_the_learner_benchmark_reports_both_learners_the_bare_loop_and_the_ratios(folder, tmp_path):
    """`bench-learner` end to end on a local 4-layer model (the embedded SmolLM2 takes minutes a step on 2 cores):
    both learners through the sft stage, scoring and evaluation, the bare loop beside them, the ratios on top."""
    import json

    import yaml

    from lib.bench.bench_learner import run_bench
    from lib.config import PROFILES_DIR
    from tests.micro import MICRO

    profile = yaml.safe_load((PROFILES_DIR / "cpu-smoke.yaml").read_text())
    profile["model"] = {"name": str(folder), "sft_full_finetune": False, "lora": {"top_layers": 2}}
    profile["corpus"]["sft_episodes"] = MICRO["corpus.sft_episodes"]
    profile["corpus"]["grpo_prompts"] = MICRO["corpus.grpo_prompts"]
    profile["grpo"]["max_completion_length"] = 32  # this fixture's tokenizer saw few prompts: longer answers
    profile["sft"]["max_length"] = 2048  # and longer prompts: some pass 1,024 tokens, which SFT refuses to cut
    profile["env_args"] = {"list_candidates": False}  # today's path reads the list; the chosen learner does not
    path = tmp_path / "bench-profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    report = run_bench(str(path), sft_steps=2, states=4, episodes=2, out=tmp_path / "bench.json")
    assert json.loads((tmp_path / "bench.json").read_text())["speedup"] == report["speedup"]
    assert set(report["speedup"]) == {"sft", "evaluate", "scoring"} and report["sft_of_bare"] > 0
    assert report["arms"]["today"]["model"]["lora_top_layers"] is None
    assert report["arms"]["chosen"]["model"]["lora_top_layers"] == 2
    assert report["arms"]["chosen"]["sft"]["steps"] == 2 and report["bare_loop"]["steps"] == 2
    assert report["arms"]["chosen"]["evaluation"]["episodes"] == 2
    today, chosen = report["arms"]["today"], report["arms"]["chosen"]
    assert today["model"]["list_candidates"] is True and chosen["model"]["list_candidates"] is False
    # the same rows, the chosen prompt shorter: fewer tokens, and the SFT speedup is the ratio of the runtimes
    assert chosen["sft"]["tokens"] < today["sft"]["tokens"]
    assert report["speedup"]["sft"] == round(today["sft"]["seconds"] / chosen["sft"]["seconds"], 2)


def test_a_learner_is_named_by_its_model_and_the_options_that_cheapened_it():
    from lib.reporting.compare import learner_label

    assert learner_label({"model": "tiny"}) == "tiny"
    smollm2 = {"model": "smollm2-135m-instruct", "precision": "bf16", "keep_layers": None, "lora_top_layers": 4}
    assert learner_label(smollm2) == "SmolLM2 (bf16, adapters top 4)"
    assert learner_label({**smollm2, "keep_layers": 10, "labels": "improver"}) == (
        "SmolLM2 (bf16, first 10 layers, adapters top 4, improver labels)"
    )
    assert learner_label({**smollm2, "list_candidates": False}) == "SmolLM2 (bf16, adapters top 4, no candidate list)"
