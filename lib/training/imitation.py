"""The SFT stage's imitation check: does the trained policy choose what the teacher chooses, and has it collapsed
onto one action?

On `sft.check_episodes` validation seeds (the train split's own block, disjoint from every corpus and holdout seed):
- agreement: the teacher plays, and at each of its states the saved SFT model's most likely candidate
  (lib/candidates.py) is compared with the teacher's, overall and per kind of action the teacher took (`agreement`;
  also `python -m lib agreement` on a saved run);
- collapse: the SFT policy plays the same seeds itself, greedy over the candidates. Playing fewer than
  `sft.collapse_ratio` of the distinct actions the teacher plays in its own episodes is a collapse onto a few actions
  (a reference run of 2026-11-25 chose one delegation at every step, where its teacher plays ten actions on these
  seeds; docs/RESULTS.md). Its most frequent action's share and the total variation between the two action mixes are
  recorded beside it.
The stage records the figures, prints them, and warns loudly on a collapse; the report says so before anything else.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict

from ..candidates import answers, distribution, score_answers, score_episodes
from ..envs.base import completion_action, format_action
from ..episodes import run_episode
from .labelling import validation_seeds


class CollapseWarning(UserWarning):
    """The SFT policy chose one action far more often than its teacher does."""


def teacher_episodes(spec, seeds) -> list[list[tuple[list[dict], list[str], list[str], str, dict[str, str]]]]:
    """Per seed (train split), at every state of the teacher's episode: (prompt, offered answers, their candidate
    ids, the teacher's candidate id, each id's kind of action)."""
    env, teacher = spec.make_env(), spec.make_policy(spec.teacher)
    episodes = []
    for seed in seeds:
        rows = []
        for t in run_episode(env, teacher, seed, "train", keep_transitions=True).transitions:
            observation = t["observation"]
            ids = [c.id for c in observation.candidates]
            chosen = next(c.id for c in observation.candidates if format_action(c.id) == t["action"].strip())
            kinds = {c.id: c.kind for c in observation.candidates}
            rows.append((env.render(observation), answers(observation), ids, chosen, kinds))
        episodes.append(rows)
    return episodes


def teacher_rows(spec, seeds) -> list[tuple[list[dict], list[str], list[str], str, dict[str, str]]]:
    """Every state of the teacher's episodes on `seeds`, one after another (`teacher_episodes`)."""
    return [row for rows in teacher_episodes(spec, seeds) for row in rows]


def teacher_state_scores(config, loaded, episodes: int) -> tuple[list[tuple], list[list[float]]]:
    """The teacher's states on `episodes` validation seeds (`teacher_episodes`) and the model's log-likelihood of
    every offered candidate at each, episode by episode (with `model.episode_cache_mb`, each episode keeping its
    cache across its states)."""
    by_episode = teacher_episodes(config.spec, validation_seeds(episodes))
    rows = [row for states in by_episode for row in states]
    if not rows:
        raise ValueError(f"the teacher's {episodes} validation episodes have no state to check")
    model, tokenizer, _ = loaded
    if config.model.episode_cache_mb:  # the episodes' states in lockstep, each episode keeping its cache
        scored = score_episodes(
            model, tokenizer, [[r[:2] for r in states] for states in by_episode], config.model.episode_cache_mb
        )
        return rows, [values for states in scored for values in states]
    return rows, score_answers(model, tokenizer, [r[0] for r in rows], [r[1] for r in rows])


def tally(rows: list[tuple], scores: list[list[float]], shift: dict[str, float] | None = None) -> dict:
    """Agreement with the teacher at its states (`teacher_state_scores`): overall, per kind of the teacher's action
    (with the mean probability of the teacher's answer, renormalised over the offered candidates), and the most
    frequent confusions between kinds. `shift` (kind -> a number) is subtracted from the score of every candidate of
    that kind first: the logit adjustment (`logit_adjusted`)."""
    shift = shift or {}
    tallies: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])  # kind -> states, agreed, p(teacher's)
    confusions: Counter = Counter()
    for (_, _, ids, teacher, kind), raw in zip(rows, scores):
        values = [v - shift.get(kind[i], 0.0) for i, v in zip(ids, raw)]
        pick = ids[max(range(len(values)), key=values.__getitem__)]
        counts = tallies[kind[teacher]]
        counts[0] += 1
        counts[1] += pick == teacher
        counts[2] += distribution(values)[ids.index(teacher)]
        if pick != teacher:
            confusions[f"{kind[teacher]} -> {kind[pick]}"] += 1
    return {
        "teacher_states": len(rows),
        "agreement": round(sum(t[1] for t in tallies.values()) / len(rows), 4),
        "by_kind": {
            kind: {"states": n, "agreement": round(right / n, 4), "p_teacher": round(p / n, 4)}
            for kind, (n, right, p) in sorted(tallies.items())
        },
        "confusions": dict(confusions.most_common(8)),
    }


def agreement(config, loaded, episodes: int) -> dict:
    """At every state of the teacher's episodes on `episodes` validation seeds: whether the model's most likely
    candidate is the teacher's, overall and per kind of the teacher's action (`tally`), and the teacher's mix of
    actions."""
    rows, scores = teacher_state_scores(config, loaded, episodes)
    return {
        "episodes": episodes,
        **tally(rows, scores),
        "teacher_mix": dict(Counter(r[3] for r in rows).most_common()),
    }


def logit_adjusted(config, loaded, episodes: int, log_weights: dict[str, float], taus: list[float]) -> dict:
    """Agreement at the teacher's states with tau * log_weights[kind] subtracted from each candidate's score, for each
    tau (0: the model as trained; 1: the resampling's prior shift undone in full), scoring the states once."""
    rows, scores = teacher_state_scores(config, loaded, episodes)
    return {
        "episodes": episodes,
        "log_weights": {k: round(v, 4) for k, v in log_weights.items()},
        "by_tau": {str(tau): tally(rows, scores, {k: tau * w for k, w in log_weights.items()}) for tau in taus},
    }


def imitation_check(config, loaded, episodes: int, ratio: float) -> dict:
    """The SFT policy against the teacher on `episodes` validation seeds (see the module doc); `loaded` is
    (model, tokenizer, source) as `inference.load_policy_model` returns it."""
    from ..evaluation.closed_loop import run_model_episodes

    agreed = agreement(config, loaded, episodes)
    teacher_mix, states = Counter(agreed["teacher_mix"]), agreed["teacher_states"]
    _, actions = run_model_episodes(
        config, loaded, validation_seeds(episodes), "train", desc="sft/imitation check", action_space="candidates"
    )
    played = [completion_action(a["completion"]) for a in actions]
    mix = Counter(played)
    top, count = mix.most_common(1)[0]
    top_share, teacher_share = count / len(played), teacher_mix[top] / states
    # total variation between the two action mixes: the share of its steps the policy would have to change to act
    # as often as the teacher does on each action (1 - the teacher's share of its top action, for a full collapse)
    distance = sum(abs(mix[a] / len(played) - teacher_mix[a] / states) for a in mix | teacher_mix) / 2
    return {
        **{k: agreed[k] for k in ("episodes", "teacher_states", "agreement")},
        "played_actions": len(played),
        "distinct_actions": len(set(played)),
        "teacher_distinct_actions": len(teacher_mix),
        "top_action": top,
        "top_share": round(top_share, 4),
        "teacher_top_share": round(teacher_share, 4),
        "mix_distance": round(distance, 4),
        "ratio": ratio,
        "collapsed": len(mix) < ratio * len(teacher_mix),
        "agreement_by_kind": agreed["by_kind"],
    }


def describe(check: dict) -> str:
    """One line for the console, the warning and the report."""
    line = (
        f"SFT chose the teacher's action at {check['agreement']:.0%} of the teacher's {check['teacher_states']} states "
        f"({check['episodes']} validation episodes); playing them itself, it used {check['distinct_actions']} "
        f"distinct actions to the teacher's {check['teacher_distinct_actions']}, {check['top_action']!r} at "
        f"{check['top_share']:.0%} of its {check['played_actions']} steps (the teacher: "
        f"{check['teacher_top_share']:.0%}); its action mix is {check['mix_distance']:.2f} from the teacher's"
    )
    if check["collapsed"]:
        line += f": COLLAPSED onto a few actions (fewer than {check['ratio']:.0%} of the teacher's: sft.collapse_ratio)"
    return line


def announce(check: dict) -> None:
    print(describe(check))
    if check["collapsed"]:
        warnings.warn(describe(check), CollapseWarning, stacklevel=2)
