"""`python -m lib fork BASE --run-dir R --set ...`: a paired experiment that shares a base run's corpus, baselines
and SFT model and changes only what comes after SFT."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from ..config import ConfigError, override_config
from ..evaluation.baselines import run_baselines_stage
from ..gate import STAGE_PARAMS
from ..io import atomic_write_json
from ..provenance import git_state, hardware, package_versions
from ..runs import Run, now, read_config, read_json_record
from ..training.corpus import run_corpus

FORK_STAGES = ("corpus", "baselines", "sft")  # what a fork shares with its base
# what a fork may change: nothing SFT depends on
FORK_SECTIONS = ("rl.", "grpo.", "aggrevate.", "eval.", "export.", "corpus.grpo_")


def fork_run(base_dir: Path | str, target_dir: Path | str, overrides: dict[str, Any]):
    """A new run that shares the base run's corpus, baselines and SFT model (hard links, not copies) and differs
    only in `overrides` to rl.*, grpo.*, aggrevate.*, eval.* or export.*: the paired experiment, one change on the
    same states, seeds and SFT weights. A fork that only raises an AggreVaTe run's aggrevate.rounds also copies its
    RL stage, which then goes on from the base's last round. Returns (config, Run)."""
    base_dir, target_dir = Path(base_dir), Path(target_dir)
    wrong = sorted(k for k in overrides if not k.startswith(FORK_SECTIONS))
    if wrong:
        raise ConfigError(
            f"a fork shares the base's SFT model; it can only change "
            f"{', '.join(s + '*' for s in FORK_SECTIONS)}, not {wrong}"
        )
    if (target_dir / "manifest.json").exists():
        raise FileExistsError(f"{target_dir} is already a run; fork into a new folder")
    base = read_config(base_dir)
    config = override_config(base, overrides, str(base_dir / "manifest.json"))
    manifest = read_json_record(base_dir / "manifest.json", "the base run's manifest")
    shared = [stage for stage in FORK_STAGES if (base_dir / stage / "stage.json").is_file()]
    if "sft" not in shared:
        raise FileNotFoundError(f"{base_dir} has no finished sft stage to fork from")
    if _adds_rounds(base, config, overrides) and (base_dir / "grpo" / "stage.json").is_file():
        # more AggreVaTe rounds on the base's: the RL stage is shared too (copied: it goes on writing there), and
        # `lib stage grpo` goes on from the base's last round (lib/training/aggrevate.py: done_rounds)
        shutil.copytree(base_dir / "grpo", target_dir / "grpo")
        shared.append("grpo")
    # a shared stage whose recorded settings the overrides change is made again in the fork (other GRPO prompts:
    # the corpus, whose SFT rows must stay the base's; another eval.episodes: the baselines), so every stage record
    # of the fork ran with the fork's config (the gate's `manifest_valid`)
    remade = [s for s in ("corpus", "baselines") if s in shared and STAGE_PARAMS[s](base) != STAGE_PARAMS[s](config)]
    shared = [s for s in shared if s not in remade]
    for stage in shared:
        if stage != "grpo":
            shutil.copytree(base_dir / stage, target_dir / stage, copy_function=os.link, dirs_exist_ok=True)
        record = target_dir / stage / "stage.json"
        record.unlink()  # a hard link: rewrite a new file, never the base's
        text = (base_dir / stage / "stage.json").read_text().replace(str(base_dir), str(target_dir))
        atomic_write_json(record, json.loads(text))  # run-relative paths need nothing; older absolute ones are moved
    manifest.update(
        run_id=target_dir.name,
        config=config.model_dump(mode="json"),
        started=now(),
        ended=None,
        stages={k: v for k, v in manifest["stages"].items() if k in shared},
        # the fork's own code and machine: its GRPO and later stages run here, not where the base ran
        git=git_state(),
        packages=package_versions(),
        hardware=hardware(),
        forked_from={
            "run_id": base_dir.name,
            "overrides": overrides,
            "shared_stages": shared,
            "git": manifest.get("git"),
        },
    )
    atomic_write_json(target_dir / "manifest.json", manifest)
    run = Run(target_dir, config)
    if "corpus" in remade:
        run_corpus(config, run)
        made, base_sft = run.manifest()["corpus_hashes"]["sft.jsonl"], manifest["corpus_hashes"]["sft.jsonl"]
        if made != base_sft:
            shutil.rmtree(target_dir)
            raise ConfigError(
                f"these corpus overrides changed the SFT rows (sft.jsonl {made[:12]} != {base_sft[:12]}), "
                "so the base's SFT model does not belong to them; fork removed"
            )
    if "baselines" in remade:
        run_baselines_stage(config, run)
    return config, run


def _adds_rounds(base, config, overrides: dict) -> bool:
    """The fork only raises aggrevate.rounds of a base whose RL stage is AggreVaTe."""
    return (
        set(overrides) == {"aggrevate.rounds"}
        and base.rl.algorithm == "aggrevate"
        and config.aggrevate.rounds > base.aggrevate.rounds
    )
