"""Make TRL 1.15's SFTTrainer and GRPOTrainer run on a CPU-only torch.

TRL 1.15 computes SFT and GRPO log-probs with a fused LM head whose kernel is written in Triton, and the CPU torch wheel
ships no Triton, so both trainers fail at its first step (`_ChunkedLogProbFunction` is None). When and only when
that kernel is missing, `ensure_logprob_kernel()` plugs in the same computation in plain torch (full logits,
fine for small vocabularies). Used by the sft and grpo stages, which record the kernel it ran with.
"""

from __future__ import annotations

import torch

OPTIONAL_OUTPUTS = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1")


class TorchChunkedLogProb:
    """Same signature and outputs as trl.kernels.ChunkedLogProbFunction.apply, differentiable through autograd."""

    @staticmethod
    def apply(
        hidden,
        weight,
        bias,
        targets,
        temperature,
        chunk_size,
        final_logit_softcapping=None,
        logit_scale=1.0,
        outputs=OPTIONAL_OUTPUTS,
    ):
        z = hidden.float() @ weight.float().t()
        if bias is not None:
            z = z + bias.float()
        z = z * logit_scale
        if final_logit_softcapping is not None:
            z = final_logit_softcapping * torch.tanh(z / final_logit_softcapping)
        z = z / temperature
        log_z = torch.logsumexp(z, dim=-1)
        logprobs = z.gather(1, targets[:, None]).squeeze(1) - log_z
        log_p = z - log_z[:, None]
        entropy = -(log_p.exp() * log_p).sum(-1) if "entropy" in outputs else None
        with torch.no_grad():
            log_sum_sq_probs = torch.logsumexp(2 * log_p, dim=-1) if "log_sum_sq_probs" in outputs else None
            mean_logits = z.mean(-1) if "mean_logits" in outputs else None
            is_top1 = (z.argmax(-1) == targets) if "is_top1" in outputs else None
        return logprobs, entropy, log_sum_sq_probs, mean_logits, is_top1


def ensure_logprob_kernel() -> str:
    """Returns the kernel the trainers will use: 'triton' (TRL's own) or 'torch' (this module's, only without
    Triton)."""
    import trl.trainer.utils as trl_utils

    if trl_utils._ChunkedLogProbFunction is None:
        trl_utils._ChunkedLogProbFunction = TorchChunkedLogProb
    return "torch" if trl_utils._ChunkedLogProbFunction is TorchChunkedLogProb else "triton"
