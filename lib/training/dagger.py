"""The teacher's labels at the learner's own states (DAgger, `corpus.dagger_from`).

Behaviour cloning trains on the states the teacher visits. A learner that errs once reaches states the teacher never
showed it, and there it may key on something that only travels with the teacher's own path (measured: an SFT that
takes half of its teacher's rare decisions right at the teacher's states takes none of them at the states its own
path reaches; docs/RESULTS.md). DAgger (Ross et al., 2011) closes that loop: play the trained SFT model on fresh
train seeds, ask the teacher what it would do at every state the model reached, and add those rows to the corpus,
so the next SFT learns the teacher's answer where the learner actually goes.

`corpus.dagger_from` names an earlier run of the same environment whose SFT model plays; `corpus.dagger_episodes`
its episodes, on train seeds of their own block (`DAGGER_SEED_OFFSET`), disjoint from the corpus's, GRPO's and
validation's. Its rows are labelled `label_source: dagger`, with the model's action as `executed`.
"""

from __future__ import annotations

from pathlib import Path

from .labelling import DAGGER_SEED_OFFSET, block_seeds, labelled_rows


def dagger_seeds(episodes: int, offset: int = 0) -> range:
    """DAgger's train seeds: `episodes` of its own block (lib/training/labelling.py), from `offset` into it."""
    return block_seeds(episodes, offset, DAGGER_SEED_OFFSET)


def dagger_rows(config, source_dir: Path | str, seeds) -> tuple[list[dict], dict]:
    """Rows at every state of the source run's SFT model's own greedy episodes on `seeds` (train split), each
    labelled with `config`'s environment teacher's action there; and a record of where they came from."""
    from ..evaluation.closed_loop import sft_model_dir
    from ..inference import load_policy_model
    from ..runs import Run, read_config

    source_dir = Path(source_dir)
    if not (source_dir / "manifest.json").is_file():
        raise FileNotFoundError(f"corpus.dagger_from: {source_dir} is not a run folder (no manifest.json)")
    source_config = read_config(source_dir)
    if source_config.env != config.env:
        raise ValueError(
            f"corpus.dagger_from: {source_dir} is a run on {source_config.env!r}, not on {config.env!r}; its model "
            "cannot play this environment"
        )
    source = Run(source_dir, source_config)
    sft = source.read_stage("sft")
    loaded = load_policy_model(sft_model_dir(source), source_config.model)
    rows, agree = labelled_rows(config, loaded, seeds, config.spec.teacher, "dagger")
    record = {
        "from": str(source_dir),
        "sft_weights_sha256": sft["metrics"].get("weights_sha256"),
        "episodes": len(seeds),
        "rows": len(rows),
        "model_agrees_with_teacher": agree,
    }
    return rows, record
