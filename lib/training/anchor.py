"""`grpo.anchor: best`: the KL term holds the policy to its best validated point, not to the SFT policy.

TRL's GRPOTrainer, handed a PEFT model that already has its adapter and a `beta` above 0, keeps a frozen copy of that
adapter, named "ref", and reads its log-probabilities for the KL term. Here the adapter is added before the trainer
is built (`with_anchor_adapter`), so TRL makes that copy; the validation callback then copies the trained adapter
into it at each new best validation point (`refresh_anchor`), and a resumed run reloads it from the best point's
saved adapter (`load_anchor`). A climb is then held where it got to; with `anchor: sft` (TRL's default for a new
adapter: the adapter disabled, i.e. the SFT model) the same term pulls a climb back toward SFT as much as a fall.
"""

from __future__ import annotations

from pathlib import Path

from .harness import ANCHOR, TRAINED


class AnchorError(RuntimeError):
    """The model has no anchor adapter to refresh, or a saved best adapter does not fit it."""


def with_anchor_adapter(model, peft_config):
    """The model with its LoRA adapter added now (`peft.get_peft_model`), and no peft_config for the trainer, so that
    TRL keeps the frozen "ref" copy the anchor lives in. A model that is already a PEFT model (Unsloth's route)
    is returned as it is."""
    if peft_config is None:
        return model, None
    from peft import get_peft_model

    return get_peft_model(model, peft_config), None


def refresh_anchor(model) -> int:
    """Copy the trained adapter's weights into the anchor; returns how many tensors were copied."""
    if ANCHOR not in getattr(model, "peft_config", {}):
        raise AnchorError(
            "grpo.anchor best: the model has no frozen 'ref' adapter to refresh (TRL adds it only to a PEFT model "
            "handed over with beta > 0)"
        )
    copied = 0
    for name, param in model.named_parameters():
        if f".{TRAINED}." in name:
            model.get_parameter(name.replace(f".{TRAINED}.", f".{ANCHOR}.")).data.copy_(param.data)
            copied += 1
    return copied


def load_anchor(model, folder: Path) -> None:
    """Load a saved adapter (the best validation point's, `grpo/adapter_best`) into the anchor: a resumed run holds
    to the same point it held to before it stopped."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(folder) / "adapter_model.safetensors"
    if not path.exists():
        raise AnchorError(f"grpo.anchor best: no saved best adapter at {path} to resume the anchor from")
    result = set_peft_model_state_dict(model, load_file(str(path)), adapter_name=ANCHOR)
    missing = [k for k in getattr(result, "missing_keys", []) if f".{ANCHOR}." in k]
    if missing:
        raise AnchorError(f"grpo.anchor best: the saved best adapter at {folder} lacks {len(missing)} anchor tensors")
