"""Exploration, measured while GRPO trains: can it sample what beats the teacher?

`group_metrics` is called every GRPO step by the reward function (lib/training/reward.py), which logs
- `explore/beats_reference`: the share of groups in which some sample scores above the reference policy's own
  action at that state (the corpus row's `reference_return`, scored the same way);
- `explore/best_minus_reference`: the mean over groups of the best sample's return minus that reference return.
The candidate sampler (lib/training/rollout.py) adds `explore/candidate_entropy` (the policy's entropy over the
state's candidates), `explore/p_best` and `explore/p_reference` (its probability of the best answer and of the
reference's own answer). `python -m lib probe-explore` (lib/bench/probe_explore.py) measures the same numbers, in
expectation, for any model folder or adapter on a fixed set of states.
"""

from __future__ import annotations


def group_metrics(
    rewards: list[float],
    reference_returns: list[float],
    group_size: int,
    tolerance: float = 1e-9,
) -> dict:
    """Per-step exploration metrics over consecutive groups of `group_size` samples (TRL keeps each prompt's
    samples together), each group compared with the reference policy's return at its state.

    >>> group_metrics([0.2, 0.9, 0.5, 0.5], [0.5, 0.5, 0.5, 0.5], 2)
    {'explore/beats_reference': 0.5, 'explore/best_minus_reference': 0.2, 'explore/mean_minus_reference': 0.025}
    """
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    beats, best_gap, mean_gap = [], [], []
    for start in range(0, len(rewards), group_size):
        group, reference = rewards[start : start + group_size], reference_returns[start]
        beats.append(max(group) > reference + tolerance)
        best_gap.append(max(group) - reference)
        mean_gap.append(sum(group) / len(group) - reference)
    n = len(beats)
    return {
        "explore/beats_reference": sum(beats) / n,
        "explore/best_minus_reference": round(sum(best_gap) / n, 6),
        "explore/mean_minus_reference": round(sum(mean_gap) / n, 6),
    }
