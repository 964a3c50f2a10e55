"""The CPU stand-in for TRL's Triton log-prob kernel computes the same quantities as a plain log-softmax, and every
private TRL member the workbook still touches is still there, with the shape it expects."""

import ast
import inspect
import textwrap

import torch

from lib.training.harness import TorchChunkedLogProb, ensure_logprob_kernel


def test_matches_log_softmax_values_and_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(7, 16, requires_grad=True)
    weight = torch.randn(50, 16, requires_grad=True)
    targets = torch.randint(0, 50, (7,))
    logprobs, entropy, log_sum_sq, mean_logits, is_top1 = TorchChunkedLogProb.apply(
        hidden, weight, None, targets, 0.7, 4096, None, 1.0, ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")
    )
    h2, w2 = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    logits = (h2 @ w2.t()) / 0.7
    ref = torch.log_softmax(logits, -1)
    expected = ref.gather(1, targets[:, None]).squeeze(1)
    assert torch.allclose(logprobs, expected, atol=1e-5)
    assert torch.allclose(entropy, -(ref.exp() * ref).sum(-1), atol=1e-5)
    assert torch.allclose(log_sum_sq, torch.log((ref.exp() ** 2).sum(-1)), atol=1e-5)
    assert torch.allclose(mean_logits, logits.mean(-1), atol=1e-5)
    assert torch.equal(is_top1, logits.argmax(-1) == targets)
    logprobs.sum().backward()
    expected.sum().backward()
    assert torch.allclose(hidden.grad, h2.grad, atol=1e-5) and torch.allclose(weight.grad, w2.grad, atol=1e-5)


def test_only_requested_outputs_are_computed_and_the_kernel_is_installed():
    hidden, weight, targets = torch.randn(3, 8), torch.randn(10, 8), torch.tensor([1, 2, 3])
    out = TorchChunkedLogProb.apply(hidden, weight, torch.zeros(10), targets, 1.0, 4096, 30.0, 1.0, ())
    assert out[0].shape == (3,) and all(x is None for x in out[1:])
    assert ensure_logprob_kernel() in ("torch", "triton")


# The TRL private members the workbook still relies on, each checked so that a TRL upgrade that removes or changes
# one fails here, naming it, instead of deep inside a training run. Everything else goes through public hooks:
# callbacks (on_save, on_log), reward_funcs and their log_metric argument, rollout_func, TrainerState.


def _call_site(function, attribute: str) -> ast.Call:
    """The call `<attribute>(...)` in `function`'s source (e.g. "_ChunkedLogProbFunction.apply")."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and ast.unparse(n.func) == attribute]
    assert calls, f"{function.__module__}.{function.__qualname__} no longer calls {attribute}: TRL changed"
    return calls[0]


def test_private_trl_member_chunked_logprob_function_is_still_the_fused_heads_kernel():
    import trl.trainer.utils as trl_utils

    name = "trl.trainer.utils._ChunkedLogProbFunction"
    assert hasattr(trl_utils, "_ChunkedLogProbFunction"), f"{name} is gone: lib/training/harness.py must change"
    kernel = trl_utils._ChunkedLogProbFunction
    assert kernel is None or callable(getattr(kernel, "apply", None)), f"{name} has no callable .apply"
    # TRL's fused LM head looks the name up when it runs, so replacing the module attribute takes effect ...
    call = _call_site(trl_utils.add_fused_lm_head, "_ChunkedLogProbFunction.apply")
    # ... and passes exactly the arguments the CPU stand-in takes, in order
    ours = list(inspect.signature(TorchChunkedLogProb.apply).parameters)
    assert not call.keywords and len(call.args) == len(ours), (
        f"{name}.apply is now called with {len(call.args)} positional and {len(call.keywords)} keyword arguments; "
        f"TorchChunkedLogProb.apply takes {ours}"
    )
    try:
        from trl.kernels import ChunkedLogProbFunction  # needs Triton (not on the CPU wheel)
    except ImportError:
        return
    theirs = list(inspect.signature(ChunkedLogProbFunction.forward).parameters)[1:]  # without ctx
    assert theirs == ours, f"{name}.forward takes {theirs}; TorchChunkedLogProb.apply takes {ours}"


def test_private_trl_member_grpo_generate_is_still_the_sampling_step():
    from trl import GRPOTrainer

    name = "trl.GRPOTrainer._generate"
    assert callable(getattr(GRPOTrainer, "_generate", None)), f"{name} is gone: lib/training/samplers.py overrides it"
    parameters = list(inspect.signature(GRPOTrainer._generate).parameters)
    assert parameters == ["self", "prompts"], (
        f"{name} now takes {parameters}; lib/training/samplers.py passes (prompts)"
    )
    # sampling goes through it (so the override's sampling mode and timing apply), and comes before the reward
    _call_site(GRPOTrainer._generate_and_score_completions, "self._generate")


def test_the_public_trl_hooks_the_stages_use_are_there():
    """Not private, but what replaced the private members: checked so that a change is named."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
    from trl import GRPOTrainer
    from trl.models.utils import disable_gradient_checkpointing

    init = inspect.signature(GRPOTrainer.__init__).parameters
    assert {"reward_funcs", "rollout_func", "callbacks", "peft_config"} <= set(init), sorted(init)
    assert list(inspect.signature(disable_gradient_checkpointing).parameters) == [
        "model",
        "gradient_checkpointing_kwargs",
    ], "trl.models.utils.disable_gradient_checkpointing changed (lib/training/samplers.py: sampling_mode)"
    assert PREFIX_CHECKPOINT_DIR == "checkpoint"  # lib/training/harness.py: CheckpointManifestCallback


def test_private_trl_member_grpo_prepare_inputs_still_buffers_the_split_generation_batch():
    from trl import GRPOTrainer

    name = "trl.GRPOTrainer._prepare_inputs"
    assert callable(getattr(GRPOTrainer, "_prepare_inputs", None)), f"{name} is gone: lib/training/samplers.py wraps it"
    source = inspect.getsource(GRPOTrainer._prepare_inputs)
    for member in ("self._buffered_inputs", "split_tensor_dict", "self.args.steps_per_generation", "self._step"):
        assert member in source, (
            f"{name} no longer uses {member}: lib/training/samplers.py's by_prompt_length must change"
        )


def test_private_trl_member_grpo_logps_is_still_the_loss_pass_the_prompt_pass_stands_in_for():
    from trl import GRPOTrainer

    from lib.training.prompt_pass import MULTIMODAL

    name = "trl.GRPOTrainer._get_per_token_logps_and_entropies"
    method = getattr(GRPOTrainer, "_get_per_token_logps_and_entropies", None)
    assert callable(method), f"{name} is gone: lib/training/samplers.py overrides it"
    parameters = list(inspect.signature(method).parameters)
    head = ["self", "model", "input_ids", "attention_mask", "logits_to_keep", "batch_size", "compute_entropy"]
    assert parameters[:8] == [*head, "compute_aux_loss"] and set(parameters[8:]) == set(MULTIMODAL), (
        f"{name} now takes {parameters}; lib/training/prompt_pass.py knows {head + ['compute_aux_loss', *MULTIMODAL]}"
    )
    source = inspect.getsource(method)
    for member in (
        "fused_lm_head=True",
        "labels[:, :-logits_to_keep] = -100",
        "outputs.log_probs[:, -logits_to_keep:]",
    ):
        assert member in source, f"{name} no longer has {member!r}: lib/training/prompt_pass.py mirrors it"
    _call_site(GRPOTrainer._compute_loss, "self._get_per_token_logps_and_entropies")


def test_micro_batches_regrouped_by_prompt_length_keep_every_row_and_drop_only_shared_padding():
    from lib.training.samplers import by_prompt_length

    torch.manual_seed(0)
    lengths = torch.tensor([5, 9, 2, 7, 3, 9, 4, 6])
    width = 9
    mask = (torch.arange(width)[None] >= width - lengths[:, None]).long()  # left-padded
    ids = torch.randint(1, 100, (8, width)) * mask
    batch = {
        "prompt_ids": ids,
        "prompt_mask": mask,
        "completion_ids": torch.arange(8)[:, None].repeat(1, 3),
        "advantages": torch.randn(8),
        "rows": list(range(8)),
        "num_items_in_batch": torch.tensor(24),
        "old_per_token_logps": None,
    }
    halves = [
        {
            k: (v[i * 4 : (i + 1) * 4] if k not in ("num_items_in_batch", "old_per_token_logps") else v)
            for k, v in batch.items()
        }
        for i in range(2)
    ]
    regrouped = by_prompt_length(halves)
    assert len(regrouped) == 2 and sorted(r for b in regrouped for r in b["rows"]) == list(range(8))
    assert [int(b["prompt_mask"].sum(1).max()) for b in regrouped] == [5, 9] and regrouped[0]["prompt_ids"].shape[
        1
    ] == 5
    for part in regrouped:
        for position, row in enumerate(part["rows"]):
            real = part["prompt_mask"][position].bool()
            assert torch.equal(part["prompt_ids"][position][real], ids[row][mask[row].bool()])  # the same tokens
            assert part["advantages"][position] == batch["advantages"][row]
            assert torch.equal(part["completion_ids"][position], batch["completion_ids"][row])
        assert part["num_items_in_batch"] == 24 and part["old_per_token_logps"] is None
