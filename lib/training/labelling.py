"""What the training stages share to play a model's own episodes and label them: the blocks of train seeds each
stage's own episodes come from, and the rows labelled at the states a model reaches.

Every block is a range of `train`-split seeds of its own, disjoint from the corpus's (from `corpus.seed_offset`),
from each other and from the holdout splits: DAgger's (`DAGGER_SEED_OFFSET`, the corpus stage's
`corpus.dagger_from`), AggreVaTe's (`AGGREVATE_SEED_OFFSET`, the RL stage's `rl.algorithm: aggrevate`) and the
validation seeds (`VALIDATION_SEED_OFFSET`: the RL stage's learning curve and the SFT stage's imitation check).
`labelled_rows` plays a model greedily on seeds of a block and labels every state it reached with a scripted
policy's answer (the teacher's for DAgger, the improver's for AggreVaTe). A stage module imports these from here,
never from another stage's module.
"""

from __future__ import annotations

from collections import defaultdict

from ..envs.base import completion_action, format_action
from .rows import sft_row

DAGGER_SEED_OFFSET = 50_000  # train seeds of the learner's own episodes: after the corpus's and GRPO's blocks
AGGREVATE_SEED_OFFSET = 70_000  # the RL stage's own episodes (rl.algorithm aggrevate): a block of their own
VALIDATION_SEED_OFFSET = 500_000  # far above any corpus seed, inside the train split's seed block


def block_seeds(episodes: int, offset: int, block: int) -> range:
    """`episodes` train seeds of the block starting at `block`, from `offset` into it."""
    return range(block + offset, block + offset + episodes)


def validation_seeds(episodes: int) -> range:
    return range(VALIDATION_SEED_OFFSET, VALIDATION_SEED_OFFSET + episodes)


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
            own, returns = teacher.act(observation, env), None
            if isinstance(label_policy, Improver):  # its label, and every candidate's return it chose by
                label, returns = label_policy.choose(observation, env)
            else:
                label = own if label_policy is teacher else label_policy.act(observation, env)
            rows.append(sft_row(env, observation, seed, position, env.history, action, own, label, source))
            if (policy := policies[seed][position]) is not None:
                rows[-1].update(p_teacher=policy.get(own), p_label=policy.get(label))
            if returns is not None:  # how far apart the candidates' returns are: 0, no signal here
                rows[-1]["label_spread"] = max(returns.values()) - min(returns.values())
            result = env.step(action)
            if env.done:
                break
            observation = result.observation
    agree = sum(r["executed"] == r["completion"][-1]["content"] for r in rows)
    return rows, (round(agree / len(rows), 4) if rows else None)
