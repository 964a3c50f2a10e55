"""Lab benchmark (docs/lab/trunk_attention/results.json): one SFT step's forward and backward on an episode packed
trunk first (lib/training/packing.py: `pack`), with the trunk's causal block computed apart (`trunk_attention`)
against one SDPA call under the whole 4D mask, on the same packed batches, the two arms alternating, batch by batch.

    python docs/lab/trunk_attention/bench.py RUN_DIR EPISODES [REPEATS]

RUN_DIR is a run whose corpus stage is done (its rows, as prefix packing would batch them: one episode a batch; a
slimmed run's gzipped rows too) and whose config names the learner (the model, its precision and its LoRA). Each
row is its prompt under the chat template and its answer with the end-of-turn token (lib/candidates.py: prompt_ids,
answer_ids). Prints and appends one record: each arm's seconds per batch (median over REPEATS), the ratio, and the
largest relative difference of the loss.
"""

import gzip
import json
import statistics
import sys
import time
from pathlib import Path

from peft import get_peft_model

from lib.candidates import answer_ids, prompt_ids
from lib.io import atomic_write_json
from lib.models import load_model, lora_config, resolved_precision
from lib.provenance import hardware
from lib.runs import read_config
from lib.training.packing import IGNORE, additive_mask, episode_key, pack, trunk_attention_on

run_dir, episodes = Path(sys.argv[1]), int(sys.argv[2])
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
config = read_config(run_dir)
model, tokenizer, _ = load_model(config.model.name, config.model)
model = get_peft_model(model, lora_config(config.model, model))
corpus = run_dir / "corpus" / "sft.jsonl"
text = corpus.read_text() if corpus.exists() else gzip.decompress(corpus.with_suffix(".jsonl.gz").read_bytes()).decode()
rows = [json.loads(line) for line in text.splitlines()]
by_episode: dict[str, list[dict]] = {}
for row in rows:
    prompt = prompt_ids(tokenizer, row["prompt"])
    answer = answer_ids(tokenizer, row["completion"][0]["content"])
    example = {"input_ids": prompt + answer, "labels": [IGNORE] * len(prompt) + answer}
    by_episode.setdefault(episode_key(row["prompt"]), []).append(example)
batches = [pack(examples, tokenizer.pad_token_id) for examples in list(by_episode.values())[:episodes]]
dtype = model.get_input_embeddings().weight.dtype


def step(batch, trunk: bool) -> tuple[float, float]:
    mask = additive_mask(batch["packed_mask"], dtype)
    inputs = {"input_ids": batch["input_ids"], "position_ids": batch["position_ids"], "attention_mask": mask}
    start = time.perf_counter()
    if trunk:
        with trunk_attention_on(model):
            logits = model(**inputs, trunk_length=int(batch["trunk_length"])).logits
    else:
        logits = model(**inputs).logits
    targets = batch["shift_labels"][0]
    keep = targets != IGNORE
    loss = -logits[0].float().log_softmax(-1)[keep].gather(1, targets[keep][:, None]).sum()
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start, float(loss)


seconds = {True: [], False: []}
loss_gap = 0.0
for index, batch in enumerate(batches):
    times, losses = {True: [], False: []}, {}
    for r in range(repeats):
        for trunk in (r % 2 == 0, r % 2 != 0):  # alternate which arm goes first
            took, losses[trunk] = step(batch, trunk)
            times[trunk].append(took)
    loss_gap = max(loss_gap, abs(losses[True] - losses[False]) / abs(losses[False]))
    for trunk in (True, False):
        seconds[trunk].append(statistics.median(times[trunk]))
    print(
        f"episode {index}: {int(batch['packed_tokens'])} tokens, trunk {int(batch['trunk_length'])}: "
        f"trunk {seconds[True][-1]:.2f} s, masked {seconds[False][-1]:.2f} s",
        flush=True,
    )
record = {
    "run": run_dir.name,
    "env": config.env,
    "env_args": config.env_args,
    "precision": resolved_precision(config.model),
    "cpu": hardware().get("cpu"),
    "episodes": len(batches),
    "repeats": repeats,
    "packed_tokens": [int(b["packed_tokens"]) for b in batches],
    "trunk_tokens": [int(b["trunk_length"]) for b in batches],
    "trunk_s": [round(s, 3) for s in seconds[True]],
    "masked_s": [round(s, 3) for s in seconds[False]],
    "trunk_s_total": round(sum(seconds[True]), 2),
    "masked_s_total": round(sum(seconds[False]), 2),
    "speedup": round(sum(seconds[False]) / sum(seconds[True]), 3),
    "max_relative_loss_gap": loss_gap,
}
print(json.dumps({k: v for k, v in record.items() if not isinstance(v, list)}))
out = Path(__file__).with_name("results.json")
atomic_write_json(out, (json.loads(out.read_text()) if out.exists() else []) + [record])
