"""GRPO's loss reading each group's prompt once (lib/training/prompt_pass.py) computes TRL's log-probabilities,
entropies and gradients, and steps aside where it cannot."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from lib.training.harness import ensure_logprob_kernel
from lib.training.prompt_pass import can_share, kept_whole, prompt_groups, shared_prompt_logps


def _model():
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
    )
    model = get_peft_model(
        Qwen2ForCausalLM(config),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    ensure_logprob_kernel()
    add_fused_lm_head(model.get_base_model(), temperature=0.7, outputs=("log_probs", "entropy"))  # as GRPOTrainer does
    return model.train()


def _batch():
    """Two prompts (7 and 11 tokens) with 3 completions each, rows interleaved, prompts left-padded, completions
    right-padded (a completion that ended early)."""
    torch.manual_seed(1)
    prompts = [torch.randint(1, 97, (7,)), torch.randint(1, 97, (11,))]
    owners = [0, 1, 1, 0, 0, 1]
    lengths = [4, 2, 4, 3, 4, 1]
    width, keep = 11, 4
    ids = torch.zeros((6, width + keep), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, (owner, length) in enumerate(zip(owners, lengths)):
        prompt = prompts[owner]
        ids[row, width - len(prompt) : width] = prompt
        mask[row, width - len(prompt) : width] = 1
        ids[row, width : width + length] = torch.randint(1, 97, (length,))
        mask[row, width : width + length] = 1
    return ids, mask, keep


def _trl(model, ids, mask, keep):
    from trl import GRPOTrainer

    trainer = SimpleNamespace(accelerator=SimpleNamespace(autocast=contextlib.nullcontext))
    method = GRPOTrainer._get_per_token_logps_and_entropies.__wrapped__  # without TRL's profiling wrapper
    logps, entropies, _ = method(trainer, model, ids, mask, keep, compute_entropy=True)
    return logps, entropies


def _grads(model, logps, mask, keep):
    model.zero_grad()
    weights = torch.linspace(-1, 1, logps.numel()).reshape(logps.shape)
    (logps * weights * mask[:, -keep:]).sum().backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}


def test_groups_are_the_distinct_prompts_without_their_padding_in_first_seen_order():
    ids, mask, keep = _batch()
    groups = prompt_groups(ids[:, :-keep], mask[:, :-keep])
    assert [rows for _, rows in groups] == [[0, 3, 4], [1, 2, 5]]
    assert [len(prompt) for prompt, _ in groups] == [7, 11]


def test_one_pass_per_prompt_gives_trls_logps_entropies_and_gradients():
    model = _model()
    ids, mask, keep = _batch()
    theirs, their_entropy = _trl(model, ids, mask, keep)
    their_grads = _grads(model, theirs, mask, keep)
    ours, our_entropy = shared_prompt_logps(model, ids, mask, keep, compute_entropy=True)
    our_grads = _grads(model, ours, mask, keep)
    real = mask[:, -keep:].bool()
    assert ours.shape == theirs.shape and our_entropy.shape == their_entropy.shape
    assert torch.allclose(ours[real], theirs[real], atol=1e-5), (ours - theirs).abs().max()
    assert torch.allclose(our_entropy[real], their_entropy[real], atol=1e-5)
    assert (ours[~real] == 0).all()  # padding scores nothing, as in TRL's pass
    assert their_grads.keys() == our_grads.keys() and len(our_grads) == 8  # A and B of q and v in 2 layers
    for name in their_grads:
        assert torch.allclose(our_grads[name], their_grads[name], atol=1e-5), name
        assert our_grads[name].abs().sum() > 0, name  # the adapters below the completions get gradient too


def test_a_batch_without_a_shared_prompt_is_left_to_trl():
    model = _model()
    ids, mask, keep = _batch()
    assert shared_prompt_logps(model, ids[:2], mask[:2], keep, compute_entropy=False) is None


@pytest.mark.parametrize(
    "aux, extra, checkpointing, device, ours",
    [
        (False, {}, False, "cpu", True),
        (False, {"pixel_values": None}, False, "cpu", True),
        (True, {}, False, "cpu", False),
        (False, {"pixel_values": torch.zeros(1)}, False, "cpu", False),
        (False, {}, True, "cpu", False),
        (False, {}, False, "cuda", False),  # on a GPU TRL's own pass was the faster (the module's docstring)
    ],
)
def test_the_shared_pass_stands_in_only_where_it_is_known_equal_and_faster(aux, extra, checkpointing, device, ours):
    from lib.training.samplers import timed_trainer_class

    trainer_class = timed_trainer_class({})
    trainer = trainer_class.__new__(trainer_class)
    trainer.args = SimpleNamespace(gradient_checkpointing=checkpointing, device=torch.device(device))
    assert can_share(trainer, aux, extra) is ours


def test_a_trainer_whose_parent_is_not_trls_is_left_alone():
    class Other:
        def _get_per_token_logps_and_entropies(self):
            raise AssertionError

    class Child(Other):
        pass

    trainer = Child()
    trainer.args = SimpleNamespace(gradient_checkpointing=False, device=torch.device("cpu"))
    assert can_share(trainer, False, {}) is False


def test_a_prompt_pass_that_kept_no_whole_cache_is_left_to_trl():
    """A model whose layers drop the cache (checkpointing inside the model) would score completions without their
    prompt; the shared pass notices and TRL's runs instead."""
    from transformers import DynamicCache

    model = _model()
    ids, mask, keep = _batch()
    head = model(input_ids=ids[:1, 4:10], use_cache=True, logits_to_keep=1)
    assert kept_whole(head.past_key_values, 6)
    assert not kept_whole(head.past_key_values, 7)
    assert not kept_whole(DynamicCache(), 6)
    real = model.forward

    def dropping(*args, **kwargs):
        out = real(*args, **kwargs)
        if kwargs.get("use_cache"):
            out.past_key_values = DynamicCache()
        return out

    model.forward = dropping
    assert shared_prompt_logps(model, ids, mask, keep, compute_entropy=False) is None
