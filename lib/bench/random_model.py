"""A random-weight model with a real model's shape, built without the hub, for `python -m lib bench-gpu
--random-model qwen2.5-0.5b`: the benchmark then measures the machinery (memory, step times) at that size on a
machine that cannot download the model. Every completion of such a model is noise, so its rewards say nothing.

The tokenizer is a byte-level BPE trained on the run's corpus (`lib.models.train_tokenizer`, the same texts the tiny
model's is trained on), not the real model's, so token counts per prompt differ from the real model's.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

# Qwen/Qwen2.5-0.5B-Instruct's config.json shape (vocab 151,936 including padding, so embedding size and memory
# match; tied embeddings): 494,032,768 parameters.
QWEN25_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151936,
    tie_word_embeddings=True,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
)
SHAPES = {
    "qwen2.5-0.5b": QWEN25_05B,
    # only for checking the benchmark's plumbing on a machine without a GPU; never a benchmark
    "small": {
        **QWEN25_05B,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 16384,
    },
}
TOKENIZER_VOCAB = 8000


def build_random_model(shape_name: str, rows: list[dict], vocabulary: str, out_dir: Path, precision: str) -> dict:
    """Train the tokenizer on the SFT rows' texts (and the environment's `vocabulary`), build a randomly initialised
    Qwen2 model of shape `shape_name` (seed 0), save both as a Hugging Face folder in `precision`. Returns what was
    built, without the folder's path."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from ..models import train_tokenizer

    began = time.perf_counter()
    shape = SHAPES[shape_name]
    tokenizer = train_tokenizer(
        [m["content"] for r in rows for m in r["prompt"] + r["completion"]] + [vocabulary], TOKENIZER_VOCAB
    )
    if len(tokenizer) > shape["vocab_size"]:
        raise ValueError(f"tokenizer has {len(tokenizer)} tokens, more than vocab_size {shape['vocab_size']}")
    torch.manual_seed(0)
    qwen = Qwen2Config(
        **shape, bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    model = Qwen2ForCausalLM(qwen)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model = model.to({"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}[precision])
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    prompt_tokens = [
        len(
            tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True)[
                "input_ids"
            ]
        )
        for r in rows
    ]
    return {
        "shape_name": shape_name,
        "shape": shape,
        "saved_dtype": precision,
        "parameters": sum(p.numel() for p in model.parameters()),
        "folder_mb": round(sum(f.stat().st_size for f in Path(out_dir).iterdir()) / 2**20, 1),
        "tokenizer_len": len(tokenizer),
        "tokenizer_vocab_requested": TOKENIZER_VOCAB,
        "sft_prompt_tokens_mean": round(statistics.mean(prompt_tokens), 1),
        "sft_prompt_tokens_max": max(prompt_tokens),
        "build_s": round(time.perf_counter() - began, 2),
    }
