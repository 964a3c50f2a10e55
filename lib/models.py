"""Models: build the offline `tiny` model, and load any model (tiny folder, embedded model, local folder or hub id)
the same way.

Used by the sft, grpo, evaluate and export stages. Every load goes through `from_pretrained(path_or_id)` (an
embedded model's name first resolves to its converted folder, `lib.embedded`); on CUDA with unsloth installed,
hub models load through Unsloth's FastLanguageModel instead.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl.chat_template_utils import qwen2_5_chat_template

from .config import ModelConfig, TinyModelConfig
from .embedded import resolve_model_source
from .io import sha256_file, weights_sha256  # noqa: F401 (re-exported: stages hash artifacts through lib.models)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but NOT special: decoding with skip_special_tokens must keep them, or no tool call is ever parsed.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


def is_tiny(model_config: ModelConfig) -> bool:
    return model_config.name == "tiny"


def cuda_available() -> bool:
    return torch.cuda.is_available()


def unsloth_available() -> bool:
    return cuda_available() and importlib.util.find_spec("unsloth") is not None


class PrecisionError(ValueError):
    """The precision asked for does not exist on this machine (bf16 on a CPU without bf16 instructions)."""


def resolved_precision(model_config: ModelConfig) -> str:
    """The precision a run trains and scores in. On a GPU: `auto` is bf16 where the GPU has it, fp16 on one without
    (a T4). On a CPU: `auto` is bf16 where the CPU has bf16 instructions (`lib.provenance.cpu_bf16`: AMX or
    avx512_bf16), else fp32; fp16 means fp32 (a CPU has no fast fp16); bf16 on a CPU without them is a
    PrecisionError."""
    from .provenance import BF16_FLAGS, cpu_bf16

    asked = model_config.precision
    if cuda_available():  # pragma: no cover - CUDA only
        if asked != "auto":
            return asked
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if asked == "bf16" and not cpu_bf16():
        raise PrecisionError(
            "model.precision is bf16, but this CPU has none of the bf16 instructions "
            f"({', '.join(BF16_FLAGS)}): bf16 would be emulated, slower than fp32. Use model.precision: fp32 or auto"
        )
    if asked == "auto":
        return "bf16" if cpu_bf16() else "fp32"
    return "bf16" if asked == "bf16" else "fp32"


def backend_for(model_config: ModelConfig) -> str:
    """The training backend that will actually be used; recorded in every report."""
    use = model_config.use_unsloth == "auto" and not is_tiny(model_config) and unsloth_available()
    return "trl_unsloth" if use else "trl_transformers"


def train_tokenizer(texts, vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE trained on the corpus, speaking TRL's shipped Qwen2.5 chat template."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.add_tokens(TOOL_TOKENS, special_tokens=False)
    fast.chat_template = qwen2_5_chat_template
    fast.padding_side = "left"
    return fast


def build_tiny(texts, tiny: TinyModelConfig, out_dir: Path, seed: int) -> Path:
    """Train the tokenizer on `texts`, build a Qwen2 model from config, save both as a normal HF folder."""
    tokenizer = train_tokenizer(texts, tiny.vocab_size)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=tiny.hidden_size,
        intermediate_size=tiny.intermediate_size,
        num_hidden_layers=tiny.num_hidden_layers,
        num_attention_heads=tiny.num_attention_heads,
        num_key_value_heads=tiny.num_key_value_heads,
        max_position_embeddings=tiny.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def load_model(path_or_id: str | Path, model_config: ModelConfig, *, trainable: bool = True, precision: str = ""):
    """Load weights and tokenizer with from_pretrained, exactly as for a hub model. `precision` (fp32, fp16 or bf16),
    where given, is a run's recorded precision, used as it is: a rebuild merges in the precision the run trained in
    on any machine (in bf16 on a CPU without bf16 instructions too: emulated, slower, the same rounding); else
    `model_config.precision` as this machine resolves it (`resolved_precision`).

    Returns (model, tokenizer, backend)."""
    backend = backend_for(model_config)
    source = resolve_model_source(path_or_id)
    dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[
        precision or resolved_precision(model_config)
    ]
    if backend == "trl_unsloth":  # pragma: no cover - CUDA only
        from unsloth import FastLanguageModel

        # dtype: Unsloth otherwise picks bf16 wherever the GPU has it, and its GRPOTrainer then refuses fp16=True
        model, tokenizer = FastLanguageModel.from_pretrained(
            source, dtype=dtype, load_in_4bit=model_config.load_in_4bit, max_seq_length=4096
        )
    else:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.train(trainable)
    return model, tokenizer, backend


class DepthCutError(ValueError):
    """model.lora.top_layers asks for more layers than the model has, or none."""


def with_lora(model, model_config: ModelConfig, backend: str):
    """(model, peft_config for the TRL trainer). On Unsloth the adapter is added here with
    FastLanguageModel.get_peft_model, Unsloth's own route (its GRPOTrainer trained every weight when handed a
    peft_config: measured on an H100, bench/README.md); otherwise TRL adds it from the returned LoraConfig."""
    if backend == "trl_unsloth":  # pragma: no cover - CUDA only
        from unsloth import FastLanguageModel

        lora = model_config.lora
        model = FastLanguageModel.get_peft_model(
            model,
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            layers_to_transform=lora_layers(model, lora.top_layers),
        )
        return model, None
    return model, lora_config(model_config, model)


def lora_config(model_config: ModelConfig, model=None):
    from peft import LoraConfig

    lora = model_config.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        layers_to_transform=lora_layers(model, lora.top_layers),
        task_type="CAUSAL_LM",
    )


def lora_layers(model, top: int | None) -> list[int] | None:
    """The decoder layers that get an adapter: the top `top` (the backward pass then stops at the lowest of them, and
    the frozen bottom runs forward only), or every layer (None)."""
    if top is None or model is None:
        return None
    have = len(model.get_decoder().layers)
    if not 1 <= top <= have:
        raise DepthCutError(
            f"model.lora.top_layers is {top}, but the model has {have} decoder layers: choose 1 to {have}"
        )
    return list(range(have - top, have))
