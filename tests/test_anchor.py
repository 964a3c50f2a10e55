"""`grpo.anchor: best`: the KL term's frozen adapter follows the best validated point (lib/training/anchor.py)."""

import json
import shutil

import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM, TrainerCallback

from lib.config import ConfigError, load_config
from lib.training.anchor import ANCHOR, AnchorError, load_anchor, refresh_anchor
from lib.training.harness import saved_adapters


def _peft(anchor: bool):
    torch.manual_seed(0)
    base = LlamaForCausalLM(
        LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2)
    )
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(base, config)
    if anchor:  # what TRL's GRPOTrainer does to a PEFT model handed over with beta > 0
        model.add_adapter(ANCHOR, config)
    return model


def _trained(model):
    """`model` with its trained adapter moved away from where it started (and from the anchor)."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".default." in name:
                param.add_(torch.randn_like(param))
    return model


def _tensors(model, adapter: str) -> dict[str, torch.Tensor]:
    return {
        n.replace(f".{adapter}.", "."): p.detach().clone() for n, p in model.named_parameters() if f".{adapter}." in n
    }


def test_refresh_copies_the_trained_adapter_into_the_anchor_and_saving_leaves_the_anchor_out(tmp_path):
    model = _trained(_peft(anchor=True))
    assert _tensors(model, "default").keys() == _tensors(model, ANCHOR).keys()
    trained, anchor = _tensors(model, "default"), _tensors(model, ANCHOR)
    assert any(not torch.equal(value, anchor[name]) for name, value in trained.items())
    copied = refresh_anchor(model)
    assert copied == len(_tensors(model, "default")) > 0
    assert all(torch.equal(a, _tensors(model, ANCHOR)[k]) for k, a in _tensors(model, "default").items())
    model.save_pretrained(tmp_path / "saved", **saved_adapters(model))
    assert (tmp_path / "saved" / "adapter_model.safetensors").exists()
    assert not (tmp_path / "saved" / ANCHOR).exists()  # the anchor is not part of the saved policy


def test_a_resumed_run_reloads_the_anchor_from_the_best_saved_adapter(tmp_path):
    trained = _trained(_peft(anchor=True))
    trained.save_pretrained(tmp_path / "best", **saved_adapters(trained))
    fresh = _peft(anchor=True)
    load_anchor(fresh, tmp_path / "best")
    want = _tensors(trained, "default")
    assert all(torch.equal(want[k], v) for k, v in _tensors(fresh, ANCHOR).items())
    with pytest.raises(AnchorError, match="no saved best adapter"):
        load_anchor(fresh, tmp_path / "missing")


def test_refresh_without_an_anchor_adapter_is_a_clear_error():
    assert saved_adapters(_peft(anchor=False)) == {}
    with pytest.raises(AnchorError, match="no frozen 'ref' adapter"):
        refresh_anchor(_peft(anchor=False))


@pytest.mark.parametrize(
    "settings, missing",
    [({"grpo.beta": 0.0, "rl.validate_every": 4}, "grpo.beta > 0"), ({"grpo.beta": 0.04}, "rl.validate_every > 0")],
)
def test_anchor_best_needs_a_kl_term_and_a_validation_curve(settings, missing):
    with pytest.raises(ConfigError, match=missing):
        load_config("cpu-smoke", {"grpo.anchor": "best", "rl.validate_every": 0, **settings})
    assert load_config("cpu-smoke", {"grpo.anchor": "best", "grpo.beta": 0.04, "rl.validate_every": 4})


@pytest.mark.slow
def test_grpo_holds_to_the_best_validated_point_at_every_step(tmp_path, monkeypatch):
    """A whole micro GRPO run with anchor best: at the start of every step the KL term's adapter is the best
    validation point's saved adapter, and the kept adapters hold the trained adapter only. The validation returns
    are made to rise with the step, so every point is a new best and the anchor must move each time."""
    import lib.evaluation.closed_loop as closed_loop
    from lib.runs import Run
    from lib.training.corpus import run_corpus
    from lib.training.rl import run_rl
    from lib.training.sft import run_sft
    from tests import micro

    overrides = {
        **micro.MICRO,
        "grpo.max_steps": 4,
        "rl.validate_every": 1,
        "rl.validation_episodes": 4,
        "grpo.beta": 0.04,
        "grpo.anchor": "best",
        "grpo.learning_rate": 5e-3,
    }
    config = load_config("cpu-smoke", overrides)
    run = Run(tmp_path / "run", config)
    run_corpus(config, run)
    run_sft(config, run)
    seen, moved = [], []
    summarize = closed_loop.summarize

    def rising(episodes, actions, **kwargs):
        summary = summarize(episodes, actions, **kwargs)
        return {**summary, "mean_return": len(seen) / 10}

    monkeypatch.setattr(closed_loop, "summarize", rising)

    class Watch(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            best = load_file(str(run.dir / "grpo" / "adapter_best" / "adapter_model.safetensors"))
            # saved names are the parameters' names without the adapter's
            anchor = {n.replace(f".{ANCHOR}.", "."): p for n, p in model.named_parameters() if f".{ANCHOR}." in n}
            assert anchor.keys() == best.keys() and best
            for name, value in best.items():
                assert torch.equal(anchor[name].data, value.to(anchor[name].dtype))
            moved.append(any(p.abs().sum() > 0 for n, p in anchor.items() if "lora_B" in n))
            seen.append(state.global_step)

    record = run_rl(config, run, extra_callbacks=[Watch()])
    assert seen == [0, 1, 2, 3]
    assert moved == [False, True, True, True]  # the SFT start (LoRA's B is zero), then each step's new best
    assert [p["step"] for p in map(json.loads, (run.dir / "grpo" / "validation.jsonl").read_text().splitlines())] == [
        0,
        1,
        2,
        3,
        4,
    ]
    for folder in ("adapter", "adapter_best"):
        assert not (run.dir / "grpo" / folder / ANCHOR).exists()
    assert record["metrics"]["steps"] == 4
    shutil.rmtree(run.dir)
