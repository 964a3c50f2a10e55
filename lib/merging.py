"""Merging a LoRA adapter into its base, the outputs a merge is checked by, and rebuilding a run's merged folders
from the adapters it keeps.

The export stage (lib/export/merge.py) merges the RL adapter and checks the merge; `python -m lib gate` rebuilds a
committed run's merged folders (`rebuild_missing`), which are large and re-derivable: `sft/model` is the base with
`sft/adapter` merged in, in the run's precision, and `export/merged` is `sft/model` with `grpo/adapter` merged in,
in fp32. A rebuilt folder is checked against the sha256 its stage recorded; where this CPU's float arithmetic
gives other bits, the merged model's logits on the export check prompts must lie within `export.logit_tolerance` of
the outputs the export stage recorded (`export/merged_outputs.json`). A rebuild is never skipped and never trusted
unchecked.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .io import atomic_write_json, stored_bytes, stored_path, weights_sha256
from .models import load_model

LOGIT_TOLERANCE = 1e-4  # default export.logit_tolerance (fp32); greedy texts must match exactly
REBUILT = "REBUILT.json"  # written into a rebuilt folder: how it was made and how it was checked


class MergeError(RuntimeError):
    """A merged model cannot be made or does not behave like the model it came from."""


class MergeExistsError(MergeError, FileExistsError):
    """The target folder already exists; merged folders are never overwritten."""


def fp32(model_config):
    """The model config the merge and its check load with: fp32 weights, whatever the run trained in, through plain
    transformers and PEFT (a merge needs no training kernels). In bf16 a merged weight rounds W + BA once where the
    adapter adds BA to a rounded W, so the two differ by bf16 rounding, not by a merge error (SmolLM2 in bf16 on a
    CPU: logits 0.44 apart, 3 of 8 greedy texts different after a 2-step GRPO); in fp32 they agree to float rounding
    and the check tests the merge itself. The merged folder is fp32; a run loads it in its own precision."""
    return model_config.model_copy(update={"precision": "fp32", "use_unsloth": "never"})


def merge_adapter(base_dir: str | Path, adapter_dir: Path, target: Path, model_config, precision: str = "") -> None:
    """Merge a LoRA adapter into its base into `target`, a new folder (written to a temp sibling, then renamed);
    `precision`: a recorded precision to merge in (`load_model`), else the config's as this machine resolves it."""
    from peft import PeftModel

    target = Path(target)
    if target.exists():
        raise MergeExistsError(
            f"{target} already exists; exports are never overwritten (choose a new run or delete it yourself)"
        )
    model, tokenizer, _ = load_model(base_dir, model_config, trainable=False, precision=precision)
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    merged.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    tmp.rename(target)


def model_outputs(model, tokenizer, prompts: list[list[dict]], max_new_tokens: int) -> dict:
    """Greedy completions and next-token logits for each prompt (one at a time: no padding effects)."""
    import torch

    texts, logits = [], []
    with torch.no_grad():
        for messages in prompts:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False).to(model.device)
            logits.append(model(**encoded).logits[0, -1].float().cpu().tolist())
            output = model.generate(
                **encoded,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            texts.append(tokenizer.decode(output[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True))
    return {"texts": texts, "logits": logits}


def compare_outputs(reference: dict, candidate: dict, tolerance: float = LOGIT_TOLERANCE) -> dict:
    """Do two models agree on fixed prompts? Greedy texts equal and logits within `tolerance`."""
    if len(candidate["texts"]) != len(reference["texts"]) or len(candidate["logits"]) != len(reference["logits"]):
        raise MergeError(f"outputs for {len(candidate['texts'])} prompts compared with {len(reference['texts'])}")
    diffs = [
        max(abs(a - b) for a, b in zip(x, y, strict=True))
        for x, y in zip(reference["logits"], candidate["logits"], strict=True)
    ]
    same = [a == b for a, b in zip(reference["texts"], candidate["texts"], strict=True)]
    return {
        "prompts": len(same),
        "greedy_texts_equal": sum(same),
        "max_abs_logit_diff": max(diffs),
        "tolerance": tolerance,
        "agree": all(same) and max(diffs) <= tolerance,
    }


def _rebuild(
    base: str | Path, adapter: Path, target: Path, model_config, recorded_sha: str, precision: str = ""
) -> dict:
    """Merge `adapter` into `base` as `target` (in `precision`, see `merge_adapter`) and say whether its weights are
    the recorded ones."""
    if not (adapter / "adapter_config.json").is_file():
        raise MergeError(f"{target} is missing and cannot be rebuilt: no adapter at {adapter}")
    merge_adapter(base, adapter, target, model_config, precision)
    sha = weights_sha256(target)
    return {"folder": target.name, "adapter": adapter.name, "sha256": sha, "recorded_sha256": recorded_sha}


def _rebuild_sft(run_dir: Path, config, records: dict) -> dict | None:
    from .runs import read_stage_record

    sft = read_stage_record(run_dir, "sft")
    target = Path(sft["outputs"]["model"])
    if target.exists():
        return None
    if "adapter" not in sft["outputs"]:
        raise MergeError(
            f"{target} is missing and cannot be rebuilt: the sft stage's record names no adapter (it trained every "
            "weight, or it ran before the sft stage kept its adapter)"
        )
    # in the precision the SFT stage trained and merged in, not this machine's: `auto` is fp32 on a CPU without bf16
    # instructions, and an fp32 sft/model of a bf16 run puts the RL merge's logits 0.245 from the recorded ones
    # (the claim run on a 2-core AMD EPYC without avx512_bf16; export.logit_tolerance 0.05)
    precision = sft["metrics"].get("precision", "")
    made = _rebuild(sft["inputs"]["base"], Path(sft["outputs"]["adapter"]), target, config.model, "", precision)
    made["precision"] = precision or "as the config resolves on this machine"
    made["recorded_sha256"] = sft["metrics"]["weights_sha256"]
    made["identical"] = made["sha256"] == made["recorded_sha256"]
    records["sft/model"] = made
    return made


def _rebuild_export(run_dir: Path, config, records: dict) -> dict | None:
    """export/merged from sft/model (or the RL stage's base) and grpo/adapter, in fp32, checked as described above."""
    from .runs import read_json_record, read_stage_record

    export = read_stage_record(run_dir, "export")
    target = Path(export["outputs"]["merged"])
    if target.exists():
        return None
    grpo = read_stage_record(run_dir, "grpo")
    manifest = read_json_record(run_dir / "export" / "export_manifest.json", "the export manifest")
    made = _rebuild(grpo["outputs"]["base_model"], Path(grpo["outputs"]["adapter"]), target, fp32(config.model), "")
    made["recorded_sha256"] = manifest["weights_sha256"]
    made["identical"] = made["sha256"] == made["recorded_sha256"]
    if not made["identical"]:
        made["check"] = _check_outputs(run_dir, config, target)
    records["export/merged"] = made
    return made


def _check_outputs(run_dir: Path, config, target: Path) -> dict:
    """The rebuilt merged model's outputs on the export check prompts against those the export stage recorded."""
    recorded = run_dir / "export" / "merged_outputs.json"  # or gzipped beside it (`python -m lib slim`)
    if stored_path(recorded) is None:
        raise MergeError(
            f"{target} rebuilt with other weights than recorded, and export/merged_outputs.json (the recorded "
            "outputs to check it by) is missing: the rebuild cannot be checked"
        )
    model, tokenizer, _ = load_model(target, fp32(config.model), trainable=False)
    prompts = json.loads((run_dir / "export" / "check_prompts.json").read_text())
    outputs = model_outputs(model.eval(), tokenizer, prompts, config.grpo.max_completion_length)
    return compare_outputs(json.loads(stored_bytes(recorded)), outputs, config.export.logit_tolerance)


def rebuild_missing(run_dir: Path | str) -> dict:
    """Rebuild the merged folders a run folder lacks (sft/model, then export/merged) from its adapters; returns
    {folder: what was done and found}, empty when nothing was missing. Each rebuilt folder gets a REBUILT.json."""
    from .runs import read_config

    run_dir = Path(run_dir)
    config = read_config(run_dir)
    records: dict[str, dict] = {}
    if (run_dir / "sft" / "stage.json").is_file():
        _rebuild_sft(run_dir, config, records)
    if (run_dir / "export" / "stage.json").is_file():
        _rebuild_export(run_dir, config, records)
    for folder, record in records.items():
        atomic_write_json(run_dir / folder / REBUILT, record)
    return records


def rebuilt_record(folder: Path) -> dict | None:
    """The REBUILT.json of a folder `rebuild_missing` made, or None for a folder the run's own stage wrote."""
    path = Path(folder) / REBUILT
    return json.loads(path.read_text()) if path.is_file() else None
