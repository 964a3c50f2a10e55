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

from collections import defaultdict
from pathlib import Path

from ..envs.base import completion_action, format_action
from .rows import sft_row

DAGGER_SEED_OFFSET = 50_000  # train seeds of the learner's own episodes: after the corpus's and GRPO's blocks
AGGREVATE_SEED_OFFSET = 70_000  # the RL stage's own episodes (rl.algorithm aggrevate): a block of their own


def dagger_seeds(episodes: int, offset: int = 0, block: int = DAGGER_SEED_OFFSET) -> range:
    return range(block + offset, block + offset + episodes)


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


def labelled_rows(config, loaded, seeds, labeller: str, source: str) -> tuple[list[dict], float | None]:
    """Rows at every state of the model in `loaded` playing its own greedy episodes on `seeds` (train split), each
    labelled with what the scripted policy `labeller` (the teacher, or the improver) would do there, `source` their
    `label_source`; and the share of those states where the model's own action already was that label. A model that
    chooses among the candidates leaves on each row its probability of the teacher's answer (`p_teacher`: GRPO's
    `explore/p_reference` at the model's own states) and of the label (`p_label`)."""
    from ..episodes import Improver, scripted_policy
    from ..evaluation.closed_loop import run_model_episodes

    _, actions = run_model_episodes(
        config, loaded, seeds, "train", desc=f"{source}: the model's own episodes", distributions=True
    )
    played, policies = defaultdict(list), defaultdict(list)
    for record in actions:  # each seed's actions, in the order it played them, and the policy it chose them from
        played[record["seed"]].append(format_action(completion_action(record["completion"])))
        policies[record["seed"]].append(record.get("p_answers"))
    spec = config.spec
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    label_policy = teacher if labeller == spec.teacher else scripted_policy(spec, labeller)
    rows = []
    for seed in seeds:
        observation = env.reset(seed, "train")
        teacher.begin(seed)
        if label_policy is not teacher:
            label_policy.begin(seed)
        for position, action in enumerate(played[seed]):
            own = teacher.act(observation, env)
            label = own if label_policy is teacher else label_policy.act(observation, env)
            rows.append(sft_row(env, observation, seed, position, env.history, action, own, label, source))
            if (policy := policies[seed][position]) is not None:
                rows[-1].update(p_teacher=policy.get(own), p_label=policy.get(label))
            if isinstance(label_policy, Improver):  # how far apart the candidates' returns are: 0, no signal here
                returns = label_policy.last_returns.values()
                rows[-1]["label_spread"] = max(returns) - min(returns)
            result = env.step(action)
            if env.done:
                break
            observation = result.observation
    agree = sum(r["executed"] == r["completion"][-1]["content"] for r in rows)
    return rows, (round(agree / len(rows), 4) if rows else None)
