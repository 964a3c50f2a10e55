"""The SFT stage's imitation check: does the trained policy choose what the teacher chooses at the teacher's own
states, and has it collapsed onto one action?

On `sft.check_episodes` validation seeds (the train split's own block, disjoint from every corpus and holdout seed)
the teacher plays; at each of its states the saved SFT model scores the offered candidates (lib/candidates.py) and
its greedy choice is compared with the teacher's. A collapse is the model choosing its most frequent action at
least `sft.collapse_margin` more often than the teacher chooses that action (the SENTINEL trust reference run of
2026-11-25 chose `delegate:S0` at every state). The stage records the figures, prints them, and warns loudly on a
collapse; the report says so before anything else.
"""

from __future__ import annotations

import warnings
from collections import Counter

from ..candidates import answers, score_answers
from ..envs.base import format_action
from ..episodes import run_episode
from .validation import validation_seeds


class CollapseWarning(UserWarning):
    """The SFT policy chose one action far more often than its teacher does."""


def teacher_rows(spec, seeds) -> list[tuple[list[dict], list[str], list[str], str]]:
    """(prompt, offered answers, their candidate ids, the teacher's candidate id) at every state of the teacher's
    episodes on `seeds` (train split)."""
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    rows = []
    for seed in seeds:
        for t in run_episode(env, teacher, seed, "train", keep_transitions=True).transitions:
            observation = t["observation"]
            ids = [c.id for c in observation.candidates]
            chosen = next(c.id for c in observation.candidates if format_action(c.id) == t["action"].strip())
            rows.append((env.render(observation), answers(observation), ids, chosen))
    return rows


def imitation_check(spec, model, tokenizer, episodes: int, margin: float) -> dict:
    """The SFT policy's greedy candidate against the teacher's at the teacher's states (see the module doc)."""
    rows = teacher_rows(spec, validation_seeds(episodes))
    if not rows:
        raise ValueError(f"the teacher's {episodes} validation episodes have no state to check")
    scores = score_answers(model, tokenizer, [r[0] for r in rows], [r[1] for r in rows])
    chosen = [ids[max(range(len(s)), key=s.__getitem__)] for (_, _, ids, _), s in zip(rows, scores)]
    teacher = [r[3] for r in rows]
    top, count = Counter(chosen).most_common(1)[0]
    top_share = count / len(rows)
    teacher_share = teacher.count(top) / len(rows)
    return {
        "episodes": episodes,
        "states": len(rows),
        "agreement": round(sum(a == b for a, b in zip(chosen, teacher)) / len(rows), 4),
        "distinct_actions": len(set(chosen)),
        "teacher_distinct_actions": len(set(teacher)),
        "top_action": top,
        "top_share": round(top_share, 4),
        "teacher_top_share": round(teacher_share, 4),
        "margin": margin,
        "collapsed": top_share - teacher_share >= margin,
    }


def describe(check: dict) -> str:
    """One line for the console, the warning and the report."""
    line = (
        f"SFT chose the teacher's action at {check['agreement']:.0%} of the teacher's {check['states']} states "
        f"({check['episodes']} validation episodes); its most frequent action, {check['top_action']!r}, at "
        f"{check['top_share']:.0%} of them, where the teacher chooses it at {check['teacher_top_share']:.0%}"
    )
    if check["collapsed"]:
        line += f": COLLAPSED onto one action (at least {check['margin']:.0%} above the teacher: sft.collapse_margin)"
    return line


def announce(check: dict) -> None:
    print(describe(check))
    if check["collapsed"]:
        warnings.warn(describe(check), CollapseWarning, stacklevel=2)
