"""Loading a saved policy model with its provenance record, batched greedy or sampled generation, and the
model as an episode actor. Used by evaluation, post-save, the GRPO validation curve and the probes.
"""

from __future__ import annotations

from pathlib import Path

import torch

from .embedded import resolve_model_source
from .envs.base import Invalid, parse_action
from .models import cuda_available, load_model, weights_sha256


def artifact_folder(path_or_id: str | Path) -> Path:
    """The local folder holding a model's weights: the path itself, or the hub cache snapshot of a hub id."""
    path = Path(resolve_model_source(path_or_id))
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(str(path_or_id), local_files_only=True))


def load_policy_model(model_dir: str | Path, model_config, adapter_dir: str | Path | None = None):
    """Load a saved model (optionally with a LoRA adapter merged in memory) and its provenance record."""
    model, tokenizer, _ = load_model(model_dir, model_config, trainable=False)
    source = {"path": str(model_dir), "sha256": weights_sha256(artifact_folder(model_dir))}
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
        source = {"path": str(adapter_dir), "sha256": weights_sha256(Path(adapter_dir)), "base": source}
    if cuda_available() and model.device.type != "cuda":
        # from_pretrained loads on the CPU and only the trainers move a model: without this, evaluation on a GPU
        # machine played on its CPU (the H100 bench of 2026-11-26: 1.2 episodes/s, 64 MB of GPU memory)
        model.to("cuda")
    model.eval()
    return model, tokenizer, source


@torch.no_grad()
def generate_actions(
    model, tokenizer, message_batches, *, greedy: bool, max_new_tokens: int = 16, temperature: float = 1.0
) -> list[str]:
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in message_batches]
    encoded = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    sampling = {} if greedy else {"temperature": temperature, "top_k": 0, "top_p": 1.0}
    output = model.generate(
        **encoded,
        max_new_tokens=max_new_tokens,
        do_sample=not greedy,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )
    new_tokens = output[:, encoded["input_ids"].shape[1] :]
    return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)


def candidate_actor(
    model,
    tokenizer,
    *,
    greedy: bool = True,
    temperature: float = 1.0,
    generator=None,
    distributions: bool = False,
    episode_cache_mb: int = 0,
    kind_shift: dict[str, float] | None = None,
):
    """An actor for `episodes.play` that chooses among the offered candidates (`model.action_space: candidates`):
    every live episode's candidates are scored in one batched pass (lib/candidates.py) and the most likely one is
    answered (greedy), or one is sampled from the softmax at `temperature`. Answers are valid by construction; each
    episode's `extra["p_action"]` is the probability the policy gave the answer it chose, and with `distributions`
    `extra["p_answers"]` its probability of every offered answer. With `episode_cache_mb` > 0 each live episode
    keeps its key/value cache from one state to the next, within that many MB (lib/episode_cache.py). `kind_shift`
    (kind -> a number) is subtracted from the score of every candidate of that kind before it is chosen: the logit
    adjustment that undoes `sft.kind_balance`'s shift in prior (lib/stats.py: `kind_log_weights`)."""
    from .candidates import answers, choose, distribution, score_answers
    from .episode_cache import EpisodeCache

    cache = EpisodeCache(episode_cache_mb) if episode_cache_mb else None

    def act(live) -> list[str]:
        options = [answers(e.observation) for e in live]
        messages = [e.env.render(e.observation) for e in live]
        scores = score_answers(model, tokenizer, messages, options, cache=cache, keys=[id(e) for e in live])
        texts = []
        for entry, offered, logprobs in zip(live, options, scores):
            if kind_shift:
                kinds = [c.kind for c in entry.observation.candidates]  # the order `answers` lists them in
                logprobs = [lp - kind_shift.get(kind, 0.0) for lp, kind in zip(logprobs, kinds)]
            probs = distribution(logprobs, temperature)
            [index] = choose(probs, greedy=greedy, generator=generator)
            entry.extra["p_action"] = round(probs[index], 6)
            if distributions:
                entry.extra["p_answers"] = {a: round(p, 6) for a, p in zip(offered, probs)}
            texts.append(offered[index])
        return texts

    return act


def model_actor(
    model,
    tokenizer,
    *,
    action_space: str = "free",
    greedy: bool = True,
    max_new_tokens: int = 16,
    veto_k: int = 0,
    temperature: float = 1.0,
    generator=None,
    distributions: bool = False,
    episode_cache_mb: int = 0,
    kind_shift: dict[str, float] | None = None,
):
    """The model as an actor for `episodes.play`: choosing among the candidates (`action_space="candidates"`,
    `candidate_actor`, which records the policy over them with `distributions`), or generating free text that the
    environment parses (`"free"`), where one generate call answers every live episode's current state.

    With free text and `veto_k` > 0 (the legality-veto ablation) an output the parser rejects is re-asked, sampled,
    up to `veto_k` times before it is submitted; the re-asks go into each episode's `extra["veto_retries"]`."""
    if action_space == "candidates":
        return candidate_actor(
            model,
            tokenizer,
            greedy=greedy,
            temperature=temperature,
            generator=generator,
            distributions=distributions,
            episode_cache_mb=episode_cache_mb,
            kind_shift=kind_shift,
        )
    if kind_shift:
        raise ValueError("a logit adjustment by kind applies to candidate scoring (action_space 'candidates') only")
    if episode_cache_mb:
        raise ValueError("an episode cache applies to candidate scoring (action_space 'candidates') only")
    if action_space != "free":
        raise ValueError(f"unknown action_space {action_space!r}: 'candidates' or 'free'")

    def act(live) -> list[str]:
        texts = generate_actions(
            model,
            tokenizer,
            [e.env.render(e.observation) for e in live],
            greedy=greedy,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )
        retries = [0] * len(live)
        for _ in range(veto_k):
            rejected = [
                j for j, e in enumerate(live) if isinstance(parse_action(texts[j], e.observation.candidates), Invalid)
            ]
            if not rejected:
                break
            again = generate_actions(
                model,
                tokenizer,
                [live[j].env.render(live[j].observation) for j in rejected],
                greedy=False,
                max_new_tokens=max_new_tokens,
            )
            for j, text in zip(rejected, again):
                texts[j], retries[j] = text, retries[j] + 1
        if veto_k:
            for entry, retry in zip(live, retries):
                entry.extra["veto_retries"] = retry
        return texts

    return act
