"""Lab probe (docs/lab/memory/results.json): RSS of SmolLM2 (bf16, LoRA top 16) forward+backward over batches
of distinct or repeated lengths."""

import sys
import time
from pathlib import Path

import torch

from lib.config import load_config
from lib.models import load_model, with_lora

mode, steps = sys.argv[1], int(sys.argv[2])


def rss():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024


config = load_config("cpu-smollm2-polyguard")
model, tok, backend = load_model(config.model.name, config.model)
model, peft = with_lora(model, config.model, backend)
if peft is not None:
    from peft import get_peft_model

    model = get_peft_model(model, peft)
model.train()
g = torch.Generator().manual_seed(0)
t0 = time.perf_counter()
out = []
for i in range(steps):
    # "distinct": 50 lengths 400-449; "wide": lengths 300-1000 as the SFT's batches meet them; "wide64": the same
    # lengths padded up to a multiple of 64 (the shapes oneDNN meets: 11)
    if mode in ("wide", "wide64"):
        L = 300 + (i * 211) % 700
        L = -(-L // 64) * 64 if mode == "wide64" else L
    else:
        L = 400 + (i * 37) % 50 if mode == "distinct" else 425
    ids = torch.randint(100, 40000, (2, L), generator=g)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    out.append(rss())
print(mode, "rss_mb per step:", out, "seconds", round(time.perf_counter() - t0, 1), flush=True)
