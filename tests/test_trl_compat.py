"""The CPU stand-in for TRL's Triton log-prob kernel computes the same quantities as a plain log-softmax."""

import torch

from lib.training.trl_compat import TorchChunkedLogProb, ensure_logprob_kernel


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
